"""Incremental relink of //kernels:moe_step: a new model costs one link, and a change to the expert
owner's tile geometry recompiles only the expert and relinks every model.

A model is the kernel file's facts (hidden, inter, experts, top_k; kernels/moe_models.bzl):
adding one must compile and pack nothing and link once.

A geometry mutation is one number of `moe_expert(...)` (kernels/moe.bzl gives it to
cuda_component's `facts`: the EXPERT_BLOCK_* define and the contract's `own` value together). The other owners
(router, dispatch, combine) and the SwiGLU library read block_m / block_h / block_n as facts
through handles, so the mutation must recompile and repack only the expert and relink
moe_step: no reader's compile. Counted from Bazel's --execution_log_json_file.

Runs on a copy of kernels/moe (+ the headers it includes) in a nested workspace under
.pipelink/e2e/moe_relink (same depth as tests/e2e/relink, so `../../..` reaches this repo and
`@pipelink//kernels:moe.bzl` is the real macro file). CPU only; skips without Bazel or the
CUDA wheels (like tests/e2e/test_bazel_relink.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers.bazel import bazel_cmd, bazel_in, bazel_skip_reason, ran_actions, rmtree, venv_paths

REPO = Path(__file__).resolve().parents[2]
E2E = REPO / ".pipelink" / "e2e"
WS = E2E / "moe_relink"
OB = E2E / "moe_ob"
EXPERT_LINE = 'moe_expert(name = "moe_expert")'

_REASON = bazel_skip_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")

BUILD = f'''load("@pipelink//kernels:moe.bzl", "moe_components", "moe_expert", "moe_step")

moe_components()

{EXPERT_LINE}

moe_step(name = "moe_step", sass_test = False)
'''
MODEL_LINE = 'moe_step(name = "qwen3_235b_a22b", model = "qwen3_235b_a22b", sass_test = False)\n'


def _bazel(log_dir: Path, *args: str, log: str | None = None) -> None:
    bazel_in(WS, OB, log_dir, *args, log=log)


_ran = ran_actions


@pytest.fixture(scope="module")
def ws():
    E2E.mkdir(parents=True, exist_ok=True)
    if (OB / "server").exists() and WS.exists():
        subprocess.run(bazel_cmd() + [f"--output_base={OB}", "shutdown"], cwd=WS, capture_output=True,
                       timeout=300)
    for d in (WS, OB):
        rmtree(d)
    (WS / "kernels").mkdir(parents=True)
    shutil.copytree(REPO / "kernels" / "moe", WS / "kernels" / "moe")
    (WS / "kernels" / "gemm").mkdir()
    shutil.copy(REPO / "kernels" / "gemm" / "wgmma.h", WS / "kernels" / "gemm" / "wgmma.h")
    (WS / "kernels" / "BUILD.bazel").write_text(BUILD)
    (WS / "BUILD.bazel").write_text("# root package of the nested workspace (the toolchain extension needs one)\n")
    (WS / "MODULE.bazel").write_text('module(name = "pipelink_e2e_moe_relink")\n\nbazel_dep(name = "pipelink")\n'
                                     'local_path_override(\n    module_name = "pipelink",\n    path = "../../..",\n)\n')
    shutil.copy(REPO / "tests" / "e2e" / "relink" / ".bazelrc", WS / ".bazelrc")
    env = venv_paths()
    (WS / "user.bazelrc").write_text("".join(f"common --repo_env={k}={v}\n" for k, v in sorted(env.items())))
    logs = E2E / "moe_logs"
    rmtree(logs)
    logs.mkdir()
    yield logs
    subprocess.run(bazel_cmd() + [f"--output_base={OB}", "shutdown"], cwd=WS, capture_output=True, timeout=300)


def test_new_model_is_one_link_and_expert_change_relinks_every_model(ws):
    _bazel(ws, "build", "//kernels:moe_step", log="cold")
    cold = _ran(ws / "cold.json")
    owners = ["//kernels:moe_router", "//kernels:moe_dispatch", "//kernels:moe_expert", "//kernels:moe_swiglu",
              "//kernels:moe_combine"]
    assert cold["CudaCompile"] == {o: 1 for o in owners}, cold
    assert cold["PipelinkLink"] == {"//kernels:moe_step": 1}, cold

    build = WS / "kernels" / "BUILD.bazel"
    build.write_text(build.read_text() + "\n" + MODEL_LINE)
    both = ("//kernels:moe_step", "//kernels:qwen3_235b_a22b")
    _bazel(ws, "build", *both, log="model")
    assert _ran(ws / "model.json") == {"PipelinkLink": {"//kernels:qwen3_235b_a22b": 1}}
    manifest = json.loads((WS / "bazel-bin" / "kernels" / "qwen3_235b_a22b.manifest.json").read_text())
    assert (manifest["facts"]["hidden"], manifest["facts"]["inter"]) == (4096, 1536)

    text = build.read_text()
    assert EXPERT_LINE in text
    build.write_text(text.replace(EXPERT_LINE, 'moe_expert(name = "moe_expert", block_n = 64)'))
    _bazel(ws, "build", *both, log="block_n")
    assert _ran(ws / "block_n.json") == {
        "CudaCompile": {"//kernels:moe_expert": 1},
        "PipelinkPack": {"//kernels:moe_expert": 1},
        "PipelinkLink": {"//kernels:moe_step": 1, "//kernels:qwen3_235b_a22b": 1},
    }
    for target in ("moe_step", "qwen3_235b_a22b"):
        manifest = json.loads((WS / "bazel-bin" / "kernels" / f"{target}.manifest.json").read_text())
        assert manifest["facts"]["block_n"] == 64

    _bazel(ws, "build", *both, log="noop")
    assert _ran(ws / "noop.json") == {}
