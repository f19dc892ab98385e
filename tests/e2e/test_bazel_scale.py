"""benchmarks/bazel_scale.py, run as its CLI, at a small size (6 components, 3 kernels): the generated
workspace builds, a no-op build runs nothing, one component's edit reruns 1 compile, 1 pack
and the links of the kernels that use it, an owner's fact change reruns the owner and its
kernels' links only. The full size (40 components, 20 kernels) is recorded in BENCHMARKS.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.bazel import bazel_skip_reason

REPO = Path(__file__).resolve().parents[2]
BAZEL_SCALE = [sys.executable, str(REPO / "benchmarks" / "bazel_scale.py")]

_REASON = bazel_skip_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


def test_layout_spreads_readers(tmp_path):
    r = subprocess.run(BAZEL_SCALE + ["--generate-only", "--components", "40", "--kernels", "20", "--owners", "4",
                                      "--readers-per-kernel", "4", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    kmap = json.loads(r.stdout)
    assert len(kmap) == 20
    used = {c for comps in kmap.values() for c in comps}
    assert len(used) == 40  # every component is in some kernel
    assert all(len(set(c)) == len(c) == 5 for c in kmap.values())


def test_small_scale_run():
    out = REPO / ".pipelink" / "bench" / "scale-test"
    (out / "results.json").unlink(missing_ok=True)  # an earlier run's must not stand in for this one's
    r = subprocess.run(BAZEL_SCALE + ["--components", "6", "--kernels", "3", "--owners", "2", "--readers-per-kernel", "2",
                                      "--out", str(out)], capture_output=True, text=True, timeout=3600)
    assert (out / "results.json").exists(), r.stdout + r.stderr  # written once every step has run
    s = json.loads((out / "results.json").read_text())
    steps = s["steps"]
    assert steps["cold"]["actions"] == {"CudaCompile": 6, "PipelinkPack": 6, "PipelinkLink": 3}, steps["cold"]
    assert steps["noop"]["spawns"] == 0
    for name, expected in s["expected"].items():
        assert steps[name]["actions"] == expected, (name, steps[name])
