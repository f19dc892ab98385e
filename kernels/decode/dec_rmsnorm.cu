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
constexpr unsigned HELD = 8;  // elements a thread keeps in registers: n <= 2048 in one read
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
  // The first HELD · 256 elements and their weights stay in registers: one round trip to L2 for
  // both, issued together, instead of a read for the sum, another for the output and a third for
  // the weight (n is the model's fact: the guards fold at link time).
  float xv[HELD], wv[HELD], ss = 0.f;
#pragma unroll
  for (unsigned j = 0; j < HELD; ++j) {
    const unsigned i = t + j * THREADS;
    xv[j] = i < n ? __ldcg(x + i) : 0.f;
    wv[j] = i < n ? __ldg(w + i) : 0.f;
  }
#pragma unroll
  for (unsigned j = 0; j < HELD; ++j) ss += xv[j] * xv[j];
  for (unsigned i = t + HELD * THREADS; i < n; i += THREADS) {
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
#pragma unroll
  for (unsigned j = 0; j < HELD; ++j) {
    const unsigned i = t + j * THREADS;
    if (i < n) o[i] = to_bf16(xv[j] * r * wv[j]);
  }
  for (unsigned i = t + HELD * THREADS; i < n; i += THREADS) o[i] = to_bf16(__ldcg(x + i) * r * __ldg(w + i));
  pl::named_barrier_sync(PL_BARRIER(sums), THREADS);  // red is reused by the next call
}
