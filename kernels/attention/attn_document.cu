// attn_document.cu — variant: document (packed variable-length) masking: query q sees key k
// iff doc[b][q] == doc[b][k]. aux (u32 words): [0] S  [1] H  [2] QB  [3] off_doc ([B][S]
// document ids, non-decreasing)  [4] off_lo  [5] off_hi ([B][QB] KV block range of a Q block).
// A block whose first and last query and key are all in one document needs no mask.
#define PL_COMPONENT attn_mask
#include <pipelink.h>

#include "attn_variant.h"

namespace {
using attn_variant::ld;
__device__ __forceinline__ unsigned doc(const void* aux, unsigned b, unsigned pos) {
  return ld(aux, ld(aux, 3) + b * ld(aux, 0) + pos);
}
}  // namespace

ATTN_PREFILL_TILE
ATTN_KV_COUNT {
  const unsigned r = (bh / ld(aux, 1)) * ld(aux, 2) + qb;
  return ld(aux, ld(aux, 5) + r) - ld(aux, ld(aux, 4) + r);
}
ATTN_KV_BLOCK {
  const unsigned b = bh / ld(aux, 1), r = b * ld(aux, 2) + qb;
  const unsigned kb = ld(aux, ld(aux, 4) + r) + i, q0 = qb * attn::BLOCK, k0 = kb * attn::BLOCK;
  const unsigned d = doc(aux, b, q0);
  const bool one = doc(aux, b, q0 + attn::BLOCK - 1) == d && doc(aux, b, k0) == d && doc(aux, b, k0 + attn::BLOCK - 1) == d;
  return one ? kb : (kb | attn::PARTIAL);
}
ATTN_SCORE {
  const unsigned b = bh / ld(aux, 1);
  return doc(aux, b, q) == doc(aux, b, k) ? s : -INFINITY;
}
