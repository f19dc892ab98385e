// tile_scheduler.cu — owner S. Persistent work scheduler for the Hopper GEMM family: a
// library exporting one callable, `unit`, that every role of the kernel (TMA loader, wgmma
// consumers) calls with the same arguments, so they walk one work stream without sharing
// code or shared memory.
//
//   unsigned unit(unsigned iter, unsigned m_tiles, unsigned n_tiles, unsigned k_tiles,
//                 unsigned* info)
//
// returns this CTA's `iter`-th work unit as (tile_m << 16) | tile_n, or 0xFFFFFFFF when the
// CTA is done, and writes info[0] = k_begin, info[1] = k_end (the unit's k-steps),
// info[2] = the tile's linear index, info[3] = the first CTA that works on the tile.
//
// Order (CTA b of G = gridDim.x, T = m_tiles * n_tiles tiles):
//  * data-parallel waves: the first floor(T / G) * G tiles, CTA b takes tiles b, b + G, ...
//    whole (k_begin = 0, k_end = k_tiles);
//  * stream-K tail (built with TILE_SCHEDULER_STREAM_K=1, the default; fact stream_k = 1):
//    the remaining T % G tiles' k-steps are cut into G equal, contiguous ranges, one per CTA, so no CTA
//    idles in a last partial wave. A range may cover the end of one tile, whole tiles and
//    the start of another. A unit that does not reach its tile's last k-step is a
//    *contributor* (it leaves partial sums for the CTA that does); the unit that reaches
//    it is the tile's *finisher*. Each CTA runs its tail units last-first, so its only
//    contributor unit comes before any finisher unit: finishers wait only for work that
//    every resident CTA does first, and no chain of waits forms.
// Linear tiles map to (tile_m, tile_n) in groups of GROUP_M tile rows (tile rows vary
// fastest), so the ~132 tiles in flight at once share about GROUP_M rows of A and
// 132 / GROUP_M column blocks of B in L2.
// Clusters (fact cluster_x, the kernel's [kernel] cluster): the stream is one of cluster
// tiles of cluster_x consecutive tile rows and one tile column; the cluster's CTAs get the
// same units, CTA rank r the r-th tile row, so the loaders can multicast the shared B tile.
// info[2] (a counter index) and info[3] (the first CTA of the tile) are per CTA rank: the
// CTAs working on a tile row's pieces are info[3], info[3] + cluster_x, ...
#define PL_COMPONENT tile_scheduler
#include <pipelink.h>

#ifndef TILE_SCHEDULER_GROUP_M
#define TILE_SCHEDULER_GROUP_M 8
#endif
#ifndef TILE_SCHEDULER_STREAM_K
#define TILE_SCHEDULER_STREAM_K 1
#endif

namespace tile_scheduler {
constexpr unsigned NO_TILE = 0xFFFFFFFFu;

__device__ __forceinline__ unsigned grouped(unsigned linear, unsigned m_tiles, unsigned n_tiles) {
  constexpr unsigned G = TILE_SCHEDULER_GROUP_M;
  const unsigned group_size = G * n_tiles;
  const unsigned first_m = (linear / group_size) * G;
  const unsigned rows = min(m_tiles - first_m, G);
  const unsigned in_group = linear % group_size;
  return ((first_m + in_group % rows) << 16) | (in_group / rows);
}

// The CTA of rank r in a cluster works on tile row cluster_row * cx + r.
__device__ __forceinline__ unsigned at_rank(unsigned tile, unsigned cx, unsigned r) {
  return (((tile >> 16) * cx + r) << 16) | (tile & 0xFFFFu);
}

// First k-step of cluster c's share of the tail's K_sk k-steps over G clusters (32-bit:
// the caller keeps K_sk * G below 2^32, so the producer warp needs few registers).
__device__ __forceinline__ unsigned share_begin(unsigned c, unsigned k_sk, unsigned g) { return c * k_sk / g; }
}  // namespace tile_scheduler

PL_DECLARE_FACT(cluster_x);
PL_OWN_FACT(stream_k, TILE_SCHEDULER_STREAM_K);  // 1: units may be parts of a tile's k-steps

PL_CALLABLE_RET(unsigned, unit)(unsigned pl_inst, unsigned iter, unsigned m_tiles, unsigned n_tiles,
                                unsigned k_tiles, unsigned* info) {
  using namespace tile_scheduler;
  const unsigned cx = PL_FACT(cluster_x);
  const unsigned g = gridDim.x / cx, b = blockIdx.x / cx, rank = blockIdx.x % cx;  // clusters of (cx, 1, 1)
  m_tiles = (m_tiles + cx - 1) / cx;  // cluster tile rows
  const unsigned tiles = m_tiles * n_tiles;
  // Stream-K needs K_sk * G < 2^32 (K_sk < G * k_tiles): true unless k_tiles > 2^32 / G^2
  // (about 246,000 k-steps at G = 132); beyond that, whole tiles only.
  const bool stream_k = TILE_SCHEDULER_STREAM_K && k_tiles > 0 && k_tiles <= 0xFFFFFFFFu / g / g;
  const unsigned dp_waves = stream_k ? tiles / g : (tiles + g - 1) / g;
  if (iter < dp_waves) {
    const unsigned linear = iter * g + b;
    if (linear >= tiles) return NO_TILE;
    info[0] = 0, info[1] = k_tiles, info[2] = linear * cx + rank, info[3] = blockIdx.x;
    return at_rank(grouped(linear, m_tiles, n_tiles), cx, rank);
  }
  if (!stream_k) return NO_TILE;
  // Stream-K tail: global k-steps [0, K_sk) over the tail tiles, tile-major.
  const unsigned first_tail = dp_waves * g;
  const unsigned k_sk = (tiles - first_tail) * k_tiles;
  const unsigned s = share_begin(b, k_sk, g), e = share_begin(b + 1, k_sk, g);
  if (s >= e) return NO_TILE;
  const unsigned t_first = s / k_tiles, t_last = (e - 1) / k_tiles;
  const unsigned j = iter - dp_waves;  // last-first
  if (j > t_last - t_first) return NO_TILE;
  const unsigned t = t_last - j;
  const unsigned t0 = t * k_tiles;
  const unsigned kb = s > t0 ? s - t0 : 0, ke = min(e - t0, k_tiles);
  // The cluster whose share holds the tile's first k-step: the largest c with
  // share_begin(c) <= t0, i.e. ceil((t0 + 1) * G / K_sk) - 1.
  const unsigned c_first = ((t0 + 1) * g + k_sk - 1) / k_sk - 1;
  info[0] = kb, info[1] = ke, info[2] = (first_tail + t) * cx + rank;
  info[3] = c_first * cx + rank;
  return at_rank(grouped(first_tail + t, m_tiles, n_tiles), cx, rank);
}
