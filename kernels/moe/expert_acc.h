// expert_acc.h — the "moe_gu16" register layout of the expert's `acc` export, the convention
// between the expert owner (exporter) and the SwiGLU owners (importers); the linker
// compares only the name.
//
// One warp holds a [16 x block_h] tile of gate (plane p = 0) and of up (p = 1): its 16 rows
// of a wgmma m64n(2·block_h) accumulator whose columns are [gate block | up block], which
// is also the mma.sync m16n8 accumulator layout: NH = block_h / 8 column tiles; lane
// (g = lane / 4, q = lane % 4) holds frag[(p * NH + nt) * 4 + i] at
//   row = row0 + g + 8 (i / 2),  col = col0 + 8 nt + 2 q + (i % 2)
// where row0 is the warp's first row in hs (expert-contiguous, padded to block_m) and col0
// the tile's first h column. Every row may be stored (padding rows hold zeros).
#pragma once
#include <cuda_bf16.h>

namespace moe_gu {
__host__ __device__ constexpr unsigned index(unsigned nh, unsigned p, unsigned nt, unsigned i) {
  return (p * nh + nt) * 4 + i;
}

// An importer's walk of the layout: h = act(gate, up) of each of the lane's elements, rounded to
// bf16 and stored to `hs` (row stride inter) at the element's (row, col), two columns at a time.
template <unsigned NH, class Act>
__device__ __forceinline__ void store_h(const float* f, __nv_bfloat16* hs, unsigned inter, unsigned row0, unsigned col0,
                                        Act act) {
  const unsigned lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
#pragma unroll
  for (unsigned nt = 0; nt < NH; ++nt)
#pragma unroll
    for (unsigned h = 0; h < 2; ++h) {  // rows g, g + 8
      const unsigned i = 2 * h;
      const float* gt = f + index(NH, 0, nt, i);
      const float* up = f + index(NH, 1, nt, i);
      const __nv_bfloat162 v = __floats2bfloat162_rn(act(gt[0], up[0]), act(gt[1], up[1]));
      const unsigned row = row0 + g + 8 * h, col = col0 + 8 * nt + 2 * q;
      *reinterpret_cast<__nv_bfloat162*>(hs + (size_t)row * inter + col) = v;
    }
}
}  // namespace moe_gu
