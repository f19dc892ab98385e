// dec_rmsnorm.cu — RMSNorm of the f32 residual into the bf16 input vector of the next matvec:
// out[i] = bf16(x[i] · rsqrt(mean(x²) + eps) · w[i]), by the calling role's 256 threads. The
// sum of squares reduces with CUB's warp reduction (CCCL), then across the 8 warps in shared
// memory. `x` is written by other CTAs of the grid: read through L2.
// rmsnorm_rows: `rows` vectors (x [rows][n], out rows `out_stride` elements apart: the batch's
// input of dec_step) as bf16(x · w) and each row's rsqrt(mean(x²) + eps) in the row's pad, which
// the matvec applies to its sums: the rows of 8 sequences (64 KB) do not fit the step role's
// registers, and held nowhere they would cost a second read and round trip before the stores
// (every op's input is on the step's critical path: its round trips are what it costs).
#define PL_COMPONENT dec_rmsnorm
#include <pipelink.h>

#include <cub/warp/warp_reduce.cuh>

PL_DECLARE_SMEM(red);
PL_DECLARE_FACT(batch);
PL_DECLARE_BARRIER(sums);

namespace dec_rmsnorm {
constexpr unsigned THREADS = 256, WARPS = THREADS / 32;
constexpr unsigned HELD = 8;  // elements a thread keeps in registers: n <= 2048 in one read
constexpr unsigned MAX_ROWS = 8;   // rmsnorm_rows: rows a pass (their float4s in registers at once)
constexpr unsigned MAX_BATCH = 32; // rmsnorm_rows: rows at most (the step's batch, [fact.batch] accept)
using WarpSum = cub::WarpReduce<float>;
// A full warp reduces with shuffles: CUB's temp storage is an empty type (a local nothing reads).
static_assert(sizeof(WarpSum::TempStorage) <= 1, "CUB's shuffle reduction: no temp storage");
// ss + w · 0 (ss itself for a finite w) as an instruction ptxas keeps: the sum then depends on
// the weight's load, so the weights' loads go out with x's, before the reduction. Without it
// ptxas sank them below the reduction's barrier, to their use, and every norm waited a second
// round trip (docs/DECISIONS.md).
__device__ __forceinline__ void issue_before_sum(float& ss, float w) {
  asm volatile("fma.rn.f32 %0, %1, 0f00000000, %0;" : "+f"(ss) : "f"(w));
}
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
#pragma unroll
  for (unsigned j = 0; j < HELD; ++j) issue_before_sum(ss, wv[j]);
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
  float* red = reinterpret_cast<float*>(PL_SMEM_PTR(red));  // [warp][row]
  if (rows > MAX_BATCH || rows > PL_FACT(batch)) __trap();   // (the step passes its batch: folds away)
  // out row b = bf16(x_b · w), and its factor rsqrt(mean(x_b²) + eps) as an f32 at element n (the
  // row's pad: out_stride >= n + 2): the caller's matvec multiplies its row sums by it
  // (W (x rs w) = rs W (x w)), so nothing waits for the reduction before the stores and nothing
  // is held: thread t takes float4 column t + p · THREADS of every row, the rows sharing the
  // weight's load, and each pass's loads go out together.
  const unsigned n4 = n / 4;
  const float4* w4 = reinterpret_cast<const float4*>(w);
  uint16_t* o = static_cast<uint16_t*>(out);
  // (more than MAX_ROWS rows: passes of MAX_ROWS, each reading the weight again from L1; unrolled
  // once `rows` folds, so each pass's row count is a constant, not eight predicates to spill)
#pragma unroll
  for (unsigned b0 = 0; b0 < rows; b0 += MAX_ROWS) {
    const unsigned rp = min(MAX_ROWS, rows - b0);
    const float* xp = x + (size_t)b0 * n;
    uint16_t* op = o + (size_t)b0 * out_stride;
    float ss[MAX_ROWS];
#pragma unroll
    for (unsigned b = 0; b < MAX_ROWS; ++b) ss[b] = 0.f;
    for (unsigned c = t; c < n4; c += THREADS) {
      const float4 g = __ldg(w4 + c);
      float4 v[MAX_ROWS];
#pragma unroll
      for (unsigned b = 0; b < MAX_ROWS; ++b)
        if (b < rp) v[b] = __ldcg(reinterpret_cast<const float4*>(xp + (size_t)b * n) + c);
#pragma unroll
      for (unsigned b = 0; b < MAX_ROWS; ++b)
        if (b < rp) {
          const float4 e = v[b];
          ss[b] += e.x * e.x + e.y * e.y + e.z * e.z + e.w * e.w;
          const unsigned lo = (unsigned)to_bf16(e.x * g.x) | (unsigned)to_bf16(e.y * g.y) << 16;
          const unsigned hi = (unsigned)to_bf16(e.z * g.z) | (unsigned)to_bf16(e.w * g.w) << 16;
          *reinterpret_cast<uint2*>(op + (size_t)b * out_stride + 4 * c) = make_uint2(lo, hi);
        }
    }
#pragma unroll
    for (unsigned b = 0; b < MAX_ROWS; ++b)
      if (b < rp) {
        float s = ss[b];
#pragma unroll
        for (unsigned off = 16; off; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (lane == 0) red[warp * rows + b0 + b] = s;
      }
  }
  pl::named_barrier_sync(PL_BARRIER(sums), THREADS);
  if (t < rows) {
    float tot = 0.f;
#pragma unroll
    for (unsigned q = 0; q < WARPS; ++q) tot += red[q * rows + t];
    *reinterpret_cast<float*>(o + (size_t)t * out_stride + n) = rsqrtf(tot / (float)n + eps);
  }
  pl::named_barrier_sync(PL_BARRIER(sums), THREADS);  // the factors are written; red is reused by the next call
}
