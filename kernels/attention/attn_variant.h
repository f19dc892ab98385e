// attn_variant.h — helpers the variant packages (attn_<variant>.cu, each built as package
// attn_mask) share: the prefill tile order and the callable signatures of attn.h.
#pragma once
#include <math.h>
#include <stdint.h>

#include "attn.h"

// The tile rows: the core's fact (every variant contract reads it, accept = [128]: mask_bits
// hands 32 bits of a row to each of 4 threads, 128 keys). pl_inst is in scope in a callable.
PL_DECLARE_FACT(block_q);
#define ATTN_BLOCK PL_FACT(block_q)

// Prefill, persistent: the ceil(q_len / 128) x bh tiles (a last partial Q block's rows past
// q_len are computed and not stored: attn_store) in the order last Q block first (the most
// KV blocks, for causal masks), every head's before the next Q block's; CTA c of G takes one
// tile of each run of G, boustrophedon (t even: c, t odd: G - 1 - c), so a CTA that took a
// long tile in one run takes a short one in the next: a causal grid's CTAs end within ~0.1%
// of each other (round-robin c + tG: 6-11% apart at S = 4K..8K, H = 32).
#define ATTN_TILE_SIGNATURE                                                                    \
  PL_CALLABLE_RET(unsigned, tile)(unsigned pl_inst, unsigned t, unsigned q_len, unsigned bh,    \
                                  const void* aux, unsigned* info)
#define ATTN_PREFILL_TILE                                                                       \
  ATTN_TILE_SIGNATURE {                                                                         \
    const unsigned qbs = (q_len + ATTN_BLOCK - 1) / ATTN_BLOCK, g = gridDim.x;                   \
    const unsigned lin = t * g + ((t & 1u) ? g - 1 - blockIdx.x : blockIdx.x);                   \
    if (lin >= qbs * bh) return 0u; /* later runs start past it too: this CTA is done */        \
    info[0] = qbs - 1 - lin / bh;                                                                \
    info[1] = lin % bh;                                                                          \
    info[2] = 0;                                                                                 \
    info[3] = 1;                                                                                 \
    return 1u;                                                                                   \
  }
// The same boustrophedon, head-major: the G CTAs of a run share one or two heads, so those
// heads' K and V stay in L2 while every Q block of them reads its KV blocks (block-sparse:
// Q-block-major order re-read K/V from DRAM, 78% of DRAM bandwidth at S = 8K).
#define ATTN_PREFILL_TILE_HEAD_MAJOR                                                            \
  ATTN_TILE_SIGNATURE {                                                                         \
    const unsigned qbs = (q_len + ATTN_BLOCK - 1) / ATTN_BLOCK, g = gridDim.x;                   \
    const unsigned lin = t * g + ((t & 1u) ? g - 1 - blockIdx.x : blockIdx.x);                   \
    if (lin >= qbs * bh) return 0u;                                                              \
    info[0] = qbs - 1 - lin % qbs;                                                               \
    info[1] = lin / qbs;                                                                         \
    info[2] = 0;                                                                                 \
    info[3] = 1;                                                                                 \
    return 1u;                                                                                   \
  }
// The causal family: the host's list schedule at aux word W when that word is non-zero
// ([W] offset of the [G + 1] list starts, [W + 1] offset of the tiles, as ATTN_LISTED_TILE; made by
// attention_masks.causal_schedule: the (batch, head) rows in sections whose K/V fit half the L2
// (at least 8 rows), each section's Q blocks longest first, every tile to the CTA free first),
// else ATTN_PREFILL_TILE's order (a shape the host makes no schedule for). Q-block-major over all
// 32 heads read 56 GB of K/V from DRAM at S = 32K (L2 hit 34%; the sections: 0.8 GB).
#define ATTN_CAUSAL_TILE(W)                                                                     \
  ATTN_TILE_SIGNATURE {                                                                         \
    const unsigned* a = static_cast<const unsigned*>(aux);                                      \
    const unsigned w0 = (W), starts = __ldg(a + w0);                                            \
    if (starts != 0u) {                                                                         \
      const unsigned s = __ldg(a + starts + blockIdx.x) + t;                                    \
      if (s >= __ldg(a + starts + blockIdx.x + 1)) return 0u;                                   \
      const unsigned w = __ldg(a + __ldg(a + w0 + 1) + s);                                      \
      info[0] = w >> 16;                                                                        \
      info[1] = w & 0xFFFFu;                                                                    \
    } else {                                                                                    \
      const unsigned qbs = (q_len + ATTN_BLOCK - 1) / ATTN_BLOCK, g = gridDim.x;                 \
      const unsigned lin = t * g + ((t & 1u) ? g - 1 - blockIdx.x : blockIdx.x);                 \
      if (lin >= qbs * bh) return 0u;                                                            \
      info[0] = qbs - 1 - lin / bh;                                                              \
      info[1] = lin % bh;                                                                        \
    }                                                                                           \
    info[2] = 0;                                                                                \
    info[3] = 1;                                                                                \
    return 1u;                                                                                  \
  }
// A schedule the host made (aux words: [W] offset of the [G + 1] list starts, [W + 1] offset of
// the tiles, each q_block << 16 | bh): CTA c takes tiles start[c] .. start[c + 1] - 1 in order
// (attention_masks.document_aux: sections of heads, each longest first, each tile to the CTA free first).
#define ATTN_LISTED_TILE(W)                                                                     \
  ATTN_TILE_SIGNATURE {                                                                         \
    const unsigned* a = static_cast<const unsigned*>(aux);                                      \
    const unsigned s = __ldg(a + __ldg(a + (W)) + blockIdx.x) + t;                               \
    if (s >= __ldg(a + __ldg(a + (W)) + blockIdx.x + 1)) return 0u;                              \
    const unsigned w = __ldg(a + __ldg(a + (W) + 1) + s);                                        \
    info[0] = w >> 16;                                                                           \
    info[1] = w & 0xFFFFu;                                                                       \
    info[2] = 0;                                                                                 \
    info[3] = 1;                                                                                 \
    return 1u;                                                                                   \
  }
// Split-KV decode, uniform: CTA (split, bh) of a grid [splits, heads], one tile each.
#define ATTN_SPLIT_TILE                                                                         \
  ATTN_TILE_SIGNATURE {                                                                         \
    info[0] = 0;                                                                                \
    info[1] = blockIdx.y;                                                                       \
    info[2] = blockIdx.x;                                                                       \
    info[3] = gridDim.x;                                                                        \
    return t == 0; /* one tile per CTA */                                                       \
  }
#define ATTN_KV_COUNT                                                                            \
  PL_CALLABLE_RET(unsigned, kv_count)(unsigned pl_inst, unsigned qb, unsigned bh, unsigned split, \
                                      unsigned q_len, unsigned kv_len, const void* aux)
#define ATTN_KV_BLOCK                                                                             \
  PL_CALLABLE_RET(unsigned, kv_block)(unsigned pl_inst, unsigned qb, unsigned bh, unsigned split,  \
                                      unsigned i, unsigned q_len, unsigned kv_len, const void* aux)
#define ATTN_MASK_BITS                                                                              \
  PL_CALLABLE_RET(unsigned, mask_bits)(unsigned pl_inst, unsigned q, unsigned k0, unsigned kind, unsigned i, \
                                       unsigned qb, unsigned bh, const void* aux)
#define ATTN_FEATURES(value) \
  PL_CALLABLE_RET(unsigned, features)(unsigned pl_inst, unsigned) { return (value); }
#define ATTN_MOD_PARAMS PL_CALLABLE(mod_params)(unsigned pl_inst, unsigned bh, const void* aux, float* prm)
#define ATTN_SCORE_MOD \
  PL_CALLABLE_RET(float, score_mod)(unsigned pl_inst, float x, unsigned q, unsigned k, float p0, float p1)
// A variant without a score modification (flags: 0, or attn::EARLY_MASK if its mask_bits read
// aux memory: the core then asks for them as soon as the block's GEMMs are issued).
#define ATTN_NO_SCORE_MOD_WITH(flags)         \
  ATTN_FEATURES(flags)                        \
  ATTN_MOD_PARAMS { prm[0] = prm[1] = 0.f; }  \
  ATTN_SCORE_MOD { return x; }
#define ATTN_NO_SCORE_MOD ATTN_NO_SCORE_MOD_WITH(0u)

namespace attn_variant {
__device__ __forceinline__ unsigned ld(const void* aux, unsigned word) {
  return __ldg(static_cast<const unsigned*>(aux) + word);
}
__device__ __forceinline__ float ldf(const void* aux, unsigned word) {
  return __ldg(static_cast<const float*>(aux) + word);
}
// Bits of mask_bits (attn.h) for keys k < x: bit 2 nt + e iff k0 + 8 nt + e < x.
__device__ __forceinline__ unsigned below(unsigned k0, int x) {
  unsigned r = 0;
#pragma unroll
  for (unsigned e = 0; e < 2; ++e) {
    const int n = min(max((x - (int)(k0 + e) + 7) >> 3, 0), 16);  // nt < n: keys below x
    unsigned m = (1u << n) - 1u;                                 // 16 bits, spread to 2 nt + e
    m = (m | (m << 8)) & 0x00FF00FFu;
    m = (m | (m << 4)) & 0x0F0F0F0Fu;
    m = (m | (m << 2)) & 0x33333333u;
    m = (m | (m << 1)) & 0x55555555u;
    r |= m << e;
  }
  return r;
}
// Uniform split-KV: the split-th of gridDim.x equal contiguous ranges of nkv blocks, its first
// block and its count.
__device__ __forceinline__ unsigned split_first(unsigned nkv, unsigned split) { return split * nkv / gridDim.x; }
__device__ __forceinline__ unsigned split_count(unsigned nkv, unsigned split) {
  return split_first(nkv, split + 1) - split_first(nkv, split);
}
// kv_block's value for block b of a head with `keys` keys: PARTIAL when keys end inside it.
__device__ __forceinline__ unsigned tail_kind(unsigned b, unsigned keys, unsigned blk) {
  return (b + 1) * blk > keys ? b | attn::PARTIAL : b;
}
// mask_bits for the keys lo <= k < hi (lo may be negative).
__device__ __forceinline__ unsigned range_bits(unsigned k0, int lo, int hi) { return below(k0, hi) & ~below(k0, lo); }
}  // namespace attn_variant
