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

Variants are the fused kernels of //kernels/attention (attn_<variant>.cubin and manifest in
`kernel_dir`, default $PIPELINK_ATTENTION_DIR or bazel-bin/kernels/attention). Every bad
input is refused before launching with pipelink.runtime.LaunchError (R-SHAPE, R-DTYPE,
R-LAYOUT, R-DEVICE, R-PARAM) and a hint. Launches go on torch's current stream (graph-capturable).
"""

from __future__ import annotations

import math
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

try:
    from pipelink.runtime import Kernel, LaunchError, expect_tensor
except ImportError:  # run from a checkout without PYTHONPATH=tools
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from pipelink.runtime import Kernel, LaunchError, expect_tensor

from attention_masks import BlockMask, create_block_mask, document_aux  # noqa: E402,F401

BLOCK, HEAD_DIM, DECODE_ROWS = 128, 128, 16
HEAD_DIMS = (128, 64)  # core builds: attn_core (attn_<variant>) and attn_core_d64 (attn_<variant>_d64)
PREFILL = ("full", "causal", "sliding", "block_sparse", "document", "softcap", "alibi")
VARIANTS = PREFILL + ("decode",)
SQUARE = ("causal", "sliding", "block_sparse", "document", "softcap", "alibi")  # q_len == kv_len
_cache: dict[tuple, Kernel] = {}
_aux_cache: dict[tuple, object] = {}
_lock = threading.Lock()


def kernel_dir_default() -> Path:
    d = os.environ.get("PIPELINK_ATTENTION_DIR")
    return Path(d) if d else Path(__file__).resolve().parents[2] / "bazel-bin" / "kernels" / "attention"


def load(variant: str, device: int = 0, *, kernel_dir=None, control: bool = False, head_dim: int = HEAD_DIM) -> Kernel:
    if variant not in VARIANTS:
        raise LaunchError("R-PARAM", f"unknown attention variant {variant!r}", hint=f"one of {', '.join(VARIANTS)}")
    d = Path(kernel_dir) if kernel_dir else kernel_dir_default()
    name = f"attn_{variant}" + ("" if head_dim == HEAD_DIM else f"_d{head_dim}")
    cubin = d / f"{name}{'.control' if control else ''}.cubin"
    key = (str(cubin), int(device))
    with _lock:
        k = _cache.get(key)
        if k is None:
            k = _cache[key] = Kernel.load(cubin, d / f"{name}.manifest.json", device)
    return k


def _aux(tensor_like, words):
    """A small int32 aux buffer on the device (cached per content)."""
    import torch
    key = (tensor_like.device.index, tuple(words))
    t = _aux_cache.get(key)
    if t is None:
        t = _aux_cache[key] = torch.tensor(list(words) + [0] * (4 - len(words) % 4), dtype=torch.int32,
                                           device=tensor_like.device)
    return t


def default_splits(bh: int, kv_len: int, num_sms: int) -> int:
    """One wave of CTAs (one fits per SM), at least one KV block each."""
    return max(1, min(kv_len // BLOCK, num_sms // bh))


def attention(q, k, v, variant: str = "full", *, block_mask: BlockMask | None = None, window: int | None = None,
              doc_ids=None, softcap: float | None = None, slopes=None, scale: float | None = None,
              splits: int | None = None,
              out=None, kernel_dir=None, control: bool = False, stream=None):
    """softmax(q k^T * scale + mask) v for q [B, H, Lq, D], k, v [B, H, Lkv, D], bf16, D = 128 or 64."""
    import torch
    if variant not in VARIANTS:
        raise LaunchError("R-PARAM", f"unknown attention variant {variant!r}", hint=f"one of {', '.join(VARIANTS)}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        expect_tensor(name, t, dtype=torch.bfloat16, device=None, align=16)
        if t.dim() != 4:
            raise LaunchError("R-SHAPE", f"{name} has shape {list(t.shape)}; expected [B, H, S, {HEAD_DIM}]",
                              hint="FlexAttention layout: batch, heads, sequence, head dim")
    dev = q.device.index or 0
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise LaunchError("R-DEVICE", f"{name} is on {t.device}, q on {q.device}", hint=f"{name}.to(q.device)")
    B, H, Lq, D = q.shape
    if D not in HEAD_DIMS or (variant == "decode" and D != HEAD_DIM):
        raise LaunchError("R-SHAPE", f"head dim {D} is not supported by variant {variant!r}",
                          hint="d = 128 or 64 (prefill variants); decode: d = 128")
    if tuple(k.shape[:2]) != (B, H) or k.shape[3] != D or k.shape != v.shape:
        raise LaunchError("R-SHAPE", f"k {list(k.shape)} / v {list(v.shape)} do not match q {list(q.shape)}",
                          hint="k and v: [B, H, Lkv, D] with q's B, H and D (no GQA in this build)")
    Lkv = k.shape[2]
    if Lkv == 0 or Lkv % BLOCK:
        raise LaunchError("R-SHAPE", f"kv length {Lkv} is not a positive multiple of {BLOCK}",
                          hint=f"pad k and v to a multiple of {BLOCK} (and mask the padding)")
    if variant == "decode":
        if not 1 <= Lq <= DECODE_ROWS:
            raise LaunchError("R-SHAPE", f"decode takes 1..{DECODE_ROWS} query rows, got {Lq}",
                              hint="use a prefill variant for longer queries")
    elif Lq == 0 or Lq % BLOCK:
        raise LaunchError("R-SHAPE", f"query length {Lq} is not a positive multiple of {BLOCK}",
                          hint=f"pad q to a multiple of {BLOCK}, or use variant='decode' for 1..16 rows")
    if variant in SQUARE and Lq != Lkv:
        raise LaunchError("R-SHAPE", f"variant {variant!r} needs q_len == kv_len, got {Lq} and {Lkv}",
                          hint="self-attention over one sequence (pack documents and use variant='document')")
    kern = load(variant, dev, kernel_dir=kernel_dir, control=control, head_dim=D)
    grid = min(kern.num_sms, Lq // BLOCK * B * H)  # attn_prefill.kernel.toml's persistent grid
    aux = _variant_aux(variant, q, B, H, Lq, block_mask=block_mask, window=window, doc_ids=doc_ids, softcap=softcap,
                       slopes=slopes, grid=grid)
    if out is None:
        out = torch.empty_like(q)
    else:
        expect_tensor("out", out, shape=tuple(q.shape), dtype=torch.bfloat16, device=dev, align=16)
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not 0 < scale < math.inf:
        raise LaunchError("R-PARAM", f"scale = {scale!r} must be a finite number > 0", hint="default: 1/sqrt(d)")
    params = {"q": q, "k": k, "v": v, "o": out, "aux": aux, "q_len": Lq, "kv_len": Lkv, "bh": B * H,
              "scale": float(scale)}
    if variant == "decode":
        s = splits or default_splits(B * H, Lkv, kern.num_sms)
        if not 1 <= s <= Lkv // BLOCK:
            raise LaunchError("R-PARAM", f"splits = {s} must be 1..{Lkv // BLOCK} (one KV block each at least)")
        params["splits"] = s
    kern.launch_with(params, stream=stream)
    return out


def alibi_slopes(H: int) -> list[float]:
    """ALiBi's head slopes 2^(-8 (h + 1) / H) (Press et al., for H a power of two)."""
    return [2.0 ** (-8.0 * (h + 1) / H) for h in range(H)]


def _variant_aux(variant, q, B, H, S, *, block_mask, window, doc_ids, softcap, slopes=None, grid=1):
    import torch
    if variant == "alibi":  # [H, slope_0 .. slope_{H-1} as f32 bits]
        sl = alibi_slopes(H) if slopes is None else slopes
        if (not isinstance(sl, (list, tuple)) or len(sl) != H
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in sl)):
            raise LaunchError("R-PARAM", f"slopes must be {H} finite numbers (one per head)",
                              hint="attention(..., variant='alibi', slopes=None) uses 2^(-8 (h + 1) / H)")
        words = torch.tensor([float(x) for x in sl], dtype=torch.float32).view(torch.int32).tolist()
        return _aux(q, [H, *words])
    if variant == "sliding":
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise LaunchError("R-PARAM", f"window = {window!r}: the sliding variant needs an int window >= 1",
                              hint="attention(..., variant='sliding', window=1024)")
        return _aux(q, [window])
    if variant == "softcap":
        if not isinstance(softcap, (int, float)) or not softcap > 0 or math.isinf(softcap):
            raise LaunchError("R-PARAM", f"softcap = {softcap!r}: needs a finite number > 0",
                              hint="attention(..., variant='softcap', softcap=30.0)")
        word = int(torch.tensor([float(softcap)], dtype=torch.float32).view(torch.int32).item())
        return _aux(q, [word])
    if variant == "block_sparse":
        if not isinstance(block_mask, BlockMask):
            raise LaunchError("R-PARAM", "variant 'block_sparse' needs block_mask=create_block_mask(...)",
                              hint="bm = create_block_mask(pred, B, H, Q_LEN, KV_LEN)")
        block_mask.check(B, H, S, S, q.device)
        return block_mask.aux
    if variant == "document":  # cached per ids tensor object and version: no host sync in a graph capture
        key = ("doc", id(doc_ids), B, H, S, grid)
        hit = _aux_cache.get(key)  # holds the tensor itself, so its id and memory cannot be reused
        if hit is None or hit[0] is not doc_ids or hit[1] != getattr(doc_ids, "_version", None):
            hit = _aux_cache[key] = (doc_ids, getattr(doc_ids, "_version", None),
                                     document_aux(doc_ids, B, H, S, q.device, grid))
        return hit[2]
    return _aux(q, [0])


def reference(q, k, v, variant="full", *, block_mask_pred=None, window=None, doc_ids=None, softcap=None,
              slopes=None, scale=None):
    """fp32 reference: the same function with a dense mask (rows with no key give 0)."""
    import torch
    B, H, Lq, D = q.shape
    Lkv = k.shape[2]
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
