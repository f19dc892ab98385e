"""The grouped-sigmoid router's selection (kernels/moe/router_grouped.cu `route_token`) emulated
lane by lane on the CPU, against moe_reference's DeepSeek-V3 routing in f64.

The emulation does what the routing warp does, in f32: lane l holds slots 8 l .. 8 l + 7; each
lane's two best biased scores, merged over the group's lanes by xor butterflies; a group's rank
from every group's score (ties: the lower group); keys of the biased score's order-preserving
bits with the slot in the low 8 bits; top_k rounds of a warp max. It checks the choices (the
expert set, and each weight to 1e-5) on tokens whose reference margin exceeds what the key
keeps (2^-15 of the score: 1e-4 here), for models of 64, 128 and 256 experts, 1 to 8 groups,
and biases wide enough that many biased scores are negative (their keys' order is the
subtle part).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "kernels" / "moe"))
torch = pytest.importorskip("torch")

import moe_models  # noqa: E402
import moe_reference  # noqa: E402

LANES, LANE_SLOTS = 32, 8


def key_of(v: np.ndarray, slot: np.ndarray) -> np.ndarray:
    b = v.astype(np.float32).view(np.uint32)
    ordered = np.where(b & 0x80000000, ~b, b | 0x80000000).astype(np.uint32)
    return (ordered & np.uint32(0xFFFFFF00)) | (np.uint32(255) - slot.astype(np.uint32))


def route_token(lg: np.ndarray, bias: np.ndarray, experts: int, groups: int, topk_groups: int, top_k: int,
                scale: float) -> tuple[list[int], list[float]]:
    """One token: lg, bias [256] f32 (slots past `experts` as the kernel sees them)."""
    s = (np.float32(1) / (np.float32(1) + np.exp(-lg, dtype=np.float32))).astype(np.float32).reshape(LANES, LANE_SLOTS)
    biased = (s + bias.reshape(LANES, LANE_SLOTS)).astype(np.float32)
    lanes = experts // LANE_SLOTS
    kept = np.arange(LANES) < lanes
    if groups > 1:
        b1 = np.full(LANES, -np.inf, np.float32)
        b2 = np.full(LANES, -np.inf, np.float32)
        for m in range(LANE_SLOTS):
            v = biased[:, m]
            b2, b1 = np.maximum(b2, np.minimum(b1, v)), np.maximum(b1, v)
        per_group = lanes // groups
        o = 1
        while o < per_group:
            o1, o2 = b1[np.arange(LANES) ^ o], b2[np.arange(LANES) ^ o]
            b2, b1 = np.maximum(np.maximum(b2, o2), np.minimum(b1, o1)), np.maximum(b1, o1)
            o *= 2
        score = (b1 + b2).astype(np.float32)
        group = np.arange(LANES) // per_group
        better = np.zeros(LANES, int)
        for j in range(groups):
            other = score[j * per_group]
            better += (other > score) | ((other == score) & (j < group))
        kept &= better < topk_groups
    slots = np.arange(LANES * LANE_SLOTS).reshape(LANES, LANE_SLOTS)
    key = np.where(kept[:, None], key_of(biased, slots), np.uint32(0)).astype(np.uint32)
    experts_chosen, scores = [], []
    for _ in range(top_k):
        best = key.max()
        e = 255 - int(best & 0xFF)
        experts_chosen.append(e)
        scores.append(float(s.reshape(-1)[e]))
        key[key == best] = 0
    chosen = np.float32(sum(np.float32(x) for x in scores))
    return experts_chosen, [float(np.float32(x) / chosen * np.float32(scale)) for x in scores]


@pytest.mark.parametrize("experts,groups,topk_groups,top_k", [
    (256, 8, 4, 8),   # DeepSeek-V3
    (128, 8, 4, 8),   # //kernels:moe_step_router_grouped
    (128, 1, 1, 8),   # no group limit: plain sigmoid top-k
    (64, 4, 2, 4), (256, 2, 1, 2), (64, 8, 8, 1),
])
@pytest.mark.parametrize("bias_scale", [0.05, 1.0])  # 1.0: many biased scores < 0
def test_emulated_selection_matches_the_f64_reference(experts, groups, topk_groups, top_k, bias_scale):
    T, H = 96, 256
    g = torch.Generator().manual_seed(experts * 131 + groups * 17 + top_k + int(bias_scale * 100))
    m = moe_models.MoeModel("grouped_test", H, 64, experts, top_k, moe_models.SIGMOID_GROUPED, groups=groups,
                            topk_groups=topk_groups, scaling=2.5)
    x = torch.randn(T, H, generator=g).to(torch.bfloat16)
    tensors = {"router_w": (torch.randn(experts, H, generator=g) * H**-0.5).to(torch.bfloat16),
               "score_bias": torch.randn(experts, generator=g) * bias_scale}
    ids, wts, gap = moe_reference.route(m, x, tensors)
    logits = (x.double() @ tensors["router_w"].double().t()).float().numpy()
    bias = np.zeros(LANES * LANE_SLOTS, np.float32)
    bias[:experts] = tensors["score_bias"].numpy()
    checked = 0
    for t in range(T):
        if gap[t] <= 1e-4:
            continue
        lg = np.zeros(LANES * LANE_SLOTS, np.float32)  # slots past `experts`: W_r rows loaded as zeros
        lg[:experts] = logits[t]
        e, w = route_token(lg, bias, experts, groups, topk_groups, top_k, 2.5)
        assert sorted(e) == sorted(ids[t].tolist()), t
        want = dict(zip(ids[t].tolist(), wts[t].tolist()))
        assert all(abs(w[i] - want[e[i]]) <= 1e-5 * max(1.0, abs(want[e[i]])) for i in range(top_k)), t
        checked += 1
    assert checked >= T * 3 // 4  # near-ties are few


def test_keys_order_like_the_scores_they_hold():
    v = np.array([-3.0, -1.0, -0.25, -0.0, 0.0, 1e-30, 0.25, 1.0, 3.0], np.float32)
    k = key_of(v, np.arange(len(v)))
    assert list(np.argsort(k, kind="stable")) == list(range(len(v)))
    assert (k != 0).all()
