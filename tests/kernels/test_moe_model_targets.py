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
REFUSED: dict[str, dict[str, set[str]]] = {}
# Links beyond what the owners hold (a model's facts with some changed), and who refuses which
# fact: 512 experts are past the counters' 3 chunks of 128 (moe_shapes.h MAX_CHUNKS), the
# SwiGLU libraries' hs sizing and the grouped router's 256 slots.
BEYOND = {
    "deepseek_v3_512": ("deepseek_v3", {"experts": 512},
                        {"experts": {"moe_router", "moe_dispatch", "moe_expert", "moe_swiglu", "moe_combine"}}),
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
    """The same five packages; the router and the activation library are the ones the model's
    table row picks (moe_router or DeepSeek-V3's moe_router_grouped with its interface; moe_swiglu
    or gpt-oss's moe_swiglu_clamped with moe_swiglu's)."""
    digests = {model: {i["package"]: i["package_digest"] for i in _manifest(MODELS[model]["target"])["instances"]}
               for model in SERVED}
    first = digests[SERVED[0]]
    assert set(first) == {f"moe_{o}" for o in OWNERS}
    picked = {"moe_swiglu": "activation", "moe_router": "router"}
    for slot, key in picked.items():
        for choice in {MODELS[m][key] for m in SERVED}:
            group = {digests[m][slot] for m in SERVED if MODELS[m][key] == choice}
            assert len(group) == 1, (slot, choice, group)
        assert len({d[slot] for d in digests.values()}) == len({MODELS[m][key] for m in SERVED}), slot
    same = lambda d: {k: v for k, v in d.items() if k not in picked}  # noqa: E731
    assert all(same(d) == same(first) for d in digests.values()), digests


@built
@pytest.mark.parametrize("case", UNSERVED + list(BEYOND))
def test_unserved_model_is_refused_naming_each_limited_fact(case, tmp_path):
    model, changed, expected = BEYOND.get(case, (case, {}, REFUSED.get(case)))
    table = MODELS[model] | changed
    kernel = tmp_path / "moe_step.kernel.toml"
    facts = "".join(f"\n[fact.{k}]\n" + (f'type = "bool"\nown = {str(v).lower()}\n' if isinstance(v, bool) else f"own = {v}\n")
                    for k, v in ((k, table[k]) for k in FACTS if k in table))
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
    assert refused == expected
    assert not out.exists() or not any(out.iterdir())  # nothing half-written
