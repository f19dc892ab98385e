// A minimal component proving the pipelink CUDA toolchain: compiled on its own to LTO-IR.
// The placement (`pl_hello_scale`) is left undefined here; at link time a generated
// definition is folded into an immediate by nvJitLink's LTO.
#include "hello.h"

extern "C" __device__ unsigned pl_hello_scale();

namespace {
__device__ unsigned mix(unsigned x) { return x * 2654435761u; }
}  // namespace

extern "C" __global__ void hello_kernel(unsigned* out) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = mix(i) * pl_hello_scale() + HELLO_BIAS;
}
