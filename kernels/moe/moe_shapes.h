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
//   xrow   u32 [S + experts * block_m]: each row's token   dispatch -> expert (world = 1: the
//          expert reads its rows from x through it; nothing is copied)
//   xs     bf16 [S + experts * block_m, hidden] x rows     dispatch -> expert (world > 1 only)
//   hs     bf16 [same rows, inter]  silu(gate) * up         swiglu (in expert warps) -> expert
//   ys     bf16 [same rows, hidden] expert outputs         expert -> combine
// xs/hs/ys rows are expert-contiguous, each expert's range padded to whole block_m tiles
// (padding rows are never stored to out): at most S + experts * (block_m - 1) rows.
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
// Per-expert counters of a set: chunks of 128 experts, 4 a lane (expert 128 c + 4 l + i is value
// 4 c + i of lane l). A model has chunks(experts) = ceil(experts / 128) of them, a fact, so every
// offset below folds to the same immediates as a fixed layout would; owners size their arrays
// for MAX_CHUNKS and walk chunks(experts) (one chunk: exactly the layout of 128 experts).
constexpr unsigned EXPERT_SLOTS = 128;  // experts a chunk (4 a lane)
constexpr unsigned MAX_CHUNKS = 3;      // 384 experts: 4 chunks' exchange area would not fit SYNC_BYTES
constexpr unsigned MAX_EXPERTS = EXPERT_SLOTS * MAX_CHUNKS;  // contracts: [fact.experts] accept max
__host__ __device__ constexpr unsigned chunks(unsigned experts) { return (experts + EXPERT_SLOTS - 1) / EXPERT_SLOTS; }
constexpr unsigned ROUTE_TOKENS = 16;  // tokens per router tile (one mma m16)
constexpr unsigned MAX_TOKENS = 65536;

// owners of generation words
enum Owner : unsigned { ROUTER = 0, DISPATCH = 1, EXPERT = 2, COMBINE = 3 };
__host__ __device__ constexpr unsigned GEN(unsigned o) { return 2 * o; }
__host__ __device__ constexpr unsigned ARR(unsigned o) { return 2 * o + 1; }
// per set s (c chunks): routed tokens, per-expert slot counts, rows gathered, h columns done,
// y tiles done, each array 128 c words (one chunk: 640 words, ROUTED/COUNTS/READY/HREADY/YDONE at
// 0/128/256/384/512)
__host__ __device__ constexpr unsigned SET_WORDS(unsigned c) { return 128 + 4 * EXPERT_SLOTS * c; }
__host__ __device__ constexpr unsigned SET(unsigned s, unsigned c) { return 64 + s * SET_WORDS(c); }
constexpr unsigned ROUTED = 0, COUNTS = 128;
__host__ __device__ constexpr unsigned READY(unsigned c) { return COUNTS + EXPERT_SLOTS * c; }
__host__ __device__ constexpr unsigned HREADY(unsigned c) { return COUNTS + 2 * EXPERT_SLOTS * c; }
__host__ __device__ constexpr unsigned YDONE(unsigned c) { return COUNTS + 3 * EXPERT_SLOTS * c; }
// router tile completion counts (zero-kept by the tile's finisher)
__host__ __device__ constexpr unsigned BLOCKCNT(unsigned c) { return 64 + 2 * SET_WORDS(c); }
__host__ __device__ constexpr unsigned SYNC_WORDS(unsigned c) { return BLOCKCNT(c) + MAX_TOKENS / ROUTE_TOKENS; }
constexpr unsigned SYNC_BYTES = 65536;  // contracts: [workspace.sync] bytes
// Count exchange (world > 1): per set s, a tag word and 128 c counts per source rank, after the
// router's tile counts (one chunk: at 6400, as before the chunks).
constexpr unsigned MAX_WORLD = 8;
constexpr unsigned PEER_XS = 0, PEER_SYNC = 1, PEER_YS = 2, PEER_WORDS = 3;
__host__ __device__ constexpr unsigned EX(unsigned c) { return 6400 + 8 * EXPERT_SLOTS * (c - 1); }
__host__ __device__ constexpr unsigned EX_TAG(unsigned s, unsigned r, unsigned c) { return EX(c) + s * MAX_WORLD + r; }
__host__ __device__ constexpr unsigned EX_COUNTS(unsigned s, unsigned r, unsigned c) {
  return EX(c) + 2 * MAX_WORLD + (s * MAX_WORLD + r) * EXPERT_SLOTS * c;
}
__host__ __device__ constexpr unsigned EX_END(unsigned c) { return EX_COUNTS(1, MAX_WORLD - 1, c) + EXPERT_SLOTS * c; }
__host__ __device__ constexpr bool layout_fits(unsigned c) {
  return SYNC_WORDS(c) <= EX(c) && (c == MAX_CHUNKS || layout_fits(c + 1));
}
static_assert(layout_fits(1), "the counters and the router's tile counts lie before the exchange area");

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

// f(0), .., f(C - 1) as straight-line code (no loop for the optimiser to see: one chunk is then
// exactly the code written for one).
template <unsigned C, unsigned K = 0, class F>
__device__ __forceinline__ void for_chunks(F&& f) {
  if constexpr (K < C) {
    f(K);
    for_chunks<C, K + 1>(f);
  }
}
// An owner's role over C chunks of counters (C = chunks(experts), a fact), as
// NS::run_chunks<C>(pl_inst, pl_params). One chunk is inlined into the entry; more go through
// a function that is never inlined, so the code of the one-chunk instantiation is compiled as
// if it were alone: beside the other instantiations in one function (or in an inlinable one)
// it came out different, and so did the cubins of the models of at most 128 experts. With one
// chunk the call folds away at link; with more the role is that one call.
#define MOE_CHUNKED_ENTRY(NS, entry)                                                                          \
  static __device__ __noinline__ void NS##__##entry##__chunks(unsigned pl_inst, const void* pl_params) {    \
    const unsigned c = moe::chunks(PL_FACT(experts));                                                        \
    static_assert(moe::MAX_CHUNKS == 3, "one branch per chunk count");                                       \
    if (c == 2) NS::run_chunks<2>(pl_inst, pl_params);                                                       \
    else if (c == 3) NS::run_chunks<3>(pl_inst, pl_params);                                                  \
    else __trap(); /* outside accept (L-FACT-ACCEPT) */                                                      \
  }                                                                                                          \
  PL_ENTRY(entry) {                                                                                          \
    if (moe::chunks(PL_FACT(experts)) <= 1) NS::run_chunks<1>(pl_inst, pl_params);                           \
    else NS##__##entry##__chunks(pl_inst, pl_params);                                                        \
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
// Zero words [from, from + n) of the other set (of `chunks` expert chunks); then reset the arrivals and bump the generation.
__device__ __forceinline__ void finish_launch(unsigned* sync, unsigned owner, unsigned set, unsigned chunks,
                                              unsigned from, unsigned n, unsigned lane) {
  unsigned* other = sync + SET(set ^ 1u, chunks) + from;
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
// lane 0 of a warp folds %globaltimer into one of TRACE_SLOTS u64 slots after the exchange area
// of the largest layout, so at one place for every chunk count (even slots: earliest, odd slots:
// latest). The host sets the slots before one launch.
constexpr unsigned TRACE = 14848, TRACE_SLOTS = 20;
static_assert(TRACE >= EX_END(MAX_CHUNKS) && (TRACE + 2 * TRACE_SLOTS) * 4 <= SYNC_BYTES,
              "trace slots fit in sync, after the exchange");
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

// The same over C chunks of 4 a lane (value 4 c + i of lane l: expert 128 c + 4 l + i), in expert
// order; C = 1 is exactly exclusive_scan4 / pick4.
template <unsigned C>
__device__ __forceinline__ void exclusive_scan(const unsigned* v, unsigned* ex, unsigned lane, unsigned& total) {
  if constexpr (C == 1) {
    exclusive_scan4(v, ex, lane, total);
  } else {
    unsigned base = 0;
#pragma unroll
    for (unsigned c = 0; c < C; ++c) {
      unsigned t;
      exclusive_scan4(v + 4 * c, ex + 4 * c, lane, t);
#pragma unroll
      for (unsigned i = 0; i < 4; ++i) ex[4 * c + i] += base;
      base += t;
    }
    total = base;
  }
}
template <unsigned C>
__device__ __forceinline__ unsigned pick(const unsigned* v, unsigned e) {
  if constexpr (C == 1) {
    return pick4(v, e);
  } else {
    // (shfl takes the source lane's low 5 bits: e / 4 is lane e / 4 % 32 of every chunk)
    const unsigned src = e / 4, j = e / EXPERT_SLOTS * 4 + e % 4;
    unsigned r = 0;
#pragma unroll
    for (unsigned k = 0; k < 4 * C; ++k) {
      const unsigned x = __shfl_sync(0xffffffffu, v[k], src);
      r = k == j ? x : r;
    }
    return r;
  }
}
// Expert e's bit in lane e / 4 % 32's readiness bits, held 4 a chunk (bit 4 c + i of lane l:
// expert 128 c + 4 l + i); the lane's shuffle may name it as e / 4 (shfl reads the low 5 bits).
template <unsigned C>
__device__ __forceinline__ unsigned bit_of(unsigned e) {
  if constexpr (C == 1) return e % 4;
  else return e / EXPERT_SLOTS * 4 + e % 4;
}

// world > 1: one warp posts this rank's counts (cur + COUNTS, complete once ROUTED = T) into
// slot `rank` of every rank's exchange area of set `set`, then each rank's tag = epoch.
template <unsigned C>
__device__ __forceinline__ void post_counts(const unsigned* cur, const unsigned long long* peers, unsigned set,
                                            unsigned epoch, unsigned rank, unsigned world, unsigned lane) {
  uint4 c[C];
#pragma unroll
  for (unsigned k = 0; k < C; ++k) c[k] = __ldcg(reinterpret_cast<const uint4*>(cur + COUNTS) + 32 * k + lane);
  for (unsigned o = 0; o < world; ++o) {
    unsigned* s = reinterpret_cast<unsigned*>(peers[PEER_WORDS * o + PEER_SYNC]);
#pragma unroll
    for (unsigned k = 0; k < C; ++k) __stcg(reinterpret_cast<uint4*>(s + EX_COUNTS(set, rank, C)) + 32 * k + lane, c[k]);
  }
  fence_sys();
  __syncwarp();
  if (lane == 0)
    for (unsigned o = 0; o < world; ++o)
      st_release_sys(reinterpret_cast<unsigned*>(peers[PEER_WORDS * o + PEER_SYNC]) + EX_TAG(set, rank, C), epoch);
  __syncwarp();
}
// world > 1: every lane waits until all ranks' counts of this launch arrived (tags reach
// epoch); -> tot[4 c + i]: expert 128 c + 4 lane + i's rows over all ranks, below[..]: over ranks < rank.
template <unsigned C>
__device__ __forceinline__ void gather_counts(const unsigned* sync, unsigned set, unsigned epoch, unsigned rank,
                                              unsigned world, unsigned lane, unsigned* tot, unsigned* below) {
  for (unsigned r = 0; r < world; ++r)
    while (static_cast<int>(ld_acquire_sys(sync + EX_TAG(set, r, C)) - epoch) < 0) __nanosleep(64);
  __syncwarp();
#pragma unroll
  for (unsigned i = 0; i < 4 * C; ++i) tot[i] = below[i] = 0;
  for (unsigned r = 0; r < world; ++r) {
#pragma unroll
    for (unsigned k = 0; k < C; ++k) {
      const uint4 c = __ldcg(reinterpret_cast<const uint4*>(sync + EX_COUNTS(set, r, C)) + 32 * k + lane);
      const unsigned v[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
      for (unsigned i = 0; i < 4; ++i) tot[4 * k + i] += v[i], below[4 * k + i] += r < rank ? v[i] : 0u;
    }
  }
}
}  // namespace moe
