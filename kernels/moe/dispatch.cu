// dispatch.cu — owner D. Communication role: once every token is routed (counter ROUTED),
// it lays the slots out expert-contiguous (each expert's rows padded to whole tiles of the
// expert owner's block_m, so expert tiles never straddle experts), records each slot's row
// in `rows` and counts the row on the expert's READY counter (release), which the expert
// GEMMs wait on.
// One rank (world = 1): no row is copied. Each row's token goes into `xrow` (u32 per row) and
// the expert reads its A rows straight from x through it: the gather was a 4 KB store and a
// 4 KB reload per slot (537 MB each way at T = 16384), and it had to finish before any
// expert could start. One slot per lane; the lane's own release covers its two stores.
// Ranks (moe_shapes.h): experts are split evenly over `world` ranks; a slot whose expert lives
// on another rank is written through that rank's peer-mapped buffers: `peers` holds, per rank
// r, {xs base, sync base, ys base} (PEER_WORDS u64 each). With world > 1 this role's global
// warp 0 posts the rank's per-expert counts to every rank (the count exchange), every warp
// lays out from the counts of all ranks (the owner's rows of expert e: ranks in order,
// padded to block_m), gathers each slot's x row into the owner's `xs`, and the READY
// releases are system-scope.
#define PL_COMPONENT moe_dispatch
#include <pipelink.h>

#include <cuda_bf16.h>

#include "moe_shapes.h"
#include "warp_mma.h"

PL_DECLARE_FACT(top_k);
PL_DECLARE_FACT(block_m);
PL_DECLARE_FACT(hidden);
PL_DECLARE_FACT(experts);
PL_DECLARE_WORKSPACE(sync);
PL_DECLARE_WORKSPACE(route);
PL_DECLARE_WORKSPACE(rows);
PL_DECLARE_WORKSPACE(xs);
PL_DECLARE_WORKSPACE(xrow);

namespace moe_dispatch {
struct Params {  // [params]: x = "ptr", t, rank, world = "u32", peers = "ptr"
  const __nv_bfloat16* x;
  unsigned t, rank, world;
  const unsigned long long* peers;
};
}  // namespace moe_dispatch

namespace moe_dispatch {
// The role over C chunks of 128 experts' counters (moe_shapes.h).
template <unsigned C>
__device__ __forceinline__ void run_chunks(unsigned pl_inst, const void* pl_params) {
  const Params& p = PL_PARAMS(Params);
  const unsigned lane = threadIdx.x % 32;
  const unsigned warps = PL_WARPS();
  const unsigned gw = blockIdx.x * warps + (threadIdx.x / 32 - PL_WARP_BEGIN()), nw = gridDim.x * warps;
  const unsigned bm = PL_FACT(block_m), top_k = PL_FACT(top_k), hidden = PL_FACT(hidden), experts = PL_FACT(experts);
  if (experts > moe::EXPERT_SLOTS * C) __trap();  // the counters' lane layout (accept; folds away)
  unsigned* sync = static_cast<unsigned*>(PL_WORKSPACE(sync));
  bool last;
  unsigned gen;
  const unsigned set = moe::enter(sync, moe::DISPATCH, nw, lane, last, gen);
  if (last) moe::finish_launch(sync, moe::DISPATCH, set, C, moe::READY(C), moe::EXPERT_SLOTS * C, lane);
  unsigned* cur = sync + moe::SET(set, C);
  const unsigned T = p.t, S = T * top_k;
  const unsigned* route_e = static_cast<const unsigned*>(PL_WORKSPACE(route));
  const unsigned* route_pos = route_e + 2 * S;
  unsigned* rows = static_cast<unsigned*>(PL_WORKSPACE(rows));
  __nv_bfloat16* xs = static_cast<__nv_bfloat16*>(PL_WORKSPACE(xs));

  if (p.world == 1 && gw * 32 >= S) return;  // no slot for this warp: it need not poll ROUTED
  moe::wait_at_least(cur + moe::ROUTED, T);
  moe::stamp(sync, moe::DISPATCH_BEGIN, lane);
  unsigned padded[4 * C], first[4 * C], total;  // value 4 c + i: expert 128 c + 4 lane + i
  const unsigned world = p.world, per_rank = experts / world;
  if (world == 1) {
#pragma unroll
    for (unsigned c = 0; c < C; ++c)
#pragma unroll
      for (unsigned i = 0; i < 4; ++i)
        padded[4 * c + i] = moe::ceil_div(__ldcg(cur + moe::COUNTS + moe::EXPERT_SLOTS * c + 4 * lane + i), bm) * bm;
    moe::exclusive_scan<C>(padded, first, lane, total);
  } else {  // first[4 c + i]: this rank's first row of its expert on the expert's owner
    if (per_rank % 4 || per_rank * world != experts) __trap();  // whole lanes per rank (moe_ep.py: world | experts / 4)
    if (gw == 0) moe::post_counts<C>(cur, p.peers, set, gen + 1, p.rank, world, lane);
    unsigned tot[4 * C], below[4 * C];
    moe::gather_counts<C>(sync, set, gen + 1, p.rank, world, lane, tot, below);
#pragma unroll
    for (unsigned i = 0; i < 4 * C; ++i) padded[i] = moe::ceil_div(tot[i], bm) * bm;
    moe::exclusive_scan<C>(padded, first, lane, total);
    if constexpr (C == 1) {
      const unsigned lanes = per_rank / 4;  // lanes per owner (per_rank >= 16)
      const unsigned base = __shfl_sync(0xffffffffu, first[0], lane / lanes * lanes);
#pragma unroll
      for (unsigned i = 0; i < 4; ++i) first[i] += below[i] - base;
    } else {  // the owner's first expert's row, expert by expert (owners may span chunks)
      unsigned base[4 * C];
#pragma unroll
      for (unsigned j = 0; j < 4 * C; ++j)
        base[j] = moe::pick<C>(first, (moe::EXPERT_SLOTS * (j / 4) + 4 * lane + j % 4) / per_rank * per_rank);
#pragma unroll
      for (unsigned j = 0; j < 4 * C; ++j) first[j] += below[j] - base[j];
    }
  }

  if (world == 1) {  // one slot per lane: its row, the row's token, READY
    unsigned* xrow = static_cast<unsigned*>(PL_WORKSPACE(xrow));
    for (unsigned base = gw * 32; base < S; base += nw * 32) {  // (warp-uniform: pick shuffles)
      const unsigned slot = base + lane;
      const unsigned e = slot < S ? __ldcg(route_e + slot) : 0u;
      const unsigned rk = moe::pick<C>(first, e) + (slot < S ? __ldcg(route_pos + slot) : 0u);
      if (slot < S) {
        rows[slot] = rk;
        xrow[rk] = slot / top_k;
        moe::red_release(cur + moe::READY(C) + e, 1);
      }
    }
    moe::stamp(sync, moe::DISPATCH_END, lane);
    return;
  }
  // world > 1. One token per warp step: its x row is loaded once, CHUNK x 256 columns at a
  // time (a uint4 a lane per 256), and stored to its top_k rows (on their owners), then one
  // system-scope fence covers all of them before each slot's lane releases its expert's READY
  // counter. (hidden = 2048 is one chunk: the whole row is loaded once.)
  constexpr unsigned CHUNK = 8;
  const unsigned chunks = moe::ceil_div(hidden, 256);  // the last one part of a chunk where hidden % 256 != 0
  const bool whole = hidden % 256 == 0;                  // (a fact: folds away)
  for (unsigned tok = gw; tok < T; tok += nw) {
    const uint4* src = reinterpret_cast<const uint4*>(p.x + (size_t)tok * hidden);
    unsigned e = 0, row = 0;
    unsigned* ready = nullptr;
    for (unsigned c0 = 0; c0 < chunks; c0 += CHUNK) {
      uint4 v[CHUNK];
#pragma unroll
      for (unsigned j = 0; j < CHUNK; ++j)
        if (c0 + j < chunks && (whole || (c0 + j) * 256 + lane * 8 < hidden)) v[j] = __ldg(src + (c0 + j) * 32 + lane);
      if (c0 == 0 && lane < top_k) {
        const unsigned slot = tok * top_k + lane;
        e = __ldcg(route_e + slot);
        row = __ldcg(route_pos + slot);
      }
      const unsigned e4 = e;
      for (unsigned k = 0; k < top_k; ++k) {
        const unsigned ek = __shfl_sync(0xffffffffu, e4, k);
        const unsigned rk = moe::pick<C>(first, ek) + __shfl_sync(0xffffffffu, row, k);
        const unsigned owner = ek / per_rank;
        __nv_bfloat16* dst_xs = xs;
        unsigned* dst_sync = cur;
        if (owner != p.rank) {  // the expert's rank: its peer-mapped buffers
          dst_xs = reinterpret_cast<__nv_bfloat16*>(p.peers[moe::PEER_WORDS * owner + moe::PEER_XS]);
          dst_sync = reinterpret_cast<unsigned*>(p.peers[moe::PEER_WORDS * owner + moe::PEER_SYNC]) + moe::SET(set, C);
        }
        if (c0 == 0 && lane == k) rows[tok * top_k + k] = rk, ready = dst_sync + moe::READY(C) + ek;
        uint4* dst = reinterpret_cast<uint4*>(dst_xs + (size_t)rk * hidden);
#pragma unroll
        for (unsigned j = 0; j < CHUNK; ++j)
          if (c0 + j < chunks && (whole || (c0 + j) * 256 + lane * 8 < hidden)) __stcg(dst + (c0 + j) * 32 + lane, v[j]);
      }
    }
    moe::fence_sys();  // the owner may be another GPU
    __syncwarp();
    if (lane < top_k) moe::red_release_sys(ready, 1);
  }
  moe::stamp(sync, moe::DISPATCH_END, lane);
}
}  // namespace moe_dispatch

MOE_CHUNKED_ENTRY(moe_dispatch, run)
