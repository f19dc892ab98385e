// attn_decode_paged.cu — variant: split-KV decode over a paged KV cache (issue 42). CTA
// (split, bh) of a grid [splits, B * kv_heads] visits the split-th of `splits` equal ranges of
// its sequence's KV blocks (attn_decode_split.cu's cut, per sequence): aux = {work heads a
// sequence (its KV heads: a group's query heads are rows), q_len, seq_lens[B]}, each length
// clamped to kv_len (max_pages * page_size). The last block is
// PARTIAL when the length is not a whole number of blocks. A split with no blocks exports an
// empty row set (l = 0), which attn_combine's merge weighs zero.
#define PL_COMPONENT attn_mask
#include <pipelink.h>

#include "attn_variant.h"

namespace {
__device__ __forceinline__ unsigned seq_len(const void* aux, unsigned bh) {
  return attn_variant::ld(aux, 2 + bh / attn_variant::ld(aux, 0));
}
}  // namespace

ATTN_SPLIT_TILE
ATTN_KV_COUNT {
  return attn_variant::split_count((min(seq_len(aux, bh), kv_len) + ATTN_BLOCK - 1) / ATTN_BLOCK, split);
}
ATTN_KV_BLOCK {
  const unsigned seq = min(seq_len(aux, bh), kv_len);
  return attn_variant::tail_kind(attn_variant::split_first((seq + ATTN_BLOCK - 1) / ATTN_BLOCK, split) + i, seq,
                                 ATTN_BLOCK);
}
ATTN_MASK_BITS { return attn_variant::below(k0, (int)seq_len(aux, bh)); }  // the tail block only
ATTN_NO_SCORE_MOD
