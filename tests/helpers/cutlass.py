"""CUTLASS/CuTe headers for tests that compile the wgmma components themselves."""

from __future__ import annotations

from pathlib import Path

import pytest


def cutlass_include() -> Path | None:
    """The nvidia-cutlass wheel's headers (cute/, cutlass/): what the Bazel toolchain finds
    next to the toolkit wheels. The wgmma components (gemm/wgmma.h, attn_wgmma.h) need them."""
    import sysconfig

    d = Path(sysconfig.get_paths()["purelib"]) / "cutlass_library" / "source" / "include"
    return d if (d / "cute").is_dir() else None


def require_cutlass() -> Path:
    d = cutlass_include()
    if d is None:
        pytest.skip("no CUTLASS headers (the nvidia-cutlass wheel: bash tools/setup.sh)")
    return d
