"""The MoE model targets (kernels/moe_models.bzl): one set of owner packages, one link per model.

Served models are built by `bazel build //...` (tools/test.sh runs it first): each manifest
carries the model's shape as kernel-owned facts, and every model's manifest names the same
package digests (nothing was recompiled for it). A model the owners do not serve yet is linked
here from the same packages and must fail with L-FACT-ACCEPT naming each fact an owner limits,
and leave no output behind. CPU only; skips when bazel-bin has no MoE packages.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

BIN = ROOT / "bazel-bin" / "kernels"
OWNERS = ("router", "dispatch", "expert", "swiglu", "combine")
SHAPE = ("hidden", "inter", "experts", "top_k", "renormalize", "biases")
FACTS = SHAPE + ("groups", "topk_groups")  # (the grouped router's, in its models' rows only)


def _table() -> dict[str, dict]:
    text = (ROOT / "kernels" / "moe_models.bzl").read_text()
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.Assign) and n.targets[0].id == "MOE_MODELS")
    return ast.literal_eval(node.value)


MODELS = _table()
SERVED = [m for m, v in MODELS.items() if v["served"]]
UNSERVED = [m for m, v in MODELS.items() if not v["served"]]
# The facts each unserved model breaks, and which owners refuse them (their accept clauses).
REFUSED = {
    "deepseek_v3": {"experts": {"moe_dispatch", "moe_expert", "moe_combine"}},  # (its router takes 256)
}

_BUILT = all((BIN / f"moe_{o}.plpkg").is_file() for o in OWNERS + ("router_grouped",))
built = pytest.mark.skipif(not _BUILT, reason="no MoE packages in bazel-bin (tools/bazel build //kernels:moe_step)")


def _manifest(target: str) -> dict:
    return json.loads((BIN / f"{target}.manifest.json").read_text())


def test_the_table_names_six_models_and_moe_step_stays_qwen3_30b():
    assert len(MODELS) == 6
    assert MODELS["qwen3_30b_a3b"]["target"] == "moe_step"
    assert set(REFUSED) == set(UNSERVED)


def test_the_bazel_and_python_tables_agree():
    sys.path.insert(0, str(ROOT / "kernels" / "moe"))
    import moe_models

    assert set(moe_models.MODELS) == set(MODELS)
    for name, m in moe_models.MODELS.items():
        assert m.facts() == {k: int(MODELS[name][k]) for k in FACTS if k in MODELS[name]}, name
        assert m.kernel == MODELS[name]["target"], name
        assert m.router == MODELS[name]["router"], name
    assert set(moe_models.NOT_LINKED) == set(UNSERVED)


@built
@pytest.mark.parametrize("model", SERVED)
def test_served_model_links_its_shape_as_kernel_facts(model):
    m = _manifest(MODELS[model]["target"])
    assert {k: m["facts"][k] for k in SHAPE} == {k: int(MODELS[model][k]) for k in SHAPE}  # (a bool reads 0/1)
    assert (BIN / f"{MODELS[model]['target']}.control.cubin").is_file()


@built
def test_every_served_model_links_the_same_packages():
    """The same five packages; the activation library is the one the model's table row picks
    (moe_swiglu, or gpt-oss's moe_swiglu_clamped with moe_swiglu's interface)."""
    digests = {model: {i["package"]: i["package_digest"] for i in _manifest(MODELS[model]["target"])["instances"]}
               for model in SERVED}
    first = digests[SERVED[0]]
    assert set(first) == {f"moe_{o}" for o in OWNERS}
    for act in {MODELS[m]["activation"] for m in SERVED}:
        group = [digests[m] for m in SERVED if MODELS[m]["activation"] == act]
        assert all(d == group[0] for d in group), (act, group)
    assert all({k: v for k, v in d.items() if k != "moe_swiglu"} == {k: v for k, v in first.items() if k != "moe_swiglu"}
               for d in digests.values()), digests
    assert len({d["moe_swiglu"] for d in digests.values()}) == len({MODELS[m]["activation"] for m in SERVED})


@built
@pytest.mark.parametrize("model", UNSERVED)
def test_unserved_model_is_refused_naming_each_limited_fact(model, tmp_path):
    kernel = tmp_path / "moe_step.kernel.toml"
    facts = "".join(f"\n[fact.{k}]\n" + (f'type = "bool"\nown = {str(v).lower()}\n' if isinstance(v, bool) else f"own = {v}\n")
                    for k, v in ((k, MODELS[model][k]) for k in FACTS if k in MODELS[model]))
    kernel.write_text((ROOT / "kernels" / "moe" / "moe_step.kernel.toml").read_text() + facts)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "pipelink", "link", "--format", "json", "--kernel", str(kernel), "--out-dir", str(out)]
    for o in OWNERS:  # the model's own router package (the grouped one for DeepSeek-V3)
        cmd += ["--package", str(BIN / f"{MODELS[model]['router'] if o == 'router' else 'moe_' + o}.plpkg")]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={"PYTHONPATH": str(ROOT / "tools"), "PATH": "/usr/bin:/bin"})
    assert res.returncode != 0
    report = json.loads(res.stdout or res.stderr)
    assert report["ok"] is False
    refused: dict[str, set[str]] = {}
    for d in report["diagnostics"]:
        assert d["code"] == "L-FACT-ACCEPT", d
        fact = d["clause"].removeprefix("fact.")
        refused.setdefault(fact, set()).add(d["facts"][1]["side"].split("(")[1].rstrip(")"))
        assert d["facts"][0]["origin"].startswith(str(kernel)), d  # the kernel file's own line
        assert d["hint"]
    assert refused == REFUSED[model]
    assert not out.exists() or not any(out.iterdir())  # nothing half-written
