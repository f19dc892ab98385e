// attn_prefill_paged.cu — variant: chunked prefill over a cached prefix in a paged KV cache
// (issue 42). Each of the B sequences ends with the q_len new tokens q holds; its KV (prefix and
// chunk, seq_lens[b] keys, clamped to kv_len = max_pages * page_size) is in pages. Query row i of
// the chunk is position off + i, off = seq_len - q_len, and sees keys k <= off + i (causal,
// bottom-right aligned as FlashAttention's). aux = {H, q_len, seq_lens[B]}: tile bh is head
// bh % H of sequence bh / H (mask_bits is given neither q_len nor kv_len, so both come from aux). KV blocks 0 .. the block of the tile's last row's last key; PARTIAL where
// the diagonal or the sequence's end crosses a block.
#define PL_COMPONENT attn_mask
#include <pipelink.h>

#include "attn_variant.h"

namespace {
// Keys of sequence bh / H (at most kv_len); the chunk's query rows sit at its end.
__device__ __forceinline__ unsigned seq_keys(const void* aux, unsigned bh, unsigned kv_len) {
  return min(attn_variant::ld(aux, 2 + bh / attn_variant::ld(aux, 0)), kv_len);
}
__device__ __forceinline__ unsigned offset(unsigned keys, unsigned q_len) { return keys > q_len ? keys - q_len : 0u; }
}  // namespace

ATTN_PREFILL_TILE
// Blocks through the last key the tile's last row sees (position off + min(qb * 128 + 127, q_len - 1)).
ATTN_KV_COUNT {
  const unsigned keys = seq_keys(aux, bh, kv_len);
  const unsigned seen = min(offset(keys, q_len) + min(qb * ATTN_BLOCK + ATTN_BLOCK, q_len), keys);
  return (seen + ATTN_BLOCK - 1) / ATTN_BLOCK;
}
// FULL iff every key of block i is visible to the tile's first row (position off + qb * 128) and
// below the sequence's end.
ATTN_KV_BLOCK {
  const unsigned keys = seq_keys(aux, bh, kv_len);
  const unsigned first = min(offset(keys, q_len) + qb * ATTN_BLOCK + 1, keys);
  return (i + 1) * ATTN_BLOCK <= first ? i : (i | attn::PARTIAL);
}
// Chunk row q sees keys below min(off + q + 1, the sequence's end).
ATTN_MASK_BITS {
  const unsigned keys = attn_variant::ld(aux, 2 + bh / attn_variant::ld(aux, 0));
  return attn_variant::below(k0, (int)min(offset(keys, attn_variant::ld(aux, 1)) + q + 1, keys));
}
ATTN_NO_SCORE_MOD
