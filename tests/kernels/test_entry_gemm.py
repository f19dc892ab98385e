"""kernels/gemm_swiglu's entry: an out sharing memory with x or w, a bad stream, device or
control is a coded refusal before any launch (CPU: entry_fakes; skipped without torch)."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402
from helpers.entry_fakes import BF16, CountingKernel, empty, gpu, randn, refused, unprobeable_dir  # noqa: E402

sys.path.insert(0, str(ROOT / "kernels" / "gemm_swiglu"))
import gemm_swiglu as gs  # noqa: E402


def test_out_overlap_stream_and_load_arguments(tmp_path):
    g = gs.GemmSwiglu.__new__(gs.GemmSwiglu)
    g.kernel = CountingKernel(["x", "w", "out", "m", "n", "k"], facts={"block_m": 128, "block_n": 64, "block_k": 64})
    g.block_m, g.block_n, g.block_k, g.ragged = 128, 64, 64, False
    x, w = randn(128, 64), randn(128, 64)
    assert g(x, w, out=empty(128, 64)) is not None and len(g.kernel.launches) == 1
    buf = torch.empty(4 * 128 * 64, dtype=BF16)
    xb, ob = gpu(buf[: 128 * 64].view(128, 64)), gpu(buf[64 * 64: 64 * 64 + 128 * 64].view(128, 64))
    for args, kw, code in [((x, w), {"out": x}, "R-LAYOUT"), ((xb, w), {"out": ob}, "R-LAYOUT"),
                           ((x, w), {"out": w}, "R-LAYOUT"), ((x, w), {"out": empty(128, 64), "stream": 0.5}, "R-PARAM"),
                           ((x, randn(127, 64)), {}, "R-SHAPE")]:  # odd rows: no [gate; up] stack (had no hint)
        assert refused(g, *args, **kw).code == code
    assert len(g.kernel.launches) == 1
    for kw, code in [({"device": "0"}, "R-DEVICE"), ({"control": "no"}, "R-PARAM"), ({"kernel_dir": 1}, "R-PARAM")]:
        assert refused(gs.load, tmp_path, **kw).code == code if "kernel_dir" not in kw else \
            refused(gs.load, **kw).code == code
    assert refused(gs.gemm_swiglu, [1.0], w, kernel_dir=tmp_path).code == "R-PARAM"


@pytest.mark.parametrize("via", ["kernel_dir", "env"])
@pytest.mark.parametrize("kind", ["long", "loop", "nul"])
def test_load_refuses_an_unprobeable_kernel_dir(tmp_path, monkeypatch, kind, via):  # loop: was Path.resolve's RuntimeError
    d = unprobeable_dir(tmp_path, kind)
    if via == "env":
        if kind == "nul":
            pytest.skip("an environment variable holds no NUL")
        monkeypatch.setenv("PIPELINK_GEMM_SWIGLU_DIR", str(d))
    e = refused(gs.load, **({"kernel_dir": d} if via == "kernel_dir" else {}))
    assert e.code == ("R-PARAM" if kind == "nul" else "R-MANIFEST")
