// attn_varlen.cu — the variants over a ragged batch (issue 42), built once per variant
// (ATTN_VARLEN_FULL, _CAUSAL, _SLIDING, _SOFTCAP or _ALIBI) as package attn_mask with
// attn_varlen_loader, the unchanged core and attn_store's varlen build.
// Sequence b has Lq = cu_q[b + 1] - cu_q[b] query and Lk = cu_k[b + 1] - cu_k[b] key tokens;
// the masked variants align the queries bottom-right (FlashAttention's varlen causal): query
// row i sits at position off + i, off = Lk - Lq, and sees keys k <= off + i (sliding: and
// off + i - k < W). A row that sees no key gives 0.
// aux (attention_varlen.py): [0] heads H, [1] B, [2] window or softcap (f32 bits), [3] base,
// [4 ..] ALiBi slopes (f32, one per head), then from word base: cu_q[B + 1], cu_k[B + 1] and
// the Q blocks' prefix sums cb[B + 1] (cb[b] = sum of ceil(Lq / 128) over sequences before b).
// Tile order: the cb[B] * H tiles, global Q block last first, the H heads of a block on
// neighbouring CTAs (a K/V head's group shares its tiles through L2), boustrophedon over the
// grid as ATTN_PREFILL_TILE.
#define PL_COMPONENT attn_mask
#include <pipelink.h>

#include "attn_variant.h"

namespace {
using attn_variant::ld;
struct Seq {
  int lq, lk, off;  // query rows, keys, position of row 0
};
__device__ __forceinline__ unsigned cu_base(const void* aux) { return ld(aux, 3); }
__device__ __forceinline__ Seq seq_of(const void* aux, unsigned bh) {
  const unsigned b = bh / ld(aux, 0), base = cu_base(aux), B = ld(aux, 1);
  const int lq = max((int)ld(aux, base + b + 1) - (int)ld(aux, base + b), 0);
  const int lk = max((int)ld(aux, base + B + 1 + b + 1) - (int)ld(aux, base + B + 1 + b), 0);
  return {lq, lk, lk - lq};
}
// Keys lo(q) <= k < hi(q) of query row q (may be empty or reach below 0).
__device__ __forceinline__ int key_hi(const Seq& s, int q) {
#if defined(ATTN_VARLEN_FULL)
  (void)q;
  return s.lk;
#else
  return min(s.off + q + 1, s.lk);
#endif
}
__device__ __forceinline__ int key_lo(const Seq& s, int q, const void* aux) {
#if defined(ATTN_VARLEN_SLIDING)
  return s.off + q + 1 - (int)ld(aux, 2);
#else
  (void)s, (void)q, (void)aux;
  return 0;
#endif
}
// The tile's first visited block and the end of its blocks (rows qb * 128 .. its last row).
__device__ __forceinline__ void block_range(const Seq& s, unsigned qb, const void* aux, unsigned blk, int& first,
                                            int& end) {
  const int q0 = (int)(qb * blk), q1 = min(q0 + (int)blk, s.lq) - 1;
  const int hi = key_hi(s, q1), lo = max(key_lo(s, q0, aux), 0);
  first = lo / (int)blk;
  end = hi > lo ? (hi + (int)blk - 1) / (int)blk : first;
}
}  // namespace

ATTN_TILE_SIGNATURE {
  const unsigned H = ld(aux, 0), B = ld(aux, 1), cb = cu_base(aux) + 2 * (B + 1), g = gridDim.x;
  const unsigned blocks = ld(aux, cb + B);
  const unsigned lin = t * g + ((t & 1u) ? g - 1 - blockIdx.x : blockIdx.x);
  if (lin >= blocks * H) return 0u;
  const unsigned j = blocks - 1 - lin / H;  // the global Q block, last first
  unsigned lo = 0, hi = B;                  // cb[lo] <= j < cb[hi]
  while (hi - lo > 1) {
    const unsigned mid = (lo + hi) / 2;
    if (ld(aux, cb + mid) <= j) lo = mid;
    else hi = mid;
  }
  info[0] = j - ld(aux, cb + lo);
  info[1] = lo * H + lin % H;
  const Seq s = seq_of(aux, info[1]);
#if defined(ATTN_VARLEN_FULL)
  info[2] = (unsigned)s.lk;  // `split`: what kv_block needs, so it reads no memory (it runs every block)
#else
  info[2] = (unsigned)s.off;
#endif
  info[3] = 1;
  (void)q_len, (void)bh;
  return 1u;
}
ATTN_KV_COUNT {
  int first, end;
  block_range(seq_of(aux, bh), qb, aux, ATTN_BLOCK, first, end);
  (void)q_len, (void)kv_len, (void)split;
  return (unsigned)(end - first);
}
// FULL iff every key of the block is visible to every row of the tile: below the first row's hi
// (off + q0 + 1; full: below Lk) and, sliding, at or above the lo of row q0 + 127 (a row past Lq
// only makes the test stricter). It runs for every KV block, so it reads no memory: `split`
// holds the tile's off (full: Lk), set by `tile`; kv_count (once a tile) and mask_bits (PARTIAL
// rows) read the sequence's lengths.
ATTN_KV_BLOCK {
  const int blk = (int)ATTN_BLOCK, q0 = (int)(qb * ATTN_BLOCK), x = (int)split;
  (void)q_len, (void)kv_len, (void)aux;
#if defined(ATTN_VARLEN_FULL)
  (void)blk, (void)q0, (void)x;
  return (i + 1) * ATTN_BLOCK <= split ? i : (i | attn::PARTIAL);
#elif defined(ATTN_VARLEN_SLIDING)
  const int w = (int)ld(aux, 2), kb = max(x + q0 + 1 - w, 0) / blk + (int)i;  // kv_count's first block + i
  const bool full = kb * blk >= x + q0 + blk - w && (kb + 1) * blk <= x + q0 + 1;
  return full ? (unsigned)kb : ((unsigned)kb | attn::PARTIAL);
#else
  return (int)(i + 1) * blk <= x + q0 + 1 ? i : (i | attn::PARTIAL);
#endif
}
ATTN_MASK_BITS {
  const Seq s = seq_of(aux, bh);
  (void)kind, (void)i, (void)qb;
  return attn_variant::range_bits(k0, key_lo(s, (int)q, aux), key_hi(s, (int)q));
}
#if defined(ATTN_VARLEN_SOFTCAP)
namespace {
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
}  // namespace
ATTN_FEATURES(attn::SCORE_MOD)
ATTN_MOD_PARAMS {
  const float cap = attn_variant::ldf(aux, 2);
  prm[0] = cap;
  prm[1] = 1.f / cap;
  (void)bh;
}
ATTN_SCORE_MOD { return p0 * tanh_approx(x * p1); }
#elif defined(ATTN_VARLEN_ALIBI)
// slope_h (k - position of q) = slope_h (k - q) - slope_h off: prm = {slope, off}.
ATTN_FEATURES(attn::SCORE_MOD)
ATTN_MOD_PARAMS {
  prm[0] = attn_variant::ldf(aux, 4 + bh % ld(aux, 0));
  prm[1] = (float)seq_of(aux, bh).off;
}
ATTN_SCORE_MOD { return fmaf(p0, (float)((int)k - (int)q) - p1, x); }
#else
ATTN_NO_SCORE_MOD
#endif
