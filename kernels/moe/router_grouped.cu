// router_grouped.cu — owner R2: DeepSeek-V3's routing (noaux_tc) as a router package with
// moe_router's interface. s = sigmoid(x · W_rᵀ) in f32; experts are chosen by the biased score
// s + score_bias: the experts fall into `groups` groups, a group's score is the sum of its two
// best biased scores, only the `topk_groups` best groups' experts may be chosen, and of those the
// top_k by biased score; their weights are the unbiased s, renormalised over the top_k (fact
// renormalize) and times route_scale (the model's routed_scaling_factor, a parameter).
//
// Work unit: one 16-token tile × up to 256 expert slots over a k-range, in one CTA: warp h of
// the role's two computes slots [128 h, 128 h + 128) with mma m16n8k16 (the accumulators of
// router.cu's tile), from a ring of k16 slices of W_r (each warp loading its 128 rows) and the
// tile's x rows (warp 0 loading them). Both warps store their partial logits into the instance
// workspace `logits` (added with f32 atomics when the tile's K is split over several units); the
// warp that completes the tile (counter in `sync`, 2 · splits arrivals) routes its 16 tokens,
// a warp per token: lane l holds slots 8 l .. 8 l + 7, so a group of experts / groups slots is
// whole lanes (experts a multiple of 64, groups <= 8: accept). It appends each slot to its expert
// (atomic per-expert count = the slot's position) and releases the tile's tokens on ROUTED,
// as router.cu does, so dispatch, expert and combine take either router unchanged.
#define PL_COMPONENT moe_router
#include <pipelink.h>

#include <cuda_bf16.h>

#include "moe_shapes.h"
#include "router_common.h"
#include "warp_mma.h"

PL_DECLARE_FACT(top_k);
PL_DECLARE_FACT(hidden);
PL_DECLARE_FACT(experts);
PL_DECLARE_FACT(groups);
PL_DECLARE_FACT(topk_groups);
PL_DECLARE_FACT_BOOL(renormalize);
PL_DECLARE_WORKSPACE(sync);
PL_DECLARE_WORKSPACE(route);
PL_DECLARE_WORKSPACE(logits);
PL_DECLARE_SMEM(wr);
PL_DECLARE_BARRIER(ring);

namespace moe_router_grouped {
struct Params {  // [params]: x, router_w, score_bias = "ptr", route_scale = "f32", t = "u32"
  const __nv_bfloat16* x;
  const __nv_bfloat16* router_w;
  const float* score_bias;  // [experts] f32: the score-correction bias (e_score_correction_bias)
  float route_scale;        // routed_scaling_factor
  unsigned t;
};
constexpr unsigned SLOTS = 256;                // expert slots of a tile ([fact.experts] accept)
constexpr unsigned WARP_SLOTS = SLOTS / 2;     // a warp's half of them
constexpr unsigned LANE_SLOTS = SLOTS / 32;    // a lane's slots when it routes a token
constexpr unsigned MAX_TOP_K = 8;              // lane k keeps choice k ([fact.top_k] accept)
constexpr unsigned NT = WARP_SLOTS / 8;        // n8 tiles of a warp
constexpr unsigned MAX_SPLITS = 64;
constexpr unsigned TILE_FLOATS = moe::ROUTE_TOKENS * SLOTS;
constexpr unsigned KSTEP = 16;
constexpr unsigned W_BYTES = SLOTS * KSTEP * 2;             // W_r[0 .. 256)[k0 .. k0 + 16)
constexpr unsigned X_BYTES = moe::ROUTE_TOKENS * KSTEP * 2;  // the tile's 16 x rows [k0 .. k0 + 16)
constexpr unsigned STAGE_BYTES = W_BYTES + X_BYTES;
constexpr unsigned STAGES = 3;  // [smem.wr]: the two routers' rings fit beside the expert's claims
constexpr unsigned AHEAD = STAGES - 1;

// A tile's logits in the workspace: warp half h's n8 tile j, token half th (tokens g or g + 8),
// lane l's float2 at h · 2048 + (j · 2 + th) · 64 + 2 l. So slot e of token t (g = t % 8,
// th = t / 8) sits at (e / 128) · 2048 + (e % 128 / 8 · 2 + th) · 64 + 8 g + e % 8, and a lane's
// 8 slots of one token are 32 contiguous bytes.
__device__ __forceinline__ float2* part(float* logits, unsigned tile, unsigned half, unsigned j, unsigned th,
                                        unsigned lane) {
  return reinterpret_cast<float2*>(logits + (size_t)tile * TILE_FLOATS + half * 2048 + (j * 2 + th) * 64 + 2 * lane);
}
__device__ __forceinline__ float* token_slots(float* logits, unsigned tile, unsigned token, unsigned lane) {
  const unsigned half = lane / 16, j = lane % 16;
  return logits + (size_t)tile * TILE_FLOATS + half * 2048 + (j * 2 + token / 8) * 64 + 8 * (token % 8);
}

// A float's bits as an unsigned that orders like the float (negative values too); the low 8
// bits then hold 255 - slot, so lower slots win ties and no key of a finite score is 0.
__device__ __forceinline__ unsigned key_of(float v, unsigned slot) {
  const unsigned b = __float_as_uint(v);
  const unsigned ordered = b & 0x80000000u ? ~b : b | 0x80000000u;
  return (ordered & ~0xFFu) | (255u - slot);
}
__device__ __forceinline__ unsigned slot_of(unsigned key) { return 255u - (key & 0xFFu); }

// Route token `tok` (< T) from its logits (lane l: slots 8 l .. 8 l + 7 in `lg`); lane k < top_k
// writes choice k.
struct Choice {
  unsigned expert;
  float score;
};
__device__ __forceinline__ void route_token(const float (&lg)[LANE_SLOTS], const float (&bias)[LANE_SLOTS],
                                            unsigned tok, unsigned lane, unsigned experts, unsigned groups,
                                            unsigned topk_groups, unsigned top_k, bool renorm, float scale,
                                            unsigned* counts, unsigned* route_e, float* route_w,
                                            unsigned* route_pos) {
  const unsigned lanes = experts / LANE_SLOTS;  // lanes holding real slots (experts % 64 == 0)
  const bool real = lane < lanes;
  float s[LANE_SLOTS], biased[LANE_SLOTS];
#pragma unroll
  for (unsigned m = 0; m < LANE_SLOTS; ++m) {
    s[m] = 1.f / (1.f + __expf(-lg[m]));
    biased[m] = s[m] + bias[m];
  }
  // The group's score: the sum of its two best biased scores (the lane's two best, merged over
  // the group's lanes, lanes_per_group a power of two: butterfly within the group).
  bool kept = real;
  if (groups > 1) {  // (a fact: one group is no limit)
    float b1 = -INFINITY, b2 = -INFINITY;
#pragma unroll
    for (unsigned m = 0; m < LANE_SLOTS; ++m) {
      const float v = biased[m];
      b2 = fmaxf(b2, fminf(b1, v));
      b1 = fmaxf(b1, v);
    }
    const unsigned per_group = lanes / groups;
    for (unsigned o = 1; o < per_group; o *= 2) {
      const float o1 = __shfl_xor_sync(0xffffffffu, b1, o), o2 = __shfl_xor_sync(0xffffffffu, b2, o);
      b2 = fmaxf(fmaxf(b2, o2), fminf(b1, o1));
      b1 = fmaxf(b1, o1);
    }
    const float score = b1 + b2;
    const unsigned group = lane / per_group;
    unsigned better = 0;  // groups ranked above this lane's (ties: the lower group)
    for (unsigned j = 0; j < groups; ++j) {
      const float other = __shfl_sync(0xffffffffu, score, j * per_group);
      better += other > score || (other == score && j < group);
    }
    kept = real && better < topk_groups;
  }
  unsigned key[LANE_SLOTS];
#pragma unroll
  for (unsigned m = 0; m < LANE_SLOTS; ++m) key[m] = kept ? key_of(biased[m], LANE_SLOTS * lane + m) : 0u;
  Choice mine = {0u, 0.f};
  float chosen = 0.f;
#pragma unroll 1
  for (unsigned k = 0; k < top_k; ++k) {
    unsigned best = 0;
#pragma unroll
    for (unsigned m = 0; m < LANE_SLOTS; ++m) best = max(best, key[m]);
    best = __reduce_max_sync(0xffffffffu, best);
    const unsigned e = slot_of(best);
    float taken = 0.f;
#pragma unroll
    for (unsigned m = 0; m < LANE_SLOTS; ++m)
      if (key[m] == best) taken = s[m], key[m] = 0u;  // (one lane, one slot)
    taken = __shfl_sync(0xffffffffu, taken, e / LANE_SLOTS);
    chosen += taken;
    if (lane == k) mine = {e, taken};
  }
  if (lane >= top_k) return;
  const unsigned slot = tok * top_k + lane;
  route_e[slot] = mine.expert;
  route_w[slot] = (renorm ? mine.score / chosen : mine.score) * scale;
  route_pos[slot] = atomicAdd(counts + mine.expert, 1u);
}
}  // namespace moe_router_grouped

PL_OWN_FACT(router_stages, moe_router_grouped::STAGES);  // sizes [smem.wr]

PL_ENTRY(run) {
  using namespace moe_router_grouped;
  const Params& p = PL_PARAMS(Params);
  const unsigned lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const unsigned nw = gridDim.x * PL_WARPS();
  unsigned* sync = static_cast<unsigned*>(PL_WORKSPACE(sync));
  unsigned* cur = router_common::enter_launch(sync, nw, lane, moe::chunks(PL_FACT(experts)));
  const unsigned hidden = PL_FACT(hidden), experts = PL_FACT(experts), top_k = PL_FACT(top_k);
  const unsigned groups = PL_FACT(groups), topk_groups = PL_FACT(topk_groups);
  const bool renorm = PL_FACT(renormalize);
  // Outside the accepted values (L-FACT-ACCEPT stops such a link; this folds away).
  if (top_k > MAX_TOP_K || experts > SLOTS || experts % 64 || topk_groups > groups ||
      top_k > experts / groups * topk_groups)
    __trap();
  const unsigned T = p.t, S = T * top_k;
  unsigned* route_e = static_cast<unsigned*>(PL_WORKSPACE(route));
  float* route_w = reinterpret_cast<float*>(route_e + S);
  unsigned* route_pos = route_e + 2 * S;
  float* logits = static_cast<float*>(PL_WORKSPACE(logits));
  const unsigned half = threadIdx.x / 32 - PL_WARP_BEGIN();  // 0 or 1 (the role has 2 warps)
  const unsigned tiles = moe::ceil_div(T, moe::ROUTE_TOKENS);
  const unsigned k32 = hidden / 32, max_splits = min(MAX_SPLITS, k32 & (0u - k32));
  const unsigned ks = router_common::splits_for(tiles, gridDim.x, max_splits), units = tiles * ks;
  const unsigned krange = hidden / ks, steps = krange / KSTEP;
  const auto ring_sync = [&]() { pl::named_barrier_sync(PL_BARRIER(ring), 64); };
  const uint32_t ring = pl::smem_addr(PL_SMEM_PTR(wr));
  // Each CTA walks its k-range from its own k32 step on (CTAs in step would ask L2 for the same
  // slice of W_r at once).
  const unsigned rot = blockIdx.x * 32 % krange;
  const auto kat = [&](unsigned k0) {
    const unsigned k = k0 + rot;
    return k >= krange ? k - krange : k;
  };
  // This lane's slots of the score-correction bias, for every token it routes.
  float bias[LANE_SLOTS];
#pragma unroll
  for (unsigned m = 0; m < LANE_SLOTS; ++m) {
    const unsigned e = LANE_SLOTS * lane + m;
    bias[m] = e < experts ? p.score_bias[e] : 0.f;
  }
#pragma unroll 1
  for (unsigned u = blockIdx.x; u < units; u += gridDim.x) {  // (uniform across the CTA's two warps)
    float acc[NT][4];
#pragma unroll
    for (unsigned j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    const unsigned tile = u / ks, split = u % ks, t0 = tile * moe::ROUTE_TOKENS, k_begin = split * krange;
    ring_sync();  // both warps are done with the last unit's stages
    const auto fill = [&](unsigned i) {
      const unsigned k = k_begin + kat(i * KSTEP);
      const uint32_t st = ring + i % STAGES * STAGE_BYTES;
      router_common::fill_half<SLOTS>(st, p.router_w, hidden, experts, k, 2 * half, lane);
      router_common::fill_half<SLOTS>(st, p.router_w, hidden, experts, k, 2 * half + 1, lane);
      if (half == 0) router_common::fill_x(st + W_BYTES, p.x, hidden, t0, T, k, lane);
    };
#pragma unroll 1
    for (unsigned i = 0; i < AHEAD; ++i) {
      if (i < steps) fill(i);
      router_common::commit();
    }
#pragma unroll 1
    for (unsigned n = 0; n < steps; ++n) {
      asm volatile("cp.async.wait_group %0;" ::"n"(AHEAD - 1) : "memory");
      ring_sync();  // step n's stage has landed (both warps' parts); step n - 1's is free
      if (n + AHEAD < steps) fill(n + AHEAD);
      router_common::commit();
      const uint32_t st = ring + n % STAGES * STAGE_BYTES;
      const uint2 xg = router_common::lds64(st + W_BYTES + g * 32 + q * 8);
      const uint2 xh = router_common::lds64(st + W_BYTES + (g + 8) * 32 + q * 8);
#pragma unroll
      for (unsigned j = 0; j < NT; ++j) {
        const uint2 b = router_common::lds64(st + (WARP_SLOTS * half + j * 8 + g) * 32 + q * 8);
        warp_mma::mma16816(acc[j], xg.x, xh.x, xg.y, xh.y, b.x, b.y);
      }
    }
    // Partial sums into the workspace (the tile's finisher zeroes it after reading, so the
    // next launch adds onto zeros whatever its split).
#pragma unroll
    for (unsigned j = 0; j < NT; ++j) {
      if (ks > 1) {
        atomicAdd(part(logits, tile, half, j, 0, lane), make_float2(acc[j][0], acc[j][1]));
        atomicAdd(part(logits, tile, half, j, 1, lane), make_float2(acc[j][2], acc[j][3]));
      } else {
        __stcg(part(logits, tile, half, j, 0, lane), make_float2(acc[j][0], acc[j][1]));
        __stcg(part(logits, tile, half, j, 1, lane), make_float2(acc[j][2], acc[j][3]));
      }
    }
    if (!router_common::finishes_tile(sync, tile, 2 * ks, lane, moe::chunks(experts))) continue;  // another warp finishes the tile
    moe::stamp(sync, moe::ROUTER_SUMMED, lane);
    const unsigned live = min(moe::ROUTE_TOKENS, T - t0);
#pragma unroll 1
    for (unsigned t = 0; t < live; ++t) {
      float* src = token_slots(logits, tile, t, lane);
      const float4 a = __ldcg(reinterpret_cast<const float4*>(src)), b = __ldcg(reinterpret_cast<const float4*>(src + 4));
      __stcg(reinterpret_cast<float4*>(src), make_float4(0.f, 0.f, 0.f, 0.f));
      __stcg(reinterpret_cast<float4*>(src + 4), make_float4(0.f, 0.f, 0.f, 0.f));
      const float lg[LANE_SLOTS] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
      route_token(lg, bias, t0 + t, lane, experts, groups, topk_groups, top_k, renorm, p.route_scale,
                  cur + moe::COUNTS, route_e, route_w, route_pos);
    }
    moe::stamp(sync, moe::ROUTER_ROUTED, lane);
    moe::signal(cur + moe::ROUTED, live, lane);
    moe::stamp(sync, moe::ROUTER_SIGNALLED, lane);
  }
  moe::stamp(sync, moe::ROUTER_END, lane);
}
