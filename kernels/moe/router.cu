// router.cu — owner R. Role: logits = x · W_rᵀ (f32), p = softmax(logits), top-8 experts
// by p, weights = p_topk / Σ p_topk. Work unit: 16 tokens × 8 experts (one mma m16n8, K =
// 2048 from global memory), written to the instance workspace `logits`; the warp that
// completes a 16-token tile (counter in `sync`, reset by it) selects its tokens' experts,
// appends each slot to its expert (atomic per-expert count = the slot's position) and
// releases the tile's tokens on counter ROUTED. No warp of this role ever waits.
// Owns top_k (moe_shapes.h's TOP_K; the readers accept only 8).
#define PL_COMPONENT moe_router
#include <pipelink.h>

#include <cuda_bf16.h>

#include "moe_shapes.h"
#include "warp_mma.h"

PL_OWN_FACT(top_k, moe::TOP_K);
PL_DECLARE_WORKSPACE(sync);
PL_DECLARE_WORKSPACE(route);
PL_DECLARE_WORKSPACE(logits);

namespace moe_router {
struct Params {  // [params]: x, router_w = "ptr", t = "u32"
  const __nv_bfloat16* x;
  const __nv_bfloat16* router_w;
  unsigned t;
};
constexpr unsigned GROUPS = moe::EXPERTS / 8;  // n8 tiles of experts per token tile

// Top-k of one token's 128 logits, held 4 per lane (experts 4 lane + i). Lane k < TOP_K
// gets the k-th choice (expert, renormalized weight).
__device__ __forceinline__ void select(const float4 l4, unsigned lane, unsigned& expert, float& weight) {
  float v[4] = {l4.x, l4.y, l4.z, l4.w};
  float m = fmaxf(fmaxf(v[0], v[1]), fmaxf(v[2], v[3]));
  for (unsigned d = 16; d; d >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
  float sum = 0.f;
#pragma unroll
  for (unsigned i = 0; i < 4; ++i) v[i] = expf(v[i] - m), sum += v[i];
  for (unsigned d = 16; d; d >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, d);
#pragma unroll
  for (unsigned i = 0; i < 4; ++i) v[i] = v[i] / sum;  // p, as softmax defines it
  unsigned taken = 0;
  float mine = 0.f;
  expert = 0;
  for (unsigned k = 0; k < moe::TOP_K; ++k) {
    float best = -1.f;
    unsigned bi = 0xFFFFFFFFu;
#pragma unroll
    for (unsigned i = 0; i < 4; ++i)
      if (!(taken >> i & 1u) && v[i] > best) best = v[i], bi = 4 * lane + i;
    for (unsigned d = 16; d; d >>= 1) {  // max p, ties to the lower expert
      const float ob = __shfl_xor_sync(0xffffffffu, best, d);
      const unsigned oi = __shfl_xor_sync(0xffffffffu, bi, d);
      if (ob > best || (ob == best && oi < bi)) best = ob, bi = oi;
    }
    if ((bi >> 2) == lane) taken |= 1u << (bi & 3u);
    if (lane == k) expert = bi, mine = best;
  }
  float s = lane < moe::TOP_K ? mine : 0.f;
  for (unsigned d = 16; d; d >>= 1) s += __shfl_xor_sync(0xffffffffu, s, d);
  weight = mine / s;
}
}  // namespace moe_router

PL_ENTRY(run) {
  using namespace moe_router;
  const Params& p = PL_PARAMS(Params);
  const unsigned lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const unsigned warps = PL_WARPS();
  const unsigned gw = blockIdx.x * warps + (threadIdx.x / 32 - PL_WARP_BEGIN()), nw = gridDim.x * warps;
  unsigned* sync = static_cast<unsigned*>(PL_WORKSPACE(sync));
  bool last;
  const unsigned set = moe::enter(sync, moe::ROUTER, nw, lane, last);
  if (last) moe::finish_launch(sync, moe::ROUTER, set, moe::ROUTED, moe::READY - moe::ROUTED, lane);
  unsigned* cur = sync + moe::SET(set);
  const unsigned T = p.t, S = T * moe::TOP_K;
  unsigned* route_e = static_cast<unsigned*>(PL_WORKSPACE(route));
  float* route_w = reinterpret_cast<float*>(route_e + S);
  unsigned* route_pos = route_e + 2 * S;
  float* logits = static_cast<float*>(PL_WORKSPACE(logits));

  const unsigned tiles = moe::ceil_div(T, moe::ROUTE_TOKENS);
  for (unsigned u = gw; u < tiles * GROUPS; u += nw) {
    const unsigned tile = u / GROUPS, grp = u % GROUPS;
    const unsigned t0 = tile * moe::ROUTE_TOKENS;
    const bool v0 = t0 + g < T, v1 = t0 + g + 8 < T;
    const __nv_bfloat16* a0 = p.x + (size_t)(t0 + g) * moe::HIDDEN + 8 * q;
    const __nv_bfloat16* a1 = a0 + 8 * moe::HIDDEN;
    const __nv_bfloat16* b = p.router_w + (size_t)(grp * 8 + g) * moe::HIDDEN + 8 * q;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll 4
    for (unsigned k0 = 0; k0 < moe::HIDDEN; k0 += 32) {
      const uint4 ag = v0 ? warp_mma::ld_cg(a0 + k0) : zero, ah = v1 ? warp_mma::ld_cg(a1 + k0) : zero;
      warp_mma::mma_k32(acc, ag, ah, __ldg(reinterpret_cast<const uint4*>(b + k0)));
    }
    float* lrow = logits + (size_t)(t0 + g) * moe::EXPERTS + grp * 8 + 2 * q;
    if (v0) __stcg(reinterpret_cast<float2*>(lrow), make_float2(acc[0], acc[1]));
    if (v1) __stcg(reinterpret_cast<float2*>(lrow + 8 * moe::EXPERTS), make_float2(acc[2], acc[3]));
    __threadfence();
    __syncwarp();
    unsigned old = 0;
    if (lane == 0) old = moe::atom_acq_rel(sync + moe::BLOCKCNT + tile, 1);
    old = __shfl_sync(0xffffffffu, old, 0);
    if (old != GROUPS - 1) continue;
    // This warp completed the tile: select the experts of its tokens.
    if (lane == 0) sync[moe::BLOCKCNT + tile] = 0;  // every group has counted: zero for the next launch
    const unsigned n = min(moe::ROUTE_TOKENS, T - t0);
    for (unsigned i = 0; i < n; ++i) {
      const unsigned tok = t0 + i;
      const float4 l4 = __ldcg(reinterpret_cast<const float4*>(logits + (size_t)tok * moe::EXPERTS) + lane);
      unsigned e;
      float w;
      select(l4, lane, e, w);
      if (lane < moe::TOP_K) {
        const unsigned slot = tok * moe::TOP_K + lane;
        route_e[slot] = e;
        route_w[slot] = w;
        route_pos[slot] = atomicAdd(cur + moe::COUNTS + e, 1u);
      }
    }
    moe::signal(cur + moe::ROUTED, n, lane);
  }
}
