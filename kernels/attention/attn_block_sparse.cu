// attn_block_sparse.cu — variant: a block mask (attention.py's BlockMask, FlexAttention-like)
// in the caller-lent aux buffer of u32 words:
//   [0] QB  [1] KB  [2] MAXK  [3] H  [4] mask_B  [5] mask_H  (1 = broadcast)
//   [6] off_counts: [mask_B*mask_H][QB]          KV blocks kept per Q block
//   [7] off_idx:    [mask_B*mask_H][QB][MAXK]    kept block | 1 << 31 if PARTIAL
//   [8] off_pslot:  [mask_B*mask_H][QB][MAXK]    bits slot of the i-th kept block (PARTIAL)
//   [9] off_bits:   [slots][block_q rows][4 qd]      the predicate's bits in mask_bits order: bit
//                   2 nt + e of word (row, qd) = column 8 nt + 2 qd + e of the block
// A PARTIAL block costs each thread two word loads per block (not one per score).
#define PL_COMPONENT attn_mask
#include <pipelink.h>

#include "attn_variant.h"

namespace {
using attn_variant::ld;
__device__ __forceinline__ unsigned mask_row(unsigned qb, unsigned bh, const void* aux) {
  const unsigned h = ld(aux, 3), mb = ld(aux, 4), mh = ld(aux, 5);
  const unsigned b = mb == 1 ? 0 : bh / h, hh = mh == 1 ? 0 : bh % h;
  return (b * mh + hh) * ld(aux, 0) + qb;
}
}  // namespace

ATTN_PREFILL_TILE_HEAD_MAJOR  // L2 reuse of each head's K/V across its Q blocks
ATTN_KV_COUNT { return ld(aux, ld(aux, 6) + mask_row(qb, bh, aux)); }
ATTN_KV_BLOCK { return ld(aux, ld(aux, 7) + mask_row(qb, bh, aux) * ld(aux, 2) + i); }
ATTN_MASK_BITS {
  const unsigned slot = ld(aux, ld(aux, 8) + mask_row(qb, bh, aux) * ld(aux, 2) + i);
  return ld(aux, ld(aux, 9) + slot * (ATTN_BLOCK * 4) + (q % ATTN_BLOCK) * 4 + (k0 % 8) / 2);
}
ATTN_NO_SCORE_MOD_WITH(attn::EARLY_MASK)  // mask words from aux: asked as the GEMMs go out
