"""fp32 references of the attention entry's functions (what the GPU checks compare against):
every variant with a dense mask, grouped-query heads, decode over a paged cache, and ragged
batches."""

from __future__ import annotations

import math


def alibi_slopes(H: int) -> list[float]:
    """ALiBi's head slopes 2^(-8 (h + 1) / H) (Press et al., for H a power of two)."""
    return [2.0 ** (-8.0 * (h + 1) / H) for h in range(H)]


def reference(q, k, v, variant="full", *, block_mask_pred=None, window=None, doc_ids=None, softcap=None,
              slopes=None, scale=None):
    """fp32 reference: the same function with a dense mask (rows with no key give 0)."""
    import torch
    B, H, Lq, D = q.shape
    Lkv = k.shape[2]
    if k.shape[1] != H:  # grouped-query: query head h reads KV head h // (H / Hkv)
        k, v = (t.repeat_interleave(H // k.shape[1], dim=1) for t in (k, v))
    scale = scale or 1.0 / math.sqrt(D)
    s = torch.einsum("bhqd,bhkd->bhqk", q.float(), k.float()) * scale
    qi = torch.arange(Lq, device=q.device)[:, None]
    ki = torch.arange(Lkv, device=q.device)[None, :]
    allow = torch.ones(Lq, Lkv, dtype=torch.bool, device=q.device)
    if variant in ("causal", "softcap", "alibi"):
        allow = ki <= qi
    elif variant == "sliding":
        allow = (ki <= qi) & (qi - ki < window)
    if variant == "softcap":
        s = softcap * torch.tanh(s / softcap)
    if variant == "alibi":
        sl = torch.tensor(alibi_slopes(H) if slopes is None else slopes, dtype=torch.float32, device=q.device)
        s = s + sl[None, :, None, None] * (ki - qi).float()[None, None]
    allow = allow.expand(B, H, Lq, Lkv)
    if variant == "block_sparse":
        b = torch.arange(B, device=q.device)[:, None, None, None]
        h = torch.arange(H, device=q.device)[None, :, None, None]
        allow = block_mask_pred(b, h, qi[None, None], ki[None, None]).expand(B, H, Lq, Lkv)
    if variant == "document":
        d = doc_ids.long()
        allow = (d[:, None, :, None] == d[:, None, None, :]).expand(B, H, Lq, Lkv)
    s = s.masked_fill(~allow, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return torch.einsum("bhqk,bhkd->bhqd", p, v.float())


def paged_reference(q, k_cache, v_cache, block_table, seq_lens, scale=None, causal=False):
    """fp32 reference over a paged cache: each sequence's K/V gathered from its pages (its first
    seq_lens[b] tokens), then attention of its query rows over them (grouped-query by head);
    causal: the Lq rows are the sequence's last tokens, row i sees keys <= seq_lens[b] - Lq + i."""
    import torch
    B, H, Lq, D = q.shape
    ps, Hkv = k_cache.shape[2], k_cache.shape[1]
    scale = scale or 1.0 / math.sqrt(D)
    out = torch.empty(B, H, Lq, D, dtype=torch.float32, device=q.device)
    for b in range(B):
        n = int(seq_lens[b])
        pages = block_table[b, : -(-n // ps)].long()
        k = k_cache[pages].permute(1, 0, 2, 3).reshape(Hkv, -1, D)[:, :n].repeat_interleave(H // Hkv, 0).float()
        v = v_cache[pages].permute(1, 0, 2, 3).reshape(Hkv, -1, D)[:, :n].repeat_interleave(H // Hkv, 0).float()
        s = torch.einsum("hqd,hkd->hqk", q[b].float(), k) * scale
        if causal:
            qi = torch.arange(Lq, device=q.device)[:, None] + (n - Lq)
            s = s.masked_fill(torch.arange(n, device=q.device)[None, :] > qi, float("-inf"))
        out[b] = torch.einsum("hqk,hkd->hqd", torch.softmax(s, -1).nan_to_num(0.0), v)
    return out


def varlen_reference(q, k, v, cu_q, cu_k, variant="full", *, window=None, softcap=None, slopes=None, scale=None):
    """fp32 reference of a ragged batch (q [tokens_q, H, D], k, v [tokens_k, Hkv, D], offsets
    [B + 1]): each sequence on its own, the masks bottom-right aligned (query row i at position
    Lk - Lq + i); rows that see no key give 0."""
    import torch
    H, D = q.shape[1], q.shape[2]
    scale = scale or 1.0 / math.sqrt(D)
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    sl = torch.tensor(alibi_slopes(H) if slopes is None else slopes, dtype=torch.float32, device=q.device)
    cq, ck = [int(x) for x in cu_q], [int(x) for x in cu_k]
    for b in range(len(cq) - 1):
        qs, ks = q[cq[b]:cq[b + 1]].float(), k[ck[b]:ck[b + 1]].float()
        vs = v[ck[b]:ck[b + 1]].float()
        Lq, Lk = qs.shape[0], ks.shape[0]
        if Lq == 0:
            continue
        ks, vs = (t.repeat_interleave(H // t.shape[1], dim=1) for t in (ks, vs))
        s = torch.einsum("qhd,khd->hqk", qs, ks) * scale
        pos = torch.arange(Lq, device=q.device)[:, None] + (Lk - Lq)
        ki = torch.arange(Lk, device=q.device)[None, :]
        allow = torch.ones(Lq, Lk, dtype=torch.bool, device=q.device)
        if variant in ("causal", "softcap", "alibi", "sliding"):
            allow = ki <= pos
        if variant == "sliding":
            allow = allow & (pos - ki < window)
        if variant == "softcap":
            s = softcap * torch.tanh(s / softcap)
        if variant == "alibi":
            s = s + sl[:, None, None] * (ki - pos).float()[None]
        s = s.masked_fill(~allow[None], float("-inf"))
        out[cq[b]:cq[b + 1]] = torch.einsum("hqk,khd->qhd", torch.softmax(s, -1).nan_to_num(0.0), vs)
    return out
