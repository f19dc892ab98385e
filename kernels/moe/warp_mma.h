// warp_mma.h — warp-level bf16 MMA from global memory (mma.sync m16n8k16, f32 accumulate),
// shared by the router and expert owners. Operands are loaded straight from global memory
// with 16-byte loads: for a k32 step at k0, lane (g = lane / 4, q = lane % 4) loads
// A[row g][k0 + 8q .. +8), A[row g + 8][...] and, per n8 tile, B[col g][k0 + 8q .. +8) (B
// stored K-contiguous, i.e. W[n][k]). The two k16 MMAs then use a permuted k order (the
// same for A and B, so the dot products are unchanged): MMA 0 takes elements 8q + {0..3},
// MMA 1 takes 8q + {4..7}.
// Accumulator of an n8 tile (4 floats): d[0], d[1] at (row g, cols 2q, 2q + 1), d[2], d[3]
// at (row g + 8, same cols).
#pragma once
#include <stdint.h>

namespace warp_mma {
__device__ __forceinline__ void mma16816(float* d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// d += A[16 x 32] * B[32 x 8] with the permuted k order above.
__device__ __forceinline__ void mma_k32(float* d, const uint4& ag, const uint4& ah, const uint4& b) {
  mma16816(d, ag.x, ah.x, ag.y, ah.y, b.x, b.y);
  mma16816(d, ag.z, ah.z, ag.w, ah.w, b.z, b.w);
}
// Streaming read of weights (read once: no L1 allocation).
__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
// Read of data another CTA wrote in this launch (L2, never a stale L1 line).
__device__ __forceinline__ uint4 ld_cg(const void* p) { return __ldcg(static_cast<const uint4*>(p)); }
}  // namespace warp_mma
