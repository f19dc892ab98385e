// stage_layout.h — layout of one stage of ring `ab`, agreed by loader (producer) and
// mainloop (consumer). Both contracts state stage_bytes = "(block_m + 2 * block_n) * block_k * 2".
//
// A stage is one bf16 array of ROWS = block_m + 2*block_n rows of block_k elements
// (K contiguous), stacked in this order:
//   rows [0, block_m)                    A tile:    x[m0 + r, k0 .. k0+block_k)
//   rows [block_m, block_m + block_n)    gate tile: w[n0 + r', k0 ..)         (r' = r - block_m)
//   rows [block_m+block_n, ROWS)         up tile:   w[n + n0 + r'', k0 ..)    (r'' = r - block_m - block_n)
// Each row is block_k/8 16-byte chunks. Chunk (row, c) has linear index q = row*(block_k/8) + c
// and is stored at byte 16 * swz(q), swz(q) = q ^ ((q >> 3) & 7): the 3-bit XOR swizzle of
// 16-byte chunks within each 128-byte line (CuTe Swizzle<3,4,3> over the linear byte
// offset; the same pattern as TMA's SWIZZLE_128B when block_k = 64). ldmatrix of 8 rows
// at one chunk column is then bank-conflict free for block_k = 32 and 64.
// Requirements: the ring buffer and every stage start 128-byte aligned (stage bytes are a
// multiple of 1024 for all accepted facts); block_k in {32, 64}; block_m, block_n
// multiples of 32 (the loader's row step).
#pragma once
#include <stdint.h>

namespace gsw {

__host__ __device__ constexpr unsigned stage_bytes(unsigned bm, unsigned bn, unsigned bk) {
  return (bm + 2u * bn) * bk * 2u;
}

template <unsigned BM, unsigned BN, unsigned BK>
struct StageLayout {
  static_assert(BK == 32 || BK == 64, "block_k must be 32 or 64");
  static constexpr unsigned ROWS = BM + 2 * BN;
  static constexpr unsigned CPR = BK / 8;  // 16-byte chunks per row
  static constexpr unsigned A_ROW = 0;
  static constexpr unsigned GATE_ROW = BM;
  static constexpr unsigned UP_ROW = BM + BN;
  static constexpr unsigned BYTES = ROWS * BK * 2;
  static_assert(BYTES == stage_bytes(BM, BN, BK), "stage_bytes");
  static_assert(BYTES % 1024 == 0, "stages keep 1024-byte alignment");
  // Byte offset of chunk `chunk` of row `row` inside a stage.
  __host__ __device__ static constexpr unsigned offset(unsigned row, unsigned chunk) {
    return 16u * swz(row * CPR + chunk);
  }
  __host__ __device__ static constexpr unsigned swz(unsigned q) { return q ^ ((q >> 3) & 7u); }
};

}  // namespace gsw
