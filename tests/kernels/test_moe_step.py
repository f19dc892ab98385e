"""moe_step (issue 9): linker-level checks on the CPU, correctness on a GPU.

CPU: //kernels:moe_step and its swiglu2 build link (bazel-bin), facts, roles and the
kernel-scope workspaces are in the manifest, the report's shared-memory footprint.
GPU (skipped without one): against an f64 reference on fresh random inputs, output
poisoned with NaN first, T = 1, 16, 128, 1024, 4096, 8192 (and 3, 200, 9000; the expert's team
mode from T = 4096 here (256 rows an expert), and at every T in //experiments:moe_step_team), linked and control, graph
replays of an opened session; tolerance |out - ref| <= 2e-2 + 2e-2 |ref| on tokens whose
8th/9th routing probabilities differ by more than 1e-4 (near-ties may route differently).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "bazel-bin" / "kernels"
sys.path.insert(0, str(ROOT / "kernels" / "moe"))
import moe_models  # noqa: E402

KERNELS = ["moe_step", "moe_step_swiglu2"]
# Builds outside //kernels: the team-mode build is an experiment target.
PACKAGES = {"moe_step_team": "experiments"}


def _bin(name):
    return ROOT / "bazel-bin" / PACKAGES.get(name, "kernels")


def _manifest(name):
    p = _bin(name) / f"{name}.manifest.json"
    if not p.is_file():
        pytest.skip(f"{p} not built (tools/bazel build //{PACKAGES.get(name, 'kernels')}:{name} --output_groups=+control)")
    return json.loads(p.read_text())


@pytest.mark.parametrize("name", KERNELS)
def test_links_with_four_owners_and_shared_workspaces(name):
    m = _manifest(name)
    assert m["facts"] == {"block_h": 64, "block_m": 64, "block_n": 128, "expert_stages": 4, "router_stages": 6,
                          "sched_bytes": 2048, "team_stages": 6, "top_k": 8, "experts": 128, "hidden": 2048,
                          "inter": 768, "renormalize": 1, "biases": 0}
    assert [i["package"] for i in m["instances"]] == ["moe_router", "moe_dispatch", "moe_expert", "moe_swiglu",
                                                       "moe_combine"]
    shared = {}
    for w in m["workspaces"]:
        if w.get("scope") == "kernel":
            shared.setdefault(w["name"], set()).add((w["bytes"], w["zero"]))
    assert set(shared) == {"sync", "route", "rows", "xs", "xrow", "hs", "ys"}
    assert all(len(v) == 1 for v in shared.values())  # one declaration form per buffer
    assert m["grid"] == ["resident_ctas", "1", "1"]
    report = json.loads((BIN / f"{name}.report.json").read_text())
    text = json.dumps(report)
    assert "first_fit" in text or "first-fit" in text or "proven" in text


def test_grouped_router_links_with_the_other_owners_packages_unchanged():
    """Another routing function is one more router package: the grouped build's dispatch,
    expert, SwiGLU and combine are moe_step's packages (same digests), its router reads the
    two group facts, and its parameters are moe_router's with score_bias and route_scale."""
    m, base = _manifest("moe_step_router_grouped"), _manifest("moe_step")
    digests = lambda man: {i["package"]: i["package_digest"] for i in man["instances"]}  # noqa: E731
    assert {k: v for k, v in digests(m).items() if k != "moe_router"} == \
        {k: v for k, v in digests(base).items() if k != "moe_router"}
    assert digests(m)["moe_router"] != digests(base)["moe_router"]
    assert (m["facts"]["groups"], m["facts"]["topk_groups"], m["facts"]["router_stages"]) == (8, 4, 3)
    assert "groups" not in base["facts"]
    import moe_step as ms
    from pipelink.runtime.manifest import Manifest

    lent = set(Manifest.from_file(BIN / "moe_step_router_grouped.manifest.json").lent)
    assert lent == ms.model_params(moe_models.VARIANTS["qwen3_30b_a3b_grouped"])
    assert "router_b" not in lent and {"score_bias", "route_scale"} <= lent


def _torch():
    return pytest.importorskip("torch")  # (the GPU itself: the requires_gpu marker)


def _inputs(torch, T, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    r = lambda *s, scale: (torch.randn(*s, generator=g, device="cuda") * scale).to(torch.bfloat16)
    return (r(T, 2048, scale=1.0), r(128, 2048, scale=0.05), r(128, 1536, 2048, scale=0.02),
            r(128, 2048, 768, scale=0.02))


@pytest.fixture(scope="module")
def weights():
    torch = _torch()
    _, rw, w13, w2 = _inputs(torch, 1, 1234)
    return rw, w13, w2


@pytest.mark.requires_gpu
@pytest.mark.parametrize("control", [False, True])
@pytest.mark.parametrize("T", [1, 3, 16, 128, 200, 1024, 4096, 8192, 9000])
@pytest.mark.parametrize("name", KERNELS + ["moe_step_team"])
def test_matches_f64_reference(name, T, control, weights):
    torch = _torch()
    _manifest(name)
    import moe_step as ms

    rw, w13, w2 = weights
    x = _inputs(torch, T, 99 + T)[0]
    out = torch.full((T, 2048), float("nan"), dtype=torch.bfloat16, device="cuda")
    ms.moe_step(x, rw, w13, w2, out, control=control, name=name,
                kernel_dir=_bin(name) if name in PACKAGES else None)
    torch.cuda.synchronize()
    ref, gap = ms.reference(x, rw, w13, w2)
    ok = gap > 1e-4
    tied = int((~ok).sum())  # near-ties below bf16 resolution route either way: left out, counted
    assert tied <= max(2, T // 10), f"{name} T={T}: {tied} of {T} tokens near-tied"
    err = (out.double() - ref).abs()
    tol = 2e-2 + 2e-2 * ref.abs()
    bad = (err > tol)[ok]
    assert not torch.isnan(out).any(), "unwritten (NaN-poisoned) output"
    assert not bad.any(), f"T={T}: {int(bad.sum())} elements off, max err {err[ok].max().item():.3e}"


@pytest.mark.requires_gpu
def test_graph_replays_without_memset(weights):
    torch = _torch()
    _manifest("moe_step")
    import moe_step as ms

    rw, w13, w2 = weights
    for T in (16, 128):
        x = _inputs(torch, T, 7 + T)[0]
        s = ms.open_step(x, rw, w13, w2)
        s.out.fill_(float("nan"))
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            s.launch(stream=stream.cuda_stream)  # warm-up outside capture
            stream.synchronize()
            with torch.cuda.graph(graph, stream=stream):
                s.launch(stream=stream.cuda_stream)
        for _ in range(5):  # replays: the counters carry over, no memset node
            s.out.fill_(float("nan"))
            graph.replay()
        torch.cuda.synchronize()
        ref, gap = ms.reference(x, rw, w13, w2)
        ok = gap > 1e-4
        err = (s.out.double() - ref).abs()[ok]
        assert not torch.isnan(s.out).any() and (err <= 2e-2 + 2e-2 * ref.abs()[ok]).all()


@pytest.mark.requires_gpu
def test_bad_inputs_are_coded(weights):
    torch = _torch()
    _manifest("moe_step")
    import moe_step as ms
    from pipelink.runtime import LaunchError

    rw, w13, w2 = weights
    x = torch.zeros(4, 2048, dtype=torch.bfloat16, device="cuda")
    for args, code in [((x.float(), rw, w13, w2), "R-DTYPE"), ((x[:, :1024].contiguous(), rw, w13, w2), "R-SHAPE"),
                       ((x, rw[:64], w13, w2), "R-SHAPE"), ((x.cpu(), rw, w13, w2), "R-DEVICE"),
                       ((x[:0], rw, w13, w2), "R-SHAPE")]:
        with pytest.raises(LaunchError) as e:
            ms.moe_step(*args)
        assert e.value.code == code


# --- every linked model (kernels/moe_models.bzl): the same packages with another shape -------

@pytest.mark.requires_gpu
# 1024, 2048 and 4096: each model's expert on both sides of its team-mode bound (T >= min(4096,
# 256 experts / top_k): Mixtral from 1024, OLMoE from 2048, the others from 4096; DeepSeek-V3's
# weights are 22.5 GB)
@pytest.mark.parametrize("T", [1, 16, 128, 1024, 2048, 4096])
@pytest.mark.parametrize("model", ["qwen3_235b_a22b", "olmoe_1b_7b", "mixtral_8x7b", "gpt_oss_120b",
                                   "qwen3_30b_a3b_grouped", "deepseek_v3"])
def test_linked_model_matches_its_f64_reference(model, T):
    _torch()
    from helpers.moe_model_check import check

    _manifest(moe_models.resolve_model(model).kernel)  # (a served model, or a test link: moe_models.VARIANTS)
    assert check(model, T) == ""
