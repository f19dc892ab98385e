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
#define PL_COMPONENT dec_matvec
#include <pipelink.h>

#include <cute/tensor.hpp>

PL_DECLARE_BARRIER(tile);

namespace dec_matvec {
constexpr unsigned THREADS = 256, WARPS = THREADS / 32;
constexpr unsigned INFLIGHT = 8;  // chunks a lane loads before it multiplies: 128 bytes in flight
constexpr unsigned SCRATCH = 8;   // y[SCRATCH + w]: warp w's segment sum when rows < WARPS

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
