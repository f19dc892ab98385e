// attn_decode_split.cu — variant: split-KV decode, stream-K. The (head, KV block) pairs of the
// launch, N = bh * kv_len / 128 in head-major order, are cut into gridDim.x equal contiguous
// ranges, one per CTA: CTA c visits blocks [c N / G, (c + 1) N / G), as one work tile per head
// its range touches. A grid of `splits` * bh CTAs gives each head `splits` equal pieces (the
// classic split-KV); a grid of num_sms CTAs keeps every SM busy to the end (no second wave
// with a tail). All q_len (<= 16) query rows see every key (FULL blocks). attn_combine merges
// a head's pieces. aux words: [kv_len, bh] (tile() has no kv_len, kv_count/kv_block no bh).
#define PL_COMPONENT attn_mask
#include <pipelink.h>

#include "attn_variant.h"

namespace attn_decode {
// The first block of CTA c's range.
__device__ __forceinline__ unsigned first(unsigned c, unsigned n, unsigned g) {
  return (unsigned)((unsigned long long)c * n / g);
}
// The CTA whose range holds block b: the largest c with first(c) <= b.
__device__ __forceinline__ unsigned owner(unsigned b, unsigned n, unsigned g) {
  return (unsigned)((((unsigned long long)b + 1) * g - 1) / n);
}
}  // namespace attn_decode

ATTN_TILE_SIGNATURE {
  using namespace attn_decode;
  const unsigned nkv = attn_variant::ld(aux, 0) / ATTN_BLOCK, n = bh * nkv, g = gridDim.x, c = blockIdx.x;
  const unsigned lo = first(c, n, g), hi = first(c + 1, n, g);
  const unsigned h = lo / nkv + t;  // the t-th head this CTA's range touches
  if (lo >= hi || h * nkv >= hi) return 0u;
  const unsigned c0 = owner(h * nkv, n, g);  // the head's first CTA
  info[0] = 0;
  info[1] = h;
  info[2] = c - c0;                                 // this piece of the head
  info[3] = owner(h * nkv + nkv - 1, n, g) - c0 + 1;  // the head's pieces
  return 1u;
}
ATTN_KV_COUNT {
  using namespace attn_decode;
  const unsigned nkv = kv_len / ATTN_BLOCK, n = attn_variant::ld(aux, 1) * nkv, g = gridDim.x;
  const unsigned lo = max(first(blockIdx.x, n, g), bh * nkv), hi = min(first(blockIdx.x + 1, n, g), bh * nkv + nkv);
  return hi - lo;
}
ATTN_KV_BLOCK {
  using namespace attn_decode;
  const unsigned nkv = kv_len / ATTN_BLOCK, n = attn_variant::ld(aux, 1) * nkv;
  return max(first(blockIdx.x, n, gridDim.x), bh * nkv) - bh * nkv + i;
}
ATTN_MASK_BITS { return ~0u; }
ATTN_NO_SCORE_MOD
