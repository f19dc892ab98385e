// Owner B of the control-isolation test (see iso_a.cu): another `struct Params`, another
// `helper()`, another SCALE (-DSCALE=5).
#define PL_COMPONENT iso_b
#include <pipelink.h>

#ifndef SCALE
#define SCALE 1
#endif
struct Params {
  unsigned* out;
  unsigned n;
  unsigned bias;
};
__device__ unsigned helper(unsigned x, unsigned y) { return x * SCALE + y; }

PL_ENTRY(run) {
  const Params& p = PL_PARAMS(Params);
  if (threadIdx.x == 32 * PL_WARP_BEGIN()) p.out[2 * blockIdx.x + 1] = helper(p.n, p.bias);
}
