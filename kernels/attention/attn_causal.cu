// attn_causal.cu — variant: causal mask (key k visible to query q iff k <= q; q_len == kv_len).
// KV blocks 0 .. q_block; only the diagonal block is PARTIAL (its bits: keys k <= q).
#define PL_COMPONENT attn_mask
#include <pipelink.h>

#include "attn_variant.h"

ATTN_CAUSAL_TILE(0u)  // aux: the host's schedule (attention_masks.causal_schedule)
ATTN_KV_COUNT { return qb + 1; }
ATTN_KV_BLOCK { return i == qb ? (i | attn::PARTIAL) : i; }
ATTN_MASK_BITS { return attn_variant::below(k0, (int)q + 1); }
ATTN_NO_SCORE_MOD
