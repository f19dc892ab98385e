"""f64 reference of one MoE layer of any served model (moe_models.MODELS): routing, expert FFN
(+ biases, clamped SwiGLU), shared expert, combine.

    out, gap = reference(MODELS["deepseek_v3"], x, tensors)      # tensors: MoeModel.tensors() names

h is rounded to bf16 between the two projections, as the kernel keeps it. `gap` [T] is each
token's margin at its routing's top-k boundary in the quantity the routing sorts by
(probabilities for softmax routings, logits for top-k-softmax, biased scores, and group
scores, for DeepSeek-V3): a token whose gap is below what bf16 resolves may route differently
in the kernel, so tests leave those tokens out and count them.
"""

from __future__ import annotations

import torch

from moe_models import (CLAMPED_SWIGLU, SIGMOID_GROUPED, SOFTMAX, SOFTMAX_RENORM, TOPK_SOFTMAX, MoeModel,
                        resolve_model)

INF = float("inf")


def _boundary(values: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-k (values, indices) along the last dim and the margin k-th minus (k+1)-th (inf when
    there is no (k+1)-th)."""
    n = values.shape[-1]
    top = torch.topk(values, min(k + 1, n), dim=-1)
    if n > k:
        gap = top.values[..., k - 1] - top.values[..., k]
    else:
        gap = torch.full(values.shape[:-1], INF, dtype=values.dtype, device=values.device)
    return top.values[..., :k], top.indices[..., :k], gap


def route(model: MoeModel, x: torch.Tensor, tensors: dict, dtype=torch.float64):
    """(ids [T, k], weights [T, k], gap [T]) of the model's router on x, in `dtype`."""
    logits = x.to(dtype) @ tensors["router_w"].to(dtype).t()
    if model.biases:
        logits = logits + tensors["router_b"].to(dtype)
    k = model.top_k
    if model.routing in (SOFTMAX_RENORM, SOFTMAX):
        pv, ids, gap = _boundary(torch.softmax(logits, dim=-1), k)
        return ids, (pv / pv.sum(-1, keepdim=True) if model.routing == SOFTMAX_RENORM else pv), gap
    if model.routing == TOPK_SOFTMAX:
        lv, ids, gap = _boundary(logits, k)
        return ids, torch.softmax(lv, dim=-1), gap
    if model.routing == SIGMOID_GROUPED:
        return _route_grouped(model, logits, tensors["score_bias"].to(dtype))
    raise ValueError(f"unknown routing {model.routing!r}")


def _route_grouped(model: MoeModel, logits: torch.Tensor, score_bias: torch.Tensor):
    """DeepSeek-V3 (noaux_tc): experts are chosen by the biased score s + b, but weighted by the
    unbiased s. A group's score is the sum of its two best biased scores; only the topk_groups
    best groups' experts may be chosen."""
    T, E, G = logits.shape[0], model.experts, model.groups
    s = torch.sigmoid(logits)
    biased = s + score_bias
    group_score = torch.topk(biased.view(T, G, E // G), 2, dim=-1).values.sum(-1)
    _, kept, group_gap = _boundary(group_score, model.topk_groups)
    allowed = torch.zeros(T, G, dtype=torch.bool, device=logits.device).scatter_(1, kept, True)
    allowed = allowed.repeat_interleave(E // G, dim=1)
    _, ids, expert_gap = _boundary(biased.masked_fill(~allowed, -INF), model.top_k)
    w = s.gather(1, ids)
    w = w / w.sum(-1, keepdim=True) * model.scaling
    return ids, w, torch.minimum(group_gap, expert_gap)


def activation(model: MoeModel, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    if model.activation == CLAMPED_SWIGLU:
        gate = gate.clamp(max=model.limit)  # only from above: a large negative gate is kept
        up = up.clamp(-model.limit, model.limit)
        return gate * torch.sigmoid(model.alpha * gate) * (up + 1)
    return torch.nn.functional.silu(gate) * up


def _ffn(model: MoeModel, xd, w13, w2, b13=None, b2=None, dtype=torch.float64):
    I = w13.shape[0] // 2
    gu = xd @ w13.to(dtype).t()
    if b13 is not None:
        gu = gu + b13.to(dtype)
    h = activation(model, gu[:, :I], gu[:, I:]).to(torch.bfloat16).to(dtype)  # the kernel keeps h in bf16
    y = h @ w2.to(dtype).t()
    return y + b2.to(dtype) if b2 is not None else y


def reference(model, x: torch.Tensor, tensors: dict, dtype=torch.float64):
    """(out [T, H] in `dtype`, gap [T]) of one layer of `model` on x [T, H]."""
    model = resolve_model(model)
    xd = x.to(dtype)
    ids, wts, gap = route(model, x, tensors, dtype)
    bias = model.biases
    out = torch.zeros_like(xd)
    for e in ids.unique().tolist():
        tok, k = (ids == e).nonzero(as_tuple=True)
        y = _ffn(model, xd[tok], tensors["w13"][e], tensors["w2"][e], tensors["b13"][e] if bias else None,
                 tensors["b2"][e] if bias else None, dtype)
        out.index_add_(0, tok, wts[tok, k, None] * y)
    if model.shared_inter:
        out += _ffn(model, xd, tensors["shared_w13"], tensors["shared_w2"], dtype=dtype)
    return out, gap
