// Toy sink library: imports the consumer's per-lane sums (32 lanes x 4 floats, lane-major)
// and writes them to global memory.
#define PL_COMPONENT sink
#include <pipelink.h>
#include "params.h"

PL_IMPORT(acc) {
  const ToyParams& p = PL_PARAMS(ToyParams);
  const float* frag = static_cast<const float*>(pl_frag);
  const unsigned lane = threadIdx.x % 32;
  for (int j = 0; j < 4; ++j) p.out[(pl_row0 + lane) * 4 + pl_col0 + j] = frag[j];
}
