// dec_stream.cu — the decode megakernel's weight stream (one warp, dec.h): walks this CTA's
// matvec tiles of the whole step in schedule order and bulk-copies each tile's loads into the
// next stages of ring `w`. It never waits on the readiness counters, only on free stages, so it
// runs ahead of the step role by the ring's depth: the next op's and the next layer's weights
// are in flight while the current op still waits for its input. Weights are read once per step,
// so the copies ask L2 to evict them first (the KV cache and the activations stay).
#define PL_COMPONENT dec_stream
#include <pipelink.h>

#include "dec.h"

// At most DEC_INFLIGHT loads in flight (0: as many as the ring has free stages). The ring still
// fills with what arrived, but fewer bytes queue in the memory system ahead of the counters' and
// activations' round trips, which are the step's critical path (docs/DECISIONS.md: one 32 KB load
// a SM, 4.2 MB over an H100, still streams the LM head at the HBM's rate).
#ifndef DEC_INFLIGHT
#define DEC_INFLIGHT 1
#endif
// While the ring is full (the step role waits for its input, as in a layer's attention), ask L2
// for the loads the ring takes next, up to DEC_L2_AHEAD of them, one every DEC_L2_PACE_NS, so
// HBM keeps streaming through the wait without queueing much more than the cap's bytes at once
// (0: none; docs/DECISIONS.md has 3 against 0 and 6).
#ifndef DEC_L2_AHEAD
#define DEC_L2_AHEAD 3
#endif
#ifndef DEC_L2_PACE_NS
#define DEC_L2_PACE_NS 1200
#endif
#ifndef DEC_TILE_ELEMS
#define DEC_TILE_ELEMS 16384  // the contract's [fact.tile_elems] own (cuda_component facts sets both)
#endif

DEC_MODEL_FACTS();
PL_OWN_FACT(tile_elems, DEC_TILE_ELEMS);
PL_DECLARE_RING(w);

namespace dec_stream {
struct Params {  // [params]: weights, head = "ptr", op_begin, op_end = "u32"
  const uint16_t* weights;
  const uint16_t* head;
  unsigned op_begin, op_end;
};

__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, uint64_t* bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          pl::smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(pl::smem_addr(bar)), "l"(policy)
      : "memory");
}

__device__ __forceinline__ bool mbar_test(uint64_t* bar, unsigned phase) {  // mbar_wait's test, once
  unsigned done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.test_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(pl::smem_addr(bar)), "r"(phase)
      : "memory");
  return done;
}

// This CTA's loads of the step in schedule order (dec.h: tile i of matvec op n when
// first_tile(cta, rot) + j G = i, each tile loads_per_tile loads of r rows). A cursor is four
// words; the op's sizes are recomputed from the model's facts (constants once linked).
struct Cursor {
  unsigned n, rot, i, h;
};
struct Walk {
  dec::Model m;
  const Params& p;
  dec::OpRange range;
  unsigned cta, grid;
  __device__ bool more(const Cursor& c) const { return c.n <= 4 * m.layers; }
  __device__ const uint16_t* src(const Cursor& c) const {
    const dec::MatOp op = dec::nth_mat_op(m, c.n);
    return (op.head ? p.head : p.weights) + op.base + ((size_t)c.i * op.tile_rows + (size_t)c.h * op.r) * op.k;
  }
  __device__ unsigned bytes(const Cursor& c) const {
    const dec::MatOp op = dec::nth_mat_op(m, c.n);
    return op.r * op.k * 2;
  }
  __device__ void enter(Cursor& c) const {  // the first load of op n or a later op that has tiles here
    for (; more(c); ++c.n) {
      const dec::MatOp op = dec::nth_mat_op(m, c.n);
      c.i = range.runs(dec::nth_mat_op_index(m, c.n)) ? dec::first_tile(cta, c.rot, grid) : op.tiles, c.h = 0;
      if (c.i < op.tiles) return;
      c.rot += op.tiles;
    }
  }
  __device__ void next(Cursor& c) const {
    const dec::MatOp op = dec::nth_mat_op(m, c.n);
    if (++c.h < dec::loads_per_tile(op)) return;
    c.h = 0, c.i += grid;
    if (c.i < op.tiles) return;
    c.rot += op.tiles, ++c.n;
    enter(c);
  }
};
}  // namespace dec_stream

PL_ENTRY(run) {
  using namespace dec_stream;
  const Params& p = PL_PARAMS(Params);
  if (threadIdx.x % 32 != 0) return;  // one thread issues every copy
  const dec::Model m{DEC_MODEL_FIELDS, DEC_TILE_ELEMS, PL_FACT(down_chunks)};
  uint8_t* ring = pl::smem_base() + PL_RING_BUFFER(w);
  uint64_t* full = reinterpret_cast<uint64_t*>(pl::smem_base() + PL_RING_FULL(w));
  uint64_t* empty = reinterpret_cast<uint64_t*>(pl::smem_base() + PL_RING_EMPTY(w));
  const unsigned depth = PL_RING_DEPTH(w);
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  const dec::OpRange range{PL_FACT(unfused), p.op_begin, p.op_end};
  const Walk walk{m, p, range, blockIdx.x, gridDim.x};
  Cursor load{0, 0, 0, 0};
  unsigned stage = 0, phase = 0, issued = 0;
  Cursor ahead{0, 0, 0, 0};  // DEC_L2_AHEAD: the next load L2 is asked for (load number ahead_n)
  unsigned ahead_n = 0, last = 0;
  for (walk.enter(load); walk.more(load); walk.next(load), ++issued) {
    if (DEC_INFLIGHT && issued >= DEC_INFLIGHT) {  // load n - DEC_INFLIGHT has landed (stage n mod depth, phase n / depth)
      const unsigned old = issued - DEC_INFLIGHT;
      pl::mbar_wait(full + old % depth, (old / depth) & 1u);
    }
    if (DEC_L2_AHEAD) {
      if (ahead_n <= issued) ahead = load, ahead_n = issued;
      while (!mbar_test(empty + stage, phase ^ 1u)) {
        const unsigned now = dec::now_ns();
        if (ahead_n < issued + DEC_L2_AHEAD && walk.more(ahead) && now - last >= DEC_L2_PACE_NS) {
          dec::prefetch_l2(walk.src(ahead), walk.bytes(ahead));
          walk.next(ahead), ++ahead_n, last = now;
        }
        __nanosleep(64);
      }
    }
    pl::mbar_wait(empty + stage, phase ^ 1u);
    const unsigned bytes = walk.bytes(load);
    pl::mbar_arrive_expect_tx(full + stage, bytes);
    bulk_load(ring + (size_t)stage * m.stage_bytes(), walk.src(load), bytes, full + stage, policy);
    if (++stage == depth) stage = 0, phase ^= 1u;
  }
}
