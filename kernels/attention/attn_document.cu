// attn_document.cu — variant: document (packed variable-length) masking: query q sees key k
// iff doc[b][q] == doc[b][k] (ids non-decreasing). aux (u32 words): [0] S  [1] H  [2] QB
// [3] off_lo  [4] off_hi ([B][QB] KV blocks [lo, hi) a Q block visits)  [5] off_flo
// [6] off_fhi ([B][QB] the FULL ones [flo, fhi): Q block and KV block in one document)
// [7] off_start  [8] off_end ([B][S] token range [start, end) of token q's document)
// [9] off_batch ([B*H] the batch row b of each bh: a load, not a division by H, which LTO and
// the single-unit control compiled differently)  [10] off_starts  [11] off_tiles (the host's
// schedule of the persistent CTAs: ATTN_LISTED_TILE, attention_masks.document_aux).
// A PARTIAL block's bits per row: keys in [start(q), end(q)) (two aux words, no per-score load).
#define PL_COMPONENT attn_mask
#include <pipelink.h>

#include "attn_variant.h"

namespace {
using attn_variant::ld;
__device__ __forceinline__ unsigned batch(unsigned bh, const void* aux) { return ld(aux, ld(aux, 9) + bh); }
}  // namespace

ATTN_LISTED_TILE(10)  // tiles of uneven length (document sizes): the host's schedule
ATTN_KV_COUNT {
  (void)ATTN_BLOCK;  // the host's tables count blocks of block_q = 128 rows (attention_masks.py)
  const unsigned r = batch(bh, aux) * ld(aux, 2) + qb;
  return ld(aux, ld(aux, 4) + r) - ld(aux, ld(aux, 3) + r);
}
ATTN_KV_BLOCK {
  const unsigned r = batch(bh, aux) * ld(aux, 2) + qb;
  const unsigned kb = ld(aux, ld(aux, 3) + r) + i;
  const unsigned flo = ld(aux, ld(aux, 5) + r), fhi = ld(aux, ld(aux, 6) + r);
  return kb | (kb - flo >= fhi - flo ? attn::PARTIAL : 0u);  // FULL iff flo <= kb < fhi (no branch)
}
ATTN_MASK_BITS {
  const unsigned t = batch(bh, aux) * ld(aux, 0) + q;
  return attn_variant::range_bits(k0, (int)ld(aux, ld(aux, 7) + t), (int)ld(aux, ld(aux, 8) + t));
}
ATTN_NO_SCORE_MOD_WITH(attn::EARLY_MASK)  // mask words from aux: asked as the GEMMs go out
