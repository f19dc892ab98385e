// tma_gemm.h — what the Hopper GEMM components (tma_loader, wgmma_consumer) agree on
// about ring `ab`; each side also states it in its contract (stage_bytes, align).
//
// A stage holds the A tile then `b_parts` B tiles, each bf16 with K contiguous, rows of
// block_k = 64 elements (128 bytes) in TMA's SWIZZLE_128B order (16-byte chunk c of row r
// at r * 128 + 16 * (c ^ (r % 8))), which is also the K-major SWIZZLE_128B layout wgmma's
// shared-memory descriptors read:
//   bytes [0, block_m * 128)                       A = x[m0 .. m0 + block_m, k0 .. k0 + 64)
//   then for p in 0 .. b_parts - 1, block_n * 128 B: B_p = w[p * n + n0 .., k0 ..)
// (for GEMM + SwiGLU, b_parts = 2: the gate rows of w, then the up rows at offset n).
// Every stage starts 1024-byte aligned (the swizzle repeats every 8 rows of 128 B).
#pragma once
#include <stdint.h>

namespace tma_gemm {

constexpr unsigned BLOCK_K = 64;  // one 128-byte swizzle row per tile row
constexpr unsigned ROW_BYTES = BLOCK_K * 2;

__host__ __device__ constexpr unsigned stage_bytes(unsigned bm, unsigned bn, unsigned parts) {
  return (bm + parts * bn) * ROW_BYTES;
}
__host__ __device__ constexpr unsigned b_offset(unsigned bm, unsigned bn, unsigned part) {
  return (bm + part * bn) * ROW_BYTES;
}
__host__ __device__ constexpr unsigned ceil_div(unsigned a, unsigned b) { return (a + b - 1) / b; }
constexpr unsigned NO_TILE = 0xFFFFFFFFu;  // tile_scheduler: the CTA has no more tiles

}  // namespace tma_gemm
