// attn_softcap.cu — variant: causal attention with tanh soft-capping of the scores
// (Gemma 2): score = cap * tanh(score / cap), cap = aux float 0, read once per tile
// (mod_params); the causal mask and tile schedule (aux words 1 on) as attn_causal.cu.
#define PL_COMPONENT attn_mask
#include <pipelink.h>

#include "attn_variant.h"

namespace {
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
}  // namespace

ATTN_CAUSAL_TILE(1u)  // aux: [cap, the host's schedule]
ATTN_KV_COUNT { return qb + 1; }
ATTN_KV_BLOCK { return i == qb ? (i | attn::PARTIAL) : i; }
ATTN_MASK_BITS { return attn_variant::below(k0, (int)q + 1); }
ATTN_FEATURES(attn::SCORE_MOD)
ATTN_MOD_PARAMS {
  const float cap = attn_variant::ldf(aux, 0);
  prm[0] = cap;
  prm[1] = 1.f / cap;
}
ATTN_SCORE_MOD { return p0 * tanh_approx(x * p1); }
