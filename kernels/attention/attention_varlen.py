"""Ragged batches (issue 42): the checks, aux words and launch parameters of attention over
sequences of different lengths packed in FlashAttention's varlen layout. attention.py loads and
launches; this module reads no kernel and makes no CUDA call but for building the aux buffer.

    out = attention(q, k, v, "causal", cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    # q [tokens_q, H, D], k and v [tokens_k, Hkv, D] bf16; cu_q, cu_k [B + 1] int32 on q's device,
    # sequence b at tokens cu_q[b] .. cu_q[b + 1] - 1 (0 first, non-decreasing)

Variants: full, causal, sliding, softcap and alibi (attn_varlen_<variant>). Where Lq != Lk the
masks align the queries bottom-right, as FlashAttention's varlen causal: query row i of sequence b
sits at position Lk - Lq + i. A row that sees no key gives 0. The offsets are not read on the host
(no sync: graph-capturable): the kernel clamps lengths to >= 0 and writes no row past tokens_q,
so bad offsets give a wrong answer, never a write outside `out`. max_seqlen_q (optional, as
FlashAttention's) only sizes the persistent grid.
"""

from __future__ import annotations

import math

from pipelink.runtime import LaunchError
from pipelink.runtime.entry import (I32_MAX, expect_disjoint, expect_stream, expect_tensor, flag, integer, optional_dir,
                                    real, refuse_unused, tensor_device)

from attention_args import READS, gqa_group, variant_args
from attention_masks import BLOCK

VARLEN_VARIANTS = ("full", "causal", "sliding", "softcap", "alibi")
VARLEN_PARAMS = {"q", "k", "v", "o", "aux", "cu_q", "cu_k", "q_len", "kv_len", "bh", "kv_group", "heads", "tokens_q",
                 "tokens_k", "scale"}  # the attn_varlen_* manifests' lent parameters
HEADER = 4  # aux words before the slopes: heads, B, window / softcap bits, base of the offsets
MIN_DUO = 65  # q_len the core sees at least: above 64 both warpgroups compute (a sequence may be longer than max_seqlen_q says)


def is_varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k) -> bool:
    return any(x is not None for x in (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k))


def check_varlen(q, k, v, variant, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, head_dims) -> dict:
    """The shape checks of a ragged call -> {B, H, Hkv, D, tokens_q, tokens_k, device, max_q,
    max_k} (the caller checks the head grouping). R-PARAM: a variant without a varlen build, one offsets tensor without the
    other, a bad max_seqlen; R-SHAPE: q, k, v not [tokens, heads, D], offsets not [B + 1]."""
    import torch
    if variant not in VARLEN_VARIANTS:
        raise LaunchError("R-PARAM", f"variant {variant!r} has no ragged-batch build (cu_seqlens_q=)",
                          hint=f"ragged batches run {', '.join(VARLEN_VARIANTS)}; document masking packs sequences "
                               "in one row: variant='document' with doc_ids")
    if cu_seqlens_q is None or cu_seqlens_k is None:
        missing = "cu_seqlens_q" if cu_seqlens_q is None else "cu_seqlens_k"
        raise LaunchError("R-PARAM", f"a ragged batch needs both cu_seqlens_q= and cu_seqlens_k= ({missing} is missing)",
                          hint="[B + 1] int32 token offsets on q's device (for self-attention pass the same tensor "
                               "twice)")
    for name, t in (("q", q), ("k", k), ("v", v)):
        expect_tensor(name, t, dtype=torch.bfloat16, align=16, nonempty=True)
        if t.dim() != 3:
            raise LaunchError("R-SHAPE", f"{name} has shape {list(t.shape)}; a ragged batch is [tokens, heads, D]",
                              hint="FlashAttention's varlen layout: the sequences' tokens one after another")
    dev = tensor_device(q)
    for name, t in (("k", k), ("v", v)):
        if tensor_device(t) != dev:
            raise LaunchError("R-DEVICE", f"{name} is on {t.device}, q on {q.device}", hint=f"{name}.to(q.device)")
    tokens_q, H, D = q.shape
    if D not in head_dims:
        raise LaunchError("R-SHAPE", f"head dim {D} is not supported by variant {variant!r}",
                          hint=" or ".join(f"d = {d}" for d in head_dims))
    if k.shape != v.shape or k.shape[2] != D:
        raise LaunchError("R-SHAPE", f"k {list(k.shape)} / v {list(v.shape)} do not match q {list(q.shape)}",
                          hint="k and v: [tokens_k, Hkv, D] with q's D, and one shape")
    tokens_k, Hkv = k.shape[0], k.shape[1]
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        expect_tensor(name, t, dtype=torch.int32, device=dev)
        if t.dim() != 1 or t.shape[0] < 2:
            raise LaunchError("R-SHAPE", f"{name} has shape {list(t.shape)}; expected [B + 1] with B >= 1",
                              hint="offsets 0, len_0, len_0 + len_1, ... (FlashAttention's cu_seqlens)")
    if cu_seqlens_q.shape != cu_seqlens_k.shape:
        raise LaunchError("R-SHAPE", f"cu_seqlens_q has {cu_seqlens_q.shape[0]} offsets and cu_seqlens_k "
                          f"{cu_seqlens_k.shape[0]}", hint="one offset more than sequences in each, the same B")
    B = cu_seqlens_q.shape[0] - 1
    # tiles: at most tokens_q / 128 + B Q blocks a head, counted (and bh = b * H + h) in 32 bits
    if (tokens_q // BLOCK + B) * H > I32_MAX or max(tokens_q, tokens_k) > I32_MAX or B * H > I32_MAX:
        raise LaunchError("R-SHAPE", f"{tokens_q} query tokens in {B} sequences of {H} heads: the kernel counts "
                          f"tiles and rows in 32 bits", hint="split the batch into several calls")
    max_q = None if max_seqlen_q is None else integer("max_seqlen_q", max_seqlen_q, 1, I32_MAX,
                                                      hint="the longest sequence's query tokens, or None")
    max_k = None if max_seqlen_k is None else integer("max_seqlen_k", max_seqlen_k, 1, I32_MAX,
                                                      hint="the longest sequence's keys, or None")
    return {"B": B, "H": H, "Hkv": Hkv, "D": D, "tokens_q": tokens_q, "tokens_k": tokens_k,
            "device": dev, "max_q": max_q, "max_k": max_k}


def check_ragged_call(q, k, v, variant, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, head_dims, *,
                      block_mask, window, doc_ids, softcap, slopes, scale, splits, schedule, out, kernel_dir, control,
                      stream, enable_gqa, block_table, seq_lens) -> dict:
    """attention.check_call of a ragged batch (cu_seqlens_*) -> check_varlen's dict with group,
    scale, the variant's argument and the aux header words; ragged = True."""
    import torch
    a = check_varlen(q, k, v, variant, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, head_dims)
    if block_table is not None or seq_lens is not None:
        raise LaunchError("R-PARAM", "a ragged batch (cu_seqlens_*) reads contiguous k and v; block_table= and "
                          "seq_lens= are the paged cache's", hint="chunked prefill over pages: q [B, H, Lq, D] with "
                          "block_table= and seq_lens=, variant 'causal'")
    a["group"] = gqa_group(variant, a["H"], a["Hkv"], 1, enable_gqa)
    given = {"block_mask": block_mask, "window": window, "doc_ids": doc_ids, "softcap": softcap, "slopes": slopes,
             "splits": splits, "schedule": schedule}
    refuse_unused(f"variant {variant!r}", {n: x for n, x in given.items() if variant not in READS[n]},
                  {n: " or ".join(f"variant {r!r}" for r in rs) for n, rs in READS.items()})
    args = variant_args(variant, q, a["B"], a["H"], a["tokens_q"], block_mask=None, window=window, doc_ids=None,
                         softcap=softcap, slopes=slopes)
    a["scale"] = 1.0 / math.sqrt(a["D"]) if scale is None else real("scale", scale, positive=True,
                                                                     hint="default: 1/sqrt(d)")
    a["header"], a["ragged"] = header_words(variant, a, args), True
    if out is not None:
        expect_tensor("out", out, shape=tuple(q.shape), dtype=torch.bfloat16, device=a["device"], align=16)
        expect_disjoint("out", out, {"q": q, "k": k, "v": v, "cu_seqlens_q": cu_seqlens_q,
                                     "cu_seqlens_k": cu_seqlens_k})
    optional_dir("kernel_dir", kernel_dir)
    flag("control", control)
    expect_stream(stream)
    return a


def varlen_aux(header, cu_seqlens_q, cu_seqlens_k):
    """The variant's aux (attn_varlen.cu): the host-made `header` words (int32 on the device), then
    cu_q, cu_k and the Q blocks' prefix sums, concatenated on the device (no host sync) -> (aux,
    cu_q view, cu_k view)."""
    import torch
    lens = (cu_seqlens_q[1:] - cu_seqlens_q[:-1]).clamp(min=0)
    blocks = torch.cumsum((lens + (BLOCK - 1)) // BLOCK, 0, dtype=torch.int32)
    zero = torch.zeros(1, dtype=torch.int32, device=header.device)
    aux = torch.cat((header, cu_seqlens_q, cu_seqlens_k, zero, blocks))
    base, n = header.shape[0], cu_seqlens_q.shape[0]
    return aux, aux[base:base + n], aux[base + n:base + 2 * n]


def header_words(variant, a, args) -> list[int]:
    """[heads, B, window or softcap bits, base, slopes...] (attn_varlen.cu's aux header)."""
    import torch
    word = 0
    if variant == "sliding":
        word = args["window"]
    elif variant == "softcap":
        word = int(torch.tensor([args["softcap"]], dtype=torch.float32).view(torch.int32).item())
    slopes = torch.tensor(args["slopes"], dtype=torch.float32).view(torch.int32).tolist() if variant == "alibi" else []
    return [a["H"], a["B"], word, HEADER + len(slopes), *slopes]


def launch_params(q, k, v, out, a, aux, cu_q, cu_k) -> dict:
    """The lent parameters of attn_varlen_<variant> for the checked call `a`."""
    max_q = a["max_q"] or a["tokens_q"]
    return {"q": q, "k": k, "v": v, "o": out, "aux": aux, "cu_q": cu_q, "cu_k": cu_k,
            "q_len": max(min(max_q, a["tokens_q"]), MIN_DUO), "kv_len": a["max_k"] or a["tokens_k"],
            "bh": a["B"] * a["H"], "kv_group": a["group"], "heads": a["H"], "tokens_q": a["tokens_q"],
            "tokens_k": a["tokens_k"], "scale": a["scale"]}
