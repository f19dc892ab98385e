// moe_shapes.h — what the four MoE owners (router, dispatch, expert, combine) agree on:
// the Qwen3-30B-A3B layer shape, the layout of the kernel-scope workspaces they exchange
// data through, and the readiness-counter protocol (each owner also states every
// workspace in its contract; the linker checks the declarations agree, L-WORKSPACE).
//
// Workspaces (scope = "kernel", one buffer per name; S = t * top_k slots, slot = token * top_k + k):
//   sync   u32 counters (layout below)                      router, dispatch, expert, combine
//   route  u32 expert[S], f32 weight[S], u32 pos[S]        router -> dispatch, combine
//   rows   u32 row[S]: the slot's row in xs/ys             dispatch -> combine
//   xs     bf16 [S + 128 * block_m, 2048] gathered x rows  dispatch -> expert
//   hs     bf16 [same rows, 768]  silu(gate) * up          swiglu (in expert warps) -> expert
//   ys     bf16 [same rows, 2048] expert outputs           expert -> combine
// xs/hs/ys rows are expert-contiguous, each expert's range padded to whole block_m tiles
// (padding rows are never stored to out).
//
// Launch sets: counters come in two sets; launch number E uses set E % 2 and its owners
// zero set (E + 1) % 2 for the next launch, so CUDA-graph replays need no memset. Every
// warp of every owner reads its owner's generation word (the set) and arrives once; the
// last arrival of a launch resets the arrival count, zeroes the owner's counters of the
// other set and bumps the generation. All CTAs must be resident (grid = resident_ctas).
#pragma once
#include <stdint.h>

namespace moe {
constexpr unsigned HIDDEN = 2048, INTER = 768, EXPERTS = 128, TOP_K = 8;
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
static_assert(SYNC_WORDS * 4 <= 32768, "sync workspace size (contracts: bytes = 32768)");

using pl::ld_acquire;   // pipelink.h: acquire load / release add of a global flag
using pl::red_release;
__device__ __forceinline__ unsigned ld_relaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned atom_acq_rel(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
// Every lane of the warp waits until *p >= target (acquire: what the signaller wrote
// before its release is visible to the whole warp afterwards).
__device__ __forceinline__ void wait_at_least(const unsigned* p, unsigned target) {
  while (ld_acquire(p) < target) __nanosleep(64);
  __syncwarp();
}
// Signal after this warp's global writes: every lane fences, lane 0 adds with release.
__device__ __forceinline__ void signal(unsigned* p, unsigned v, unsigned lane) {
  __threadfence();
  __syncwarp();
  if (lane == 0) red_release(p, v);
}

// The launch set of this warp's owner; `last` is true in the warp that arrived last this
// launch (it then zeroes its owner's counters of the other set and calls finish_launch).
__device__ __forceinline__ unsigned enter(unsigned* sync, unsigned owner, unsigned warps, unsigned lane, bool& last) {
  unsigned gen = 0, old = 0;
  if (lane == 0) {
    gen = ld_relaxed(sync + GEN(owner));
    old = atom_acq_rel(sync + ARR(owner), 1);  // release: the read above precedes the flip
  }
  gen = __shfl_sync(0xffffffffu, gen, 0);
  old = __shfl_sync(0xffffffffu, old, 0);
  last = old == warps - 1;
  return gen & 1u;
}
// Zero words [from, from + n) of the other set; then reset the arrivals and bump the generation.
__device__ __forceinline__ void finish_launch(unsigned* sync, unsigned owner, unsigned set, unsigned from,
                                              unsigned n, unsigned lane) {
  unsigned* other = sync + SET(set ^ 1u) + from;
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
constexpr unsigned TRACE = 6144, TRACE_SLOTS = 16;
static_assert(TRACE >= SYNC_WORDS && (TRACE + 2 * TRACE_SLOTS) * 4 <= 32768, "trace slots fit in sync");
enum Stamp : unsigned {
  ROUTER_BEGIN = 0, ROUTER_END = 1, DISPATCH_BEGIN = 2, DISPATCH_END = 3, GATEUP_BEGIN = 4, GATEUP_END = 5,
  DOWN_BEGIN = 6, DOWN_END = 7, COMBINE_BEGIN = 8, COMBINE_END = 9, KERNEL_BEGIN = 10, KERNEL_END = 11,
  ROUTER_GEMM_END = 13, ROUTER_SUMMED = 15  // (latest only)
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
}  // namespace moe
