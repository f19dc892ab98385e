// expert.cu — owner X. Role: the expert FFN of every routed slot, in two passes over
// work units spread over all warps of the grid (every warp finishes its pass-1 units
// before any pass-2 unit, so waits never form a cycle):
//  1. gate/up: unit (expert e, h-column block hc, row tile rb): [block_m x block_h] of
//     x·gateᵀ and of x·upᵀ (K = 2048, mma.sync from global memory, f32), after the
//     expert's rows are gathered (READY[e] = count). The accumulators go to the importer
//     of `acc` (the SwiGLU library), which writes h = silu(gate) * up to `hs`; then the
//     unit adds its valid rows × block_h to HREADY[e].
//  2. down: unit (e, n-column block nc, rb): [block_m x block_n] of h·w2[e]ᵀ (K = 768) once
//     HREADY[e] = count × 768, stored f32 to `ys` (valid rows only); +1 on YDONE[e].
// Units are ordered expert-major, row tiles fastest, so the tiles that read the same
// weights run side by side (L2 reuse).
// Owns the tile geometry: block_m (EXPERT_BLOCK_M), block_h (EXPERT_BLOCK_H), block_n
// (EXPERT_BLOCK_N); the contract's `own` values come from the same defines (Bazel).
// Export `acc`: [2, block_m, block_h] f32, layout "moe_gu" (expert_acc.h), scope warp.
#define PL_COMPONENT moe_expert
#include <pipelink.h>

#include <cuda_bf16.h>

#include "moe_shapes.h"
#include "warp_mma.h"

#ifndef EXPERT_BLOCK_M
#define EXPERT_BLOCK_M 32
#endif
#ifndef EXPERT_BLOCK_H
#define EXPERT_BLOCK_H 16
#endif
#ifndef EXPERT_BLOCK_N
#define EXPERT_BLOCK_N 32
#endif

namespace moe_expert {
constexpr unsigned BM = EXPERT_BLOCK_M, BH = EXPERT_BLOCK_H, BN = EXPERT_BLOCK_N;
constexpr unsigned MT = BM / 16, NH = BH / 8, NN = BN / 8;
static_assert(BM % 16 == 0 && BM <= 64 && BH % 8 == 0 && BH <= 32 && BN % 8 == 0 && BN <= 64, "tile geometry");
static_assert(moe::INTER % BH == 0 && moe::HIDDEN % BN == 0, "blocks divide the layer");
constexpr unsigned HBLOCKS = moe::INTER / BH, NBLOCKS = moe::HIDDEN / BN;

struct Params {  // [params]: w13, w2 = "ptr", t = "u32"
  const __nv_bfloat16* w13;
  const __nv_bfloat16* w2;
  unsigned t;
};

// Work unit u of a pass with `blocks` column blocks per row tile: expert e has
// ceil(count[e] / BM) * blocks units from first[e]; sets e, the column block and the row
// tile (fastest).
struct Unit {
  unsigned e, block, tile;
};
__device__ __forceinline__ Unit locate(unsigned u, const unsigned* count, const unsigned* first, unsigned blocks) {
  unsigned hit = 4;
#pragma unroll
  for (unsigned i = 0; i < 4; ++i)
    if (u >= first[i] && u < first[i] + moe::ceil_div(count[i], BM) * blocks) hit = i;
  const unsigned src = __ffs(__ballot_sync(0xffffffffu, hit < 4)) - 1;
  const unsigned e = 4 * src + __shfl_sync(0xffffffffu, hit, src);
  const unsigned local = u - moe::pick4(first, e), tiles = moe::ceil_div(moe::pick4(count, e), BM);
  return {e, local / tiles, local % tiles};
}

// acc[P][MT][NB][4] += A[BM rows of lda, K] · B_p[NB*8 rows of ldb, K]ᵀ for P planes of B
// (B_p = b + p * plane); A rows >= valid read as zero. The planes share the A loads.
template <unsigned P, unsigned NB, unsigned K>
__device__ __forceinline__ void gemm(float* acc, const __nv_bfloat16* a, unsigned lda, unsigned valid,
                                     const __nv_bfloat16* b, size_t plane, unsigned ldb, unsigned lane) {
  const unsigned g = lane / 4, q = lane % 4;
  const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll 1
  for (unsigned k0 = 0; k0 < K; k0 += 32) {
    uint4 ag[MT], ah[MT], bv[P * NB];
#pragma unroll
    for (unsigned n = 0; n < P * NB; ++n)
      bv[n] = warp_mma::ld_stream(b + (n / NB) * plane + (size_t)((n % NB) * 8 + g) * ldb + k0 + 8 * q);
#pragma unroll
    for (unsigned m = 0; m < MT; ++m) {
      const unsigned r = 16 * m + g;
      ag[m] = r < valid ? warp_mma::ld_cg(a + (size_t)r * lda + k0 + 8 * q) : zero;
      ah[m] = r + 8 < valid ? warp_mma::ld_cg(a + (size_t)(r + 8) * lda + k0 + 8 * q) : zero;
    }
#pragma unroll
    for (unsigned pl = 0; pl < P; ++pl)
#pragma unroll
      for (unsigned m = 0; m < MT; ++m)
#pragma unroll
        for (unsigned n = 0; n < NB; ++n)
          warp_mma::mma_k32(acc + ((pl * MT + m) * NB + n) * 4, ag[m], ah[m], bv[pl * NB + n]);
  }
}
}  // namespace moe_expert

PL_OWN_FACT(block_m, moe_expert::BM);
PL_OWN_FACT(block_h, moe_expert::BH);
PL_OWN_FACT(block_n, moe_expert::BN);
PL_DECLARE_FACT(top_k);
PL_DECLARE_EXPORT(acc);
PL_DECLARE_WORKSPACE(sync);
PL_DECLARE_WORKSPACE(xs);
PL_DECLARE_WORKSPACE(hs);
PL_DECLARE_WORKSPACE(ys);

PL_ENTRY(run) {
  using namespace moe_expert;
  const Params& p = PL_PARAMS(Params);
  const unsigned lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const unsigned warps = PL_WARPS();
  const unsigned gw = blockIdx.x * warps + (threadIdx.x / 32 - PL_WARP_BEGIN()), nw = gridDim.x * warps;
  unsigned* sync = static_cast<unsigned*>(PL_WORKSPACE(sync));
  bool last;
  const unsigned set = moe::enter(sync, moe::EXPERT, nw, lane, last);
  if (last) moe::finish_launch(sync, moe::EXPERT, set, moe::HREADY, 2 * moe::EXPERTS, lane);
  unsigned* cur = sync + moe::SET(set);
  const __nv_bfloat16* xs = static_cast<const __nv_bfloat16*>(PL_WORKSPACE(xs));
  const __nv_bfloat16* hs = static_cast<const __nv_bfloat16*>(PL_WORKSPACE(hs));
  float* ys = static_cast<float*>(PL_WORKSPACE(ys));

  if (PL_FACT(top_k) != moe::TOP_K) __trap();  // xs/hs/ys are sized for it (folds away)
  moe::wait_at_least(cur + moe::ROUTED, p.t);
  unsigned count[4], padded[4], first_row[4], first[4], units[4], total;
#pragma unroll
  for (unsigned i = 0; i < 4; ++i) {
    count[i] = __ldcg(cur + moe::COUNTS + 4 * lane + i);
    padded[i] = moe::ceil_div(count[i], BM) * BM;
  }
  moe::exclusive_scan4(padded, first_row, lane, total);

  // Pass 1: gate/up (one k-loop, shared A loads), SwiGLU (the importer of `acc`) into hs.
#pragma unroll
  for (unsigned i = 0; i < 4; ++i) units[i] = padded[i] / BM * HBLOCKS;
  moe::exclusive_scan4(units, first, lane, total);
  for (unsigned u = gw; u < total; u += nw) {
    const Unit w = locate(u, count, first, HBLOCKS);
    const unsigned cnt = moe::pick4(count, w.e), row0 = moe::pick4(first_row, w.e) + w.tile * BM;
    const unsigned valid = min(BM, cnt - w.tile * BM);
    moe::wait_at_least(cur + moe::READY + w.e, cnt);
    float acc[2 * MT * NH * 4];
#pragma unroll
    for (unsigned i = 0; i < 2 * MT * NH * 4; ++i) acc[i] = 0.f;
    const __nv_bfloat16* gate = p.w13 + ((size_t)w.e * 2 * moe::INTER + w.block * BH) * moe::HIDDEN;
    gemm<2, NH, moe::HIDDEN>(acc, xs + (size_t)row0 * moe::HIDDEN, moe::HIDDEN, valid, gate,
                             (size_t)moe::INTER * moe::HIDDEN, moe::HIDDEN, lane);
    PL_EXPORT(acc, acc, row0, w.block * BH);
    moe::signal(cur + moe::HREADY + w.e, valid * BH, lane);
  }

  // Pass 2: down projection into ys.
#pragma unroll
  for (unsigned i = 0; i < 4; ++i) units[i] = padded[i] / BM * NBLOCKS;
  moe::exclusive_scan4(units, first, lane, total);
  for (unsigned u = gw; u < total; u += nw) {
    const Unit w = locate(u, count, first, NBLOCKS);
    const unsigned cnt = moe::pick4(count, w.e), row0 = moe::pick4(first_row, w.e) + w.tile * BM;
    const unsigned valid = min(BM, cnt - w.tile * BM);
    moe::wait_at_least(cur + moe::HREADY + w.e, cnt * moe::INTER);
    float acc[MT * NN * 4];
#pragma unroll
    for (unsigned i = 0; i < MT * NN * 4; ++i) acc[i] = 0.f;
    const __nv_bfloat16* down = p.w2 + ((size_t)w.e * moe::HIDDEN + w.block * BN) * moe::INTER;
    gemm<1, NN, moe::INTER>(acc, hs + (size_t)row0 * moe::INTER, moe::INTER, BM, down, 0, moe::INTER, lane);
#pragma unroll
    for (unsigned m = 0; m < MT; ++m)
#pragma unroll
      for (unsigned n = 0; n < NN; ++n) {
        const float* d = acc + (m * NN + n) * 4;
        const unsigned r = 16 * m + g, c = w.block * BN + n * 8 + 2 * q;
        float* y = ys + (size_t)(row0 + r) * moe::HIDDEN + c;
        if (r < valid) __stcg(reinterpret_cast<float2*>(y), make_float2(d[0], d[1]));
        if (r + 8 < valid) __stcg(reinterpret_cast<float2*>(y + 8 * moe::HIDDEN), make_float2(d[2], d[3]));
      }
    moe::signal(cur + moe::YDONE + w.e, 1, lane);
  }
}
