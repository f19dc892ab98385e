"""benchmarks/moe_bench.py's f64 reference against kernels/moe's model reference (moe_reference),
on the CPU at small shapes: the check the GPU runs is only as good as this reference. gpt-oss's
biases (router, gate/up, down) and clamped SwiGLU, and a bias-free model."""

import dataclasses
import sys

import pytest

from conftest import ROOT

torch = pytest.importorskip("torch")
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "kernels" / "moe"))
import moe_bench  # noqa: E402
import moe_models  # noqa: E402
import moe_reference  # noqa: E402


@pytest.mark.parametrize("name", ["gpt_oss_120b", "olmoe_1b_7b"])
def test_bench_reference_is_the_model_reference(name, monkeypatch):
    H, I, E = 64, 32, 16
    model = dataclasses.replace(moe_models.MODELS[name], hidden=H, inter=I, experts=E)
    monkeypatch.setattr(moe_models, "MODELS", {**moe_models.MODELS, name: model})
    for n in ("H", "I", "E", "TOP_K", "MODEL", "TARGET", "RENORM"):  # use_model's globals: restored after
        monkeypatch.setattr(moe_bench, n, getattr(moe_bench, n))
    moe_bench.use_model(name)
    g = torch.Generator().manual_seed(7)
    u = lambda *s: torch.rand(*s, generator=g, dtype=torch.float64) * 2 - 1  # noqa: E731
    x = u(40, H).bfloat16()
    t = {"router_w": (u(E, H) / H**0.5).bfloat16(), "w13": (u(E, 2 * I, H) * 2 / H**0.5).bfloat16(),
         "w2": (u(E, H, I) * 2 / I**0.5).bfloat16()}
    biases = {"router_b": u(E).bfloat16(), "b13": (u(E, 2 * I) * 16).bfloat16(), "b2": (u(E, H) / 2).bfloat16()}
    monkeypatch.setattr(moe_bench, "BIASES", biases if model.biases else {})
    rows = torch.arange(40)
    got, ambiguous = moe_bench.reference(x, t["router_w"], t["w13"], t["w2"], rows)
    want, _ = moe_reference.reference(model, x, t | (biases if model.biases else {}))
    keep = ~ambiguous
    assert keep.sum() >= 36
    rms = want.pow(2).mean().sqrt()
    # the model reference rounds h to bf16 (as the kernel does); the bench's keeps it in f64
    assert float(((got - want)[keep].abs() / (want[keep].abs() + rms)).max()) < 2e-2
    if model.biases:
        assert float(((t["w13"][0].double() @ x.double().t()).t() + biases["b13"][0].double()).abs().max()) > 7


def test_bench_routes_deepseek_as_the_model_reference(monkeypatch):
    """DeepSeek-V3 in the bench: its baselines' float32 grouped routing picks the reference's
    experts on every token that is not near-tied, with the same weights (× 2.5), and the shared
    expert is added to their output as the reference adds it."""
    H, I, E = 64, 32, 32
    model = dataclasses.replace(moe_models.MODELS["deepseek_v3"], hidden=H, inter=I, experts=E, shared_inter=I)
    monkeypatch.setattr(moe_models, "MODELS", {**moe_models.MODELS, "deepseek_v3": model})
    for n in ("H", "I", "E", "TOP_K", "MODEL", "TARGET", "RENORM"):
        monkeypatch.setattr(moe_bench, n, getattr(moe_bench, n))
    moe_bench.use_model("deepseek_v3")
    g = torch.Generator().manual_seed(11)
    u = lambda *s: torch.rand(*s, generator=g, dtype=torch.float64) * 2 - 1  # noqa: E731
    x = u(40, H).bfloat16()
    router_w = (u(E, H) / H**0.5).bfloat16()
    extras = {"score_bias": (u(E) * 0.1).float(), "shared_w13": (u(2 * I, H) * 2 / H**0.5).bfloat16(),
              "shared_w2": (u(H, I) * 2 / I**0.5).bfloat16()}
    monkeypatch.setattr(moe_bench, "EXTRAS", extras)
    wv, ids = moe_bench.route(x, router_w)
    rids, rw, gap = moe_reference.route(model, x, {"router_w": router_w, **extras})
    keep = gap > 1e-4
    assert keep.sum() >= 30
    assert torch.equal(ids[keep].sort(1).values, rids[keep].sort(1).values)
    assert torch.allclose(wv.double().sum(1)[keep], rw.sum(1)[keep], rtol=1e-5)
    assert abs(float(rw.sum(1)[0]) - model.scaling) < 1e-9
    zero = torch.zeros(40, H, dtype=torch.float64)
    shared = moe_bench.with_shared(x, zero)
    gu = x.double() @ extras["shared_w13"].double().t()
    want = (torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]) @ extras["shared_w2"].double().t()
    assert float((shared - want).abs().max() / want.abs().max()) < 2e-2
