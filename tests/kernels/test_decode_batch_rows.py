"""The batch's row-wise helpers of the decode megakernel emulated thread by thread on the CPU, as
the kernel indexes them: dec_rmsnorm.cu's rmsnorm_rows (a thread the same float4 columns of every
row; out = x · w and each row's factor in its pad), dec_swiglu.cu's swiglu_rows and dec_argmax.cu's argmax_rows. Each
must write every element of every row exactly once and nothing else (the output is poisoned
first), for every batch 1 .. 32 (rmsnorm_rows: passes of 8 rows) and the row lengths the
contracts accept."""

from __future__ import annotations

import numpy as np
import pytest

THREADS, WARPS = 256, 8
MAX_ROWS = 8  # dec_rmsnorm.cu: rows a pass of rmsnorm_rows


def rmsnorm_rows(x: np.ndarray, w: np.ndarray, eps: float, rows: int, out_stride: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dec_rmsnorm.cu's rmsnorm_rows: x [rows][n] f32 -> out [rows][out_stride] = x · w (NaN where
    not written), each row's factor rsqrt(mean(x²) + eps) (the f32 the kernel leaves at element n,
    over the pad's first two bf16 slots), and how many times each element was written."""
    n = x.shape[1]
    n4 = n // 4
    out = np.full((rows, out_stride), np.nan, dtype=np.float32)
    writes = np.zeros((rows, out_stride), dtype=int)
    red = np.full(WARPS * rows, np.nan, dtype=np.float32)
    for b0 in range(0, rows, MAX_ROWS):  # passes of MAX_ROWS rows
        rp = min(MAX_ROWS, rows - b0)
        for warp in range(WARPS):
            lane_ss = np.zeros((32, rp), dtype=np.float32)
            for lane in range(32):
                t = warp * 32 + lane
                for c in range(t, n4, THREADS):  # thread t: column c of the pass's rows, the weight loaded once
                    g = w[4 * c: 4 * c + 4]
                    for b in range(rp):
                        e = x[b0 + b, 4 * c: 4 * c + 4]
                        lane_ss[lane, b] += np.float32((e * e).sum())
                        out[b0 + b, 4 * c: 4 * c + 4] = e * g
                        writes[b0 + b, 4 * c: 4 * c + 4] += 1
            for b in range(rp):
                red[warp * rows + b0 + b] = lane_ss[:, b].sum()
    factor = np.full(rows, np.nan, dtype=np.float32)
    for t in range(rows):  # threads t < rows: row t's total over the warps
        tot = sum(float(red[q * rows + t]) for q in range(WARPS))
        factor[t] = np.float32(1.0 / np.sqrt(tot / n + eps))
        writes[t, n: n + 2] += 1
    assert not np.isnan(red).any()  # every warp wrote its sum of every row
    return out, factor, writes


@pytest.mark.parametrize("rows", [*range(1, 9), 9, 16, 20, 32])
@pytest.mark.parametrize("n", [256, 2048, 4096, 5120, 14336])
def test_rmsnorm_rows_writes_each_element_once_and_its_rows_factor(rows, n):
    rng = np.random.default_rng(rows * 100000 + n)
    x = rng.standard_normal((rows, n)).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    stride = n + 32  # dec.h XIN_PAD: the factor's f32 fits the pad
    out, factor, writes = rmsnorm_rows(x, w, 1e-5, rows, stride)
    assert (writes[:, :n + 2] == 1).all() and (writes[:, n + 2:] == 0).all()
    np.testing.assert_allclose(out[:, :n], x * w, rtol=1e-6)
    want = 1 / np.sqrt((x.astype(np.float64) ** 2).mean(1) + 1e-5)
    np.testing.assert_allclose(factor, want, rtol=1e-5)
    # what the matvec then computes: factor · W (x w) = W (rmsnorm(x) w)
    np.testing.assert_allclose(factor[:, None] * out[:, :n], x * want[:, None] * w, rtol=1e-5, atol=1e-6)
    assert np.isnan(out[:, n:]).all()


def swiglu_rows(g_rows: np.ndarray, u_rows: np.ndarray, n: int, rows: int, ystride: int, hstride: int) -> np.ndarray:
    """dec_swiglu.cu's swiglu_rows: thread t takes element t % n of row t / n (t < rows · n, then
    t + 256 ...); g, u flat with rows ystride apart, h rows hstride apart."""
    h = np.full(rows * hstride, np.nan)
    writes = np.zeros(rows * hstride, dtype=int)
    for t in range(THREADS):
        for e in range(t, rows * n, THREADS):
            b, j = e // n, e % n
            a = g_rows[b * ystride + j]
            h[b * hstride + j] = a / (1 + np.exp(-a)) * u_rows[b * ystride + j]
            writes[b * hstride + j] += 1
    return h, writes


@pytest.mark.parametrize("rows", [*range(1, 9), 20, 32])
@pytest.mark.parametrize("n", [1, 2, 8, 16, 32])  # a tile's rows (dec.h tile_rows)
def test_swiglu_rows_covers_every_row_once(rows, n):
    rng = np.random.default_rng(rows + 10 * n)
    ystride, hstride = 128, 8192
    y = rng.standard_normal(rows * ystride)
    h, writes = swiglu_rows(y, y[n:], n, rows, ystride, hstride)
    for b in range(rows):
        g, u = y[b * ystride: b * ystride + n], y[b * ystride + n: b * ystride + 2 * n]
        np.testing.assert_allclose(h[b * hstride: b * hstride + n], g / (1 + np.exp(-g)) * u)
        assert (writes[b * hstride: b * hstride + n] == 1).all()
    assert writes.sum() == rows * n


def argmax_rows(vals: np.ndarray, n: int, base: int, rows: int, stride: int) -> list[tuple[float, int]]:
    """dec_argmax.cu's argmax_rows: n <= 32 (a power of two): warp w takes rows w 32/n .. + 32/n - 1,
    n lanes a row, each lane one element, the row's n keys reduced by xor shuffles (offsets n/2 .. 1);
    longer rows: warp w takes rows w, w + 8, ...; each lane the max of elements lane, lane + 32,
    ... (ties to the smaller index, as dec.h's key), then the warp."""
    best = [None] * rows
    if n <= 32:
        per_warp = 32 // n
        for warp in range(WARPS):
            for b0 in range(warp * per_warp, rows, WARPS * per_warp):
                keys = [None] * 32
                for lane in range(32):
                    b, j = b0 + lane // n, lane % n
                    keys[lane] = (vals[b * stride + j], -(base + j)) if b < rows else (-np.inf, -2**40)
                off = n // 2
                while off:
                    keys = [max(keys[ln], keys[ln ^ off]) for ln in range(32)]
                    off //= 2
                for lane in range(32):
                    b = b0 + lane // n
                    if lane % n == 0 and b < rows:
                        best[b] = (keys[lane][0], -keys[lane][1])
        return best
    for warp in range(WARPS):
        for b in range(warp, rows, 8):
            keys = []
            for lane in range(32):
                for j in range(lane, n, 32):
                    keys.append((vals[b * stride + j], -(base + j)))
            if keys:
                v, neg = max(keys)
                best[b] = (v, -neg)
    return best


@pytest.mark.parametrize("rows", [*range(1, 9), 20, 32])
@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32, 64])  # a tile's rows: powers of two (dec.h tile_rows)
def test_argmax_rows_finds_each_rows_first_maximum(rows, n):
    rng = np.random.default_rng(rows * 7 + n)
    stride = 128
    vals = rng.integers(-3, 3, rows * stride).astype(np.float64)  # ties on purpose
    got = argmax_rows(vals, n, 1000, rows, stride)
    for b in range(rows):
        row = vals[b * stride: b * stride + n]
        assert got[b] == (row.max(), 1000 + int(np.argmax(row)))


def test_each_ctas_best_joined_once_is_each_rows_first_maximum():
    """The head's tiles go to CTAs in turn; each CTA keeps its best key of each row over its tiles
    ([smem.best], argmax_rows per tile) and joins it to the step's once (argmax_publish): the max
    of maxima is the row's first maximum, ties included (dec.h's key: larger value, then smaller
    index)."""
    rng = np.random.default_rng(5)
    rows, vocab, r, ctas = 20, 512, 4, 7
    logits = rng.integers(-4, 4, (rows, vocab)).astype(np.float64)  # many ties across tiles
    key = lambda v, i: (v, -i)  # noqa: E731  (dec.h argmax_key's order)
    local = [[None] * rows for _ in range(ctas)]
    for i in range(vocab // r):  # tile i of the head: rows i r .. i r + r - 1, CTA i mod ctas
        cta = i % ctas
        tile = np.zeros(rows * 128)
        for b in range(rows):
            tile[b * 128: b * 128 + r] = logits[b, i * r: i * r + r]
        for b, (v, idx) in enumerate(argmax_rows(tile, r, i * r, rows, 128)):
            k = key(v, idx)
            local[cta][b] = k if local[cta][b] is None else max(local[cta][b], k)
    for b in range(rows):
        v, neg = max(local[c][b] for c in range(ctas))
        assert (v, -neg) == (logits[b].max(), int(np.argmax(logits[b])))
