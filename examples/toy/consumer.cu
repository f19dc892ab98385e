// Toy consumer role: owns the tile fact, sums each ring stage into per-thread
// accumulators, combines them through a scratch buffer, and exports the result.
#define PL_COMPONENT consumer
#include <pipelink.h>
#include "params.h"

#ifndef TOY_TILE
#define TOY_TILE 256
#endif
PL_OWN_FACT(tile, TOY_TILE);
PL_DECLARE_RING(work);
PL_DECLARE_SMEM(scratch);
PL_DECLARE_BARRIER(combine);
PL_DECLARE_EXPORT(acc);

PL_ENTRY(main) {
  const ToyParams& p = PL_PARAMS(ToyParams);
  const unsigned t_id = pl::role_thread(PL_WARP_BEGIN()), threads = 32 * PL_WARPS();
  const unsigned depth = PL_RING_DEPTH(work);
  const float* ring = reinterpret_cast<const float*>(pl::smem_base() + PL_RING_BUFFER(work));
  uint64_t* full = reinterpret_cast<uint64_t*>(pl::smem_base() + PL_RING_FULL(work));
  uint64_t* empty = reinterpret_cast<uint64_t*>(pl::smem_base() + PL_RING_EMPTY(work));
  float acc[4] = {0, 0, 0, 0};
  for (unsigned t = 0; t < p.tiles; ++t) {
    unsigned s = t % depth;
    pl::mbar_wait(&full[s], (t / depth) & 1);
    for (unsigned i = t_id; i < TOY_TILE; i += threads) acc[i % 4] += ring[s * TOY_TILE + i] * (t + 1);
    pl::mbar_arrive(&empty[s]);
  }
  float* scratch = reinterpret_cast<float*>(PL_SMEM_PTR(scratch));
  for (int j = 0; j < 4; ++j) scratch[t_id * 4 + j] = acc[j];
  pl::named_barrier_sync(PL_BARRIER(combine), threads);
  // Fold the role's threads onto the first warp: 32 lanes x 4 values.
  if (t_id < 32) {
    for (unsigned w = 1; w < threads / 32; ++w)
      for (int j = 0; j < 4; ++j) acc[j] += scratch[(w * 32 + t_id) * 4 + j];
    PL_EXPORT(acc, acc, blockIdx.x * 32, 0);
  }
}
