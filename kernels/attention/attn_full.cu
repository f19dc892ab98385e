// attn_full.cu — variant: no mask; every KV block FULL (no mask or score math), but for the
// last one when kv_len is not a whole number of blocks.
#define PL_COMPONENT attn_mask
#include <pipelink.h>

#include "attn_variant.h"

ATTN_PREFILL_TILE
ATTN_KV_COUNT { return (kv_len + ATTN_BLOCK - 1) / ATTN_BLOCK; }
// The last block is PARTIAL when kv_len is not a whole number of blocks: its keys past kv_len
// (the next head's rows, or TMA's zeros past the tensor) are masked.
ATTN_KV_BLOCK { return attn_variant::tail_kind(i, kv_len, ATTN_BLOCK); }
ATTN_MASK_BITS { return attn_variant::below(k0, (int)attn_variant::ld(aux, 0)); }  // aux = {kv_len}
ATTN_NO_SCORE_MOD
