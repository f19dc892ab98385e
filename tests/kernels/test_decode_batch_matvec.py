"""The batched tile product of the decode megakernel (kernels/decode/dec_matvec.cu, matvec_batch)
emulated lane by lane on the CPU: each lane's 16-byte loads of the input rows and the tile rows,
placed into mma.sync m16n8k16's A, B fragments by the PTX ISA's layout (bf16: A row-major with
row gid (a0, a2) / gid + 8 (a1, a3) and columns 2 qd + (0, 1), + 8 for a2, a3; B column-major
with rows 2 qd + (0, 1) (b0) and + 8 (b1), column gid; C rows gid (c0, c1) / gid + 8, columns
2 qd + (0, 1)), the warps' sums through [smem.red] as the kernel indexes it. The product must
equal W · x for every batch 1 .. 8 and the tile shapes the weight stream makes (dec.h
tile_rows: 64 rows at k = 256, two passes), and through the wide path (batch 9 .. 32: A's rows
gid + 8 too, two m16 tiles) for the 16 KB stages those links stream, so the k permutation both operands share is checked, not only the arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from mma_fragments import mma_m16n8k16 as _mma

WARPS, INFLIGHT, MAX_GROUPS, PAD = 8, 4, 4, 32
NARROW_BATCH, WIDE_INFLIGHT = 8, 4  # dec_matvec.cu: batches past 8 take the wide path


def matvec_batch(W: np.ndarray, X: np.ndarray, batch: int, ystride: int, factors=None) -> np.ndarray:
    """dec_matvec.cu's matvec_batch, line by line: W [rows, k] the tile, X [batch][k + PAD] xin;
    `factors` [batch] (scaled = 1): the f32 rmsnorm_rows left in each row's pad at element k."""
    rows, k = W.shape
    groups, blocks = (rows + 7) // 8, k // 32
    y = np.full(batch * ystride, np.nan)
    if batch > NARROW_BATCH:
        return _matvec_wide(W, X, batch, ystride, factors, y)
    for g0 in range(0, groups, MAX_GROUPS):  # passes of MAX_GROUPS n8 groups
        gn, rn = min(MAX_GROUPS, groups - g0), min(8 * MAX_GROUPS, rows - 8 * g0)
        red = np.full(MAX_GROUPS * WARPS * batch * 8, np.nan)
        for warp in range(WARPS):
            acc = np.zeros((32, MAX_GROUPS, 4))
            for kb0 in range(warp, blocks, WARPS * INFLIGHT):
                for u in range(INFLIGHT):
                    kb = kb0 + u * WARPS
                    a = np.zeros((32, 8))
                    w = np.zeros((32, MAX_GROUPS, 8))
                    for lane in range(32):
                        gid, qd = lane // 4, lane % 4
                        if kb < blocks and gid < batch:
                            a[lane] = X[gid, kb * 32 + qd * 8: kb * 32 + qd * 8 + 8]
                        for g in range(MAX_GROUPS):
                            r = (g0 + g) * 8 + gid
                            if kb < blocks and g < gn and r < rows:
                                w[lane, g] = W[r, kb * 32 + qd * 8: kb * 32 + qd * 8 + 8]
                    for g in range(gn):  # mma_k32: words (0, 1) then (2, 3) of each 16-byte run
                        slot = u % MAX_GROUPS if gn == 1 else g  # one group: each block into its own sums
                        for step in range(2):
                            a_regs = [[a[ln, 4 * step: 4 * step + 2], [0, 0], a[ln, 4 * step + 2: 4 * step + 4], [0, 0]]
                                      for ln in range(32)]
                            b_regs = [[w[ln, g, 4 * step: 4 * step + 2], w[ln, g, 4 * step + 2: 4 * step + 4]]
                                      for ln in range(32)]
                            _mma(acc[:, slot], a_regs, b_regs)
            if gn == 1:
                acc[:, 0] += acc[:, 1:].sum(axis=1)
            for lane in range(32):
                gid, qd = lane // 4, lane % 4
                if gid < batch:
                    for g in range(gn):
                        d = ((g * WARPS + warp) * batch + gid) * 8 + 2 * qd
                        red[d], red[d + 1] = acc[lane, g, 0], acc[lane, g, 1]
        for i in range(batch * rn):
            b, r = i // rn, i % rn
            s = ((r // 8 * WARPS) * batch + b) * 8 + r % 8
            f = 1.0 if factors is None else factors[b]
            y[b * ystride + 8 * g0 + r] = sum(red[s + w8 * batch * 8] for w8 in range(WARPS)) * f
    return y


def _matvec_wide(W, X, batch, ystride, factors, y):
    """matvec_batch's wide path (batch > 8): lane (gid, qd) loads vector rows gid + 8 h (h < 4:
    A rows gid / gid + 8 of m16 tiles 0 and 1) and tile row 8 g + gid, one n8 group a pass; the
    warps' sums through [smem.red] as [warp][b][8 columns]."""
    rows, k = W.shape
    groups, blocks, mtiles = (rows + 7) // 8, k // 32, (batch + 15) // 16
    for g in range(groups):
        rn = min(8, rows - 8 * g)
        red = np.full(WARPS * batch * 8, np.nan)
        for warp in range(WARPS):
            acc = np.zeros((2, 32, 4))
            for kb0 in range(warp, blocks, WARPS * WIDE_INFLIGHT):
                for u in range(WIDE_INFLIGHT):
                    kb = kb0 + u * WARPS
                    a = np.zeros((32, 4, 8))
                    w = np.zeros((32, 8))
                    for lane in range(32):
                        gid, qd = lane // 4, lane % 4
                        for h in range(4):
                            if kb < blocks and gid + 8 * h < batch:
                                a[lane, h] = X[gid + 8 * h, kb * 32 + qd * 8: kb * 32 + qd * 8 + 8]
                        if kb < blocks and 8 * g + gid < rows:
                            w[lane] = W[8 * g + gid, kb * 32 + qd * 8: kb * 32 + qd * 8 + 8]
                    for mt in range(mtiles):  # mma_k16_rows16: a0, a2 row gid's words, a1, a3 row gid + 8's
                        for step in range(2):
                            lo, hi = a[:, 2 * mt], a[:, 2 * mt + 1]
                            a_regs = [[lo[ln, 4 * step: 4 * step + 2], hi[ln, 4 * step: 4 * step + 2],
                                       lo[ln, 4 * step + 2: 4 * step + 4], hi[ln, 4 * step + 2: 4 * step + 4]]
                                      for ln in range(32)]
                            b_regs = [[w[ln, 4 * step: 4 * step + 2], w[ln, 4 * step + 2: 4 * step + 4]]
                                      for ln in range(32)]
                            _mma(acc[mt], a_regs, b_regs)
            for lane in range(32):
                gid, qd = lane // 4, lane % 4
                for mt in range(2):
                    for hh in range(2):
                        b = 16 * mt + 8 * hh + gid
                        if b < batch:
                            d = (warp * batch + b) * 8 + 2 * qd
                            red[d], red[d + 1] = acc[mt, lane, 2 * hh], acc[mt, lane, 2 * hh + 1]
        for i in range(batch * rn):
            b, r = i // rn, i % rn
            f = 1.0 if factors is None else factors[b]
            y[b * ystride + 8 * g + r] = sum(red[(w8 * batch + b) * 8 + r] for w8 in range(WARPS)) * f
    return y


def tile_rows(k: int, tile_elems: int = 16384) -> int:
    r = 1
    while 2 * r * k <= tile_elems:
        r *= 2
    return r


@pytest.mark.parametrize("k,batch,tile_elems", [(2048, 8, 16384), (8192, 8, 16384), (512, 3, 16384), (256, 1, 16384),
                                                 (256, 7, 16384), (1024, 5, 16384), (14336, 2, 16384),
                                                 (2048, 32, 8192), (1024, 20, 8192), (256, 9, 8192), (512, 16, 8192)])
def test_the_batched_tile_product_is_w_times_x(k, batch, tile_elems):
    rng = np.random.default_rng(k + batch)
    rows = tile_rows(k, tile_elems)
    W = rng.integers(-8, 8, (rows, k)).astype(np.float64)  # small integers: exact sums
    x = rng.integers(-8, 8, (batch, k)).astype(np.float64)
    X = np.zeros((batch, k + PAD))
    X[:, :k] = x
    ystride = tile_elems // 128  # dec.h y_floats
    y = matvec_batch(W, X, batch, ystride)
    for b in range(batch):
        assert np.array_equal(y[b * ystride: b * ystride + rows], W @ x[b])
    assert np.isnan(y[rows:ystride]).all()  # nothing written past a sequence's rows


@pytest.mark.parametrize("k,batch", [(2048, 8), (256, 3), (512, 24)])
def test_a_scaled_product_applies_each_rows_factor(k, batch):
    """scaled = 1 (the QKV, GU and HEAD ops: xin = bf16(x w) from rmsnorm_rows): y_b = f_b W x_b."""
    rng = np.random.default_rng(k * batch)
    rows = tile_rows(k)
    W = rng.integers(-8, 8, (rows, k)).astype(np.float64)
    x = rng.integers(-8, 8, (batch, k)).astype(np.float64)
    f = 2.0 ** rng.integers(-4, 4, batch)  # powers of two: exact
    X = np.zeros((batch, k + PAD))
    X[:, :k] = x
    y = matvec_batch(W, X, batch, 128, factors=f)
    for b in range(batch):
        assert np.array_equal(y[b * 128: b * 128 + rows], f[b] * (W @ x[b]))


def test_a_k_order_the_operands_do_not_share_is_caught():
    """One k16 step with the tile's words in the kernel's order gives the dot product over the
    16 elements the lanes loaded; with its second word taken from another pair of columns than
    the vectors' (a k order the operands do not share), it does not: the emulation checks the
    fragment mapping, not only the arithmetic."""
    rng = np.random.default_rng(1)
    batch = 2
    W = rng.integers(-8, 8, (8, 32)).astype(np.float64)
    x = rng.integers(-8, 8, (batch, 32)).astype(np.float64)
    cols = [qd * 8 + j for qd in range(4) for j in range(4)]  # the first step's columns
    want = x[:, cols] @ W[:, cols].T

    def step(b_words):
        C = np.zeros((32, 4))
        a_regs, b_regs = [], []
        for lane in range(32):
            gid, qd = lane // 4, lane % 4
            a = x[gid, qd * 8: qd * 8 + 8] if gid < batch else np.zeros(8)
            w = W[gid, qd * 8: qd * 8 + 8]
            a_regs.append([a[0:2], [0, 0], a[2:4], [0, 0]])
            b_regs.append([w[2 * b_words[0]: 2 * b_words[0] + 2], w[2 * b_words[1]: 2 * b_words[1] + 2]])
        _mma(C, a_regs, b_regs)
        return np.array([[C[4 * b + n // 2, n % 2] for n in range(8)] for b in range(batch)])

    assert np.array_equal(step((0, 1)), want)
    assert not np.array_equal(step((0, 2)), want)
