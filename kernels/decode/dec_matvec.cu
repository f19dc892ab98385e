// dec_matvec.cu — one weight-stream stage of a decode matrix-vector product: y[r] = Σ_c W[r, c] ·
// x[c] for the `rows` rows of a bf16 tile in shared memory (row-major, `k` columns) and the bf16
// vector x in shared memory, accumulated in f32, by the calling role's 8 warps. CuTe views the
// tile and the vector as 16-byte chunks. Each warp owns whole rows (rows >= 8: rows w, w + 8, ...)
// or one contiguous segment of a row (rows < 8: 8 / rows warps a row); its lanes take the
// segment's chunks 32 apart (consecutive lanes read consecutive 16 bytes: no bank conflicts),
// keep their sums in registers, and the warp reduces once. So a tile costs one shuffle reduction
// per row (or segment) and one barrier, and y needs no zeroing: rows >= 8 are stored by their
// warp; fewer rows add their warps' sums through y[8 .. 16), which the caller leaves free.
// Ends with a barrier: y is complete and the stage may be overwritten.
//
// matvec_batch: the same product for the batch's B input vectors at once (fact `batch`),
// y[b ystride + r] = s_b · Σ_c W[r, c] · x[b, c] (s_b: with `scaled`, the RMSNorm factor that
// dec_rmsnorm's rmsnorm_rows left as an f32 in row b's pad, else 1), by tensor cores:
// mma.sync m16n8k16 with the vectors as A (rows gid < B of the 16; the rest zero) and eight tile rows as B (each n8 group of rows
// in turn). Warp w takes the k32 blocks w, w + 8, ...: lane (gid, qd) = (lane / 4, lane % 4)
// loads 16 bytes of row gid of the vectors and of the tile at block column qd · 8, and the mma's
// k order is a permutation of the block's columns that both operands share (as dec_attn_split's
// scores), so every load is a whole 16-byte run. The warps' partial sums meet in [smem.red], then
// B · rows threads add them. x's rows are k + dec::XIN_PAD elements apart (dec.h).
// B > 8 (up to 32, dec.h MAX_BATCH) takes the wide path: the vectors fill both halves of A (rows
// gid and gid + 8) of one or two m16 tiles, one n8 group of tile rows a pass, and the warps'
// sums meet in [smem.red] as [warp][b][8 columns] (the contract's 1024 · min(batch, 8) bytes).
#define PL_COMPONENT dec_matvec
#include <pipelink.h>

#include <cute/tensor.hpp>

#include "dec.h"

PL_DECLARE_BARRIER(tile);
PL_DECLARE_FACT(batch);
PL_DECLARE_SMEM(red);

namespace dec_matvec {
constexpr unsigned THREADS = 256, WARPS = THREADS / 32;
constexpr unsigned INFLIGHT = 8;  // chunks a lane loads before it multiplies: 128 bytes in flight
constexpr unsigned SCRATCH = 8;   // y[SCRATCH + w]: warp w's segment sum when rows < WARPS
constexpr unsigned MAX_GROUPS = 4;  // n8 groups of tile rows a pass of matvec_batch ([smem.red])
constexpr unsigned BATCH_INFLIGHT = 4;  // k32 blocks a lane loads before it multiplies
constexpr unsigned NARROW_BATCH = 8;    // matvec_batch's A holds the vectors in rows gid < 8 up to here
#ifndef DEC_WIDE_INFLIGHT
#define DEC_WIDE_INFLIGHT 4
#endif
constexpr unsigned WIDE_INFLIGHT = DEC_WIDE_INFLIGHT;  // the wide path's k32 blocks in flight (four A runs a block)

__device__ __forceinline__ float dot8(uint4 a, uint4 b) {
  const unsigned aw[4] = {a.x, a.y, a.z, a.w}, bw[4] = {b.x, b.y, b.z, b.w};
  float s = 0.f;
#pragma unroll
  for (unsigned i = 0; i < 4; ++i) {
    s += __uint_as_float(aw[i] << 16) * __uint_as_float(bw[i] << 16);
    s += __uint_as_float(aw[i] & 0xffff0000u) * __uint_as_float(bw[i] & 0xffff0000u);
  }
  return s;
}

// Σ over chunks [begin, end) of row `row`, this lane's share (chunks lane, lane + 32, ...)
template <class TW, class TX>
__device__ __forceinline__ float lane_sum(const TW& W, const TX& X, unsigned row, unsigned begin, unsigned end,
                                          unsigned lane) {
  float s = 0.f;
  for (unsigned c0 = begin + lane; c0 < end; c0 += 32 * INFLIGHT) {
    uint4 w[INFLIGHT], x[INFLIGHT];
#pragma unroll
    for (unsigned u = 0; u < INFLIGHT; ++u) {
      const unsigned c = c0 + 32 * u;
      w[u] = c < end ? W(row, c) : make_uint4(0, 0, 0, 0);
      x[u] = c < end ? X(c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (unsigned u = 0; u < INFLIGHT; ++u) s += dot8(w[u], x[u]);
  }
  return s;
}

// c += A · B for two k16 steps of one k32 block: a, b the lane's 16 bytes of its vector row and
// tile row (words 0, 1: the first step's k pairs 2 qd and 2 qd + 8; words 2, 3: the second's)
__device__ __forceinline__ void mma_k32(float (&c)[4], const uint4& a, const uint4& b) {
  dec::mma_k16(c, a.x, a.y, b.x, b.y);
  dec::mma_k16(c, a.z, a.w, b.z, b.w);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (unsigned off = 16; off; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
}  // namespace dec_matvec

PL_CALLABLE(matvec)(unsigned pl_inst, const void* tile, const void* xin, unsigned rows, unsigned k, float* y) {
  using namespace dec_matvec;
  using namespace cute;
  const unsigned t = pl::role_thread(PL_WARP_BEGIN()), warp = t / 32, lane = t % 32, kc = k / 8;
  // [rows, k / 8] chunks of the tile, [k / 8] of the vector
  Tensor W = make_tensor(make_smem_ptr(static_cast<const uint4*>(tile)), make_layout(make_shape(rows, kc), make_stride(kc, Int<1>{})));
  Tensor X = make_tensor(make_smem_ptr(static_cast<const uint4*>(xin)), make_layout(make_shape(kc)));
  if (rows >= WARPS) {
    for (unsigned r = warp; r < rows; r += WARPS) {
      const float s = warp_sum(lane_sum(W, X, r, 0, kc, lane));
      if (lane == 0) y[r] = s;
    }
  } else {
    const unsigned per_row = WARPS / rows, row = warp / per_row, seg = warp % per_row;
    const unsigned len = (kc + per_row - 1) / per_row, begin = seg * len, end = min(kc, begin + len);
    const float s = warp_sum(lane_sum(W, X, row, begin, end, lane));
    if (lane == 0) y[SCRATCH + warp] = s;
    pl::named_barrier_sync(PL_BARRIER(tile), THREADS);
    if (t < rows) {
      float sum = 0.f;
      for (unsigned j = 0; j < per_row; ++j) sum += y[SCRATCH + t * per_row + j];
      y[t] = sum;
    }
  }
  pl::named_barrier_sync(PL_BARRIER(tile), THREADS);
}

PL_CALLABLE(matvec_batch)(unsigned pl_inst, const void* tile, const void* xin, unsigned rows, unsigned k, float* y,
                          unsigned ystride, unsigned scaled) {
  using namespace dec_matvec;
  const unsigned B = PL_FACT(batch);
  if (B > dec::MAX_BATCH) __trap();  // outside accept (folds away)
  const unsigned t = pl::role_thread(PL_WARP_BEGIN()), warp = t / 32, lane = t % 32, gid = lane / 4, qd = lane % 4;
  const uint16_t* W = static_cast<const uint16_t*>(tile);
  const uint16_t* X = static_cast<const uint16_t*>(xin) + (size_t)gid * (k + dec::XIN_PAD) + qd * 8;
  float* red = reinterpret_cast<float*>(PL_SMEM_PTR(red));  // [group][warp][b][8 columns]
  const unsigned groups = (rows + 7) / 8, blocks = k / 32;
  if (B > NARROW_BATCH) {  // (the fact folds the choice)
    // lane (gid, qd): 16 bytes of vector rows gid + 8 h (h < 4: A rows gid, gid + 8 of m16 tiles
    // 0 and 1) and of tile row 8 g + gid, at block column qd · 8, each block's two k16 steps
    const size_t xs = k + dec::XIN_PAD;
    const uint16_t* X0 = static_cast<const uint16_t*>(xin) + (size_t)gid * xs + qd * 8;
    const unsigned mtiles = (B + 15) / 16;
    for (unsigned g = 0; g < groups; ++g) {
      const unsigned rn = min(8u, rows - 8 * g), wr = 8 * g + gid;
      float acc[2][4];
#pragma unroll
      for (unsigned mt = 0; mt < 2; ++mt)
#pragma unroll
        for (unsigned e = 0; e < 4; ++e) acc[mt][e] = 0.f;
      for (unsigned kb0 = warp; kb0 < blocks; kb0 += WARPS * WIDE_INFLIGHT) {
        uint4 a[WIDE_INFLIGHT][4], w[WIDE_INFLIGHT];
#pragma unroll
        for (unsigned u = 0; u < WIDE_INFLIGHT; ++u) {
          const unsigned kb = kb0 + u * WARPS;
#pragma unroll
          for (unsigned hh = 0; hh < 4; ++hh)
            a[u][hh] = kb < blocks && gid + 8 * hh < B ? *reinterpret_cast<const uint4*>(X0 + 8 * hh * xs + kb * 32)
                                                       : make_uint4(0, 0, 0, 0);
          w[u] = kb < blocks && wr < rows ? *reinterpret_cast<const uint4*>(W + (size_t)wr * k + kb * 32 + qd * 8)
                                          : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (unsigned u = 0; u < WIDE_INFLIGHT; ++u)
#pragma unroll
          for (unsigned mt = 0; mt < 2; ++mt)
            if (mt < mtiles) {
              const uint4 &lo = a[u][2 * mt], &hi = a[u][2 * mt + 1];
              dec::mma_k16_rows16(acc[mt], lo.x, hi.x, lo.y, hi.y, w[u].x, w[u].y);
              dec::mma_k16_rows16(acc[mt], lo.z, hi.z, lo.w, hi.w, w[u].z, w[u].w);
            }
      }
      // C: acc[mt][0, 1] row 16 mt + gid, acc[mt][2, 3] row 16 mt + 8 + gid; columns 2 qd, 2 qd + 1
#pragma unroll
      for (unsigned mt = 0; mt < 2; ++mt)
#pragma unroll
        for (unsigned hh = 0; hh < 2; ++hh) {
          const unsigned b = 16 * mt + 8 * hh + gid;
          if (b < B) {
            float* d = red + ((size_t)warp * B + b) * 8 + 2 * qd;
            d[0] = acc[mt][2 * hh], d[1] = acc[mt][2 * hh + 1];
          }
        }
      pl::named_barrier_sync(PL_BARRIER(tile), THREADS);
      for (unsigned i = t; i < B * rn; i += THREADS) {
        const unsigned b = i / rn, r = i % rn;
        float sum = 0.f;
#pragma unroll
        for (unsigned w8 = 0; w8 < WARPS; ++w8) sum += red[((size_t)w8 * B + b) * 8 + r];
        const float f = scaled ? *reinterpret_cast<const float*>(static_cast<const uint16_t*>(xin) + (size_t)b * xs + k) : 1.f;
        y[b * ystride + 8 * g + r] = sum * f;
      }
      pl::named_barrier_sync(PL_BARRIER(tile), THREADS);  // y is complete, red and the stage free
    }
    return;
  }
  // MAX_GROUPS n8 groups a pass (one pass up to 32 rows: every k >= 512; k = 256 makes 64-row tiles)
  for (unsigned g0 = 0; g0 < groups; g0 += MAX_GROUPS) {
    const unsigned gn = min(MAX_GROUPS, groups - g0), rn = min(8 * MAX_GROUPS, rows - 8 * g0);
    float acc[MAX_GROUPS][4];
#pragma unroll
    for (unsigned g = 0; g < MAX_GROUPS; ++g)
#pragma unroll
      for (unsigned e = 0; e < 4; ++e) acc[g][e] = 0.f;
    for (unsigned kb0 = warp; kb0 < blocks; kb0 += WARPS * BATCH_INFLIGHT) {
      uint4 a[BATCH_INFLIGHT], w[BATCH_INFLIGHT][MAX_GROUPS];
#pragma unroll
      for (unsigned u = 0; u < BATCH_INFLIGHT; ++u) {
        const unsigned kb = kb0 + u * WARPS;
        a[u] = kb < blocks && gid < B ? *reinterpret_cast<const uint4*>(X + kb * 32) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (unsigned g = 0; g < MAX_GROUPS; ++g) {
          const unsigned r = (g0 + g) * 8 + gid;
          w[u][g] = kb < blocks && g < gn && r < rows
                        ? *reinterpret_cast<const uint4*>(W + (size_t)r * k + kb * 32 + qd * 8)
                        : make_uint4(0, 0, 0, 0);
        }
      }
      if (gn == 1) {  // one group (k >= 2048): each block into its own sums, no chain of dependent mma
#pragma unroll
        for (unsigned u = 0; u < BATCH_INFLIGHT; ++u) mma_k32(acc[u % MAX_GROUPS], a[u], w[u][0]);
      } else {
#pragma unroll
        for (unsigned u = 0; u < BATCH_INFLIGHT; ++u)
#pragma unroll
          for (unsigned g = 0; g < MAX_GROUPS; ++g)
            if (g < gn) mma_k32(acc[g], a[u], w[u][g]);
      }
    }
    if (gn == 1)
#pragma unroll
      for (unsigned g = 1; g < MAX_GROUPS; ++g)
#pragma unroll
        for (unsigned e = 0; e < 4; ++e) acc[0][e] += acc[g][e];
    // C's rows gid (the vectors; rows gid + 8 are zero), columns 2 qd, 2 qd + 1 of the group
    if (gid < B)
#pragma unroll
      for (unsigned g = 0; g < MAX_GROUPS; ++g)
        if (g < gn) {
          float* d = red + ((g * WARPS + warp) * B + gid) * 8 + 2 * qd;
          d[0] = acc[g][0], d[1] = acc[g][1];
        }
    pl::named_barrier_sync(PL_BARRIER(tile), THREADS);
    for (unsigned i = t; i < B * rn; i += THREADS) {
      const unsigned b = i / rn, r = i % rn;
      const float* s = red + ((r / 8 * WARPS) * B + b) * 8 + r % 8;
      float sum = 0.f;
#pragma unroll
      for (unsigned w8 = 0; w8 < WARPS; ++w8) sum += s[w8 * B * 8];
      // scaled: the RMSNorm factor rmsnorm_rows left in the row's pad (past its k elements)
      const float f = scaled ? *reinterpret_cast<const float*>(static_cast<const uint16_t*>(xin) + (size_t)b * (k + dec::XIN_PAD) + k) : 1.f;
      y[b * ystride + 8 * g0 + r] = sum * f;
    }
    pl::named_barrier_sync(PL_BARRIER(tile), THREADS);  // y is complete, red and the stage free
  }
}
