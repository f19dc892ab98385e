// dec_argmax.cu — greedy decoding's running argmax: the largest of a tile's `n` logits (ties to
// the smaller index) joins the step's best (u64 in global memory, dec.h's key: the ordered
// float bits over the inverted index) with one atomicMax a warp. The warp's maximum is CUB's
// warp reduction (CCCL) over those keys. Called by the step role's 256 threads.
#define PL_COMPONENT dec_argmax
#include <pipelink.h>

#include <cub/warp/warp_reduce.cuh>

#include "dec.h"

namespace dec_argmax {
constexpr unsigned WARPS = 8;  // the calling role's
using WarpMax = cub::WarpReduce<unsigned long long>;
// A full warp reduces with shuffles: CUB's temp storage is an empty type, so it needs no shared
// memory claim (a local that nothing reads).
static_assert(sizeof(WarpMax::TempStorage) <= 1, "CUB's shuffle reduction: no temp storage");
struct Max {
  __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const { return a > b ? a : b; }
};
}  // namespace dec_argmax

PL_CALLABLE(argmax)(unsigned pl_inst, const float* vals, unsigned n, unsigned base, unsigned long long* best) {
  using namespace dec_argmax;
  const unsigned t = pl::role_thread(PL_WARP_BEGIN()), warp = t / 32;
  if (warp * 32 >= n) return;  // (whole warps)
  typename WarpMax::TempStorage temp;
  const unsigned long long key = t < n ? dec::argmax_key(vals[t], base + t) : 0ull;
  const unsigned long long m = WarpMax(temp).Reduce(key, Max{});
  if (t % 32 == 0) atomicMax(best, m);
}

// argmax_rows: the same for `rows` sequences' logits at once (row b at vals + b stride, its best
// at best[b]), warp w taking rows w, w + 8, ...: the batch's rows in parallel, not one by one
PL_CALLABLE(argmax_rows)(unsigned pl_inst, const float* vals, unsigned n, unsigned base, unsigned long long* best,
                         unsigned rows, unsigned stride) {
  using namespace dec_argmax;
  const unsigned t = pl::role_thread(PL_WARP_BEGIN()), warp = t / 32, lane = t % 32;
  for (unsigned b = warp; b < rows; b += WARPS) {
    typename WarpMax::TempStorage temp;
    unsigned long long key = 0ull;
    for (unsigned j = lane; j < n; j += 32) key = Max{}(key, dec::argmax_key(vals[b * stride + j], base + j));
    const unsigned long long m = WarpMax(temp).Reduce(key, Max{});
    if (lane == 0) atomicMax(best + b, m);
  }
}
