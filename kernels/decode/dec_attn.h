// dec_attn.h — what both attention packages of the decode megakernel (dec_attn_split.cu,
// dec_attn_simple.cu) share: the role's size, the RoPE callable and the cache layout.
//
// KV cache (`kcache`, `vcache`, bf16): [batch][layers][kv_heads][max_seq][head_dim], position-major
// within a head, so a head's keys are one contiguous run. Position `pos` (a sequence's
// state[4 b + ST_POS]) is written by the step that computes it, and read by later steps only.
#pragma once
#include <stdint.h>

#include "dec.h"

// The handles both attention packages declare (a macro, for the component being compiled); each
// adds its own shared memory and workspaces.
#define DEC_ATTN_DECLARATIONS()                                  \
  DEC_MODEL_FACTS();                                             \
  PL_DECLARE_FACT_BOOL(qk_norm);                                 \
  PL_DECLARE_SMEM(q);                                            \
  PL_DECLARE_SMEM(kv);                                           \
  PL_DECLARE_SMEM(o);                                            \
  PL_DECLARE_BARRIER(attn);                                      \
  PL_DECLARE_WORKSPACE(sync);                                    \
  PL_DECLARE_WORKSPACE(qkv);                                     \
  PL_DECLARE_WORKSPACE(ao);                                      \
  PL_DECLARE_CALL(rope, float*, unsigned, unsigned, const float*); \
  PL_DECLARE_CALL(headnorm, float*, unsigned, const float*, float)

namespace dec_attn {
constexpr unsigned THREADS = 128;  // the role's 4 warps
constexpr unsigned MAX_GROUP = 8;  // [fact.heads] / [fact.kv_heads] accept: query heads per KV head

struct Params {  // [params]: kcache, vcache = "ptr", max_seq = "u32", inv_freq, state = "ptr", op_begin, op_end = "u32",
                 // qk_norms = "ptr", eps = "f32"
  uint16_t* kcache;
  uint16_t* vcache;
  unsigned max_seq;
  const float* inv_freq;
  int* state;
  unsigned op_begin, op_end;
  const float* qk_norms;  // f32 [layers][2][head_dim]: q_norm, k_norm (read with the fact qk_norm only)
  float eps;
};

__device__ __forceinline__ float bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ uint16_t to_bf16(float f) {  // round to nearest even (finite values)
  const unsigned u = __float_as_uint(f);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
// A task's prologue, the same in both packages: the group's queries and the KV head's new key and
// value from qkv into shared memory (f32), then Qwen3's head norm (qk_norm) and RoPE, each of
// which ends with a barrier. sync_role: the role's barrier; headnorm(v, n, which) and rope(v, n):
// the dec_rope callables (which: 0 for the queries' weight, 1 for the key's).
template <class Sync, class HeadNorm, class Rope>
__device__ __forceinline__ void load_heads(float* q, float* kn, float* vn, const float* qkv, const dec::Model& m,
                                           unsigned kvh, unsigned t, bool qk_norm, Sync sync_role,
                                           HeadNorm headnorm, Rope rope) {
  const unsigned hd = m.head_dim, g = m.heads / m.kv_heads;
  for (unsigned i = t; i < g * hd; i += THREADS) q[i] = __ldcg(qkv + kvh * g * hd + i);
  for (unsigned i = t; i < hd; i += THREADS) {
    kn[i] = __ldcg(qkv + m.q_dim() + kvh * hd + i);
    vn[i] = __ldcg(qkv + m.q_dim() + m.kv_dim() + kvh * hd + i);
  }
  sync_role();
  if (qk_norm) {  // (a fact: folds away for Llama)
    headnorm(q, g, 0u);
    headnorm(kn, 1u, 1u);
  }
  rope(q, g);
  rope(kn, 1u);
}
}  // namespace dec_attn
