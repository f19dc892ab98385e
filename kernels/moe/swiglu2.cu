// swiglu2.cu — owner G2, written independently of swiglu.cu against the same contract
// interface (import `acc`, layout "moe_gu16" of expert_acc.h; workspace `hs`). Differences
// on purpose: silu through tanh (x · sigmoid(x) = x/2 · (1 + tanh(x/2))), the tile walked
// column-tile-major, and each h pair packed by hand into a 32-bit store.
#define PL_COMPONENT moe_swiglu
#include <pipelink.h>

#include <cuda_bf16.h>
#include <stdint.h>

PL_DECLARE_FACT(block_m);
PL_DECLARE_FACT(block_h);
PL_DECLARE_FACT(inter);  // hs's row stride (the model's expert intermediate size)
PL_DECLARE_WORKSPACE(hs);
PL_DECLARE_FACT(top_k);
PL_DECLARE_FACT(experts);  // sizes `hs` (contract): each expert's rows padded to block_m

namespace swiglu2 {
__device__ __forceinline__ float silu_tanh(float x) {
  const float h = 0.5f * x;
  return h + h * tanhf(h);
}
__device__ __forceinline__ uint32_t bf16x2(float lo, float hi) {
  const uint32_t a = __bfloat16_as_ushort(__float2bfloat16_rn(lo));
  const uint32_t b = __bfloat16_as_ushort(__float2bfloat16_rn(hi));
  return a | (b << 16);
}
// plane p, row tile m, column tile n, element i of the "moe_gu16" fragment
template <unsigned ROW_TILES, unsigned COL_TILES>
__device__ __forceinline__ void write_tile(const float* acc, uint32_t* hs_words, unsigned inter, unsigned r0, unsigned c0) {
  constexpr unsigned UP = ROW_TILES * COL_TILES * 4;  // first index of the up plane
  const unsigned l = threadIdx.x & 31u;
#pragma unroll
  for (unsigned n = 0; n < COL_TILES; ++n) {
    const unsigned col = c0 + n * 8 + (l & 3u) * 2;
#pragma unroll
    for (unsigned m = 0; m < ROW_TILES; ++m) {
      const unsigned base = (m * COL_TILES + n) * 4, row = r0 + m * 16 + (l >> 2);
      hs_words[(row * inter + col) / 2] = bf16x2(silu_tanh(acc[base]) * acc[UP + base],
                                                silu_tanh(acc[base + 1]) * acc[UP + base + 1]);
      hs_words[((row + 8) * inter + col) / 2] = bf16x2(silu_tanh(acc[base + 2]) * acc[UP + base + 2],
                                                      silu_tanh(acc[base + 3]) * acc[UP + base + 3]);
    }
  }
}
}  // namespace swiglu2

PL_IMPORT(acc) {
  uint32_t* words = static_cast<uint32_t*>(PL_WORKSPACE(hs));
  const float* acc = static_cast<const float*>(pl_frag);
  if (PL_FACT(top_k) > 8u || PL_FACT(experts) > 384u) __trap();
  if ((PL_FACT(block_m) & 15u) != 0u) __trap();  // whole 16-row warp slices per tile
  switch (PL_FACT(block_h)) {  // one warp's 16 rows: a single row tile
    case 32: return swiglu2::write_tile<1, 4>(acc, words, PL_FACT(inter), pl_row0, pl_col0);
    case 64: return swiglu2::write_tile<1, 8>(acc, words, PL_FACT(inter), pl_row0, pl_col0);
    default: __trap();
  }
}
