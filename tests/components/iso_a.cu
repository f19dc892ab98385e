// Owner A of the control-isolation test: defines `struct Params`, `helper()` and the macro
// SCALE (from -DSCALE=3), names owner B (iso_b.cu) uses too with other meanings. Linked, they
// never meet; the control build must keep them apart as well.
#define PL_COMPONENT iso_a
#include <pipelink.h>

#ifndef SCALE
#define SCALE 1
#endif
struct Params {
  unsigned* out;
  unsigned n;
};
__device__ unsigned helper(unsigned x) { return x * SCALE; }

PL_ENTRY(run) {
  const Params& p = PL_PARAMS(Params);
  if (threadIdx.x == 32 * PL_WARP_BEGIN()) p.out[2 * blockIdx.x] = helper(p.n);
}
