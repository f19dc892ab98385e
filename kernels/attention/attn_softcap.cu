// attn_softcap.cu — variant: causal attention with tanh soft-capping of the scores
// (Gemma 2): score = cap * tanh(score / cap), cap = aux float 0. Every block is modified.
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

ATTN_PREFILL_TILE
ATTN_KV_COUNT { return qb + 1; }
ATTN_KV_BLOCK { return i | attn::PARTIAL; }
ATTN_SCORE {
  const float cap = attn_variant::ldf(aux, 0);
  return k <= q ? cap * tanh_approx(s / cap) : -INFINITY;
}
