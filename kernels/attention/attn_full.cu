// attn_full.cu — variant: no mask; every KV block, all FULL (no mask or score math).
#define PL_COMPONENT attn_mask
#include <pipelink.h>

#include "attn_variant.h"

ATTN_PREFILL_TILE
ATTN_KV_COUNT { return kv_len / ATTN_BLOCK; }
ATTN_KV_BLOCK { return i; }
ATTN_MASK_BITS { return ~0u; }
ATTN_NO_SCORE_MOD
