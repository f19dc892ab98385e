// attn_variant.h — helpers the variant packages (attn_<variant>.cu, each built as package
// attn_mask) share: the prefill tile order and the callable signatures of attn.h.
#pragma once
#include <math.h>
#include <stdint.h>

#include "attn.h"

// Prefill: one CTA per (Q block, batch*head). CTAs start in launch order (x fastest), and the
// launch order walks the Q blocks from the last (the most KV blocks, for causal masks) down,
// every head's before the next Q block's: the long tiles go first over the whole grid, the
// short ones fill the tail.
#define ATTN_PREFILL_TILE                                                   \
  PL_CALLABLE(tile)(unsigned pl_inst, unsigned* info) {                     \
    const unsigned lin = blockIdx.x + blockIdx.y * gridDim.x;               \
    info[0] = gridDim.x - 1 - lin / gridDim.y;                              \
    info[1] = lin % gridDim.y;                                              \
    info[2] = 0;                                                            \
    info[3] = 1;                                                            \
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
