// A component with an internal-linkage global: nvcc names it with a per-compilation module id
// (from -frandom-seed, or random), as it does CuTe's and libcu++'s `inline constexpr` objects.
#define PL_COMPONENT module_id
#include <pipelink.h>
namespace {
__device__ unsigned hits;
}
PL_DECLARE_SMEM(buf);
PL_ENTRY(run) {
  atomicAdd(&hits, 1u);
  reinterpret_cast<unsigned*>(pl::smem_base() + PL_SMEM(buf))[threadIdx.x] = hits;
}
