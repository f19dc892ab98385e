// Toy producer role: streams `tiles` tiles of `tile` floats into ring `work`.
#define PL_COMPONENT producer
#include <pipelink.h>
#include "params.h"

PL_DECLARE_RING(work);
PL_DECLARE_FACT(tile);

PL_ENTRY(main) {
  const ToyParams& p = PL_PARAMS(ToyParams);
  const unsigned lane = threadIdx.x % 32, tile = PL_FACT(tile), depth = PL_RING_DEPTH(work);
  float* ring = reinterpret_cast<float*>(pl::smem_base() + PL_RING_BUFFER(work));
  uint64_t* full = reinterpret_cast<uint64_t*>(pl::smem_base() + PL_RING_FULL(work));
  uint64_t* empty = reinterpret_cast<uint64_t*>(pl::smem_base() + PL_RING_EMPTY(work));
  const float* src = p.in + blockIdx.x * p.tiles * tile;
  for (unsigned t = 0; t < p.tiles; ++t) {
    unsigned s = t % depth, round = t / depth;
    if (t >= depth) pl::mbar_wait(&empty[s], (round - 1) & 1);
    for (unsigned i = lane; i < tile; i += 32) ring[s * tile + i] = src[t * tile + i];
    pl::mbar_arrive(&full[s]);  // every writing lane arrives: its own stores are released
  }
}
