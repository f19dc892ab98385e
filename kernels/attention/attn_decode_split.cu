// attn_decode_split.cu — variant: split-KV decode. CTA (split, bh) of a grid [splits, B*H]
// visits the split-th of `splits` equal contiguous ranges of the head's KV blocks; all
// q_len (<= 16) query rows see every key (FULL blocks). attn_combine merges the splits.
#define PL_COMPONENT attn_mask
#include <pipelink.h>

#include "attn_variant.h"

ATTN_TILE_SIGNATURE {
  info[0] = 0;
  info[1] = blockIdx.y;
  info[2] = blockIdx.x;
  info[3] = gridDim.x;
  return t == 0;  // one tile per CTA
}
ATTN_KV_COUNT {
  const unsigned nkv = kv_len / ATTN_BLOCK, ns = gridDim.x;
  return (split + 1) * nkv / ns - split * nkv / ns;
}
ATTN_KV_BLOCK { return split * (kv_len / ATTN_BLOCK) / gridDim.x + i; }
ATTN_MASK_BITS { return ~0u; }
ATTN_NO_SCORE_MOD
