// attn_decode_streamk.cu — variant: split-KV decode, stream-K. The bh heads' KV blocks are one
// run of N = bh * nkv blocks (head h: [h nkv, (h + 1) nkv)); CTA c of a persistent grid of
// G = min(gridDim.x, N) takes the blocks [c N / G, (c + 1) N / G), one work tile per head its
// range meets. Every CTA streams the same number of blocks (±1) in one wave, with no launch
// between heads: the uniform split (attn_decode_split.cu, a CTA per split and head) ran two or
// more waves of CTAs of one per SM, each wave's tail and each CTA's start idle on DRAM.
// info = {0, h, split, splits}: the split-th of the `splits` CTAs whose ranges meet head h,
// which attn_combine merges. aux = {bh, kv_len} (tile is not given kv_len, kv_count and
// kv_block not the grid's bh); nkv = ceil(kv_len / block_q) (the linked fact), the last block
// PARTIAL when kv_len is not a whole number of blocks.
#define PL_COMPONENT attn_mask
#include <pipelink.h>

#include "attn_variant.h"

namespace {
// At most 255 CTAs take ranges (a larger grid's others idle): N < 2^24 (attention.py bounds B*H*S
// by 2^31 rows, 128 a block), so every product below, at most N (G + 1), fits 32 bits. 64-bit
// division is a long dependent subroutine, and the loader and the core ask for kv_block once a
// block, the loader on its single thread.
constexpr unsigned MAX_CTAS = 255;
struct Run {  // the grid's cut of the N blocks
  unsigned n, g, nkv;
  __device__ __forceinline__ Run(const void* aux, unsigned block) {
    const unsigned bh = attn_variant::ld(aux, 0);
    nkv = (attn_variant::ld(aux, 1) + block - 1) / block;  // the last block PARTIAL past kv_len
    n = bh * nkv;
    g = min(min(gridDim.x, n), MAX_CTAS);
  }
  // First block of CTA c (c <= g: start(g) = n).
  __device__ __forceinline__ unsigned start(unsigned c) const { return c * n / g; }
  // The CTA whose range holds block b: the last c with start(c) <= b, i.e. c N < (b + 1) G.
  __device__ __forceinline__ unsigned cta_of(unsigned b) const { return ((b + 1) * g + n - 1) / n - 1; }
  __device__ __forceinline__ unsigned first_cta(unsigned h) const { return cta_of(h * nkv); }
  // Head h's blocks in the range of its split s: [lo, hi) in the run.
  __device__ __forceinline__ void range(unsigned h, unsigned s, unsigned& lo, unsigned& hi) const {
    const unsigned c = first_cta(h) + s;
    lo = max(start(c), h * nkv);
    hi = min(start(c + 1), (h + 1) * nkv);
  }
};
}  // namespace

ATTN_TILE_SIGNATURE {
  const Run r(aux, ATTN_BLOCK);  // ATTN_BLOCK: the linked fact (pl_inst in scope)
  const unsigned c = blockIdx.x;
  if (c >= r.g) return 0u;  // fewer blocks than CTAs: this one has none
  const unsigned h = r.start(c) / r.nkv + t;
  if (h * r.nkv >= r.start(c + 1)) return 0u;  // the range ends before head h
  const unsigned first = r.first_cta(h);
  info[0] = 0;
  info[1] = h;
  info[2] = c - first;
  info[3] = r.cta_of((h + 1) * r.nkv - 1) - first + 1;
  (void)q_len;
  (void)bh;
  return 1u;
}
ATTN_KV_COUNT {
  const Run r(aux, ATTN_BLOCK);
  unsigned lo, hi;
  r.range(bh, split, lo, hi);
  return hi - lo;
}
ATTN_KV_BLOCK {
  const Run r(aux, ATTN_BLOCK);
  unsigned lo, hi;
  r.range(bh, split, lo, hi);
  return attn_variant::tail_kind(lo - bh * r.nkv + i, kv_len, ATTN_BLOCK);
}
ATTN_MASK_BITS { return attn_variant::below(k0, (int)attn_variant::ld(aux, 1)); }  // the tail block only
ATTN_NO_SCORE_MOD
