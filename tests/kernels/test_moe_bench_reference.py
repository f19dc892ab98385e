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
