"""kernels/moe/moe_reference.py: each served model's routing and FFN (CPU, float64).

Every routing against a tiny hand-checked case, and the whole layer against an independent
per-token loop (Python sorting, one token and one expert at a time) on random inputs of small
versions of the six models (same routing and activation, smaller dims)."""

from __future__ import annotations

import dataclasses
import math
import sys

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402

sys.path.insert(0, str(ROOT / "kernels" / "moe"))
import moe_reference as mr  # noqa: E402
import moe_step as ms  # noqa: E402
from moe_models import MODELS  # noqa: E402

F64 = torch.float64
SMALL = {  # the six models at test size: (experts, top_k) and DeepSeek's groups
    "qwen3_30b_a3b": dict(experts=16, top_k=4), "qwen3_235b_a22b": dict(experts=16, top_k=8),
    "olmoe_1b_7b": dict(experts=16, top_k=4), "mixtral_8x7b": dict(experts=8, top_k=2),
    "deepseek_v3": dict(experts=32, top_k=8, groups=8, topk_groups=4, shared_inter=8),
    "gpt_oss_120b": dict(experts=16, top_k=4),
}


def small(name, hidden=16, inter=8):
    return dataclasses.replace(MODELS[name], hidden=hidden, inter=inter, **SMALL[name])


def random_tensors(m, gen, scale=1.0):
    t = {}
    for name, (shape, dt) in m.tensors().items():
        v = torch.randn(*shape, generator=gen, dtype=F64)
        t[name] = v * (0.5 if name in ("router_w", "router_b", "score_bias") else 0.3) * scale
    if "score_bias" in t:
        t["score_bias"] = t["score_bias"] * 0.1  # the published biases are small next to σ's range
    return t


def _bf16(v: float) -> float:
    return torch.tensor(v, dtype=F64).to(torch.bfloat16).item()


def loop_reference(m, x, t):
    """One token at a time, with Python sorting: an implementation independent of the batched one."""
    E, k = m.experts, m.top_k
    outs, gaps = [], []
    for row in x.to(F64):
        logit = [float(row @ t["router_w"][e]) + (float(t["router_b"][e]) if m.biases else 0.0) for e in range(E)]
        if m.routing in ("softmax_renorm", "softmax"):
            mx = max(logit)
            p = [math.exp(v - mx) for v in logit]
            p = [v / sum(p) for v in p]
            order = sorted(range(E), key=lambda e: -p[e])
            chosen, gap = order[:k], p[order[k - 1]] - p[order[k]]
            w = [p[e] for e in chosen]
            if m.routing == "softmax_renorm":
                w = [v / sum(w) for v in w]
        elif m.routing == "topk_softmax":
            order = sorted(range(E), key=lambda e: -logit[e])
            chosen, gap = order[:k], logit[order[k - 1]] - logit[order[k]]
            ex = [math.exp(logit[e] - logit[chosen[0]]) for e in chosen]
            w = [v / sum(ex) for v in ex]
        else:  # sigmoid_grouped
            s = [1 / (1 + math.exp(-v)) for v in logit]
            b = [s[e] + float(t["score_bias"][e]) for e in range(E)]
            per = E // m.groups
            gscore = [sum(sorted(b[g * per:(g + 1) * per], reverse=True)[:2]) for g in range(m.groups)]
            gorder = sorted(range(m.groups), key=lambda g: -gscore[g])
            kept = gorder[:m.topk_groups]
            cand = sorted((e for g in kept for e in range(g * per, (g + 1) * per)), key=lambda e: -b[e])
            chosen = cand[:k]
            gap = min(gscore[gorder[m.topk_groups - 1]] - gscore[gorder[m.topk_groups]], b[cand[k - 1]] - b[cand[k]])
            w = [s[e] / sum(s[c] for c in chosen) * m.scaling for e in chosen]
        y = torch.zeros(m.hidden, dtype=F64)
        for e, we in zip(chosen, w):
            y += we * _expert(m, row, t["w13"][e], t["w2"][e], t["b13"][e] if m.biases else None,
                              t["b2"][e] if m.biases else None)
        if m.shared_inter:
            y += _expert(m, row, t["shared_w13"], t["shared_w2"], None, None)
        outs.append(y)
        gaps.append(gap)
    return torch.stack(outs), torch.tensor(gaps, dtype=F64)


def _expert(m, row, w13, w2, b13, b2):
    I = w13.shape[0] // 2
    h = []
    for j in range(I):
        g = float(row @ w13[j]) + (float(b13[j]) if b13 is not None else 0.0)
        u = float(row @ w13[I + j]) + (float(b13[I + j]) if b13 is not None else 0.0)
        if m.activation == "clamped_swiglu":
            g, u = min(g, m.limit), max(-m.limit, min(u, m.limit))
            a = g / (1 + math.exp(-m.alpha * g)) * (u + 1)
        else:
            a = g / (1 + math.exp(-g)) * u
        h.append(_bf16(a))
    y = w2.to(F64) @ torch.tensor(h, dtype=F64)
    return y + b2.to(F64) if b2 is not None else y


@pytest.mark.parametrize("name", list(MODELS))
def test_matches_a_per_token_loop_on_random_inputs(name):
    m = small(name)
    gen = torch.Generator().manual_seed(hash(name) % 1000)
    t = random_tensors(m, gen, scale=3.0 if name == "gpt_oss_120b" else 1.0)  # gpt-oss: reach the clamp
    x = torch.randn(24, m.hidden, generator=gen, dtype=F64)
    out, gap = mr.reference(m, x, t)
    want, want_gap = loop_reference(m, x, t)
    ok = gap > 1e-9
    assert ok.sum() >= 20, f"{int((~ok).sum())} near-ties of 24"
    assert torch.allclose(gap, want_gap, rtol=0, atol=1e-12)
    assert torch.allclose(out[ok], want[ok], rtol=1e-10, atol=1e-12), (out - want).abs().max()
    if name == "gpt_oss_120b":  # the clamp was exercised
        gu = torch.einsum("th,eih->tei", x, t["w13"])
        assert (gu[..., :m.inter] > m.limit).any() and (gu[..., m.inter:].abs() > m.limit).any()


def _one_hot_logits(logits, hidden=4):
    """x = e0 and router_w[:, 0] = logits: the router's logits are exactly `logits`."""
    E = len(logits)
    rw = torch.zeros(E, hidden, dtype=F64)
    rw[:, 0] = torch.tensor(logits, dtype=F64)
    x = torch.zeros(1, hidden, dtype=F64)
    x[0, 0] = 1.0
    return x, rw


@pytest.mark.parametrize("name, weights, gap", [
    ("qwen3_30b_a3b", [4 / 7, 3 / 7], 0.3 - 0.2),        # softmax = [.1 .2 .3 .4], renormalised
    ("olmoe_1b_7b", [0.4, 0.3], 0.3 - 0.2),               # not renormalised
    ("mixtral_8x7b", [4 / 7, 3 / 7], math.log(3 / 2)),   # softmax of the two logits; gap in logits
])
def test_softmax_routings_by_hand(name, weights, gap):
    m = dataclasses.replace(MODELS[name], hidden=4, inter=1, experts=4, top_k=2)
    x, rw = _one_hot_logits([math.log(v) for v in (1, 2, 3, 4)])
    ids, w, g = mr.route(m, x, {"router_w": rw})
    assert ids.tolist() == [[3, 2]]
    assert torch.allclose(w, torch.tensor([weights], dtype=F64)) and abs(g.item() - gap) < 1e-12


def test_gpt_oss_router_bias_and_topk_softmax_by_hand():
    m = dataclasses.replace(MODELS["gpt_oss_120b"], hidden=4, inter=1, experts=4, top_k=2)
    x, rw = _one_hot_logits([0.0, 0.0, 0.0, 0.0])
    ids, w, g = mr.route(m, x, {"router_w": rw, "router_b": torch.tensor([1.0, 3.0, 0.0, 2.0], dtype=F64)})
    assert ids.tolist() == [[1, 3]] and abs(g.item() - 1.0) < 1e-12
    e = 1 / (1 + math.exp(-1.0))  # softmax([3, 2])
    assert torch.allclose(w, torch.tensor([[e, 1 - e]], dtype=F64))


def test_deepseek_drops_the_group_of_the_best_single_expert():
    """8 experts in 4 groups of 2, keep 2 groups, top-2. Biased scores: group 0 = {.95, .0}
    (sum .95: the best expert, but a weak partner), group 1 = {.7, .6} (1.3), group 2 =
    {.55, .5} (1.05), group 3 = {.4, .1} (.5). Kept: groups 1 and 2; chosen: experts 2 and 3,
    weighted by their unbiased σ (.75 and .5) renormalised × 2.5 = 1.5 and 1.0."""
    m = dataclasses.replace(MODELS["deepseek_v3"], hidden=4, inter=1, experts=8, top_k=2, groups=4,
                            topk_groups=2, shared_inter=0)
    logits = [0.0, 0.0, math.log(3.0), 0.0, 0.0, 0.0, 0.0, 0.0]  # σ: .5 everywhere but .75 for expert 2
    biased = [0.95, 0.0, 0.7, 0.6, 0.55, 0.5, 0.4, 0.1]
    sig = [1 / (1 + math.exp(-v)) for v in logits]
    x, rw = _one_hot_logits(logits)
    bias = torch.tensor([b - s for b, s in zip(biased, sig)], dtype=F64)
    ids, w, g = mr.route(m, x, {"router_w": rw, "score_bias": bias})
    assert ids.tolist() == [[2, 3]]
    assert torch.allclose(w, torch.tensor([[1.5, 1.0]], dtype=F64))
    assert abs(g.item() - 0.05) < 1e-12  # min(group margin 1.05 - .95 = .1, expert margin .6 - .55)


def test_gpt_oss_clamped_swiglu_by_hand():
    m = MODELS["gpt_oss_120b"]
    gate = torch.tensor([10.0, -10.0, 1.0], dtype=F64)
    up = torch.tensor([-9.0, 9.0, 0.5], dtype=F64)
    want = [7.0 / (1 + math.exp(-1.702 * 7.0)) * (-7.0 + 1),   # gate clamped to 7, up to -7
            -10.0 / (1 + math.exp(1.702 * 10.0)) * (7.0 + 1),  # gate not clamped from below; up to 7
            1.0 / (1 + math.exp(-1.702)) * 1.5]
    assert torch.allclose(mr.activation(m, gate, up), torch.tensor(want, dtype=F64), rtol=1e-14)


def test_layer_by_hand_with_biases_and_shared_expert():
    """One token, I = 1: out = Σ w_k (h_k d_k + b2_k) (+ the shared expert's h d), h in bf16."""
    m = dataclasses.replace(MODELS["deepseek_v3"], hidden=2, inter=1, experts=4, top_k=2, groups=2, topk_groups=1,
                            shared_inter=1)
    x = torch.tensor([[1.0, 0.0]], dtype=F64)
    rw = torch.tensor([[2.0, 0], [0.0, 0], [-1.0, 0], [-3.0, 0]], dtype=F64)  # group 0 wins (σ(2) + σ(0))
    t = {"router_w": rw, "score_bias": torch.zeros(4, dtype=F64),
         "w13": torch.tensor([[[0.5, 0], [2.0, 0]]] * 4, dtype=F64),          # gate .5 x0, up 2 x0
         "w2": torch.tensor([[[1.0], [3.0]]] * 4, dtype=F64),
         "shared_w13": torch.tensor([[1.0, 0], [1.0, 0]], dtype=F64), "shared_w2": torch.tensor([[1.0], [0.0]], dtype=F64)}
    out, _ = mr.reference(m, x, t)
    s0, s1 = 1 / (1 + math.exp(-2.0)), 0.5
    h = _bf16(0.5 / (1 + math.exp(-0.5)) * 2.0)
    hs = _bf16(1.0 / (1 + math.exp(-1.0)))
    want = [2.5 * h * 1.0 + hs, 2.5 * h * 3.0]  # weights s0/(s0+s1), s1/(s0+s1) sum to 1, × 2.5
    assert torch.allclose(out, torch.tensor([want], dtype=F64), rtol=1e-14)
    assert s0 > s1


def test_moe_step_reference_is_qwen3_30b_a3b():
    m = dataclasses.replace(MODELS["qwen3_30b_a3b"], hidden=32, inter=8, experts=16)  # top-8 as served
    gen = torch.Generator().manual_seed(3)
    t = random_tensors(m, gen)
    x = torch.randn(8, 32, generator=gen, dtype=F64)
    a = mr.reference(m, x, t)
    b = mr.reference("qwen3_30b_a3b", x, t)  # the served model's routing does not depend on the dims
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    c = ms.reference(x, t["router_w"], t["w13"], t["w2"])
    assert torch.equal(a[0], c[0]) and torch.equal(a[1], c[1])
