// dec_rmsnorm.cu — RMSNorm of the f32 residual into the bf16 input vector of the next matvec:
// out[i] = bf16(x[i] · rsqrt(mean(x²) + eps) · w[i]), by the calling role's 256 threads. The
// sum of squares reduces with CUB's warp reduction (CCCL), then across the 8 warps in shared
// memory. `x` is written by other CTAs of the grid: read through L2.
#define PL_COMPONENT dec_rmsnorm
#include <pipelink.h>

#include <cub/warp/warp_reduce.cuh>

PL_DECLARE_SMEM(red);
PL_DECLARE_BARRIER(sums);

namespace dec_rmsnorm {
constexpr unsigned THREADS = 256, WARPS = THREADS / 32;
using WarpSum = cub::WarpReduce<float>;
// A full warp reduces with shuffles: CUB's temp storage is an empty type (a local nothing reads).
static_assert(sizeof(WarpSum::TempStorage) <= 1, "CUB's shuffle reduction: no temp storage");
__device__ __forceinline__ uint16_t to_bf16(float f) {
  const unsigned u = __float_as_uint(f);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
}  // namespace dec_rmsnorm

PL_OWN_FACT(norm_warps, dec_rmsnorm::WARPS);  // sizes [smem.red]: one sum a warp

PL_CALLABLE(rmsnorm)(unsigned pl_inst, const float* x, const float* w, void* out, unsigned n, float eps) {
  using namespace dec_rmsnorm;
  const unsigned t = pl::role_thread(PL_WARP_BEGIN()), warp = t / 32;
  float* red = reinterpret_cast<float*>(PL_SMEM_PTR(red));
  typename WarpSum::TempStorage temp;
  float ss = 0.f;
  for (unsigned i = t; i < n; i += THREADS) {
    const float v = __ldcg(x + i);
    ss += v * v;
  }
  ss = WarpSum(temp).Sum(ss);
  if (t % 32 == 0) red[warp] = ss;
  pl::named_barrier_sync(PL_BARRIER(sums), THREADS);
  float total = 0.f;
#pragma unroll
  for (unsigned i = 0; i < WARPS; ++i) total += red[i];
  const float r = rsqrtf(total / (float)n + eps);
  uint16_t* o = static_cast<uint16_t*>(out);
  for (unsigned i = t; i < n; i += THREADS) o[i] = to_bf16(__ldcg(x + i) * r * __ldg(w + i));
  pl::named_barrier_sync(PL_BARRIER(sums), THREADS);  // red is reused by the next call
}
