// dec_stream.cu — the decode megakernel's weight stream (one warp, dec.h): walks this CTA's
// matvec tiles of the whole step in schedule order and bulk-copies each into the next stage of
// ring `w`. It never waits on the readiness counters, only on free stages, so it runs ahead of
// the step role by the ring's depth: the next op's and the next layer's weights are in flight
// while the current op still waits for its input. Weights are read once per step, so the copies
// ask L2 to evict them first (the KV cache and the activations stay).
#define PL_COMPONENT dec_stream
#include <pipelink.h>

#include "dec.h"

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
}  // namespace dec_stream

PL_ENTRY(run) {
  using namespace dec_stream;
  const Params& p = PL_PARAMS(Params);
  if (threadIdx.x % 32 != 0) return;  // one thread issues every copy
  const dec::Model m{DEC_MODEL_FIELDS, DEC_TILE_ELEMS};
  uint8_t* ring = pl::smem_base() + PL_RING_BUFFER(w);
  uint64_t* full = reinterpret_cast<uint64_t*>(pl::smem_base() + PL_RING_FULL(w));
  uint64_t* empty = reinterpret_cast<uint64_t*>(pl::smem_base() + PL_RING_EMPTY(w));
  const unsigned depth = PL_RING_DEPTH(w);
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  const dec::OpRange range{PL_FACT(unfused), p.op_begin, p.op_end};
  unsigned stage = 0, phase = 0, rot = 0;
  const unsigned grid = gridDim.x;
  for (unsigned n = 0; n <= 4 * m.layers; ++n) {
    const dec::MatOp op = dec::nth_mat_op(m, n);
    const unsigned bytes = op.tile_rows * op.k * 2;
    const uint16_t* src = (op.head ? p.head : p.weights) + op.base;
    const unsigned first = range.runs(dec::nth_mat_op_index(m, n)) ? dec::first_tile(blockIdx.x, rot, grid) : op.tiles;
    for (unsigned i = first; i < op.tiles; i += grid) {
      pl::mbar_wait(empty + stage, phase ^ 1u);
      pl::mbar_arrive_expect_tx(full + stage, bytes);
      bulk_load(ring + (size_t)stage * m.stage_bytes(), src + (size_t)i * op.tile_rows * op.k, bytes, full + stage, policy);
      if (++stage == depth) stage = 0, phase ^= 1u;
    }
    rot += op.tiles;
  }
}
