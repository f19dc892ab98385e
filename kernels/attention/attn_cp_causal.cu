// attn_cp_causal.cu — variant (package attn_mask) for context-parallel causal attention over N
// ranks with zigzag chunks (attn_cp.h). Q is this rank's 2C local rows; the KV blocks a Q block
// visits are the global blocks at or before its own (causal over the whole sequence), listed in
// ring order of their owner rank: r, r-1, ..., r-N+1 (each owner's low chunk, then its high one).
// kv_block returns a *global* KV block index (the loader maps it to its owner's region) from a
// table in aux; score compares global positions, so only the diagonal block is partial. World 1
// is plain causal attention, block for block.
#define PL_COMPONENT attn_mask
#include <pipelink.h>

#include "attn_cp.h"
#include "attn_variant.h"

using attn_variant::ld;

ATTN_PREFILL_TILE
// aux words [8 + qb * row, 8 + (qb + 1) * row), row = aux[7]: the count, then the list (built once on
// the host, attention_cp.visit_table): one dependent load per call, as cheap as the core needs
ATTN_KV_COUNT { return ld(aux, 8 + qb * ld(aux, 7)); }
ATTN_KV_BLOCK { return ld(aux, 9 + qb * ld(aux, 7) + i); }
ATTN_SCORE {  // q: local row; k: global key (the block index kv_block returned, times 128)
  const unsigned n = ld(aux, 0), r = ld(aux, 1), c = ld(aux, 2);
  const unsigned gq = q < c ? r * c + q : (2 * n - 1 - r) * c + (q - c);
  return k <= gq ? s : -INFINITY;
}
