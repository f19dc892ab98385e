"""The split-KV decode schedules of attention(..., "decode"): how many splits a head gets
(attn_decode's uniform splits) or how the stream-K kernel's one-wave grid cuts every head's
KV blocks (attn_decode_streamk). Pure arithmetic, no CUDA: the entry and the tests use it."""

from __future__ import annotations

import math

from attention_masks import BLOCK  # the core's block_q: KV blocks of 128 keys
STREAMK_MAX_CTAS = 255  # attn_decode_streamk.cu's MAX_CTAS: its 32-bit products need N (G + 1) < 2^32
MAX_DECODE_BLOCKS = 2**24  # N = heads x KV blocks below this: N (G + 1) < 2^32 (whole-block lengths kept it there)


def kv_blocks(kv_len: int) -> int:
    """KV blocks of a head: the last one partial when kv_len is not a whole number of blocks."""
    return -(-kv_len // BLOCK)


def default_splits(bh: int, kv_len: int, num_sms: int) -> int:
    """Fewer heads than SMs: one wave of CTAs (one fits per SM), at least one KV block each.
    Several waves: two splits per head of 64..127 KV blocks (B = 32, KV = 8K: 1.3-2.0% faster
    in four timings); heads of 32 blocks (B = 64, KV = 4K), 128 (B = 16, KV = 16K) or 256 (B = 8,
    KV = 32K) gained nothing from two, and more splits cost more in each CTA's set-up than they
    saved (docs/DECISIONS.md, attention)."""
    blocks = kv_blocks(kv_len)
    if bh >= num_sms:
        return 2 if 64 <= blocks < 128 else 1
    return max(1, min(blocks, num_sms // bh))


def decode_schedule(bh: int, kv_len: int, num_sms: int, schedule: str | None = None,
                    splits: int | None = None) -> tuple[bool, int]:
    """(uniform, splits param). schedule "uniform": attn_decode, `splits` per head (given, or
    default_splits); "streamk": attn_decode_streamk, whose `splits` is attn_combine's slot
    stride. None picks by shape (each measured beside the other; BENCHMARKS.md, split-KV decode):
    - heads fewer than the SMs: uniform, one wave (stream-K's ranges across heads cost it ~3 us:
      B = 1, KV 4K..128K);
    - uniform's waves under 90% used (w / ceil(w), w = its CTAs / SMs): stream-K (160 heads,
      KV = 32K: 599 us against 835);
    - fewer than 8 heads a SM: stream-K (B = 8..32 at 1-8 heads a SM: 0.9-1.6% faster);
    - else uniform (B = 64, KV = 4K, 15.5 heads a SM: stream-K's 16 tiles a CTA cost 1%)."""
    if schedule is None and splits is None and bh >= num_sms:
        waves = bh * default_splits(bh, kv_len, num_sms) / num_sms
        streamk = waves / math.ceil(waves) < 0.9 or bh < 8 * num_sms
        schedule = "streamk" if streamk else "uniform"
    if schedule == "streamk":
        return False, streamk_stride(bh, kv_len, num_sms)
    return True, splits if splits is not None else default_splits(bh, kv_len, num_sms)


def streamk_stride(bh: int, kv_len: int, num_sms: int) -> int:
    """attn_combine's slot stride for attn_decode_streamk: the most CTAs whose ranges meet one
    head. G = min(num_sms, N) CTAs take N = bh * nkv blocks, each at least N // G; a head's
    nkv blocks meet at most nkv // (N // G) whole ranges and two partial ones."""
    nkv = kv_blocks(kv_len)
    n = bh * nkv
    g = min(num_sms, n, STREAMK_MAX_CTAS)
    return min(g, nkv // (n // g) + 2)
