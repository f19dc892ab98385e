// attn_producer.h — the one copy of the producer side of the attention core's rings `q` and
// `kv`, shared by attn_loader and attn_cp_loader (the core does not know which loader feeds
// it): the clauses both contracts import from the core, and the stage protocol. To fill a
// stage: wait on its `empty` barrier until the core has freed it (a fresh barrier passes
// parity 1), expect the tile's bytes on its `full` barrier, then TMA the tile (d / 64 boxes
// of [blk rows, 64 cols], SWIZZLE_128B: attn.h) with completion on `full`.
// Include after <pipelink.h> (the pl:: helpers and handle macros).
#pragma once
#include <stdint.h>

// A macro: it declares the handles of the component being compiled (PL_COMPONENT where it
// is used).
#define ATTN_PRODUCER_DECLARATIONS()                                                                         \
  PL_DECLARE_FACT(block_q);                                                                                 \
  PL_DECLARE_FACT(head_dim);                                                                                \
  PL_DECLARE_RING(q);                                                                                       \
  PL_DECLARE_RING(kv);                                                                                      \
  PL_DECLARE_CALL_RET(unsigned, tile, unsigned, unsigned, unsigned, const void*, unsigned*);                \
  PL_DECLARE_CALL_RET(unsigned, kv_count, unsigned, unsigned, unsigned, unsigned, unsigned, const void*);   \
  PL_DECLARE_CALL_RET(unsigned, kv_block, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, const void*)

namespace attn_producer {

// d / 64 boxes of [blk rows, 64 cols], each blk * 128 bytes (d = head_dim: 128 or 64; blk =
// block_q).
__device__ __forceinline__ void load_tile(uint8_t* dst, const pl::TensorMap* map, int row, uint64_t* bar, unsigned d,
                                          unsigned blk) {
  pl::tma_load_2d(dst, map, 0, row, bar);
  if (d > 64) pl::tma_load_2d(dst + blk * 128, map, 64, row, bar);
}

// Claim one stage for a tile: wait until `empty` passes `parity` (the core has freed it),
// then expect `bytes` on `full`. The caller issues the tile's TMA next, with completion on
// `full`.
__device__ __forceinline__ void claim_stage(uint64_t* full, uint64_t* empty, unsigned parity, unsigned bytes) {
  pl::mbar_wait(empty, parity);
  pl::mbar_arrive_expect_tx(full, bytes);
}

// The ring position after one more stage.
__device__ __forceinline__ void next_stage(unsigned& stage, unsigned& phase, unsigned depth) {
  if (++stage == depth) { stage = 0; phase ^= 1u; }
}

// Wait until the core has released every stage of a ring of `depth` stages from (stage,
// phase) on: every TMA read into it is complete.
__device__ __forceinline__ void drain(uint64_t* empty, unsigned& stage, unsigned& phase, unsigned depth) {
  for (unsigned d = 0; d < depth; ++d) {
    pl::mbar_wait(empty + stage, phase ^ 1u);
    next_stage(stage, phase, depth);
  }
}

}  // namespace attn_producer
