// attn_variant.h — helpers the variant packages (attn_<variant>.cu, each built as package
// attn_mask) share: the prefill tile order and the callable signatures of attn.h.
#pragma once
#include <math.h>
#include <stdint.h>

#include "attn.h"

// Prefill, persistent: the (q_len / 128) x bh tiles in the order last Q block first (the most
// KV blocks, for causal masks), every head's before the next Q block's; CTA c of G takes one
// tile of each run of G, boustrophedon (t even: c, t odd: G - 1 - c), so a CTA that took a
// long tile in one run takes a short one in the next: a causal grid's CTAs end within ~0.1%
// of each other (round-robin c + tG: 6-11% apart at S = 4K..8K, H = 32).
#define ATTN_PREFILL_TILE                                                                       \
  PL_CALLABLE_RET(unsigned, tile)(unsigned pl_inst, unsigned t, unsigned q_len, unsigned bh,     \
                                  unsigned* info) {                                              \
    const unsigned qbs = q_len / attn::BLOCK, g = gridDim.x;                                     \
    const unsigned lin = t * g + ((t & 1u) ? g - 1 - blockIdx.x : blockIdx.x);                   \
    if (lin >= qbs * bh) return 0u; /* later runs start past it too: this CTA is done */        \
    info[0] = qbs - 1 - lin / bh;                                                                \
    info[1] = lin % bh;                                                                          \
    info[2] = 0;                                                                                 \
    info[3] = 1;                                                                                 \
    return 1u;                                                                                   \
  }
#define ATTN_KV_COUNT                                                                            \
  PL_CALLABLE_RET(unsigned, kv_count)(unsigned pl_inst, unsigned qb, unsigned bh, unsigned split, \
                                      unsigned q_len, unsigned kv_len, const void* aux)
#define ATTN_KV_BLOCK                                                                             \
  PL_CALLABLE_RET(unsigned, kv_block)(unsigned pl_inst, unsigned qb, unsigned bh, unsigned split,  \
                                      unsigned i, unsigned q_len, unsigned kv_len, const void* aux)
#define ATTN_SCORE \
  PL_CALLABLE_RET(float, score)(unsigned pl_inst, float s, unsigned q, unsigned k, unsigned bh, const void* aux)

namespace attn_variant {
__device__ __forceinline__ unsigned ld(const void* aux, unsigned word) {
  return __ldg(static_cast<const unsigned*>(aux) + word);
}
__device__ __forceinline__ float ldf(const void* aux, unsigned word) {
  return __ldg(static_cast<const float*>(aux) + word);
}
}  // namespace attn_variant
