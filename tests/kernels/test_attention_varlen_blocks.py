"""The block arithmetic of attn_varlen.cu, on the CPU: for any sequence lengths, window and
tile, the KV blocks a tile visits (kv_count from the first block) cover every key a real row of
the tile sees, and a block marked FULL (kv_block, from the tile's offset in `split` alone) holds
only keys every real row sees. The formulas are the kernel's, line for line (integer division
of non-negative values as C++'s); the GPU test test_ragged_batch_matches_fp32_reference checks
the kernel itself."""

from __future__ import annotations

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

BLK = 128


def key_hi(variant, lk, off, q):
    return lk if variant == "full" else min(off + q + 1, lk)


def key_lo(variant, off, q, w):
    return off + q + 1 - w if variant == "sliding" else 0


def block_range(variant, lq, lk, qb, w):
    """kv_count's first block and end (attn_varlen.cu block_range)."""
    off = lk - lq
    q0, q1 = qb * BLK, min(qb * BLK + BLK, lq) - 1
    hi, lo = key_hi(variant, lk, off, q1), max(key_lo(variant, off, q0, w), 0)
    first = lo // BLK
    return first, ((hi + BLK - 1) // BLK if hi > lo else first)


def kv_block(variant, lq, lk, qb, i, w):
    """(block, FULL?) from `split` = off (full: Lk), as ATTN_KV_BLOCK."""
    off, q0 = lk - lq, qb * BLK
    if variant == "full":
        return i, (i + 1) * BLK <= lk
    if variant == "sliding":
        kb = max(off + q0 + 1 - w, 0) // BLK + i
        return kb, kb * BLK >= off + q0 + BLK - w and (kb + 1) * BLK <= off + q0 + 1
    return i, (i + 1) * BLK <= off + q0 + 1


def check_tile(variant, lq, lk, qb, w):
    import numpy as np
    first, end = block_range(variant, lq, lk, qb, w)
    blocks = {}
    for i in range(end - first):
        kb, full = kv_block(variant, lq, lk, qb, i, w)
        assert kb == first + i  # kv_block walks kv_count's blocks
        blocks[kb] = full
    q = np.arange(qb * BLK, min(qb * BLK + BLK, lq))[:, None]
    k = np.arange(max(lk, 1) + 2 * BLK)[None, :]
    pos = lk - lq + q
    seen = k < lk
    if variant != "full":
        seen = seen & (k <= pos)
    if variant == "sliding":
        seen = seen & (pos - k < w)
    need = set((np.nonzero(seen.any(axis=0))[0] // BLK).tolist())
    assert need <= set(blocks), (variant, lq, lk, qb, w, sorted(need - set(blocks)))
    for kb, full in blocks.items():
        if full:
            assert seen[:, kb * BLK:kb * BLK + BLK].all(), (variant, lq, lk, qb, w, kb)


@settings(max_examples=400, deadline=None)
@given(variant=st.sampled_from(["full", "causal", "sliding"]), lq=st.integers(1, 1200), extra=st.integers(-300, 900),
       w=st.integers(1, 700), data=st.data())
def test_visited_blocks_cover_the_visible_keys_and_full_blocks_need_no_mask(variant, lq, extra, w, data):
    lk = max(0, lq + extra)
    check_tile(variant, lq, lk, data.draw(st.integers(0, (lq - 1) // BLK)), w)


@pytest.mark.parametrize("lq, extra", [(300, 0), (256, 37), (129, 500), (700, -200)])
def test_every_window_alignment(lq, extra):
    """Every window from 1 to 300 keys against every tile: each alignment of a band edge to a
    block edge occurs (random windows rarely hit them)."""
    for w in range(1, 301):
        for qb in range(-(-lq // BLK)):
            check_tile("sliding", lq, lq + extra, qb, w)
