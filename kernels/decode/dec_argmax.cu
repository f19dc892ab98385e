// dec_argmax.cu — greedy decoding's running argmax: the largest of a tile's `n` logits (ties to
// the smaller index), as dec.h's key (the ordered float bits over the inverted index), joins this
// CTA's best of the step in [smem.best] (a shared-memory atomicMax a warp); after its last tile of
// the head the CTA joins its best to the step's (u64 in global memory) with one atomicMax a
// sequence (argmax_publish). A global atomic a tile made every CTA's tiles of the head queue on
// the same few addresses in L2. The warp's maximum is CUB's warp reduction (CCCL) over the keys.
// Called by the step role's 256 threads.
#define PL_COMPONENT dec_argmax
#include <pipelink.h>

#include <cub/warp/warp_reduce.cuh>

#include "dec.h"

PL_DECLARE_SMEM(best);
PL_DECLARE_FACT(batch);

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

// this CTA's best of each of `rows` sequences back to none (0 is below every key): before its
// first tile of the head
PL_CALLABLE(argmax_reset)(unsigned pl_inst, unsigned rows) {
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  unsigned long long* local = reinterpret_cast<unsigned long long*>(PL_SMEM_PTR(best));
  if (rows > PL_FACT(batch)) __trap();  // [smem.best] holds batch keys (the step passes its batch: folds away)
  for (unsigned b = t; b < rows; b += dec_argmax::WARPS * 32) local[b] = 0ull;
}

PL_CALLABLE(argmax)(unsigned pl_inst, const float* vals, unsigned n, unsigned base) {
  using namespace dec_argmax;
  const unsigned t = pl::role_thread(PL_WARP_BEGIN()), warp = t / 32;
  if (warp * 32 >= n) return;  // (whole warps)
  unsigned long long key = t < n ? dec::argmax_key(vals[t], base + t) : 0ull;
  if (n < 32) {  // (a power of two: the keys of lanes 0 .. n - 1 in log2 n shuffles)
    for (unsigned off = n / 2; off; off /= 2) key = Max{}(key, __shfl_xor_sync(0xffffffffu, key, off));
  } else {
    typename WarpMax::TempStorage temp;
    key = WarpMax(temp).Reduce(key, Max{});
  }
  if (t % 32 == 0) atomicMax(reinterpret_cast<unsigned long long*>(PL_SMEM_PTR(best)), key);
}

// argmax_rows: the same for `rows` sequences' logits at once (row b at vals + b stride, its best
// at [smem.best] b). A tile's n rows are a power of two: with n <= 32 each warp takes 32 / n rows,
// n lanes a row, and reduces each row's n keys in log2 n shuffles (a whole warp's reduction a row
// took most of a batch-32 head tile); longer rows take a warp each, rows w, w + 8, ...
PL_CALLABLE(argmax_rows)(unsigned pl_inst, const float* vals, unsigned n, unsigned base, unsigned rows,
                         unsigned stride) {
  using namespace dec_argmax;
  const unsigned t = pl::role_thread(PL_WARP_BEGIN()), warp = t / 32, lane = t % 32;
  unsigned long long* local = reinterpret_cast<unsigned long long*>(PL_SMEM_PTR(best));
  if (n <= 32) {
    const unsigned per_warp = 32 / n, j = lane % n;
    for (unsigned b0 = warp * per_warp; b0 < rows; b0 += WARPS * per_warp) {
      const unsigned b = b0 + lane / n;
      unsigned long long key = b < rows ? dec::argmax_key(vals[b * stride + j], base + j) : 0ull;
      for (unsigned off = n / 2; off; off /= 2) key = Max{}(key, __shfl_xor_sync(0xffffffffu, key, off));
      if (j == 0 && b < rows) atomicMax(local + b, key);
    }
    return;
  }
  for (unsigned b = warp; b < rows; b += WARPS) {
    typename WarpMax::TempStorage temp;
    unsigned long long key = 0ull;
    for (unsigned j = lane; j < n; j += 32) key = Max{}(key, dec::argmax_key(vals[b * stride + j], base + j));
    const unsigned long long m = WarpMax(temp).Reduce(key, Max{});
    if (lane == 0) atomicMax(local + b, m);
  }
}

// After the CTA's last tile of the head and a barrier: each sequence's best of this CTA joins the
// step's (best[b], global), and the CTA's is reset for the next step's head
PL_CALLABLE(argmax_publish)(unsigned pl_inst, unsigned long long* best, unsigned rows) {
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  unsigned long long* local = reinterpret_cast<unsigned long long*>(PL_SMEM_PTR(best));
  for (unsigned b = t; b < rows; b += dec_argmax::WARPS * 32) {
    const unsigned long long k = local[b];
    if (k) atomicMax(best + b, k);
    local[b] = 0ull;
  }
}
