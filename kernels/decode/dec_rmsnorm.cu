// dec_rmsnorm.cu — RMSNorm of the f32 residual into the bf16 input vector of the next matvec:
// out[i] = bf16(x[i] · rsqrt(mean(x²) + eps) · w[i]), by the calling role's 256 threads. The
// sum of squares reduces with CUB's warp reduction (CCCL), then across the 8 warps in shared
// memory. `x` is written by other CTAs of the grid: read through L2.
// rmsnorm_rows: the same for `rows` vectors (x [rows][n], out rows `out_stride` elements apart:
// the batch's input of dec_step), a warp a row: one pass for the sum of squares, one for the
// output (x again, from L2), so every row costs two round trips whatever the batch.
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
  if (n > HELD * THREADS)  // (t < THREADS: written so, the loop folds away with n <= 2048)
#pragma unroll 4  // (16 loads in flight spilled the step role's budget)
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
  if (n > HELD * THREADS)
#pragma unroll 4
    for (unsigned i = t + HELD * THREADS; i < n; i += THREADS) o[i] = to_bf16(__ldcg(x + i) * r * __ldg(w + i));
  pl::named_barrier_sync(PL_BARRIER(sums), THREADS);  // red is reused by the next call
}

PL_CALLABLE(rmsnorm_rows)(unsigned pl_inst, const float* x, const float* w, void* out, unsigned n, float eps,
                          unsigned rows, unsigned out_stride) {
  using namespace dec_rmsnorm;
  const unsigned t = pl::role_thread(PL_WARP_BEGIN()), warp = t / 32, lane = t % 32;
  constexpr unsigned U = 4;  // float4 loads a lane has in flight
  for (unsigned r = warp; r < rows; r += WARPS) {
    const float4* xr = reinterpret_cast<const float4*>(x + (size_t)r * n);
    float ss = 0.f;
    for (unsigned c0 = lane; c0 < n / 4; c0 += 32 * U) {
      float4 v[U];
#pragma unroll
      for (unsigned u = 0; u < U; ++u) v[u] = c0 + 32 * u < n / 4 ? __ldcg(xr + c0 + 32 * u) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (unsigned u = 0; u < U; ++u) ss += v[u].x * v[u].x + v[u].y * v[u].y + v[u].z * v[u].z + v[u].w * v[u].w;
    }
#pragma unroll
    for (unsigned off = 16; off; off /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    const float rs = rsqrtf(ss / (float)n + eps);
    uint16_t* o = static_cast<uint16_t*>(out) + (size_t)r * out_stride;
    for (unsigned c = lane; c < n / 4; c += 32) {
      const float4 v = __ldcg(xr + c), g = __ldg(reinterpret_cast<const float4*>(w) + c);
      const unsigned lo = (unsigned)to_bf16(v.x * rs * g.x) | (unsigned)to_bf16(v.y * rs * g.y) << 16;
      const unsigned hi = (unsigned)to_bf16(v.z * rs * g.z) | (unsigned)to_bf16(v.w * rs * g.w) << 16;
      *reinterpret_cast<uint2*>(o + 4 * c) = make_uint2(lo, hi);
    }
  }
  pl::named_barrier_sync(PL_BARRIER(sums), THREADS);
}
