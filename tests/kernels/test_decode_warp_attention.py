"""The split-KV decode attention's per-warp softmax (kernels/decode/dec_attn_split.cu) emulated lane by
lane on the CPU: each warp keeps its own running max and sum of head gid over its 32 positions of
every block of a task, takes its probabilities as mma.sync's A words (each the sum of two bf16
halves, the high ones in A's row gid, the low ones in row gid + 8), its value rows as B by byte
permutes of each lane's 16-byte runs (lane (gid, qd)'s row r is block position 32 w + 16 (r / 4) + 8
(r / 2 % 2) + 2 qd + r % 2, its dims hd / 8 gid ..), and the four warps' states merge once a task as
the kernel indexes [smem.o]. The task's output, max and sum must equal softmax attention over its
chunk, the position `pos` taking the new key and value (its cache row stale), for every group size,
both head dims and chunk lengths that end mid-block and mid-warp; a value-row order the operands do
not share is caught."""

from __future__ import annotations

import numpy as np
import pytest

from mma_fragments import mma_m16n8k16

BLOCK, TILES, WARPS = 128, 4, 4


def bf16(x):
    """Round to bf16 (nearest even), kept as float64 values."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def value_row(warp: int, lane: int, r: int) -> int:
    """dec_attn_split.cu warp_value_row: lane's value row r's block position."""
    return warp * 32 + 16 * (r // 4) + 8 * (r // 2 % 2) + 2 * (lane % 4) + r % 2


@np.errstate(invalid="ignore")  # (np.where evaluates both sides: -inf - -inf where nothing is scored yet)
def warp_task(q, K, V, kn, vn, c0, c1, pos, row_of=value_row):
    """One task: q [g][hd] (f32 queries), K, V [positions][hd] bf16 values of the cache (row pos
    stale), kn, vn the new key and value (f32), positions c0 .. c1. Returns (o [g][hd] unnormalised,
    mtask [g], ltask [g]) as the kernel leaves them for the merge."""
    g, hd = q.shape
    dpl = hd // 8
    scale = hd ** -0.5 * 1.4426950408889634
    kpos = np.where(np.arange(len(K))[:, None] == pos, bf16(kn)[None, :], K)
    state = []
    for warp in range(WARPS):
        mw = np.full(32, -np.inf)
        lw = np.zeros(32)
        pacc = np.zeros((dpl, 32, 4))
        for b in range(c0, c1, BLOCK):
            n = min(BLOCK, c1 - b)
            sc = np.full((32, TILES, 2), -np.inf)  # the score mma's C layout: head gid, position 32 w + 8 i + 2 qd + j
            for lane in range(32):
                gid, qd = lane // 4, lane % 4
                for i in range(TILES):
                    for j in range(2):
                        p = warp * 32 + 8 * i + 2 * qd + j
                        if gid < g and p < n:
                            sc[lane, i, j] = q[gid] @ kpos[b + p] * scale
            mb = sc.reshape(32, -1).max(axis=1)
            mb = np.maximum(mb, mb[np.arange(32) ^ 1])
            mb = np.maximum(mb, mb[np.arange(32) ^ 2])
            mnew = np.maximum(mw, mb)
            alpha = np.where(mnew == -np.inf, 1.0, np.exp2(np.where(mnew == -np.inf, 0, mw - mnew)))
            ph = np.where(sc == -np.inf, 0.0, np.exp2(sc - np.where(mnew == -np.inf, 0, mnew)[:, None, None]))
            big = bf16(ph)
            small = bf16(ph - big)
            ls = ph.reshape(32, -1).sum(axis=1)
            ls = ls + ls[np.arange(32) ^ 1]
            ls = ls + ls[np.arange(32) ^ 2]
            lw, mw = lw * alpha + ls, mnew
            pacc *= alpha[None, :, None]
            # each lane's value rows (zeros past n; the row at pos is the new value)
            rows = np.zeros((32, 8, dpl))
            for lane in range(32):
                gid = lane // 4
                for r in range(8):
                    p = row_of(warp, lane, r)
                    if p < n:
                        src = bf16(vn) if b + p == pos else V[b + p]
                        rows[lane, r] = src[dpl * gid: dpl * gid + dpl]
            for s in range(2):
                a_regs = [[big[ln, 2 * s], small[ln, 2 * s], big[ln, 2 * s + 1], small[ln, 2 * s + 1]]
                          for ln in range(32)]
                for t in range(dpl):  # n-tile t: column n is dim dpl n + t; element t of rows 4 s ..
                    b_regs = [[[rows[ln, 4 * s, t], rows[ln, 4 * s + 1, t]], [rows[ln, 4 * s + 2, t], rows[ln, 4 * s + 3, t]]]
                              for ln in range(32)]
                    mma_m16n8k16(pacc[t], a_regs, b_regs)
        state.append((mw, lw, pacc))
    # the merge: the task's max and sum of head gid, each warp's sums rescaled, added into o
    o = np.full((g, hd), np.nan)
    mtask, ltask = np.zeros(g), np.zeros(g)
    for gid in range(g):
        ms = np.array([state[w][0][4 * gid] for w in range(WARPS)])
        ls = np.array([state[w][1][4 * gid] for w in range(WARPS)])
        mtask[gid] = ms.max()
        ltask[gid] = sum(l * np.exp2(m - mtask[gid]) for m, l in zip(ms, ls) if m != -np.inf)
    for warp, (mw, _, pacc) in enumerate(state):
        for lane in range(32):
            gid, qd = lane // 4, lane % 4
            if gid >= g:
                continue
            f = 0.0 if mw[lane] == -np.inf else np.exp2(mw[lane] - mtask[gid])
            for t in range(dpl):
                for j in range(2):
                    d = dpl * (2 * qd + j) + t
                    v = (pacc[t, lane, j] + pacc[t, lane, 2 + j]) * f
                    o[gid, d] = v if warp == 0 else o[gid, d] + v
    return o, mtask, ltask


def reference(q, K, V, kn, vn, c0, c1, pos):
    g, hd = q.shape
    Kp = np.where(np.arange(len(K))[:, None] == pos, bf16(kn)[None, :], K)[c0:c1]
    Vp = np.where(np.arange(len(V))[:, None] == pos, bf16(vn)[None, :], V)[c0:c1]
    s = q @ Kp.T * hd ** -0.5 * 1.4426950408889634
    m = s.max(axis=1)
    p = np.exp2(s - m[:, None])
    return p @ Vp, m, p.sum(axis=1)


def _case(g, hd, c0, c1, pos, seed=0):
    rng = np.random.default_rng(seed)
    n = c1 + 4
    q = rng.standard_normal((g, hd)) * 2
    K, V = bf16(rng.standard_normal((n, hd))), bf16(rng.standard_normal((n, hd)))
    if pos < n:
        K[pos], V[pos] = np.nan, np.nan  # the cache row at pos is stale until this step's append
    kn, vn = rng.standard_normal(hd), rng.standard_normal(hd)
    return q, K, V, kn, vn, c0, c1, pos


@pytest.mark.parametrize("g", [1, 2, 4, 8])
@pytest.mark.parametrize("hd", [64, 128])
@pytest.mark.parametrize("c0,c1,pos", [(0, 1, 0), (0, 33, 32), (64, 300, 299), (0, 128, 127), (128, 384, 400),
                                       (0, 97, 40)])
def test_the_warps_softmax_is_attention_over_the_chunk(g, hd, c0, c1, pos):
    args = _case(g, hd, c0, c1, pos, seed=g * 1000 + hd + c1)
    o, m, l = warp_task(*args)
    ro, rm, rl = reference(*args)
    # the kernel's partial: o and l relative to its own max; the reference's to the chunk's
    np.testing.assert_allclose(m, rm, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(l, rl, rtol=1e-5)
    np.testing.assert_allclose(o / l[:, None], ro / rl[:, None], rtol=2e-4, atol=2e-5)


def test_a_value_row_order_the_operands_do_not_share_is_caught():
    def swapped(warp, lane, r):  # rows 2 qd + 8 and 2 qd + 1 exchanged
        return value_row(warp, lane, {1: 2, 2: 1, 5: 6, 6: 5}.get(r, r))
    args = _case(4, 64, 0, 128, 127, seed=7)
    o, _, l = warp_task(*args, row_of=swapped)
    ro, _, rl = reference(*args)
    assert not np.allclose(o / l[:, None], ro / rl[:, None], rtol=2e-4, atol=2e-5)
