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
namespace moe_gu {
__host__ __device__ constexpr unsigned index(unsigned nh, unsigned p, unsigned nt, unsigned i) {
  return (p * nh + nt) * 4 + i;
}
}  // namespace moe_gu
