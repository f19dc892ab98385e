// attn_alibi.cu — variant: causal attention with ALiBi (Press et al.): score + slope_h (k - q),
// slope_h = aux float [1 + h] of head h = bh % H (H = aux word 0; attention.py's default
// slopes 2^(-8 (h + 1) / H)), read once per tile (mod_params); the causal mask as
// attn_causal.cu (only the diagonal block is PARTIAL) and its tile schedule (aux words 1 + H on).
#define PL_COMPONENT attn_mask
#include <pipelink.h>

#include "attn_variant.h"

ATTN_CAUSAL_TILE(1u + attn_variant::ld(aux, 0))  // aux: [H, slopes, the host's schedule]
ATTN_KV_COUNT { return qb + 1; }
ATTN_KV_BLOCK { return i == qb ? (i | attn::PARTIAL) : i; }
ATTN_MASK_BITS { return attn_variant::below(k0, (int)q + 1); }
ATTN_FEATURES(attn::SCORE_MOD)
ATTN_MOD_PARAMS {
  prm[0] = attn_variant::ldf(aux, 1 + bh % attn_variant::ld(aux, 0));
  prm[1] = 0.f;
}
ATTN_SCORE_MOD { return fmaf(p0, (float)((int)k - (int)q), x); }
