// expert_acc.h — the "moe_gu" register layout of the expert's `acc` export, the convention
// between the expert owner (exporter) and the SwiGLU owners (importers); the linker
// compares only the name.
//
// One warp holds a [block_m x block_h] tile of gate (plane p = 0) and of up (p = 1) as
// mma.sync m16n8 accumulators: MT = block_m / 16 row tiles, NH = block_h / 8 column tiles;
// lane (g = lane / 4, q = lane % 4) holds frag[((p * MT + mt) * NH + nt) * 4 + i] at
//   row = row0 + 16 mt + g + 8 (i / 2),  col = col0 + 8 nt + 2 q + (i % 2)
// where row0 is the tile's first row in hs (expert-contiguous, padded to block_m) and col0
// its first h column. Every row of the tile may be stored (padding rows hold zeros).
#pragma once
namespace moe_gu {
__host__ __device__ constexpr unsigned index(unsigned mt_count, unsigned nh, unsigned p, unsigned mt, unsigned nt,
                                             unsigned i) {
  return ((p * mt_count + mt) * nh + nt) * 4 + i;
}
}  // namespace moe_gu
