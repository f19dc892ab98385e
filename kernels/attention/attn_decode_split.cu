// attn_decode_split.cu — variant: split-KV decode. CTA (split, bh) of a grid [splits, B*H]
// visits the split-th of `splits` equal contiguous ranges of the head's KV blocks; all
// q_len (<= 16) query rows see every key (FULL blocks; the last one PARTIAL when kv_len is
// not a whole number of blocks). attn_combine merges the splits.
#define PL_COMPONENT attn_mask
#include <pipelink.h>

#include "attn_variant.h"

ATTN_SPLIT_TILE
ATTN_KV_COUNT { return attn_variant::split_count((kv_len + ATTN_BLOCK - 1) / ATTN_BLOCK, split); }
// The last block is PARTIAL when kv_len is not a whole number of blocks: its keys past kv_len
// are masked (the loader's rows there are the next head's, or TMA's zeros past the tensor).
ATTN_KV_BLOCK {
  return attn_variant::tail_kind(attn_variant::split_first((kv_len + ATTN_BLOCK - 1) / ATTN_BLOCK, split) + i,
                                 kv_len, ATTN_BLOCK);
}
// Only the tail block asks: keys below kv_len (aux = {bh, kv_len}, attention.py's decode aux).
ATTN_MASK_BITS { return attn_variant::below(k0, (int)attn_variant::ld(aux, 1)); }
ATTN_NO_SCORE_MOD
