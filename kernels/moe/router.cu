// router.cu — owner R. Role: logits = x · W_rᵀ (f32), p = softmax(logits), top-k experts
// by p, weights = p_topk / Σ p_topk (or p_topk: fact renormalize). Work unit: one 16-token
// tile × all 128 expert slots (16 mma m16n8 tiles) over a k-range: the tile's K = hidden is split into KS ranges so that
// tiles × KS units fill the role's warps at small T (KS = 1 from T ≈ 16 × warps). With
// KS > 1 each unit adds its partial logits into the instance workspace `logits` (f32
// atomics; zero-kept) and the unit that completes the tile (counter in `sync`, reset by
// it) reads the sums and zeroes them for the next launch. The completing
// warp then selects in registers, four lanes per token (the mma accumulator layout: lane
// (g, q) holds 32 of token g's and of token g + 8's logits), appends each slot to its expert
// (atomic per-expert count = the slot's position) and releases the tile's tokens on counter
// ROUTED. No warp of this role ever waits; a warp without a unit warms the instruction cache
// for the routing code (below).
// A k-step's operands come by cp.async into a six-stage ring that the CTA's two router warps
// share (smem claim `wr`), five steps ahead of the MMAs: W_r's k16 slice (128 experts x 16 k,
// 4 KB), each warp loading half (64 experts), and each warp's 16 x rows (512 B). Both warps run
// the same k-steps on two tiles, with one named barrier (`ring`) a step. The phase is bound by
// what L2 delivers: W_r is read by every warp (512 KB a tile pair), so a slice serves two tiles
// (the router phase 19% shorter than with a ring per warp), and x's rows, from DRAM, come as
// far ahead as W_r's. Straight from global into registers ptxas kept about seven loads in
// flight and no step ahead.
// Reads the model's hidden, experts, top_k and renormalize (kernel facts): its tiles hold 128
// expert slots (a model with fewer leaves the rest out: W_r rows past `experts` load as zeros and
// their logits are -inf), lane q of a token's four takes choices q and q + 4 of top_k <= 8, and
// its k-split runs over any hidden it accepts. The facts fold at link time: a 128-expert, top-8,
// renormalizing model compiles to the code without those tests.
#define PL_COMPONENT moe_router
#include <pipelink.h>

#include <cuda_bf16.h>

#include "moe_shapes.h"
#include "router_common.h"
#include "warp_mma.h"

PL_DECLARE_FACT(top_k);
PL_DECLARE_FACT(hidden);
PL_DECLARE_FACT(experts);
PL_DECLARE_FACT_BOOL(renormalize);
PL_DECLARE_FACT_BOOL(biases);
PL_DECLARE_WORKSPACE(sync);
PL_DECLARE_WORKSPACE(route);
PL_DECLARE_WORKSPACE(logits);
PL_DECLARE_SMEM(wr);
PL_DECLARE_BARRIER(ring);

namespace moe_router {
struct Params {  // [params]: x, router_w, router_b = "ptr", t = "u32"
  const __nv_bfloat16* x;
  const __nv_bfloat16* router_w;
  const __nv_bfloat16* router_b;  // [experts] logit biases where the model has them (fact biases), else unread
  unsigned t;
};
constexpr unsigned EXPERTS = moe::EXPERT_SLOTS;  // expert slots of a tile ([fact.experts] accept: up to 128)
constexpr unsigned MAX_TOP_K = 8;                // lane q takes choices q and q + 4 ([fact.top_k] accept)
constexpr unsigned NT = EXPERTS / 8;             // n8 tiles per unit
constexpr unsigned MAX_SPLITS = 64;        // k-ranges down to one k32 step (T = 1: 64 units at hidden 2048)
constexpr unsigned TILE_FLOATS = moe::ROUTE_TOKENS * EXPERTS;
constexpr unsigned KSTEP = 16;                              // k per step: one mma k16
constexpr unsigned W_BYTES = EXPERTS * KSTEP * 2;          // W_r[0 .. 128)[k0 .. k0 + 16): 32 B a row
constexpr unsigned X_BYTES = moe::ROUTE_TOKENS * KSTEP * 2;  // a tile's 16 x rows [k0 .. k0 + 16)
constexpr unsigned STAGE_BYTES = W_BYTES + 2 * X_BYTES;     // the slice, then each warp's x rows
constexpr unsigned STAGES = 6;                              // [smem.wr]: STAGES x STAGE_BYTES, the CTA's
constexpr unsigned AHEAD = STAGES - 1;                      // steps in flight

using router_common::commit;
using router_common::fill_x;
using router_common::lds64;
using router_common::splits_for;
// Warp half's share of W_r's k16 slice: experts [64 half, 64 half + 64) of the tile's 128.
__device__ __forceinline__ void fill_half(uint32_t dst, const __nv_bfloat16* w, unsigned hidden, unsigned experts,
                                          unsigned k, unsigned half, unsigned lane) {
  router_common::fill_half<EXPERTS>(dst, w, hidden, experts, k, half, lane);
}

// Logits of one tile in the accumulator layout: float2 (n8 tile j, half h) of lane l at
// (j * 2 + h) * 64 + 2 l, so a unit's 2048 floats are added and read back coalesced.
__device__ __forceinline__ float2* part(float* logits, unsigned tile, unsigned j, unsigned h, unsigned lane) {
  return reinterpret_cast<float2*>(logits + (size_t)tile * TILE_FLOATS + (j * 2 + h) * 64 + 2 * lane);
}

// A probability and its expert as one sortable word: p >= 0, so its float bits order like
// unsigned; the low 8 bits (2^-15 of p) make room for the expert, lower experts win ties,
// and the word is odd, so 0 marks a taken entry.
__device__ __forceinline__ unsigned key_of(float p, unsigned expert) {
  return (__float_as_uint(p) & ~0xFFu) | (127u - expert) << 1 | 1u;
}
__device__ __forceinline__ float p_of(unsigned key) { return __uint_as_float(key & ~0xFFu); }
__device__ __forceinline__ unsigned expert_of(unsigned key) { return 127u - (key >> 1 & 0x7Fu); }

// Top-k of token g of the tile (the half-0 columns of acc), held by the 4 lanes q = 0..3 of a
// group: acc[j][i] is expert 8 j + 2 q + i. Softmax over the model's experts (slots past
// `experts` count as -inf), then top_k rounds of a max over sortable words. Each exp is taken
// once and every reduction runs as 4 independent chains. Lane q gets choices k = q and q + 4
// (expert, weight: renormalized over the top_k when `renorm`, else the softmax probability).
constexpr unsigned CHAINS = 4;
// `bias` (the model's router biases, or null): added to the logits first.
__device__ __forceinline__ void select(const float (&acc_in)[NT][4], unsigned q, unsigned experts, unsigned top_k,
                                       bool renorm, const __nv_bfloat16* bias, unsigned (&expert)[2],
                                       float (&weight)[2]) {
  unsigned key[NT][2];
  float c[CHAINS];
  float acc[NT][2];
#pragma unroll
  for (unsigned j = 0; j < NT; ++j)
#pragma unroll
    for (unsigned i = 0; i < 2; ++i) {
      const unsigned e = 8 * j + 2 * q + i;
      const bool real = experts >= EXPERTS || e < experts;
      acc[j][i] = real ? acc_in[j][i] + (bias ? __bfloat162float(bias[e]) : 0.f) : -INFINITY;
    }
#pragma unroll
  for (unsigned j = 0; j < CHAINS; ++j) c[j] = fmaxf(acc[j][0], acc[j][1]);
#pragma unroll
  for (unsigned j = CHAINS; j < NT; ++j) c[j % CHAINS] = fmaxf(c[j % CHAINS], fmaxf(acc[j][0], acc[j][1]));
  float m = fmaxf(fmaxf(c[0], c[1]), fmaxf(c[2], c[3]));
  m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
  m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
#pragma unroll
  for (unsigned j = 0; j < CHAINS; ++j) c[j] = 0.f;
#pragma unroll
  for (unsigned j = 0; j < NT; ++j) {
    const float e0 = expf(acc[j][0] - m), e1 = expf(acc[j][1] - m);
    key[j][0] = __float_as_uint(e0), key[j][1] = __float_as_uint(e1);  // p before the 1 / sum
    c[j % CHAINS] += e0 + e1;
  }
  float sum = (c[0] + c[1]) + (c[2] + c[3]);
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  const float inv = 1.f / sum;
#pragma unroll
  for (unsigned j = 0; j < NT; ++j)
#pragma unroll
    for (unsigned i = 0; i < 2; ++i) key[j][i] = key_of(__uint_as_float(key[j][i]) * inv, 8 * j + 2 * q + i);
  float chosen = 0.f, mine0 = 0.f, mine1 = 0.f;
#pragma unroll 1
  for (unsigned k = 0; k < top_k; ++k) {
    unsigned b[CHAINS];
#pragma unroll
    for (unsigned j = 0; j < CHAINS; ++j) b[j] = max(key[j][0], key[j][1]);
#pragma unroll
    for (unsigned j = CHAINS; j < NT; ++j) b[j % CHAINS] = max(b[j % CHAINS], max(key[j][0], key[j][1]));
    unsigned best = max(max(b[0], b[1]), max(b[2], b[3]));
    best = max(best, __shfl_xor_sync(0xffffffffu, best, 1));
    best = max(best, __shfl_xor_sync(0xffffffffu, best, 2));
#pragma unroll
    for (unsigned j = 0; j < NT; ++j)
#pragma unroll
      for (unsigned i = 0; i < 2; ++i) key[j][i] = key[j][i] == best ? 0u : key[j][i];
    chosen += p_of(best);
    if (k == q) expert[0] = expert_of(best), mine0 = p_of(best);  // (constant indices: no local memory)
    if (k == q + 4) expert[1] = expert_of(best), mine1 = p_of(best);
  }
  weight[0] = renorm ? mine0 / chosen : mine0, weight[1] = renorm ? mine1 / chosen : mine1;
}

// Select the experts of token t0 + g (acc's half-0 columns) and, if it is < T, append its
// slots (lane q: choices q and q + 4, those below top_k).
__device__ __forceinline__ void route_token(const float (&acc)[NT][4], unsigned t0, unsigned T, unsigned g, unsigned q,
                                            unsigned experts, unsigned top_k, bool renorm, const __nv_bfloat16* bias,
                                            unsigned* counts, unsigned* route_e, float* route_w, unsigned* route_pos) {
  unsigned e[2] = {0, 0};
  float w[2];
  select(acc, q, experts, top_k, renorm, bias, e, w);
  const unsigned tok = t0 + g;
  if (tok >= T) return;
  const unsigned slot = tok * top_k + q;
  if (top_k >= MAX_TOP_K) {  // (a fact: the top-8 code as it was)
    const unsigned pos0 = atomicAdd(counts + e[0], 1u), pos1 = atomicAdd(counts + e[1], 1u);
    route_e[slot] = e[0], route_w[slot] = w[0], route_pos[slot] = pos0;
    route_e[slot + 4] = e[1], route_w[slot + 4] = w[1], route_pos[slot + 4] = pos1;
    return;
  }
  if (q < top_k) route_e[slot] = e[0], route_w[slot] = w[0], route_pos[slot] = atomicAdd(counts + e[0], 1u);
  if (q + 4 < top_k) route_e[slot + 4] = e[1], route_w[slot + 4] = w[1], route_pos[slot + 4] = atomicAdd(counts + e[1], 1u);
}
}  // namespace moe_router

PL_OWN_FACT(router_stages, moe_router::STAGES);  // sizes [smem.wr]

PL_ENTRY(run) {
  using namespace moe_router;
  const Params& p = PL_PARAMS(Params);
  const unsigned lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const unsigned warps = PL_WARPS();
  const unsigned nw = gridDim.x * warps;
  unsigned* sync = static_cast<unsigned*>(PL_WORKSPACE(sync));
  unsigned* cur = router_common::enter_launch(sync, nw, lane, moe::chunks(PL_FACT(experts)));
  const unsigned hidden = PL_FACT(hidden), experts = PL_FACT(experts), top_k = PL_FACT(top_k);
  const bool renorm = PL_FACT(renormalize);
  const __nv_bfloat16* bias = PL_FACT(biases) ? p.router_b : nullptr;  // (a fact: null folds the adds away)
  // Outside the accepted values (L-FACT-ACCEPT stops such a link; this folds away).
  if (top_k > MAX_TOP_K || top_k > experts || experts > EXPERTS) __trap();
  const unsigned T = p.t, S = T * top_k;
  unsigned* route_e = static_cast<unsigned*>(PL_WORKSPACE(route));
  float* route_w = reinterpret_cast<float*>(route_e + S);
  unsigned* route_pos = route_e + 2 * S;
  float* logits = static_cast<float*>(PL_WORKSPACE(logits));

  // Work units: (tile pair, k-range) per CTA, warp h of the CTA taking tile 2 pair + h. The K =
  // hidden of a pair is split into ks ranges so that units fill the CTAs at small T (ks = 1 from
  // T ~ 32 x CTAs). A warp whose tile is past T runs the k-steps on zero rows (it loads its half
  // of the slices for its partner) and routes nothing.
  const unsigned half = threadIdx.x / 32 - PL_WARP_BEGIN();  // 0 or 1 (the role has 2 warps)
  const unsigned tiles = moe::ceil_div(T, moe::ROUTE_TOKENS), pairs = moe::ceil_div(tiles, 2u);
  // A k-range is whole k32 steps (the rotation below), so ks divides hidden / 32: the largest
  // power of two that does, at most MAX_SPLITS (a fact: 64 for every hidden of whole 2048s).
  const unsigned k32 = hidden / 32, max_splits = min(MAX_SPLITS, k32 & (0u - k32));
  const unsigned ks = splits_for(pairs, gridDim.x, max_splits), units = pairs * ks;
  const unsigned krange = hidden / ks, steps = krange / KSTEP;  // steps >= 2 (krange >= 32)
  const auto tile_of = [&](unsigned v) { return v / ks * 2 + half; };
  // x comes from DRAM once; router_w stays in L2. Each k-step waits on both, so the warp
  // asks L2 for the x lines of its tile of unit v ahead of its k-loop (the next unit's while it works).
  const auto prefetch_x = [&](unsigned v) {
    if (v >= units || tile_of(v) >= tiles) return;
    const unsigned lines = moe::ceil_div(krange * 2, 128);  // 128 B lines per token
    const unsigned t0 = tile_of(v) * moe::ROUTE_TOKENS;
    for (unsigned i = lane; i < moe::ROUTE_TOKENS * lines; i += 32) {
      if (t0 + i / lines >= T) break;
      const char* line = reinterpret_cast<const char*>(p.x + (size_t)(t0 + i / lines) * hidden + v % ks * krange);
      asm volatile("prefetch.global.L2 [%0];" ::"l"(line + i % lines * 128));
    }
  };
  const auto ring_sync = [&]() { pl::named_barrier_sync(PL_BARRIER(ring), 64); };
  const uint32_t ring = pl::smem_addr(PL_SMEM_PTR(wr));
  // Each CTA walks its k-range from its own k32 step on: CTAs that ran in step would all ask
  // L2 for the same slice of W_r at once. A power-of-two hidden (a fact: the test folds away)
  // rotates by masks, any other by one compare.
  const bool pow2 = (hidden & (hidden - 1)) == 0;
  unsigned rot = pow2 ? blockIdx.x * 32 & (krange - 1) : blockIdx.x * 32 % krange;
  asm("" : "+r"(rot));  // opaque, as in the build that was measured
  const auto kat = [&](unsigned k0) {
    const unsigned k = k0 + rot;
    return pow2 ? k & (krange - 1) : k >= krange ? k - krange : k;
  };
  // The routing below runs once per tile, in one warp: from a cold instruction cache it took
  // ~6 us per pass (moe_step_trace), from a warm one ~2. So a warp that has routed no tile
  // when it has no more makes one dry pass through the same code (no token: no side effect),
  // which leaves it in its SM's instruction cache for the finishers.
  bool warm = false;
  prefetch_x(blockIdx.x);
  for (unsigned u = blockIdx.x;; u += gridDim.x) {
    const bool have = u < units;
    if (!have && warm) break;
    float acc[NT][4];
#pragma unroll
    for (unsigned j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    const unsigned tile = tile_of(u), split = u % ks, t0 = tile * moe::ROUTE_TOKENS;
    const bool mine = have && tile < tiles;  // this warp has a tile in the unit
    if (have) {  // (uniform across the CTA's two warps: the ring's barriers)
      prefetch_x(u + gridDim.x);
      const unsigned k_begin = split * krange;
      ring_sync();  // both warps are done with the last unit's stages
      // One cp.async group a step (empty past the range), so step n's is always AHEAD - 1
      // groups from the newest at its wait. A step's stage: the W_r slice, then each warp's x rows.
      const uint32_t xpart = W_BYTES + half * X_BYTES;
      const auto fill = [&](unsigned i) {
        const unsigned k = k_begin + kat(i * KSTEP);
        const uint32_t st = ring + i % STAGES * STAGE_BYTES;
        fill_half(st, p.router_w, hidden, experts, k, half, lane);
        fill_x(st + xpart, p.x, hidden, t0, mine ? T : 0u, k, lane);
      };
#pragma unroll 1
      for (unsigned i = 0; i < AHEAD; ++i) {
        if (i < steps) fill(i);
        commit();
      }
#pragma unroll 1
      for (unsigned n = 0; n < steps; ++n) {
        asm volatile("cp.async.wait_group %0;" ::"n"(AHEAD - 1) : "memory");
        // Both warps' parts of step n's stage have landed, and both warps are done with step
        // n - 1: its stage takes step n + AHEAD's.
        ring_sync();
        if (n + AHEAD < steps) fill(n + AHEAD);
        commit();
        // Lane (g, q) reads x rows g and g + 8, bytes [8 q, 8 q + 8), and W_r row 8 j + g, the
        // same bytes: k0 + 4q .. (the permuted k order of warp_mma.h) of n8 tile j.
        const uint32_t st = ring + n % STAGES * STAGE_BYTES;
        const uint2 xg = lds64(st + xpart + g * 32 + q * 8), xh = lds64(st + xpart + (g + 8) * 32 + q * 8);
#pragma unroll
        for (unsigned j = 0; j < NT; ++j) {
          const uint2 b = lds64(st + (j * 8 + g) * 32 + q * 8);
          warp_mma::mma16816(acc[j], xg.x, xh.x, xg.y, xh.y, b.x, b.y);
        }
      }
      if (mine && ks > 1) {  // add the partial sums; the tile's last unit takes them
#pragma unroll
        for (unsigned j = 0; j < NT; ++j) {
          atomicAdd(part(logits, tile, j, 0, lane), make_float2(acc[j][0], acc[j][1]));
          atomicAdd(part(logits, tile, j, 1, lane), make_float2(acc[j][2], acc[j][3]));
        }
        if (!router_common::finishes_tile(sync, tile, ks, lane, moe::chunks(experts))) continue;
#pragma unroll
        for (unsigned j = 0; j < NT; ++j) {
          const float2 lo = __ldcg(part(logits, tile, j, 0, lane)), hi = __ldcg(part(logits, tile, j, 1, lane));
          acc[j][0] = lo.x, acc[j][1] = lo.y, acc[j][2] = hi.x, acc[j][3] = hi.y;
        }
#pragma unroll
        for (unsigned j = 0; j < NT; ++j) {  // zero-kept: the next launch adds onto zeros
          __stcg(part(logits, tile, j, 0, lane), make_float2(0.f, 0.f));
          __stcg(part(logits, tile, j, 1, lane), make_float2(0.f, 0.f));
        }
      }
    }
    if (!mine && warm) continue;  // nothing to route, and the code is warm
    if (mine) moe::stamp(sync, moe::ROUTER_SUMMED, lane);
    // The tile's finisher routes its tokens t0 + g, then (if any) t0 + g + 8 (moved into the
    // half-0 columns), through one copy of the code; a dry pass routes no token.
    const unsigned r0 = mine ? t0 : 0u, live = mine ? T : 0u;  // live: tokens a pass routes
#pragma unroll 1
    for (unsigned h = 0; h < (live > r0 + 8 ? 2u : 1u); ++h) {
      route_token(acc, r0 + 8 * h, live, g, q, experts, top_k, renorm, bias, cur + moe::COUNTS, route_e, route_w,
                  route_pos);
#pragma unroll
      for (unsigned j = 0; j < NT; ++j) acc[j][0] = acc[j][2], acc[j][1] = acc[j][3];  // tokens + 8 next
    }
    warm = true;
    if (!mine) continue;
    moe::stamp(sync, moe::ROUTER_ROUTED, lane);
    moe::signal(cur + moe::ROUTED, min(moe::ROUTE_TOKENS, T - t0), lane);
    moe::stamp(sync, moe::ROUTER_SIGNALLED, lane);
  }
  moe::stamp(sync, moe::ROUTER_END, lane);
}
