// attn_producer.h — the one copy of the producer side of the attention core's rings `q` and
// `kv`, shared by attn_loader and attn_cp_loader (the core does not know which loader feeds
// it): the clauses both contracts import from the core, and the stage protocol. To fill a
// stage: wait on its `empty` barrier until the core has freed it (a fresh barrier passes
// parity 1), expect the tile's bytes on its `full` barrier, then TMA the tile (d / 64 boxes
// of [blk rows, 64 cols], SWIZZLE_128B: attn.h) with completion on `full`.
// Include after <pipelink.h> (the pl:: helpers and handle macros). ATTN_PRODUCER_RINGS(base) gives
// a loader its Rings (the handles are the compiled component's).
#pragma once
#include <stdint.h>

#define ATTN_PRODUCER_RINGS(base)                                                                          \
  attn_producer::Rings {                                                                                    \
    (base) + PL_RING_BUFFER(q), reinterpret_cast<uint64_t*>((base) + PL_RING_FULL(q)),                      \
        reinterpret_cast<uint64_t*>((base) + PL_RING_EMPTY(q)), PL_RING_DEPTH(q), (base) + PL_RING_BUFFER(kv), \
        reinterpret_cast<uint64_t*>((base) + PL_RING_FULL(kv)), reinterpret_cast<uint64_t*>((base) + PL_RING_EMPTY(kv)), \
        PL_RING_DEPTH(kv)                                                                                   \
  }

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

// The producer's view of rings `q` and `kv` (addresses and depths of the linked placement).
struct Rings {
  uint8_t* q_buf;
  uint64_t* q_full;
  uint64_t* q_empty;
  unsigned q_depth;
  uint8_t* kv_buf;
  uint64_t* kv_full;
  uint64_t* kv_empty;
  unsigned kv_depth;
};

// d / 64 boxes of [the map's box rows, 64 cols] at a stride of blk * 128 bytes, one per 64-column
// chunk of the stage (d = head_dim: 64, 128 or 256; blk = block_q; box rows: blk, or a page's
// rows at its offset in the chunk for attn_paged_loader), from column col (0, or a head's first
// column in a token-major [tokens, heads * d] map).
__device__ __forceinline__ void load_tile(uint8_t* dst, const pl::TensorMap* map, int row, uint64_t* bar, unsigned d,
                                          unsigned blk, int col = 0) {
  pl::tma_load_2d(dst, map, col, row, bar);
  if (d > 64) pl::tma_load_2d(dst + blk * 128, map, col + 64, row, bar);
  if (d > 128) {
    pl::tma_load_2d(dst + 2 * blk * 128, map, col + 128, row, bar);
    pl::tma_load_2d(dst + 3 * blk * 128, map, col + 192, row, bar);
  }
}

// Claim one stage for a tile: wait until `empty` passes `parity` (the core has freed it),
// then expect `bytes` on `full`. The caller issues the tile's TMA next, with completion on
// `full`.
__device__ __forceinline__ void claim_stage(uint64_t* full, uint64_t* empty, unsigned parity, unsigned bytes) {
  pl::mbar_wait(empty, parity);
  pl::mbar_arrive_expect_tx(full, bytes);
}

// Work tile `it`'s Q block (rows row .. row + blk - 1 of `map`) into its stage of ring q, once the
// core has freed that stage.
__device__ __forceinline__ void load_q(const Rings& r, unsigned it, const pl::TensorMap* map, int row, unsigned d,
                                       unsigned blk, int col = 0) {
  const unsigned qs = it % r.q_depth, bytes = blk * d * 2;
  claim_stage(r.q_full + qs, r.q_empty + qs, ((it / r.q_depth) & 1u) ^ 1u, bytes);
  load_tile(r.q_buf + qs * bytes, map, row, r.q_full + qs, d, blk, col);
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
