// router.cu — owner R. Role: logits = x · W_rᵀ (f32), p = softmax(logits), top-8 experts
// by p, weights = p_topk / Σ p_topk. Work unit: one 16-token tile × all 128 experts (16
// mma m16n8 tiles) over a k-range: the tile's K = 2048 is split into KS ranges so that
// tiles × KS units fill the role's warps at small T (KS = 1 from T ≈ 16 × warps). With
// KS > 1 each unit adds its partial logits into the instance workspace `logits` (f32
// atomics; zero-kept) and the unit that completes the tile (counter in `sync`, reset by
// it) reads the sums and zeroes them for the next launch. The completing
// warp then selects in registers, four lanes per token (the mma accumulator layout: lane
// (g, q) holds 32 of token g's and of token g + 8's logits), appends each slot to its expert
// (atomic per-expert count = the slot's position) and releases the tile's tokens on counter
// ROUTED. No warp of this role ever waits; a warp without a unit warms the instruction cache
// for the routing code (below).
// W_r's k32 slice of a k-step (128 experts x 32 k, 8 KB) comes by cp.async into a two-stage ring
// of the warp's own (smem claim `wr`): the next step's slice loads while this one's MMAs run.
// Straight from global into registers (16 uint4 a lane, beside 64 accumulators) ptxas kept about
// seven loads in flight and no step ahead: two or three L2 round trips a step (the router phase
// at T = 4096: 128 -> 84 us, the step 3.4% faster; BENCHMARKS.md issue 9 run 13). A ring
// shared by the CTA's two warps (half a slice each, a barrier a step) did not link without
// spills: the kernel sits at 128 registers a thread.
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
PL_DECLARE_SMEM(wr);

namespace moe_router {
struct Params {  // [params]: x, router_w = "ptr", t = "u32"
  const __nv_bfloat16* x;
  const __nv_bfloat16* router_w;
  unsigned t;
};
constexpr unsigned NT = moe::EXPERTS / 8;  // n8 tiles per unit
constexpr unsigned MAX_SPLITS = 64;        // k-ranges down to one k32 step (T = 1: 64 units)
constexpr unsigned TILE_FLOATS = moe::ROUTE_TOKENS * moe::EXPERTS;
constexpr unsigned STAGE_BYTES = moe::EXPERTS * 32 * 2;  // W_r[0 .. 128)[k0 .. k0 + 32): 64 B a row
constexpr unsigned STAGES = 2;                           // the loop below alternates two (s ^= 1)
constexpr unsigned WARP_RING = STAGES * STAGE_BYTES;     // [smem.wr]: the role's 2 warps x this

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
  return v;
}
// W_r's k32 slice at k into the stage at dst: 512 chunks of 16 B (chunk c: row c / 4, 16 B
// column c % 4), lane l taking c = l + 32 i, 8 rows further each time; one cp.async group.
__device__ __forceinline__ void fill_stage(uint32_t dst, const __nv_bfloat16* w, unsigned k, unsigned lane) {
  const __nv_bfloat16* src = w + (size_t)(lane / 4) * moe::HIDDEN + k + 8 * (lane % 4);
  dst += lane * 16;
#pragma unroll 4
  for (unsigned i = 0; i < moe::EXPERTS / 8; ++i) cp_async16(dst + i * 512, src + (size_t)i * 8 * moe::HIDDEN);
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// Splits per tile: the largest power of two <= MAX_SPLITS with tiles * splits <= warps.
__device__ __forceinline__ unsigned splits_for(unsigned tiles, unsigned warps) {
  unsigned ks = 1;
  while (ks < MAX_SPLITS && tiles * ks * 2 <= warps) ks *= 2;
  return ks;
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
// group: acc[j][i] is expert 8 j + 2 q + i. Softmax, then k rounds of a max over sortable
// words. Each exp is taken once and every reduction runs as 4 independent chains.
// Lane q gets choices k = q and q + 4 (expert, renormalized weight).
constexpr unsigned CHAINS = 4;
__device__ __forceinline__ void select(const float (&acc)[NT][4], unsigned q, unsigned (&expert)[2], float (&weight)[2]) {
  unsigned key[NT][2];
  float c[CHAINS];
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
  for (unsigned k = 0; k < moe::TOP_K; ++k) {
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
  weight[0] = mine0 / chosen, weight[1] = mine1 / chosen;
}

// Select the experts of token t0 + g (acc's half-0 columns) and, if it is < T, append its
// slots (lane q: choices q and q + 4).
__device__ __forceinline__ void route_token(const float (&acc)[NT][4], unsigned t0, unsigned T, unsigned g, unsigned q,
                                            unsigned* counts, unsigned* route_e, float* route_w, unsigned* route_pos) {
  unsigned e[2];
  float w[2];
  select(acc, q, e, w);
  const unsigned tok = t0 + g;
  if (tok >= T) return;
  const unsigned pos0 = atomicAdd(counts + e[0], 1u), pos1 = atomicAdd(counts + e[1], 1u);
  const unsigned slot = tok * moe::TOP_K + q;
  route_e[slot] = e[0], route_w[slot] = w[0], route_pos[slot] = pos0;
  route_e[slot + 4] = e[1], route_w[slot + 4] = w[1], route_pos[slot + 4] = pos1;
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
  bool last;
  const unsigned set = moe::enter(sync, moe::ROUTER, nw, lane, last);
  if (last) moe::finish_launch(sync, moe::ROUTER, set, moe::ROUTED, moe::READY - moe::ROUTED, lane);
  unsigned* cur = sync + moe::SET(set);
  moe::stamp(sync, moe::KERNEL_BEGIN, lane);
  moe::stamp(sync, moe::ROUTER_BEGIN, lane);
  const unsigned T = p.t, S = T * moe::TOP_K;
  unsigned* route_e = static_cast<unsigned*>(PL_WORKSPACE(route));
  float* route_w = reinterpret_cast<float*>(route_e + S);
  unsigned* route_pos = route_e + 2 * S;
  float* logits = static_cast<float*>(PL_WORKSPACE(logits));

  const unsigned tiles = moe::ceil_div(T, moe::ROUTE_TOKENS), ks = splits_for(tiles, nw);
  const unsigned krange = moe::HIDDEN / ks;
  // x comes from DRAM once; router_w stays in L2. Each k-step waits on both, so the warp
  // asks L2 for the x lines of unit v ahead of its k-loop (the next unit's while it works).
  const auto prefetch_x = [&](unsigned v) {
    if (v >= tiles * ks) return;
    const unsigned lines = moe::ceil_div(krange * 2, 128);  // 128 B lines per token
    const unsigned t0 = v / ks * moe::ROUTE_TOKENS;
    for (unsigned i = lane; i < moe::ROUTE_TOKENS * lines; i += 32) {
      if (t0 + i / lines >= T) break;
      const char* line = reinterpret_cast<const char*>(p.x + (size_t)(t0 + i / lines) * moe::HIDDEN + v % ks * krange);
      asm volatile("prefetch.global.L2 [%0];" ::"l"(line + i % lines * 128));
    }
  };
  // Units go to the CTAs' first router warps before their second ones (rank: CTA-fastest),
  // so at small T a busy CTA has an idle router warp. The routing below runs once per tile,
  // in one warp: from a cold instruction cache it took ~6 us per pass (moe_step_trace), from
  // a warm one ~2. So a warp without a unit makes one dry pass through the same code (no
  // token: no side effect), which leaves it in its SM's instruction cache for the finisher.
  const unsigned rank = (threadIdx.x / 32 - PL_WARP_BEGIN()) * gridDim.x + blockIdx.x, units = tiles * ks;
  const unsigned end = rank < units ? units : rank + 1;  // a warp without a unit: one dry pass
  prefetch_x(rank);
  for (unsigned u = rank; u < end; u += nw) {
    float acc[NT][4];
#pragma unroll
    for (unsigned j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    if (u < units) {  // a unit: its slice of the tile's logits; the tile's last unit goes on
      const unsigned tile = u / ks, split = u % ks, t0 = tile * moe::ROUTE_TOKENS;
      prefetch_x(u + nw);
      const bool v0 = t0 + g < T, v1 = t0 + g + 8 < T;
      const unsigned k_begin = split * krange;
      const __nv_bfloat16* a0 = p.x + (size_t)(t0 + g) * moe::HIDDEN + 8 * q + k_begin;
      const __nv_bfloat16* a1 = a0 + 8 * moe::HIDDEN;
      const uint4 zero = make_uint4(0, 0, 0, 0);
      const uint32_t ring = pl::smem_addr(PL_SMEM_PTR(wr)) + (threadIdx.x / 32 - PL_WARP_BEGIN()) * WARP_RING;
      // Each warp walks its k-range from its own k32 step on (krange is a power of two): warps
      // that ran in step would all ask L2 for the same 8 KB of W_r at once.
      unsigned rot = rank * 32 & (krange - 1);
      asm("" : "+r"(rot));  // opaque, as measured (run 16); linked = control SASS holds without it too
      const auto kat = [&](unsigned k0) { return (k0 + rot) & (krange - 1); };
      fill_stage(ring, p.router_w, k_begin + kat(0), lane);
      uint4 ag = v0 ? warp_mma::ld_cg(a0 + kat(0)) : zero, ah = v1 ? warp_mma::ld_cg(a1 + kat(0)) : zero;
#pragma unroll 1
      for (unsigned k0 = 0, s = 0; k0 < krange; k0 += 32, s ^= 1u) {
        const uint4 ga = ag, ha = ah;
        if (k0 + 32 < krange) {  // the next step's slice and x while this one's MMAs run
          const unsigned kn = kat(k0 + 32);
          fill_stage(ring + (s ^ 1u) * STAGE_BYTES, p.router_w, k_begin + kn, lane);
          ag = v0 ? warp_mma::ld_cg(a0 + kn) : zero, ah = v1 ? warp_mma::ld_cg(a1 + kn) : zero;
          asm volatile("cp.async.wait_group 1;" ::: "memory");
        } else {
          asm volatile("cp.async.wait_group 0;" ::: "memory");
        }
        __syncwarp();  // every lane's chunks of stage s have landed
        // Lane (g, q) reads row 8 j + g, bytes [16 q, 16 q + 16): B[col g][k0 + 8q ..) of n8 tile j.
        const uint32_t st = ring + s * STAGE_BYTES + g * 64 + q * 16;
#pragma unroll
        for (unsigned j = 0; j < NT; ++j) warp_mma::mma_k32(acc[j], ga, ha, lds128(st + j * 8 * 64));
        __syncwarp();  // every lane is done with stage s before the next step refills it
      }
      if (ks > 1) {  // add the partial sums; the tile's last unit takes them
#pragma unroll
        for (unsigned j = 0; j < NT; ++j) {
          atomicAdd(part(logits, tile, j, 0, lane), make_float2(acc[j][0], acc[j][1]));
          atomicAdd(part(logits, tile, j, 1, lane), make_float2(acc[j][2], acc[j][3]));
        }
        __threadfence();
        __syncwarp();
        unsigned old = 0;
        if (lane == 0) old = moe::atom_acq_rel(sync + moe::BLOCKCNT + tile, 1);
        old = __shfl_sync(0xffffffffu, old, 0);
        if (old != ks - 1) continue;
        if (lane == 0) sync[moe::BLOCKCNT + tile] = 0;  // every split has counted: zero for the next launch
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
    const bool dry = u >= units;
    if (!dry) moe::stamp(sync, moe::ROUTER_SUMMED, lane);
    // The tile's finisher routes its tokens t0 + g, then (if any) t0 + g + 8 (moved into the
    // half-0 columns), through one copy of the code; a dry pass routes no token.
    const unsigned t0 = dry ? 0u : u / ks * moe::ROUTE_TOKENS, live = dry ? 0u : T;  // live: tokens a pass routes
#pragma unroll 1
    for (unsigned h = 0; h < (live > t0 + 8 ? 2u : 1u); ++h) {
      route_token(acc, t0 + 8 * h, live, g, q, cur + moe::COUNTS, route_e, route_w, route_pos);
#pragma unroll
      for (unsigned j = 0; j < NT; ++j) acc[j][0] = acc[j][2], acc[j][1] = acc[j][3];  // tokens + 8 next
    }
    if (dry) break;
    moe::stamp(sync, moe::ROUTER_ROUTED, lane);
    moe::signal(cur + moe::ROUTED, min(moe::ROUTE_TOKENS, T - t0), lane);
    moe::stamp(sync, moe::ROUTER_SIGNALLED, lane);
  }
  moe::stamp(sync, moe::ROUTER_END, lane);
}
