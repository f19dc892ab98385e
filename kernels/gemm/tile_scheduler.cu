// tile_scheduler.cu — owner S. Persistent tile scheduler for the Hopper GEMM family: a
// library exporting one callable, `tile`, that every role of the kernel (TMA loader,
// wgmma consumers) calls with the same arguments, so they walk one tile stream without
// sharing code or shared memory.
//
//   unsigned tile(unsigned iter, unsigned m_tiles, unsigned n_tiles)
//
// returns the `iter`-th output tile of this CTA as (tile_m << 16) | tile_n, or 0xFFFFFFFF
// when the CTA has no more tiles. CTA b takes linear tiles b, b + gridDim.x, ... (the grid
// is persistent: one CTA per SM). Linear tiles are ordered in groups of GROUP_M tile rows:
// within a group, tile rows vary fastest, so the ~132 tiles in flight at once cover about
// GROUP_M rows of A and 132 / GROUP_M column blocks of B, which both stay in L2.
#define PL_COMPONENT tile_scheduler
#include <pipelink.h>

#ifndef TILE_SCHEDULER_GROUP_M
#define TILE_SCHEDULER_GROUP_M 8
#endif

PL_CALLABLE_RET(unsigned, tile)(unsigned pl_inst, unsigned iter, unsigned m_tiles, unsigned n_tiles) {
  constexpr unsigned G = TILE_SCHEDULER_GROUP_M;
  const unsigned linear = blockIdx.x + iter * gridDim.x;
  if (linear >= m_tiles * n_tiles) return 0xFFFFFFFFu;
  const unsigned group_size = G * n_tiles;
  const unsigned first_m = (linear / group_size) * G;
  const unsigned rows = min(m_tiles - first_m, G);
  const unsigned in_group = linear % group_size;
  return ((first_m + in_group % rows) << 16) | (in_group / rows);
}
