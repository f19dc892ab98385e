"""Python entry points of the linked attention kernels (FlexAttention-like ergonomics).

    from attention import attention, create_block_mask
    out = attention(q, k, v, variant="causal")                    # q, k, v: [B, H, S, 128] bf16
    bm = create_block_mask(lambda b, h, q, k: (q // 128 + k // 128) % 10 == 0, None, None, S, S)
    out = attention(q, k, v, variant="block_sparse", block_mask=bm)
    out = attention(q, k, v, variant="sliding", window=1024)
    out = attention(q, k, v, variant="document", doc_ids=ids)      # ids: [B, S] int32, non-decreasing
    out = attention(q, k, v, variant="softcap", softcap=30.0)      # causal + tanh soft-cap
    out = attention(q, k, v, variant="alibi")                      # causal + ALiBi (slopes=[H] optional)
    out = attention(q1, k, v, variant="decode")                    # q1: [B, H, 1..16, 128], split-KV
    out = attention(q1, k, v, variant="decode", schedule="streamk")  # or "uniform" (splits=n per head)
    out = attention(q1, k8, v8, variant="decode")  # GQA: q1 [B, 32, 1, 128], k8/v8 [B, 8, S, 128]
    out = attention(q1, k_pages, v_pages, "decode", block_table=bt, seq_lens=lens)  # paged (HND pools)
    out = attention(q, k_pages, v_pages, "causal", block_table=bt, seq_lens=lens)  # chunked prefill, paged prefix
    out = attention(q, k, v, "causal", cu_seqlens_q=cu, cu_seqlens_k=cu)  # ragged batch: q [tokens, H, D]

Variants are the fused kernels of //kernels/attention (attn_<variant>.cubin and manifest in
`kernel_dir`, default $PIPELINK_ATTENTION_DIR or bazel-bin/kernels/attention). Launches go on
torch's current stream (graph-capturable). The variants' small device buffers (window, softcap,
slopes, document schedules) are cached: the AUX_CACHE_LIMIT most recently used, plus every one a
CUDA graph captured (call once before capturing: building a buffer copies from the host).

Every bad input is refused by `check_call` before the kernel is loaded or anything launched,
with pipelink.runtime.LaunchError, a code and a hint:
  R-PARAM   variant not one of VARIANTS; a keyword argument the variant does not read
            (block_mask, window, doc_ids, softcap, slopes, splits, schedule: each is read by one
            variant); schedule not None, "uniform" or "streamk"; splits with schedule="streamk";
            window not an int in 1 .. 2^31-1; softcap / scale / slopes not finite float32
            numbers (softcap and scale > 0; bools, strings, tensors refused, numpy numbers
            taken); splits not an int in 1 .. kv_len/128 (0 is not "the default": pass None);
            control not a bool, kernel_dir not a path; enable_gqa not None/True/False;
            block_table= / seq_lens= outside decode and causal, one without the other, or
            with schedule='streamk'; cu_seqlens_q= without cu_seqlens_k= (or the reverse),
            with a variant that has no ragged build (full, causal, sliding, softcap, alibi
            have), or with block_table=; max_seqlen_q/k not an int in 1 .. 2^31-1; a tensor that requires grad while
            autograd records; a non-tensor where a tensor goes; doc_ids decreasing
  R-SHAPE   not [B, H, S, D] (a ragged batch: q, k, v not [tokens, heads, D], cu_seqlens_* not
            [B + 1] of one B, tiles or rows past 32 bits); D not 128/64; zero-size dims; k/v heads not dividing q's, or
            grouped (Hkv < H) with group * q rows > 16 in decode, or with enable_gqa=False;
            lengths not multiples of 128 for block_sparse and document (the others
            take any length); a paged pool not
            [num_pages, Hkv, 16|32|64|128, D], block_table not [B, max_pages], seq_lens not [B];
            of 128 (decode: 1..16 query rows); q_len != kv_len for the masked variants; more
            than 2^31 - 1 rows B*H*S (the loader's 32-bit TMA row coordinate); uniform decode
            B*H > 65535 (grid y); decode of 2^24 KV blocks or more (B*Hkv*ceil(Lkv/128));
            document B*H or S/128 > 65535; doc_ids or block mask of other shapes
  R-DTYPE   q/k/v/out not bf16, doc_ids, block_table, seq_lens or cu_seqlens_* not int32
  R-DEVICE  CPU tensors, operands (or the block mask, doc_ids) on different GPUs
  R-LAYOUT  non-contiguous, not 16-byte aligned (q, k, v, out: TMA), sparse or lazy views, an
            out that shares memory with q, k, v (or doc_ids, the block mask)
  R-MANIFEST  no kernel in kernel_dir, or a manifest that is not that attention variant's
"""

from __future__ import annotations

import math
import os
import sys
import threading
from pathlib import Path

try:
    from pipelink.runtime import Kernel, LaunchError
except ImportError:  # run from a checkout without PYTHONPATH=tools
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from pipelink.runtime import Kernel, LaunchError
from pipelink.runtime.entry import (I32_MAX, device_index, expect_cubin, expect_disjoint, expect_manifest, expect_stream,
                            expect_tensor, flag, integer, kernel_file, optional_dir, real, refuse_unused, tensor_device)

from attention_masks import (BLOCK, BlockMask, causal_schedule, check_doc_ids, create_block_mask,  # noqa: E402,F401
                             document_aux)
from attention_reference import alibi_slopes, paged_reference, reference  # noqa: E402,F401
from attention_args import (DECODE_ROWS, MAX_ROWS, PAGE_SIZES, PAGED_VARIANTS, READS, gqa_group,  # noqa: E402,F401
                            paged_layout, variant_args)
from attention_varlen import (VARLEN_PARAMS, VARLEN_VARIANTS, check_ragged_call, is_varlen, launch_params,  # noqa: E402
                              varlen_aux)
from aux_cache import AuxCache  # noqa: E402
from decode_schedule import (MAX_DECODE_BLOCKS, STREAMK_MAX_CTAS, decode_schedule, default_splits,  # noqa: E402,F401
                             kv_blocks, streamk_stride)

HEAD_DIM = 128
HEAD_DIMS = (128, 64, 256)  # core builds: attn_core (attn_<variant>), attn_core_d64 / _d256 (attn_<variant>_d64 / _d256)
PREFILL = ("full", "causal", "sliding", "block_sparse", "document", "softcap", "alibi")
VARIANTS = PREFILL + ("decode",)
SQUARE = ("causal", "sliding", "block_sparse", "document", "softcap", "alibi")  # q_len == kv_len
ANY_LENGTH = ("full", "causal", "sliding", "softcap", "alibi", "decode")  # lengths need not be whole blocks
SCHEDULES = ("uniform", "streamk")  # decode: attn_decode (splits per head), attn_decode_streamk
PARAMS = {"q", "k", "v", "o", "aux", "q_len", "kv_len", "bh", "kv_group", "scale"}  # the manifests' lent parameters
PAGED_PREFILL_PARAMS = PARAMS | {"pages", "max_pages", "kv_heads", "page_size", "pool_rows"}  # attn_prefill_paged
PAGED_PARAMS = PAGED_PREFILL_PARAMS | {"splits"}  # attn_decode_paged
AUX_CACHE_LIMIT = 64  # device aux buffers kept (least recently used out), plus those graphs use


_cache: dict[tuple, Kernel] = {}
_aux_cache = AuxCache(AUX_CACHE_LIMIT)
_lock = threading.Lock()


def kernel_dir_default() -> Path:
    d = os.environ.get("PIPELINK_ATTENTION_DIR")
    return Path(d) if d else Path(__file__).resolve().parents[2] / "bazel-bin" / "kernels" / "attention"


def check_variant(variant) -> str:
    if not isinstance(variant, str) or variant not in VARIANTS:
        raise LaunchError("R-PARAM", f"unknown attention variant {variant!r:.60}", hint=f"one of {', '.join(VARIANTS)}")
    return variant


def load(variant: str, device: int = 0, *, kernel_dir=None, control: bool = False, head_dim: int = HEAD_DIM,
         uniform: bool = False, paged: bool = False, varlen: bool = False) -> Kernel:
    """The (cached) kernel attn_<variant>[_d64|_d256] on `device` (decode: attn_decode_streamk, or
    attn_decode's uniform splits with `uniform`, or attn_decode_paged with `paged`); R-MANIFEST if
    kernel_dir has none, or its manifest is not that variant's (parameters, head_dim), before the
    cubin is loaded."""
    variant, device = check_variant(variant), device_index(device)
    kdir, control = optional_dir("kernel_dir", kernel_dir), flag("control", control)
    uniform, paged, varlen = flag("uniform", uniform), flag("paged", paged), flag("varlen", varlen)
    if varlen and (paged or variant not in VARLEN_VARIANTS):
        raise LaunchError("R-PARAM", f"varlen=True: variant {variant!r}{' over a paged cache' if paged else ''} has no "
                          "ragged build", hint=f"ragged batches run {', '.join(VARLEN_VARIANTS)} (contiguous k, v)")
    if paged and variant not in PAGED_VARIANTS:
        raise LaunchError("R-PARAM", f"paged=True: variant {variant!r} reads a contiguous cache",
                          hint=f"a paged cache is read by {' and '.join(PAGED_VARIANTS)}")
    head_dim = integer("head_dim", head_dim, code="R-SHAPE")
    if head_dim not in HEAD_DIMS:
        raise LaunchError("R-SHAPE", f"head dim {head_dim} is not supported by variant {variant!r}",
                          hint="d = 64, 128 or 256")
    d = kdir or kernel_dir_default()
    kernel = (f"{'decode' if variant == 'decode' else 'prefill'}_paged" if paged else f"varlen_{variant}" if varlen else
              "decode_streamk" if variant == "decode" and not uniform else variant)
    name = f"attn_{kernel}" + ("" if head_dim == HEAD_DIM else f"_d{head_dim}")
    cubin, manifest = d / f"{name}{'.control' if control else ''}.cubin", d / f"{name}.manifest.json"
    key = (str(cubin), device)
    with _lock:
        k = _cache.get(key)
        if k is None:
            build = f"tools/bazel build //kernels/attention:{name} --output_groups=+control, or pass kernel_dir="
            kernel_file(cubin, hint=build)
            expect_manifest(manifest, f"attention variant {variant!r} (d = {head_dim})",
                            params=(PAGED_PARAMS if variant == "decode" else PAGED_PREFILL_PARAMS) if paged else
                            VARLEN_PARAMS if varlen else PARAMS | ({"splits"} if variant == "decode" else set()),
                            facts={"head_dim": head_dim, "block_q": BLOCK}, hint=build)
            expect_cubin(cubin, hint=build)
            k = _cache[key] = Kernel.load(cubin, manifest, device)
    return k


def _words_tensor(words, device):
    import torch
    return torch.tensor(list(words) + [0] * (4 - len(words) % 4), dtype=torch.int32, device=device)


def _aux(tensor_like, words):
    """A small int32 aux buffer on the device (cached per content)."""
    key = (tensor_like.device.index, tuple(words))
    t = _aux_cache.get(key)
    if t is None:
        t = _aux_cache.put(key, _words_tensor(words, tensor_like.device))
    return t


def check_call(q, k, v, variant="full", *, block_mask=None, window=None, doc_ids=None, softcap=None, slopes=None,
               scale=None, splits=None, schedule=None, out=None, kernel_dir=None, control=False,
               stream=None, enable_gqa=None, block_table=None, seq_lens=None, cu_seqlens_q=None, cu_seqlens_k=None,
               max_seqlen_q=None, max_seqlen_k=None) -> dict:
    """Every check of one `attention` call, without CUDA -> {B, H, Hkv, group, Lq, Lkv, D, device,
    scale, splits and schedule (None: the default), and the variant's own argument} (a ragged
    batch: _check_ragged's)."""
    import torch
    variant = check_variant(variant)
    if is_varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
        return check_ragged_call(q, k, v, variant, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                 HEAD_DIMS, block_mask=block_mask, window=window, doc_ids=doc_ids, softcap=softcap,
                                 slopes=slopes, scale=scale, splits=splits, schedule=schedule, out=out,
                                 kernel_dir=kernel_dir, control=control, stream=stream, enable_gqa=enable_gqa,
                                 block_table=block_table, seq_lens=seq_lens)
    for name, t in (("q", q), ("k", k), ("v", v)):
        expect_tensor(name, t, dtype=torch.bfloat16, align=16, nonempty=True)
        if t.dim() != 4:
            raise LaunchError("R-SHAPE", f"{name} has shape {list(t.shape)}; expected [B, H, S, {HEAD_DIM}]",
                              hint="FlexAttention layout: batch, heads, sequence, head dim")
    dev = tensor_device(q)
    for name, t in (("k", k), ("v", v)):
        if tensor_device(t) != dev:
            raise LaunchError("R-DEVICE", f"{name} is on {t.device}, q on {q.device}", hint=f"{name}.to(q.device)")
    B, H, Lq, D = q.shape
    if D not in HEAD_DIMS:
        raise LaunchError("R-SHAPE", f"head dim {D} is not supported by variant {variant!r}",
                          hint="d = 64, 128 or 256")
    paging = None
    if block_table is not None or seq_lens is not None:
        paging = paged_layout(variant, k, v, block_table, seq_lens, B, D, dev)
        Hkv, Lkv = k.shape[1], paging["max_pages"] * paging["page_size"]
    else:
        if k.shape[0] != B or k.shape[3] != D or k.shape != v.shape:
            raise LaunchError("R-SHAPE", f"k {list(k.shape)} / v {list(v.shape)} do not match q {list(q.shape)}",
                              hint="k and v: [B, Hkv, Lkv, D] with q's B and D, and one shape")
        Hkv, Lkv = k.shape[1], k.shape[2]
    group = gqa_group(variant, H, Hkv, Lq, enable_gqa)
    if Lkv % BLOCK and variant not in ANY_LENGTH:  # the others mask their tail block themselves
        raise LaunchError("R-SHAPE", f"kv length {Lkv} is not a positive multiple of {BLOCK} for variant {variant!r}",
                          hint=f"pad k and v to a multiple of {BLOCK} (and mask the padding); "
                               f"{', '.join(ANY_LENGTH)} take any length")
    if variant == "decode":
        if schedule is not None and (not isinstance(schedule, str) or schedule not in SCHEDULES):
            raise LaunchError("R-PARAM", f"schedule must be None, 'uniform' or 'streamk', got {schedule!r:.60}",
                              hint="None picks by shape; 'uniform': splits per head; 'streamk': equal ranges per SM")
        if schedule == "streamk" and splits is not None:
            raise LaunchError("R-PARAM", "splits= is the uniform schedule's; schedule='streamk' takes none",
                              hint="drop splits=, or pass schedule='uniform' (or None) with it")
        if not 1 <= Lq <= DECODE_ROWS:
            raise LaunchError("R-SHAPE", f"decode takes 1..{DECODE_ROWS} query rows, got {Lq}",
                              hint="use a prefill variant for longer queries")
        if paging is not None and schedule == "streamk":
            raise LaunchError("R-PARAM", "a paged cache is decoded with uniform splits; schedule='streamk' is not built "
                              "for it", hint="schedule=None (or 'uniform')")
        if paging is None and B * Hkv * kv_blocks(Lkv) >= MAX_DECODE_BLOCKS:
            raise LaunchError("R-SHAPE", f"decode of B*Hkv = {B * Hkv} heads of {kv_blocks(Lkv)} KV blocks: "
                              f"{B * Hkv * kv_blocks(Lkv)} blocks, the stream-K schedule's 32-bit arithmetic "
                              f"takes fewer than {MAX_DECODE_BLOCKS}", hint="split the batch into calls")
        if B * Hkv > 65535 and (splits is not None or schedule == "uniform" or paging is not None):
            raise LaunchError("R-SHAPE", f"decode with splits= launches one CTA row per KV head: B*Hkv = {B * Hkv} > "
                              "65535 (grid y)", hint="splits=None (stream-K takes any B*Hkv), or split the batch into calls")
    elif Lq % BLOCK and variant not in ANY_LENGTH:
        raise LaunchError("R-SHAPE", f"query length {Lq} is not a positive multiple of {BLOCK} for variant {variant!r}",
                          hint=f"pad q to a multiple of {BLOCK}; {', '.join(ANY_LENGTH)} take any length")
    if variant in SQUARE and Lq != Lkv and paging is None:
        raise LaunchError("R-SHAPE", f"variant {variant!r} needs q_len == kv_len, got {Lq} and {Lkv}",
                          hint="self-attention over one sequence (pack documents and use variant='document')")
    if B * H * (Lq if paging else max(Lq, Lkv)) > MAX_ROWS:
        raise LaunchError("R-SHAPE", f"B*H*S = {B * H * max(Lq, Lkv)} rows: the kernel addresses at most "
                          f"{MAX_ROWS} (a 32-bit TMA row coordinate)", hint="split the batch or heads into several calls")
    given = {"block_mask": block_mask, "window": window, "doc_ids": doc_ids, "softcap": softcap, "slopes": slopes,
             "splits": splits, "schedule": schedule, "block_table": block_table, "seq_lens": seq_lens}
    refuse_unused(f"variant {variant!r}", {n: x for n, x in given.items() if variant not in READS[n]},
                  {n: " or ".join(f"variant {r!r}" for r in rs) for n, rs in READS.items()})
    a = {"B": B, "H": H, "Hkv": Hkv, "group": group, "Lq": Lq, "Lkv": Lkv, "D": D, "device": dev, "splits": None,
         "schedule": None,
         **variant_args(variant, q, B, H, Lq, block_mask=block_mask, window=window, doc_ids=doc_ids,
                         softcap=softcap, slopes=slopes)}
    a["paging"], a["block_table"] = paging, block_table
    if variant == "decode":
        a["schedule"] = schedule
    if variant == "decode" and splits is not None:
        nkv = kv_blocks(Lkv)
        a["splits"] = integer("splits", splits, 1, nkv,
                              hint=f"1 .. {nkv} (each split takes one KV block at least), or None")
    if out is not None:
        expect_tensor("out", out, shape=tuple(q.shape), dtype=torch.bfloat16, device=dev, align=16)
        expect_disjoint("out", out, {"q": q, "k": k, "v": v, "doc_ids": doc_ids, "block_table": block_table,
                                     "seq_lens": seq_lens, "block_mask": getattr(block_mask, "aux", None)})
    a["scale"] = 1.0 / math.sqrt(D) if scale is None else real("scale", scale, positive=True, hint="default: 1/sqrt(d)")
    optional_dir("kernel_dir", kernel_dir)
    flag("control", control)
    expect_stream(stream)
    return a


def attention(q, k, v, variant: str = "full", *, block_mask: BlockMask | None = None, window: int | None = None,
              doc_ids=None, softcap: float | None = None, slopes=None, scale: float | None = None,
              splits: int | None = None, schedule: str | None = None,
              out=None, kernel_dir=None, control: bool = False, stream=None, enable_gqa: bool | None = None,
              block_table=None, seq_lens=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q: int | None = None,
              max_seqlen_k: int | None = None):
    """softmax(q k^T * scale + mask) v for q [B, H, Lq, D], k, v [B, Hkv, Lkv, D], bf16, D = 128 or
    64. Hkv < H is grouped-query attention (query head h reads KV head h // (H / Hkv)), inferred
    from the shapes unless enable_gqa=False (decode: group * Lq <= 16).
    A paged cache: k, v [num_pages, Hkv, page_size, D] (FlashInfer's HND layout, page_size
    16/32/64/128), block_table [B, max_pages] int32, seq_lens [B] int32: variant "decode", or
    "causal" for chunked prefill (q's Lq tokens are the last of each sequence's seq_lens[b]).
    A ragged batch (attention_varlen.py): q [tokens_q, H, D], k, v [tokens_k, Hkv, D] and
    cu_seqlens_q, cu_seqlens_k [B + 1] int32 (FlashAttention's varlen API; max_seqlen_q optional)."""
    import torch
    a = check_call(q, k, v, variant, block_mask=block_mask, window=window, doc_ids=doc_ids, softcap=softcap,
                   slopes=slopes, scale=scale, splits=splits, schedule=schedule, out=out, kernel_dir=kernel_dir,
                   control=control, stream=stream, enable_gqa=enable_gqa, block_table=block_table,
                   seq_lens=seq_lens, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                   max_seqlen_k=max_seqlen_k)
    if out is None:
        out = torch.empty_like(q)
    if a.get("ragged"):
        kern = load(variant, a["device"], kernel_dir=kernel_dir, control=control, head_dim=a["D"], varlen=True)
        header = _aux(q, a["header"])[:len(a["header"])]
        aux, cu_q, cu_k = varlen_aux(header, cu_seqlens_q, cu_seqlens_k)
        kern.launch_with(launch_params(q, k, v, out, a, aux, cu_q, cu_k), stream=stream)
        return out
    if a["paging"] is not None:
        run = _paged_decode if variant == "decode" else _paged_prefill
        return run(q, k, v, a, seq_lens, out, kernel_dir=kernel_dir, control=control, stream=stream)
    B, H, Lq, Lkv = a["B"], a["H"], a["Lq"], a["Lkv"]
    uniform, splits = True, None
    out_view = out
    if variant == "decode":
        q, out_view, H, Lq = _group_rows(q, out, a)
    if variant == "decode":  # the schedule needs the SM count: the forced schedule's kernel, else streamk's, has it
        probe = a["schedule"] == "uniform" or a["splits"] is not None
        sms = load(variant, a["device"], kernel_dir=kernel_dir, control=control, head_dim=a["D"], uniform=probe).num_sms
        uniform, splits = decode_schedule(B * H, Lkv, sms, a["schedule"], a["splits"])
    kern = load(variant, a["device"], kernel_dir=kernel_dir, control=control, head_dim=a["D"], uniform=uniform)
    grid = min(kern.num_sms, -(-Lq // BLOCK) * B * H)  # attn_prefill.kernel.toml's persistent grid
    aux = _variant_aux(variant, q, B, H, Lq, block_mask=block_mask, window=window, doc_ids=doc_ids, softcap=softcap,
                       slopes=slopes, grid=max(grid, 1), kv_len=Lkv)
    # prefill: tile bh reads K/V head bh / group (neighbouring CTAs share it through L2); decode
    # ran the group as rows above
    params = {"q": q, "k": k, "v": v, "o": out_view, "aux": aux, "q_len": Lq, "kv_len": Lkv, "bh": B * H,
              "kv_group": 1 if variant == "decode" else a["group"], "scale": a["scale"]}
    if variant == "decode":
        params["splits"] = splits
    kern.launch_with(params, stream=stream)
    return out


def _group_rows(q, out, a):
    """Decode's view of grouped-query heads: a group's query heads are adjacent rows of one KV
    head's tile ([B, Hkv, group * Lq, D] is the same memory as q), so the kernel loads each K/V
    tile once per group -> (q, out, heads, rows) as the kernel sees them (group 1: unchanged)."""
    B, Hkv, rows, D = a["B"], a["Hkv"], a["group"] * a["Lq"], a["D"]
    return q.view(B, Hkv, rows, D), out.view(B, Hkv, rows, D), Hkv, rows


def _paged_decode(q, k, v, a, seq_lens, out, *, kernel_dir, control, stream):
    """attn_decode_paged over the checked call `a`: a group's query heads as rows (as contiguous
    decode), uniform splits over the longest possible sequence (no host sync to read seq_lens),
    aux = {Hkv, rows, seq_lens} built on the device (graph-capturable)."""
    B, D = a["B"], a["D"]
    qv, ov, Hkv, rows = _group_rows(q, out, a)
    kern = load("decode", a["device"], kernel_dir=kernel_dir, control=control, head_dim=D, paged=True)
    splits = a["splits"] if a["splits"] is not None else default_splits(B * Hkv, a["Lkv"], kern.num_sms)
    aux = _paged_aux(q, Hkv, rows, seq_lens)
    params = {"q": qv, "k": k, "v": v, "o": ov, "aux": aux, "q_len": rows, "kv_len": a["Lkv"], "bh": B * Hkv,
              "kv_group": 1, "scale": a["scale"], "splits": splits, **_paging_params(a)}
    kern.launch_with(params, stream=stream)
    return out


def _paged_prefill(q, k, v, a, seq_lens, out, *, kernel_dir, control, stream):
    """attn_prefill_paged over the checked call `a`: each sequence's q_len new tokens (the end of its
    seq_lens[b] keys) against its pages, causal and bottom-right aligned; aux = {H, q_len, seq_lens}."""
    B, H = a["B"], a["H"]
    kern = load("causal", a["device"], kernel_dir=kernel_dir, control=control, head_dim=a["D"], paged=True)
    params = {"q": q, "k": k, "v": v, "o": out, "aux": _paged_aux(q, H, a["Lq"], seq_lens), "q_len": a["Lq"],
              "kv_len": a["Lkv"], "bh": B * H, "kv_group": a["group"], "scale": a["scale"], **_paging_params(a)}
    kern.launch_with(params, stream=stream)
    return out


def _paging_params(a) -> dict:
    pg, Hkv = a["paging"], a["Hkv"]
    return {"pages": a["block_table"], "max_pages": pg["max_pages"], "kv_heads": Hkv, "page_size": pg["page_size"],
            "pool_rows": pg["num_pages"] * Hkv * pg["page_size"]}


def _paged_aux(q, heads: int, q_len: int, seq_lens):
    """{work heads a sequence, q_len, seq_lens[0..B-1]} int32 on the device: one concatenation
    (no host sync)."""
    import torch
    return torch.cat((_aux(q, [heads, q_len])[:2], seq_lens))


def _l2_bytes(q):
    import torch
    return torch.cuda.get_device_properties(q.device).L2_cache_size if q.device.type == "cuda" else 0


def _causal_aux(q, B, H, S, grid, head):
    """The variant's words `head`, then the host's tile schedule of the causal family
    (attention_masks.causal_schedule, ATTN_CAUSAL_TILE(len(head))); cached per shape and grid."""
    grid = integer("grid", grid, 1, I32_MAX)
    key = ("causal", q.device.index, B, H, S, q.shape[-1], grid, tuple(head))
    hit = _aux_cache.get(key)
    if hit is None:
        words = head + causal_schedule(B, H, S, q.shape[-1], grid, _l2_bytes(q), base=len(head))
        hit = _aux_cache.put(key, _words_tensor(words, q.device))
    return hit


def _variant_aux(variant, q, B, H, S, *, block_mask, window, doc_ids, softcap, slopes=None, grid=1, kv_len=None):
    import torch
    a = variant_args(variant, q, B, H, S, block_mask=block_mask, window=window, doc_ids=doc_ids, softcap=softcap,
                      slopes=slopes)
    if variant == "alibi":  # [H, slope_0 .. slope_{H-1} as f32 bits, the causal schedule]
        words = torch.tensor(a["slopes"], dtype=torch.float32).view(torch.int32).tolist()
        return _causal_aux(q, B, H, S, grid, [H, *words])
    if variant == "sliding":
        return _aux(q, [a["window"]])
    if variant == "softcap":
        word = int(torch.tensor([a["softcap"]], dtype=torch.float32).view(torch.int32).item())
        return _causal_aux(q, B, H, S, grid, [word])  # [cap as f32 bits, the causal schedule]
    if variant == "block_sparse":
        return block_mask.aux_for(H)
    if variant == "document":  # cached per ids tensor object and version: no host sync in a graph capture
        grid = integer("grid", grid, 1, I32_MAX)
        key = ("doc", id(doc_ids), B, H, S, grid)
        hit = _aux_cache.get(key)  # holds the tensor itself, so its id and memory cannot be reused
        if hit is None or hit[0] is not doc_ids or hit[1] != getattr(doc_ids, "_version", None):
            hit = _aux_cache.put(key, (doc_ids, getattr(doc_ids, "_version", None),
                                       document_aux(doc_ids, B, H, S, q.device, grid, _l2_bytes(q), q.shape[-1])))
        return hit[2]
    if variant == "causal":
        return _causal_aux(q, B, H, S, grid, [])
    if variant == "decode":  # {bh, kv_len}: attn_decode_streamk.cu's (attn_decode reads no aux)
        return _aux(q, [B * H, integer("kv_len", S if kv_len is None else kv_len, 1, I32_MAX)])
    return _aux(q, [integer("kv_len", S if kv_len is None else kv_len, 1, I32_MAX)])  # full: {kv_len}
