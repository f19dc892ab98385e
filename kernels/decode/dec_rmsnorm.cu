// dec_rmsnorm.cu — RMSNorm of the f32 residual into the bf16 input vector of the next matvec:
// out[i] = bf16(x[i] · rsqrt(mean(x²) + eps) · w[i]), by the calling role's 256 threads. The
// sum of squares reduces with CUB's warp reduction (CCCL), then across the 8 warps in shared
// memory. `x` is written by other CTAs of the grid: read through L2.
// rmsnorm_rows: the same for `rows` vectors (x [rows][n], out rows `out_stride` elements apart:
// the batch's input of dec_step), WARPS / rows warps a row, ROW_HELD float4 a lane in flight
// at once (every op's input is on the step's critical path: its round trips are what it costs).
#define PL_COMPONENT dec_rmsnorm
#include <pipelink.h>

#include <cub/warp/warp_reduce.cuh>

PL_DECLARE_SMEM(red);
PL_DECLARE_BARRIER(sums);

namespace dec_rmsnorm {
constexpr unsigned THREADS = 256, WARPS = THREADS / 32;
constexpr unsigned HELD = 8;  // elements a thread keeps in registers: n <= 2048 in one read
constexpr unsigned ROW_HELD = 8;   // rmsnorm_rows: float4 a lane keeps (16 spill the step role's 128 registers)
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
  float* red = reinterpret_cast<float*>(PL_SMEM_PTR(red));
  // WARPS / rows warps a row (rows <= WARPS: the step's batch), each lane ROW_HELD float4 of its
  // row in registers: n <= ROW_HELD · 128 · wpr in one round trip; longer rows in chunks
  const unsigned wpr = rows && rows <= WARPS ? WARPS / rows : 1u, r = warp / wpr, lanes = 32 * wpr;
  const unsigned lt = warp % wpr * 32 + lane, n4 = n / 4;
  const bool live = r < rows;
  const float4* xr = reinterpret_cast<const float4*>(x + (size_t)r * n);
  const float4* w4 = reinterpret_cast<const float4*>(w);
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  const auto sq = [](const float4& e) { return e.x * e.x + e.y * e.y + e.z * e.z + e.w * e.w; };
  // the lane's ROW_HELD float4 of the chunk at c0, their loads in flight together
  const auto load_chunk = [&](unsigned c0, float4 (&dst)[ROW_HELD]) {
#pragma unroll
    for (unsigned u = 0; u < ROW_HELD; ++u) {
      const unsigned c = c0 + lt + u * lanes;
      dst[u] = live && c < n4 ? __ldcg(xr + c) : zero;
    }
  };
  float4 v[ROW_HELD];
  float ss = 0.f;
  load_chunk(0, v);
#pragma unroll
  for (unsigned u = 0; u < ROW_HELD; ++u) ss += sq(v[u]);
  if (n4 > ROW_HELD * lanes)  // longer rows: the rest in passes of ROW_HELD loads (folds away with n = 2048)
    for (unsigned c0 = ROW_HELD * lanes; c0 < n4; c0 += ROW_HELD * lanes) {
      float4 e[ROW_HELD];
      load_chunk(c0, e);
#pragma unroll
      for (unsigned u = 0; u < ROW_HELD; ++u) ss += sq(e[u]);
    }
#pragma unroll
  for (unsigned off = 16; off; off /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  if (lane == 0) red[warp] = ss;
  pl::named_barrier_sync(PL_BARRIER(sums), THREADS);
  float tot = 0.f;
  for (unsigned q = 0; q < wpr; ++q) tot += red[r * wpr + q];  // (r · wpr + q <= 7, idle warps too)
  const float rs = rsqrtf(tot / (float)n + eps);
  uint16_t* o = static_cast<uint16_t*>(out) + (size_t)r * out_stride;
  const auto store = [&](unsigned c, const float4& xv, const float4& g) {
    const unsigned lo = (unsigned)to_bf16(xv.x * rs * g.x) | (unsigned)to_bf16(xv.y * rs * g.y) << 16;
    const unsigned hi = (unsigned)to_bf16(xv.z * rs * g.z) | (unsigned)to_bf16(xv.w * rs * g.w) << 16;
    *reinterpret_cast<uint2*>(o + 4 * c) = make_uint2(lo, hi);
  };
  // a chunk's stores: the weights W_AHEAD float4 at a time, loaded before their stores (out is a
  // generic pointer: a store in between would order the next load behind it)
  const auto store_chunk = [&](unsigned c0, const float4 (&vals)[ROW_HELD]) {
    constexpr unsigned W_AHEAD = 4;
#pragma unroll
    for (unsigned u0 = 0; u0 < ROW_HELD; u0 += W_AHEAD) {
      float4 g[W_AHEAD];
#pragma unroll
      for (unsigned u = 0; u < W_AHEAD; ++u) {
        const unsigned c = c0 + lt + (u0 + u) * lanes;
        g[u] = c < n4 ? __ldg(w4 + c) : zero;
      }
#pragma unroll
      for (unsigned u = 0; u < W_AHEAD; ++u)
        if (c0 + lt + (u0 + u) * lanes < n4) store(c0 + lt + (u0 + u) * lanes, vals[u0 + u], g[u]);
    }
  };
  if (live) {
    store_chunk(0, v);
    if (n4 > ROW_HELD * lanes)  // the rest from L2 again
      for (unsigned c0 = ROW_HELD * lanes; c0 < n4; c0 += ROW_HELD * lanes) {
        float4 e[ROW_HELD];
        load_chunk(c0, e);
        store_chunk(c0, e);
      }
  }
  pl::named_barrier_sync(PL_BARRIER(sums), THREADS);  // red is reused by the next call
}
