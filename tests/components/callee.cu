// A library that exports a callable: scale(x, n) doubles n floats (one warp strides them).
#define PL_COMPONENT callee
#include <pipelink.h>

PL_CALLABLE(scale)(unsigned pl_inst, float* x, unsigned n) {
  for (unsigned i = threadIdx.x % 32; i < n; i += 32) x[i] *= 2.0f;
}
