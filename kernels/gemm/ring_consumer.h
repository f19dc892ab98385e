// ring_consumer.h — the one copy of the protocol every consumer of ring `ab` in the Hopper
// GEMM family follows (wgmma_consumer, wgmma_pingpong, cute_consumer). The loader (tma_loader) and the scheduler (tile_scheduler) do not know which
// consumer they serve, so all consumers must walk the ring and fix up stream-K units alike:
//  * ring walk (RING_CONSUMER_WALK; consume_unit wraps it): per k-step of a unit, wait `full`,
//    issue the k-step's MMAs, then release the PREVIOUS stage, whose MMAs are complete once at
//    most one group is in flight; after the unit, drain every group and release its last stage;
//  * stream-K fix-up (fix_up): a contributor unit (it does not reach the tile's last k-step)
//    leaves its partial sums in its CTA's slot of workspace `partials`, then counts once on
//    the tile's counter in workspace `flags`; the finisher (it reaches the last k-step,
//    started after 0) waits (acquire) until every contributor has counted, adds their slots
//    (read through L2) and resets the counter for the next launch (`flags` is a zero
//    workspace). A slot holds THREADS threads' FRAG accumulators as float4s, float4 i of
//    thread t at [i][t] (coalesced). `Frag` is anything indexable with [] (a float array, a
//    CuTe register tensor).
// Include after <pipelink.h> (the pl:: helpers and handle macros).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

// The clauses every consumer's contract shares (ring `ab`, export `acc`, callable `unit`,
// workspaces `partials` and `flags`). A macro: it declares the handles of the component
// being compiled (PL_COMPONENT where it is used).
#define RING_CONSUMER_DECLARATIONS()                                                  \
  PL_DECLARE_RING(ab);                                                                \
  PL_DECLARE_EXPORT(acc);                                                             \
  PL_DECLARE_CALL_RET(unsigned, unit, unsigned, unsigned, unsigned, unsigned, unsigned*); \
  PL_DECLARE_WORKSPACE(partials);                                                     \
  PL_DECLARE_WORKSPACE(flags)

namespace ring_consumer {

// Ring `ab` in this CTA's shared memory.
struct Ring {
  uint8_t* buffer;  // stage 0
  uint64_t* full;
  uint64_t* empty;
  unsigned depth;
};
// Inside PL_ENTRY (the handles take its instance).
#define RING_CONSUMER_RING()                                                          \
  (ring_consumer::Ring{pl::smem_base() + PL_RING_BUFFER(ab),                          \
                       reinterpret_cast<uint64_t*>(pl::smem_base() + PL_RING_FULL(ab)),  \
                       reinterpret_cast<uint64_t*>(pl::smem_base() + PL_RING_EMPTY(ab)), \
                       PL_RING_DEPTH(ab)})

// Consume k-steps [k_begin, k_end) of one unit, starting at ring position (stage, phase) and
// leaving it after them.
// The ring walk itself, as text: consume_unit expands it, and so do wgmma_consumer and
// cute_consumer in place. A macro, not a call, for those two: through a function boundary
// link-time optimization schedules their inlined scheduler differently (their SASS changed),
// while the expansion is the very token stream they compiled before. Expects in scope:
// `full` (uint64_t*), `depth`, `stage`, `phase` (unsigned&), `k_begin`, `k_end`, `lane0`.
// RELEASE is the statement that frees stage `prev`; the rest (...) is the k-step on `stage`
// (`kt != k_begin`: accumulate), its MMAs committed with at most one group left in flight.
#define RING_CONSUMER_WALK(RELEASE, ...)                 \
  unsigned prev = 0;                                     \
  for (unsigned kt = k_begin; kt < k_end; ++kt) {        \
    pl::mbar_wait(full + stage, phase);                  \
    __VA_ARGS__                                          \
    if (kt > k_begin && lane0) RELEASE;                  \
    prev = stage;                                        \
    if (++stage == depth) { stage = 0; phase ^= 1u; }    \
  }
// After the walk and the drain: free the unit's last stage.
#define RING_CONSUMER_RELEASE_LAST(RELEASE) \
  if (k_end > k_begin && lane0) RELEASE

//  step(s, accumulate): the k-step's MMAs on stage s, committed, with at most one group left
//    in flight (accumulate is false on the unit's first k-step: start from zero);
//  drain(): wait until no group is in flight;
//  release(s): free stage s for the loader, on ring.empty (called by lane 0 of each warp).
template <class Step, class Drain, class Release>
__device__ __forceinline__ void consume_unit(const Ring& ring, unsigned& stage, unsigned& phase, unsigned k_begin,
                                             unsigned k_end, bool lane0, Step step, Drain drain, Release release) {
  uint64_t* const full = ring.full;
  const unsigned depth = ring.depth;
  RING_CONSUMER_WALK(release(prev), step(stage, kt != k_begin);)
  drain();
  RING_CONSUMER_RELEASE_LAST(release(prev));
}

template <unsigned FRAG, unsigned THREADS, class Frag>
__device__ __forceinline__ void store_partial(float4* slot, const Frag& acc, unsigned t) {
#pragma unroll
  for (unsigned i = 0; i < FRAG / 4; ++i)
    __stcg(slot + i * THREADS + t, make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
}
template <unsigned FRAG, unsigned THREADS, class Frag>
__device__ __forceinline__ void add_partial(const float4* slot, Frag& acc, unsigned t) {
#pragma unroll
  for (unsigned i = 0; i < FRAG / 4; ++i) {
    const float4 v = __ldcg(slot + i * THREADS + t);
    acc[4 * i] += v.x, acc[4 * i + 1] += v.y, acc[4 * i + 2] += v.z, acc[4 * i + 3] += v.w;
  }
}

// After a unit's MMAs: true when `acc` now holds the whole tile (export it), false when the
// unit was a contributor (its sums are stored, nothing to export).
//  [k_begin, k_end): the unit's k-steps; info: the scheduler's unit (linear tile in info[2],
//    first CTA of the tile in info[3]);
//  t: this thread among the THREADS that hold `acc`; sync(): a named barrier over them, which
//    orders the slot writes before the count and the wait before the reads;
//  cta_step: the contributors are CTAs info[3], info[3] + cta_step, ... below this one (the
//    cluster size: the CTAs of a cluster share each unit).
template <unsigned FRAG, unsigned THREADS, class Frag, class Sync>
__device__ __forceinline__ bool fix_up(Frag& acc, float4* partials, unsigned* flags, unsigned k_begin, unsigned k_end,
                                       const unsigned* info, unsigned k_tiles, unsigned t, unsigned cta_step, Sync sync) {
  if (k_end < k_tiles) {  // contributor: leave the partial sums for the tile's finisher
    store_partial<FRAG, THREADS>(partials + blockIdx.x * (FRAG / 4) * THREADS, acc, t);
    __threadfence();
    sync();
    if (t == 0) pl::red_release(flags + info[2], 1);
    return false;
  }
  if (k_begin > 0) {  // finisher: add the contributors' partial sums
    const unsigned contributors = (blockIdx.x - info[3]) / cta_step;
    if (t == 0) {
      while (pl::ld_acquire(flags + info[2]) < contributors) {
      }
      flags[info[2]] = 0;  // every contributor has counted: ready for the next launch
    }
    sync();
    for (unsigned c = info[3]; c < blockIdx.x; c += cta_step)
      add_partial<FRAG, THREADS>(partials + c * (FRAG / 4) * THREADS, acc, t);
  }
  return true;
}

}  // namespace ring_consumer
