"""The batch's row-wise helpers of the decode megakernel emulated thread by thread on the CPU, as
the kernel indexes them: dec_rmsnorm.cu's rmsnorm_rows (8 / rows warps a row, ROW_HELD float4 a
lane, longer rows in chunks), dec_swiglu.cu's swiglu_rows and dec_argmax.cu's argmax_rows. Each
must write every element of every row exactly once and nothing else (the output is poisoned
first), for every batch 1 .. 8 and the row lengths the contracts accept."""

from __future__ import annotations

import numpy as np
import pytest

THREADS, WARPS, ROW_HELD, W_AHEAD = 256, 8, 8, 4


def rmsnorm_rows(x: np.ndarray, w: np.ndarray, eps: float, rows: int, out_stride: int) -> tuple[np.ndarray, np.ndarray]:
    """dec_rmsnorm.cu's rmsnorm_rows: x [rows][n] f32 -> out [rows][out_stride] (NaN where not
    written), and how many times each element was written."""
    n = x.shape[1]
    n4 = n // 4
    out = np.full((rows, out_stride), np.nan, dtype=np.float32)
    writes = np.zeros((rows, out_stride), dtype=int)
    wpr = WARPS // rows if 0 < rows <= WARPS else 1
    lanes = 32 * wpr
    red = np.full(WARPS, np.nan, dtype=np.float32)
    held = {}
    for warp in range(WARPS):  # the sums of squares: held chunk, then the rest in chunks
        r = warp // wpr
        live = r < rows
        lane_ss = np.zeros(32, dtype=np.float32)
        for lane in range(32):
            lt = warp % wpr * 32 + lane
            v = []
            for u in range(ROW_HELD):
                c = lt + u * lanes
                v.append(x[r, 4 * c: 4 * c + 4] if live and c < n4 else np.zeros(4, np.float32))
            held[warp, lane] = v
            ss = np.float32(sum(float((e * e).sum()) for e in v))
            if n4 > ROW_HELD * lanes:
                for c0 in range(ROW_HELD * lanes, n4, ROW_HELD * lanes):
                    for u in range(ROW_HELD):
                        c = c0 + lt + u * lanes
                        if live and c < n4:
                            ss += np.float32((x[r, 4 * c: 4 * c + 4] ** 2).sum())
            lane_ss[lane] = ss
        red[warp] = lane_ss.sum()
    for warp in range(WARPS):
        r = warp // wpr
        tot = sum(float(red[r * wpr + q]) for q in range(wpr))  # r · wpr + q <= 7
        assert r * wpr + wpr - 1 < WARPS
        if r >= rows:
            continue
        rs = np.float32(1.0 / np.sqrt(tot / n + eps))
        for lane in range(32):
            lt = warp % wpr * 32 + lane

            def store(c, xv):
                out[r, 4 * c: 4 * c + 4] = xv * rs * w[4 * c: 4 * c + 4]
                writes[r, 4 * c: 4 * c + 4] += 1
            for u in range(ROW_HELD):
                if lt + u * lanes < n4:
                    store(lt + u * lanes, held[warp, lane][u])
            if n4 > ROW_HELD * lanes:
                for c0 in range(ROW_HELD * lanes, n4, ROW_HELD * lanes):
                    for u in range(ROW_HELD):
                        c = c0 + lt + u * lanes
                        if c < n4:
                            store(c, x[r, 4 * c: 4 * c + 4])
    return out, writes


@pytest.mark.parametrize("rows", range(1, 9))
@pytest.mark.parametrize("n", [256, 2048, 4096, 5120, 14336])
def test_rmsnorm_rows_writes_each_element_once_with_its_rows_norm(rows, n):
    rng = np.random.default_rng(rows * 100000 + n)
    x = rng.standard_normal((rows, n)).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    stride = n + 32  # dec.h XIN_PAD
    out, writes = rmsnorm_rows(x, w, 1e-5, rows, stride)
    assert (writes[:, :n] == 1).all() and (writes[:, n:] == 0).all()
    want = x / np.sqrt((x.astype(np.float64) ** 2).mean(1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(out[:, :n], want, rtol=1e-5, atol=1e-5)
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


@pytest.mark.parametrize("rows", range(1, 9))
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
    """dec_argmax.cu's argmax_rows: warp w takes rows w, w + 8, ...; each lane the max of
    elements lane, lane + 32, ... (ties to the smaller index, as dec.h's key), then the warp."""
    best = [None] * rows
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


@pytest.mark.parametrize("rows", range(1, 9))
@pytest.mark.parametrize("n", [1, 8, 33, 64])
def test_argmax_rows_finds_each_rows_first_maximum(rows, n):
    rng = np.random.default_rng(rows * 7 + n)
    stride = 128
    vals = rng.integers(-3, 3, rows * stride).astype(np.float64)  # ties on purpose
    got = argmax_rows(vals, n, 1000, rows, stride)
    for b in range(rows):
        row = vals[b * stride: b * stride + n]
        assert got[b] == (row.max(), 1000 + int(np.argmax(row)))
