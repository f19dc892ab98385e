// moe_shapes.h — what the four MoE owners (router, dispatch, expert, combine) agree on: the
// layout of the kernel-scope workspaces they exchange data through and the readiness-counter
// protocol (each owner also states every workspace in its contract; the linker checks the
// declarations agree, L-WORKSPACE). The model's shape is not here: hidden, inter (the expert's
// intermediate size), experts and top_k are facts the kernel file owns (kernels/moe_models.bzl),
// read by each owner through its handles and accepted where its code is limited.
//
// Workspaces (scope = "kernel", one buffer per name; S = t * top_k slots, slot = token * top_k + k):
//   sync   u32 counters (layout below)                      router, dispatch, expert, combine
//   route  u32 expert[S], f32 weight[S], u32 pos[S]        router -> dispatch, combine
//   rows   u32 row[S]: the slot's row in xs/ys             dispatch -> combine
//   xrow   u32 [S + 128 * block_m]: each row's token       dispatch -> expert (world = 1: the
//          expert reads its rows from x through it; nothing is copied)
//   xs     bf16 [S + 128 * block_m, hidden] gathered x rows dispatch -> expert (world > 1 only)
//   hs     bf16 [same rows, inter]  silu(gate) * up         swiglu (in expert warps) -> expert
//   ys     bf16 [same rows, hidden] expert outputs         expert -> combine
// xs/hs/ys rows are expert-contiguous, each expert's range padded to whole block_m tiles
// (padding rows are never stored to out).
//
// Launch sets: counters come in two sets; launch number E uses set E % 2 and its owners
// zero set (E + 1) % 2 for the next launch, so CUDA-graph replays need no memset. Every
// warp of every owner reads its owner's generation word (the set) and arrives once; the
// last arrival of a launch resets the arrival count, zeroes the owner's counters of the
// other set and bumps the generation. All CTAs must be resident (grid = resident_ctas).
//
// Expert parallelism (world > 1 ranks, one kernel per rank; issue 13): rank o owns experts
// [o P, (o + 1) P), P = experts / world. Each rank routes its own tokens. Its dispatch posts the
// rank's per-expert counts into slot `rank` of every rank's exchange area (EX_COUNTS of
// this launch's set, then EX_TAG = epoch = generation + 1, release, system scope); dispatch,
// expert and combine wait until all `world` tags show the epoch (the count exchange is the
// launch's barrier across ranks: no rank gets more than one launch ahead of another). On the
// owner, expert e's rows in xs/hs/ys are ordered by source rank (offset Σ counts of lower
// ranks) and padded to block_m; READY[e] there reaches the total over sources. Dispatch
// writes rows into the owner's xs and releases the owner's READY (system scope); combine
// waits on the owner's YDONE[e] and reads the owner's ys rows. The `peers` table holds per
// rank {xs, sync, ys} base addresses (PEER_WORDS u64). The expert zeroes its other-set
// counters (HREADY, YDONE) only after the exchange, so no rank still reads them remotely.
#pragma once
#include <stdint.h>

namespace moe {
// Per-expert counters of a set, 4 a lane (expert 4 l + i in lane l): the layout's capacity.
// Owners whose code walks this layout accept [fact.experts] = 128 only.
constexpr unsigned EXPERT_SLOTS = 128;
constexpr unsigned ROUTE_TOKENS = 16;  // tokens per router tile (one mma m16)
constexpr unsigned MAX_TOKENS = 65536;

// owners of generation words
enum Owner : unsigned { ROUTER = 0, DISPATCH = 1, EXPERT = 2, COMBINE = 3 };
__host__ __device__ constexpr unsigned GEN(unsigned o) { return 2 * o; }
__host__ __device__ constexpr unsigned ARR(unsigned o) { return 2 * o + 1; }
// per set s: routed tokens, per-expert slot counts, rows gathered, h columns done, y tiles done
constexpr unsigned SET_WORDS = 640;
__host__ __device__ constexpr unsigned SET(unsigned s) { return 64 + s * SET_WORDS; }
constexpr unsigned ROUTED = 0, COUNTS = 128, READY = 256, HREADY = 384, YDONE = 512;
// router tile completion counts (zero-kept by the tile's finisher)
constexpr unsigned BLOCKCNT = 64 + 2 * SET_WORDS;
constexpr unsigned SYNC_WORDS = BLOCKCNT + MAX_TOKENS / ROUTE_TOKENS;
constexpr unsigned SYNC_BYTES = 65536;  // contracts: [workspace.sync] bytes
static_assert(SYNC_WORDS * 4 <= SYNC_BYTES, "sync workspace size");
// Count exchange (world > 1): per set s, a tag word and 128 counts per source rank.
constexpr unsigned MAX_WORLD = 8, EX = 6400;
constexpr unsigned PEER_XS = 0, PEER_SYNC = 1, PEER_YS = 2, PEER_WORDS = 3;
__host__ __device__ constexpr unsigned EX_TAG(unsigned s, unsigned r) { return EX + s * MAX_WORLD + r; }
__host__ __device__ constexpr unsigned EX_COUNTS(unsigned s, unsigned r) {
  return EX + 2 * MAX_WORLD + (s * MAX_WORLD + r) * EXPERT_SLOTS;
}
static_assert((EX_COUNTS(1, MAX_WORLD - 1) + EXPERT_SLOTS) * 4 <= SYNC_BYTES, "exchange area fits in sync");

using pl::ld_acquire;   // pipelink.h: acquire load / release add of a global flag
using pl::red_release;
__device__ __forceinline__ unsigned ld_relaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
using pl::atom_acq_rel;
// Every lane of the warp waits until *p >= target (acquire: what the signaller wrote
// before its release is visible to the whole warp afterwards). The sleep between polls
// doubles from 32 ns to max_ns: a waiter off the critical path polls less often (every poll is
// a request to the L2 slice that also serves the signaller and the weight stream there).
__device__ __forceinline__ void wait_at_least(const unsigned* p, unsigned target, unsigned max_ns = 64) {
  for (unsigned ns = 32; ld_acquire(p) < target; ns = min(2 * ns, max_ns)) __nanosleep(ns);
  __syncwarp();
}
// Signal after this warp's global writes: every lane fences, lane 0 adds with release.
__device__ __forceinline__ void signal(unsigned* p, unsigned v, unsigned lane) {
  __threadfence();
  __syncwarp();
  if (lane == 0) red_release(p, v);
}

// System-scope flags (world > 1: the other side is another GPU).
using pl::ld_acquire_sys;
using pl::red_release_sys;
using pl::st_release_sys;
__device__ __forceinline__ void fence_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
// Acquire at the scope of the launch: GPU for one rank, system for several.
__device__ __forceinline__ unsigned ld_acquire_at(const unsigned* p, unsigned world) {
  return world > 1 ? ld_acquire_sys(p) : ld_acquire(p);
}
// Four consecutive counters (16 B, aligned) in one acquire: a lane's 4 experts of a readiness
// bit set (the expert's READY/HREADY bits, combine's YDONE bits); `sys` at system scope.
__device__ __forceinline__ uint4 ld_acquire4(const unsigned* p, bool sys = false) {
  uint4 v;
  if (sys)
    asm volatile("ld.acquire.sys.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  else
    asm volatile("ld.acquire.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}

// The launch set of this warp's owner; `last` is true in the warp that arrived last this
// launch (it then zeroes its owner's counters of the other set and calls finish_launch);
// `gen` is the owner's generation (launches before this one).
__device__ __forceinline__ unsigned enter(unsigned* sync, unsigned owner, unsigned warps, unsigned lane, bool& last,
                                          unsigned& gen) {
  unsigned old = 0;
  gen = 0;
  if (lane == 0) {
    gen = ld_relaxed(sync + GEN(owner));
    old = atom_acq_rel(sync + ARR(owner), 1);  // release: the read above precedes the flip
  }
  gen = __shfl_sync(0xffffffffu, gen, 0);
  old = __shfl_sync(0xffffffffu, old, 0);
  last = old == warps - 1;
  return gen & 1u;
}
__device__ __forceinline__ unsigned enter(unsigned* sync, unsigned owner, unsigned warps, unsigned lane, bool& last) {
  unsigned gen;
  return enter(sync, owner, warps, lane, last, gen);
}
// Zero words [from, from + n) of the other set; then reset the arrivals and bump the generation.
__device__ __forceinline__ void finish_launch(unsigned* sync, unsigned owner, unsigned set, unsigned from,
                                              unsigned n, unsigned lane) {
  unsigned* other = sync + SET(set ^ 1u) + from;
  // Opaque: folding the set's offset into each lane's address let the linked and the
  // single-unit builds pick different (equivalent) instructions (fused_kernel_sass_test).
  asm("" : "+l"(other));
  for (unsigned i = lane; i < n; i += 32) other[i] = 0;
  __syncwarp();
  if (lane == 0) {
    sync[ARR(owner)] = 0;
    __threadfence();
    sync[GEN(owner)] = sync[GEN(owner)] + 1;
  }
  __syncwarp();
}
// Phase timeline (only in the MOE_TRACE build, //kernels:moe_step_trace; benchmarks/moe_trace.py):
// lane 0 of a warp folds %globaltimer into one of TRACE_SLOTS u64 slots after SYNC_WORDS
// (even slots: earliest, odd slots: latest). The host sets the slots before one launch.
constexpr unsigned TRACE = 6144, TRACE_SLOTS = 20;
static_assert(TRACE >= SYNC_WORDS && TRACE + 2 * TRACE_SLOTS <= EX, "trace slots fit in sync, before the exchange");
enum Stamp : unsigned {
  ROUTER_BEGIN = 0, ROUTER_END = 1, DISPATCH_BEGIN = 2, DISPATCH_END = 3, GATEUP_BEGIN = 4, GATEUP_END = 5,
  DOWN_BEGIN = 6, DOWN_END = 7, COMBINE_BEGIN = 8, COMBINE_END = 9, KERNEL_BEGIN = 10, KERNEL_END = 11,
  ROUTER_SUMMED = 15, ROUTER_ROUTED = 17, ROUTER_SIGNALLED = 19  // (latest only)
};
__device__ __forceinline__ void stamp(unsigned* sync, Stamp slot, unsigned lane) {
#ifdef MOE_TRACE
  if (lane == 0) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    auto* s = reinterpret_cast<unsigned long long*>(sync + TRACE) + slot;
    if (slot % 2 == 0) atomicMin(s, t);
    else atomicMax(s, t);
  }
#else
  (void)sync, (void)slot, (void)lane;
#endif
}
__device__ __forceinline__ unsigned ceil_div(unsigned a, unsigned b) { return (a + b - 1) / b; }

// Per-expert values held 4 per lane (lane l: experts 4l .. 4l + 3): exclusive prefix over
// experts of v, returned in ex[0..3].
__device__ __forceinline__ void exclusive_scan4(const unsigned* v, unsigned* ex, unsigned lane, unsigned& total) {
  const unsigned mine = v[0] + v[1] + v[2] + v[3];
  unsigned inc = mine;
#pragma unroll
  for (unsigned d = 1; d < 32; d <<= 1) {
    const unsigned o = __shfl_up_sync(0xffffffffu, inc, d);
    if (lane >= d) inc += o;
  }
  total = __shfl_sync(0xffffffffu, inc, 31);
  unsigned b = inc - mine;
#pragma unroll
  for (unsigned i = 0; i < 4; ++i) ex[i] = b, b += v[i];
}
// Value i = e % 4 of lane e / 4's four.
__device__ __forceinline__ unsigned pick4(const unsigned* v, unsigned e) {
  const unsigned a = __shfl_sync(0xffffffffu, v[0], e >> 2), b = __shfl_sync(0xffffffffu, v[1], e >> 2);
  const unsigned c = __shfl_sync(0xffffffffu, v[2], e >> 2), d = __shfl_sync(0xffffffffu, v[3], e >> 2);
  const unsigned i = e & 3u;
  return i == 0 ? a : i == 1 ? b : i == 2 ? c : d;
}

// world > 1: one warp posts this rank's counts (cur + COUNTS, complete once ROUTED = T) into
// slot `rank` of every rank's exchange area of set `set`, then each rank's tag = epoch.
__device__ __forceinline__ void post_counts(const unsigned* cur, const unsigned long long* peers, unsigned set,
                                            unsigned epoch, unsigned rank, unsigned world, unsigned lane) {
  const uint4 c = __ldcg(reinterpret_cast<const uint4*>(cur + COUNTS) + lane);
  for (unsigned o = 0; o < world; ++o) {
    unsigned* s = reinterpret_cast<unsigned*>(peers[PEER_WORDS * o + PEER_SYNC]);
    __stcg(reinterpret_cast<uint4*>(s + EX_COUNTS(set, rank)) + lane, c);
  }
  fence_sys();
  __syncwarp();
  if (lane == 0)
    for (unsigned o = 0; o < world; ++o)
      st_release_sys(reinterpret_cast<unsigned*>(peers[PEER_WORDS * o + PEER_SYNC]) + EX_TAG(set, rank), epoch);
  __syncwarp();
}
// world > 1: every lane waits until all ranks' counts of this launch arrived (tags reach
// epoch); -> tot[i]: expert 4 lane + i's rows over all ranks, below[i]: over ranks < rank.
__device__ __forceinline__ void gather_counts(const unsigned* sync, unsigned set, unsigned epoch, unsigned rank,
                                              unsigned world, unsigned lane, unsigned* tot, unsigned* below) {
  for (unsigned r = 0; r < world; ++r)
    while (static_cast<int>(ld_acquire_sys(sync + EX_TAG(set, r)) - epoch) < 0) __nanosleep(64);
  __syncwarp();
#pragma unroll
  for (unsigned i = 0; i < 4; ++i) tot[i] = below[i] = 0;
  for (unsigned r = 0; r < world; ++r) {
    const uint4 c = __ldcg(reinterpret_cast<const uint4*>(sync + EX_COUNTS(set, r)) + lane);
    const unsigned v[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (unsigned i = 0; i < 4; ++i) tot[i] += v[i], below[i] += r < rank ? v[i] : 0u;
  }
}
}  // namespace moe
