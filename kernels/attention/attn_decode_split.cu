// attn_decode_split.cu — variant: split-KV decode. CTA (split, bh) of a grid [splits, B*H]
// visits the split-th of `splits` equal contiguous ranges of the head's KV blocks; all
// q_len (<= 16) query rows see every key (FULL blocks; the last one PARTIAL when kv_len is
// not a whole number of blocks). attn_combine merges the splits.
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
  const unsigned nkv = (kv_len + ATTN_BLOCK - 1) / ATTN_BLOCK, ns = gridDim.x;
  return (split + 1) * nkv / ns - split * nkv / ns;
}
// The last block is PARTIAL when kv_len is not a whole number of blocks: its keys past kv_len
// are masked (the loader's rows there are the next head's, or TMA's zeros past the tensor).
ATTN_KV_BLOCK {
  const unsigned b = split * ((kv_len + ATTN_BLOCK - 1) / ATTN_BLOCK) / gridDim.x + i;
  return (b + 1) * ATTN_BLOCK > kv_len ? b | attn::PARTIAL : b;
}
// Only the tail block asks: keys below kv_len (aux = {bh, kv_len}, attention.py's decode aux).
ATTN_MASK_BITS { return attn_variant::below(k0, (int)attn_variant::ld(aux, 1)); }
ATTN_NO_SCORE_MOD
