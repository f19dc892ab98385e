"""Argument checks the attention entries share (attention.py, attention_varlen.py), without
CUDA: the grouping of query heads over KV heads, each variant's own argument, and the layout of
a paged KV cache. Each raises pipelink.runtime.LaunchError with an R-* code and a hint."""

from __future__ import annotations

from pipelink.runtime import LaunchError
from pipelink.runtime.entry import I32_MAX, expect_tensor, integer, real

from attention_masks import BlockMask, check_doc_ids
from attention_reference import alibi_slopes

DECODE_ROWS = 16  # query rows a KV head in decode (the combine's)
PAGE_SIZES = (16, 32, 64, 128)  # attn_paged_loader: one TMA box per page, at most a KV block
PAGED_VARIANTS = ("decode", "causal")  # attn_decode_paged, attn_prefill_paged (chunked prefill over a cached prefix)
MAX_ROWS = 2**31 - 1  # B*H*S rows: attn_loader's TMA row coordinate is an int
READS = {"block_mask": ("block_sparse",), "window": ("sliding",), "doc_ids": ("document",), "softcap": ("softcap",),
         "slopes": ("alibi",), "splits": ("decode",), "schedule": ("decode",), "block_table": ("decode", "causal"),
         "seq_lens": ("decode", "causal")}  # the keyword arguments only some variants read


def gqa_group(variant: str, H: int, Hkv: int, Lq: int, enable_gqa) -> int:
    """Query heads per KV head (1: plain multi-head attention); R-SHAPE / R-PARAM where this build
    cannot serve the grouping."""
    if enable_gqa is not None and not isinstance(enable_gqa, bool):
        raise LaunchError("R-PARAM", f"enable_gqa must be None, True or False, got {enable_gqa!r:.60}",
                          hint="None infers grouped-query attention from the head counts")
    if Hkv == H:
        return 1
    if enable_gqa is False:
        raise LaunchError("R-SHAPE", f"k and v have {Hkv} heads and q {H}, with enable_gqa=False",
                          hint="enable_gqa=None (or True) for grouped-query attention, or give k and v q's heads")
    if Hkv < 1 or H % Hkv:
        raise LaunchError("R-SHAPE", f"q's {H} heads are not a whole multiple of k/v's {Hkv}",
                          hint="grouped-query attention needs Hq = group * Hkv")
    group = H // Hkv
    if variant == "decode" and group * Lq > DECODE_ROWS:
        raise LaunchError("R-SHAPE", f"decode with group {group} and {Lq} query rows is {group * Lq} rows a KV head; "
                          f"the combine takes at most {DECODE_ROWS}",
                          hint=f"at most {DECODE_ROWS // group} query row(s) a call at this grouping")
    return group


def variant_args(variant, q, B, H, S, *, block_mask, window, doc_ids, softcap, slopes) -> dict:
    """The checked argument of the variant (no CUDA call): {"window": int}, {"softcap": float},
    {"slopes": [H floats]}, {} (block mask and doc_ids checked against the inputs' shape)."""
    if variant == "alibi":
        if slopes is None:
            return {"slopes": alibi_slopes(H)}
        if not isinstance(slopes, (list, tuple)) or len(slopes) != H:
            raise LaunchError("R-PARAM", f"slopes must be a list of {H} numbers (one per head), got "
                              f"{type(slopes).__name__}" + (f" of {len(slopes)}" if isinstance(slopes, (list, tuple))
                                                            else ""),
                              hint="attention(..., variant='alibi', slopes=None) uses 2^(-8 (h + 1) / H); "
                                   "a tensor: slopes=t.tolist()")
        return {"slopes": [real(f"slopes[{i}]", x) for i, x in enumerate(slopes)]}
    if variant == "sliding":
        if window is None:
            raise LaunchError("R-PARAM", "the sliding variant needs window=", hint="attention(..., variant='sliding', "
                              "window=1024)")
        return {"window": integer("window", window, 1, I32_MAX,
                                  hint="an int in 1 .. 2^31-1 keys (k <= q and q - k < window)")}
    if variant == "softcap":
        if softcap is None:
            raise LaunchError("R-PARAM", "the softcap variant needs softcap=", hint="attention(..., variant='softcap', "
                              "softcap=30.0)")
        return {"softcap": real("softcap", softcap, positive=True, hint="a finite number > 0, e.g. softcap=30.0")}
    if variant == "block_sparse":
        if not isinstance(block_mask, BlockMask):
            raise LaunchError("R-PARAM", f"variant 'block_sparse' needs block_mask=create_block_mask(...), got "
                              f"{type(block_mask).__name__}", hint="bm = create_block_mask(pred, B, H, Q_LEN, KV_LEN)")
        block_mask.check(B, H, S, S, q.device)
    if variant == "document":
        check_doc_ids(doc_ids, B, H, S, q.device)
    return {}


def paged_layout(variant, k, v, block_table, seq_lens, B, D, dev) -> dict:
    """A paged KV cache (FlashInfer's HND layout): k and v [num_pages, Hkv, page_size, D] bf16,
    block_table [B, max_pages] int32, seq_lens [B] int32 -> {page_size, max_pages, num_pages}.
    Device contents are not read (no host sync): lengths above max_pages * page_size are
    clamped by the kernel, page numbers past the pool read zeros, and a page's slots past its
    sequence's length must hold finite values (allocate the pool with torch.zeros)."""
    import torch
    if variant not in PAGED_VARIANTS:
        raise LaunchError("R-PARAM", f"variant {variant!r} does not read a paged cache (block_table=, seq_lens=)",
                          hint=f"block_table= and seq_lens= are read by {' and '.join(PAGED_VARIANTS)} "
                               "(causal: chunked prefill over a cached prefix)")
    if block_table is None or seq_lens is None:
        missing = "block_table" if block_table is None else "seq_lens"
        raise LaunchError("R-PARAM", f"a paged cache needs both block_table= and seq_lens= ({missing} is missing)",
                          hint="block_table [B, max_pages] int32, seq_lens [B] int32, on q's device")
    if k.shape != v.shape or k.shape[3] != D:
        raise LaunchError("R-SHAPE", f"k cache {list(k.shape)} / v cache {list(v.shape)}: expected one shape "
                          f"[num_pages, Hkv, page_size, {D}]", hint="FlashInfer's HND layout, K and V pools apart")
    num_pages, Hkv, page_size = k.shape[:3]
    if page_size not in PAGE_SIZES:
        raise LaunchError("R-SHAPE", f"page size {page_size} (k.shape[2]) is not one of {PAGE_SIZES}",
                          hint="pages of 16, 32, 64 or 128 tokens")
    if num_pages * Hkv * page_size > MAX_ROWS:
        raise LaunchError("R-SHAPE", f"the page pool has {num_pages * Hkv * page_size} rows; the loader addresses at "
                          f"most {MAX_ROWS} (a 32-bit TMA row coordinate)", hint="a smaller pool, or split it")
    expect_tensor("block_table", block_table, dtype=torch.int32, device=dev, nonempty=True)
    expect_tensor("seq_lens", seq_lens, shape=(B,), dtype=torch.int32, device=dev)
    if block_table.dim() != 2 or block_table.shape[0] != B:
        raise LaunchError("R-SHAPE", f"block_table has shape {list(block_table.shape)}; expected [{B}, max_pages]",
                          hint="one row of page numbers per sequence of q's batch")
    max_pages = block_table.shape[1]
    if max_pages * page_size > I32_MAX:
        raise LaunchError("R-SHAPE", f"block_table's {max_pages} pages of {page_size} tokens exceed 2^31 - 1 keys",
                          hint="fewer pages a sequence")
    return {"page_size": page_size, "max_pages": max_pages, "num_pages": num_pages}
