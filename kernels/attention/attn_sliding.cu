// attn_sliding.cu — variant: causal sliding window of W keys (k <= q and q - k < W), W = aux
// word 0 (q_len == kv_len). Visits the KV blocks that meet the band; blocks wholly inside it
// are FULL, the others get the band's bits per row (one aux word per PARTIAL block).
#define PL_COMPONENT attn_mask
#include <pipelink.h>

#include "attn_variant.h"

namespace {
__device__ __forceinline__ unsigned first_block(unsigned qb, const void* aux, unsigned blk) {
  const unsigned w = attn_variant::ld(aux, 0), q0 = qb * blk;
  return q0 + 1 > w ? (q0 + 1 - w) / blk : 0;  // block of key q0 - W + 1
}
}  // namespace

ATTN_PREFILL_TILE
ATTN_KV_COUNT { return qb - first_block(qb, aux, ATTN_BLOCK) + 1; }
ATTN_KV_BLOCK {
  const unsigned kb = first_block(qb, aux, ATTN_BLOCK) + i, w = attn_variant::ld(aux, 0);
  const bool inside = kb < qb && (qb - kb + 1) * ATTN_BLOCK - 1 < w;  // (q0 + 127) - k0 < W
  return inside ? kb : (kb | attn::PARTIAL);
}
ATTN_MASK_BITS { return attn_variant::range_bits(k0, (int)q + 1 - (int)attn_variant::ld(aux, 0), (int)q + 1); }
ATTN_NO_SCORE_MOD
