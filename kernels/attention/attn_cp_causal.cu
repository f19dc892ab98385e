// attn_cp_causal.cu — variant (package attn_mask) for context-parallel causal attention over N
// ranks with zigzag chunks (attn_cp.h). Q is this rank's 2C local rows; the KV blocks a Q block
// visits are the global blocks at or before its own (causal over the whole sequence), listed in
// ring order of their owner rank: r, r-1, ..., r-N+1. kv_block returns a *global* KV block
// index (the loader maps it to its owner's region); score compares global positions, so only
// the diagonal block is partial. World 1 is plain causal attention.
#define PL_COMPONENT attn_mask
#include <pipelink.h>

#include "attn_cp.h"
#include "attn_variant.h"

namespace {
using attn_variant::ld;
// global block index of local block lb on rank r (C / 128 blocks per chunk)
__device__ __forceinline__ unsigned global_block(unsigned lb, unsigned r, unsigned n, unsigned cb) {
  return lb < cb ? r * cb + lb : (2 * n - 1 - r) * cb + (lb - cb);
}
// KV blocks of one chunk c visible to a Q block in global block gq (chunk qc = gq / cb)
__device__ __forceinline__ unsigned chunk_visits(unsigned c, unsigned gq, unsigned cb) {
  const unsigned qc = gq / cb;
  return c < qc ? cb : c == qc ? gq % cb + 1 : 0u;
}
}  // namespace

ATTN_PREFILL_TILE
ATTN_KV_COUNT {
  const unsigned n = ld(aux, 0), r = ld(aux, 1), cb = ld(aux, 2) / attn::BLOCK;
  return global_block(qb, r, n, cb) + 1;  // causal: every global block up to the diagonal
}
ATTN_KV_BLOCK {
  const unsigned n = ld(aux, 0), r = ld(aux, 1), cb = ld(aux, 2) / attn::BLOCK;
  const unsigned gq = global_block(qb, r, n, cb);
  // walk the owners in ring order; each owner's low chunk s, then its high chunk 2N-1-s
#pragma unroll 1
  for (unsigned step = 0; step < n; ++step) {
    const unsigned s = (r + n - step) % n;
#pragma unroll 1
    for (unsigned h = 0; h < 2; ++h) {
      const unsigned c = h ? 2 * n - 1 - s : s;
      const unsigned v = chunk_visits(c, gq, cb);
      if (i < v) {
        const unsigned gb = c * cb + i;
        return gb == gq ? (gb | attn::PARTIAL) : gb;
      }
      i -= v;
    }
  }
  return 0u;  // not reached: i < kv_count
}
ATTN_SCORE {  // q: local row; k: global key (the block index kv_block returned, times 128)
  const unsigned n = ld(aux, 0), r = ld(aux, 1), c = ld(aux, 2);
  const unsigned gq = q < c ? r * c + q : (2 * n - 1 - r) * c + (q - c);
  return k <= gq ? s : -INFINITY;
}
