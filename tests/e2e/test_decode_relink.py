"""Incremental relink of the decode megakernel (kernels/decode): a new model costs one link, and a
change to one attention package recompiles that package only and relinks exactly the models
that link it. The other eight packages are compiled once and shared by every model and both
attention builds (issue 43's swap). Counted from Bazel's --execution_log_json_file.

Runs on a copy of kernels/decode in a nested workspace under .pipelink/e2e/decode_relink (as
tests/e2e/test_moe_relink.py does for the MoE owners). CPU only; skips without Bazel or the CUDA
wheels.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers.bazel import bazel_cmd, bazel_in, bazel_skip_reason, ran_actions, rmtree, venv_paths

REPO = Path(__file__).resolve().parents[2]
E2E = REPO / ".pipelink" / "e2e"
WS = E2E / "decode_relink"
OB = E2E / "decode_ob"
_REASON = bazel_skip_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")

PACKAGES = ["dec_step", "dec_stream", "dec_argmax", "dec_embed", "dec_rmsnorm", "dec_rope", "dec_swiglu", "dec_matvec",
            "dec_attn_split", "dec_attn_simple"]
MODEL_LINE = 'llama_decode(name = "llama3_1b", model = "llama3_2_1b")\n'
CHUNKS = "constexpr unsigned MAX_CHUNKS = 32;"


def _bazel(logs, *args: str, log: str | None = None) -> None:
    bazel_in(WS, OB, logs, *args, log=log)


_ran = ran_actions


@pytest.fixture(scope="module")
def ws():
    E2E.mkdir(parents=True, exist_ok=True)
    if (OB / "server").exists() and WS.exists():
        subprocess.run(bazel_cmd() + [f"--output_base={OB}", "shutdown"], cwd=WS, capture_output=True, timeout=300)
    for d in (WS, OB):
        rmtree(d)
    (WS / "kernels").mkdir(parents=True)
    dst = WS / "kernels" / "decode"
    shutil.copytree(REPO / "kernels" / "decode", dst, ignore=shutil.ignore_patterns("*.py", "*.md", "__pycache__"))
    build = (dst / "BUILD.bazel").read_text()
    build = build.replace('load("//pipelink_rules:defs.bzl"', 'load("@pipelink//pipelink_rules:defs.bzl"')
    build = re.sub(r'load\(":decode_models.bzl", "decode_models"\)',
                   'load("@pipelink//kernels/decode:decode_models.bzl", "llama_decode")', build)
    build = build.replace("decode_models()\n", 'llama_decode(name = "llama_tiny", model = "llama_tiny")\n'
                          'llama_decode(name = "llama_tiny_simple", model = "llama_tiny", attention = "simple")\n')
    (dst / "BUILD.bazel").write_text(build)
    (dst / "decode_models.bzl").unlink()  # the macro is the real one, from @pipelink
    (WS / "BUILD.bazel").write_text("# root package of the nested workspace (the toolchain extension needs one)\n")
    (WS / "MODULE.bazel").write_text('module(name = "pipelink_e2e_decode_relink")\n\nbazel_dep(name = "pipelink")\n'
                                     'local_path_override(\n    module_name = "pipelink",\n    path = "../../..",\n)\n')
    shutil.copy(REPO / "tests" / "e2e" / "relink" / ".bazelrc", WS / ".bazelrc")
    (WS / "user.bazelrc").write_text("".join(f"common --repo_env={k}={v}\n" for k, v in sorted(venv_paths().items())))
    logs = E2E / "decode_logs"
    rmtree(logs)
    logs.mkdir()
    yield logs
    subprocess.run(bazel_cmd() + [f"--output_base={OB}", "shutdown"], cwd=WS, capture_output=True, timeout=300)


def test_new_model_is_one_link_and_an_attention_change_relinks_its_models_only(ws):
    two = ("//kernels/decode:llama_tiny", "//kernels/decode:llama_tiny_simple")
    _bazel(ws, "build", *two, log="cold")
    cold = _ran(ws / "cold.json")
    assert cold["CudaCompile"] == {f"//kernels/decode:{p}": 1 for p in PACKAGES}, cold
    assert cold["PipelinkLink"] == {t: 1 for t in two}, cold

    build = WS / "kernels" / "decode" / "BUILD.bazel"
    build.write_text(build.read_text() + MODEL_LINE)
    three = two + ("//kernels/decode:llama3_1b",)
    _bazel(ws, "build", *three, log="model")
    assert _ran(ws / "model.json") == {"PipelinkLink": {"//kernels/decode:llama3_1b": 1}}
    facts = json.loads((WS / "bazel-bin" / "kernels" / "decode" / "llama3_1b.manifest.json").read_text())["facts"]
    assert (facts["hidden"], facts["layers"], facts["inter"]) == (2048, 16, 8192)

    src = WS / "kernels" / "decode" / "dec_attn_split.cu"
    assert CHUNKS in src.read_text()
    src.write_text(src.read_text().replace(CHUNKS, CHUNKS.replace("32", "16")))
    _bazel(ws, "build", *three, log="attention")
    assert _ran(ws / "attention.json") == {
        "CudaCompile": {"//kernels/decode:dec_attn_split": 1},
        "PipelinkPack": {"//kernels/decode:dec_attn_split": 1},
        "PipelinkLink": {"//kernels/decode:llama_tiny": 1, "//kernels/decode:llama3_1b": 1},
    }

    _bazel(ws, "build", *three, log="noop")
    assert _ran(ws / "noop.json") == {}
