// dec_attn.h — what both attention packages of the decode megakernel (dec_attn_split.cu,
// dec_attn_simple.cu) share: the role's size, the RoPE callable and the cache layout.
//
// KV cache (`kcache`, `vcache`, bf16): [layers][kv_heads][max_seq][head_dim], position-major
// within a head, so a head's keys are one contiguous run. Position `pos` (the step's
// state[ST_POS]) is written by the step that computes it, and read by later steps only.
#pragma once
#include <stdint.h>

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
}  // namespace dec_attn
