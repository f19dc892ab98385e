// dec_matvec.cu — one tile of a decode matrix-vector product: y[r] = Σ_c W[r, c] · x[c] for the
// `rows` rows of a bf16 tile in shared memory (row-major, `k` columns) and the bf16 vector x in
// shared memory, accumulated in f32, by the calling role's 256 threads. CuTe views the tile and
// the vector as 16-byte chunks; thread t takes chunks t, t + 256, ... (consecutive threads read
// consecutive 16 bytes: no bank conflicts), a warp's 32 chunks always in one row (k is a
// multiple of 256), so each warp's partial sum per step goes to its row with one shared atomic.
// Ends with a barrier: y is complete and the tile may be overwritten.
#define PL_COMPONENT dec_matvec
#include <pipelink.h>

#include <cute/tensor.hpp>

PL_DECLARE_BARRIER(tile);

namespace dec_matvec {
constexpr unsigned THREADS = 256;
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
}  // namespace dec_matvec

PL_CALLABLE(matvec)(unsigned pl_inst, const void* tile, const void* xin, unsigned rows, unsigned k, float* y) {
  using namespace dec_matvec;
  using namespace cute;
  const unsigned t = pl::role_thread(PL_WARP_BEGIN()), kc = k / 8;
  // [rows, k / 8] chunks of the tile, [k / 8] of the vector
  Tensor W = make_tensor(make_smem_ptr(static_cast<const uint4*>(tile)), make_layout(make_shape(rows, kc), make_stride(kc, Int<1>{})));
  Tensor X = make_tensor(make_smem_ptr(static_cast<const uint4*>(xin)), make_layout(make_shape(kc)));
  if (t < rows) y[t] = 0.f;
  pl::named_barrier_sync(PL_BARRIER(tile), THREADS);
  const unsigned chunks = rows * kc;
  for (unsigned c0 = 0; c0 < chunks; c0 += 4 * THREADS) {  // 4 chunks a thread in flight
    float s[4];
#pragma unroll
    for (unsigned u = 0; u < 4; ++u) {
      const unsigned c = c0 + u * THREADS + t;
      s[u] = c < chunks ? dot8(W(c / kc, c % kc), X(c % kc)) : 0.f;
    }
#pragma unroll
    for (unsigned u = 0; u < 4; ++u) {
      float v = s[u];
      for (unsigned off = 16; off; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
      const unsigned c = c0 + u * THREADS + t;
      if (t % 32 == 0 && c < chunks) atomicAdd(y + c / kc, v);
    }
  }
  pl::named_barrier_sync(PL_BARRIER(tile), THREADS);
}
