// attn_cp_causal.cu — variant (package attn_mask) for context-parallel causal attention over N
// ranks with zigzag chunks (attn_cp.h). Q is this rank's 2C local rows; the KV blocks a Q block
// visits are the global blocks at or before its own (causal over the whole sequence), listed in
// ring order of their owner rank: r, r-1, ..., r-N+1 (each owner's low chunk, then its high one).
// kv_block returns a *global* KV block index (the loader maps it to its owner's region) from a
// table in aux; only the Q block's own global block (the diagonal) is PARTIAL, and mask_bits
// compares global positions. World 1 is plain causal attention, block for block.
#define PL_COMPONENT attn_mask
#include <pipelink.h>

#include "attn_cp.h"
#include "attn_variant.h"

using attn_variant::ld;

namespace attn_cp_causal {
// Global position of local Q row q (aux words 0..2: world n, rank r, chunk rows c).
__device__ __forceinline__ unsigned global_row(const void* aux, unsigned q) {
  const unsigned n = ld(aux, 0), r = ld(aux, 1), c = ld(aux, 2);
  return q < c ? r * c + q : (2 * n - 1 - r) * c + (q - c);
}
}  // namespace attn_cp_causal

ATTN_PREFILL_TILE
// aux words [8 + qb * row, 8 + (qb + 1) * row), row = aux[7]: the count, then the list (built once on
// the host, attention_cp.visit_table): one dependent load per call, as cheap as the core needs
ATTN_KV_COUNT { return ld(aux, 8 + qb * ld(aux, 7)); }
ATTN_KV_BLOCK {
  const unsigned b = ld(aux, 9 + qb * ld(aux, 7) + i);
  return b == attn_cp_causal::global_row(aux, qb * ATTN_BLOCK) / ATTN_BLOCK ? (b | attn::PARTIAL) : b;
}
// q: local row; k0: global key (the block index kv_block returned, times 128, plus the column)
ATTN_MASK_BITS { return attn_variant::below(k0, (int)attn_cp_causal::global_row(aux, q) + 1); }
ATTN_NO_SCORE_MOD
