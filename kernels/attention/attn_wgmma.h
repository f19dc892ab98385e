// attn_wgmma.h — the two sm_90a warpgroup MMAs of the attention core (owner: attention core),
// m64n128k16 bf16 -> f32 (P V: m64n64k16 for d = 64, m64n256k16 for d = 256), over CuTe's SM90 GMMA atoms:
//   ss: S[64 x 128] += Q[64 x 16] K[128 x 16]^T, both K-major SWIZZLE_128B in shared memory;
//   rs: O[64 x 128] += P[64 x 16] V[16 x 128], P in registers (the accumulator layout of S
//       converted to bf16 pairs is wgmma's A-fragment layout), V "MN-major" (d contiguous)
//       SWIZZLE_128B in shared memory, read transposed (tnspB = MN).
#pragma once
#include <stdint.h>

#include <utility>

#include <cute/arch/mma_sm90_gmma.hpp>

namespace attn_wgmma {

namespace gmma = cute::SM90::GMMA;

// K-major SWIZZLE_128B operand at a 1024-byte aligned 8-row atom: start >> 4, LBO unused (1),
// SBO = 1024 B (8 rows of 128 B), layout type 1 (SWIZZLE_128B). +16 elements of K = +2.
__device__ __forceinline__ uint64_t desc_k_sw128(uint32_t addr) {
  return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024u >> 4) << 32) | ((uint64_t)1 << 62);
}
// MN-major SWIZZLE_128B operand (rows of 64 MN-elements = 128 B, K along rows): LBO = the
// stride between 64-element MN chunks, SBO = 1024 B between groups of 8 K-rows.
__device__ __forceinline__ uint64_t desc_mn_sw128(uint32_t addr, uint32_t lbo) {
  return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFFu) << 16) |
         ((uint64_t)(1024u >> 4) << 32) | ((uint64_t)1 << 62);
}
// A descriptor as its two words: the low one (start address >> 4, LBO) varies, the high one
// (SBO, layout type) is one constant for both operand kinds, so stepping along K or through V's
// chunks is a 32-bit add (the address field stays below 2^14 in shared memory: no carry into LBO).
constexpr uint64_t DESC_HI = ((uint64_t)(1024u >> 4) << 32) | ((uint64_t)1 << 62);
__device__ __forceinline__ uint64_t desc(uint32_t lo) { return (uint64_t)lo | DESC_HI; }
__device__ __forceinline__ void fence() { cute::warpgroup_arrive(); }
__device__ __forceinline__ void commit() { cute::warpgroup_commit_batch(); }
template <int N>
__device__ __forceinline__ void wait() { cute::warpgroup_wait<N>(); }
// Keeps the compiler from moving register reads/writes across the asynchronous wgmmas.
template <unsigned R, class T>
__device__ __forceinline__ void fence_regs(T* d) {
#pragma unroll
  for (unsigned i = 0; i < R; ++i) cute::warpgroup_fence_operand(d[i]);
}

// The atoms take the accumulator as separate float& arguments d[0] .. d[n - 1].
template <size_t... I>
__device__ __forceinline__ void ss_n128(float* d, uint64_t da, uint64_t db, uint32_t scale_d, std::index_sequence<I...>) {
  gmma::MMA_64x128x16_F32BF16BF16_SS<gmma::Major::K, gmma::Major::K>::fma(da, db, d[I]...,
                                                                            static_cast<gmma::ScaleOut>(scale_d));
}
template <class Atom, size_t... I>
__device__ __forceinline__ void rs_atom(float* d, const uint32_t* a, uint64_t db, std::index_sequence<I...>) {
  Atom::fma(a[0], a[1], a[2], a[3], db, d[I]..., gmma::ScaleOut::One);
}

// d {=, +=} A(desc) * B(desc)^T; scale_d = 0 overwrites.
__device__ __forceinline__ void ss(float* d, uint64_t da, uint64_t db, uint32_t scale_d) {
  ss_n128(d, da, db, scale_d, std::make_index_sequence<64>{});
}
// d += A(regs a[0..3]) * B(desc, transposed).
__device__ __forceinline__ void rs(float* d, const uint32_t* a, uint64_t db) {
  rs_atom<gmma::MMA_64x128x16_F32BF16BF16_RS<gmma::Major::K, gmma::Major::MN>>(d, a, db, std::make_index_sequence<64>{});
}
// d += A(regs a[0..3]) * B(desc, transposed), N = 64 (the d = 64 core's P V).
__device__ __forceinline__ void rs64(float* d, const uint32_t* a, uint64_t db) {
  rs_atom<gmma::MMA_64x64x16_F32BF16BF16_RS<gmma::Major::K, gmma::Major::MN>>(d, a, db, std::make_index_sequence<32>{});
}

// d += A(regs a[0..3]) * B(desc, transposed), N = 256 (the d = 256 core's P V).
__device__ __forceinline__ void rs256(float* d, const uint32_t* a, uint64_t db) {
  rs_atom<gmma::MMA_64x256x16_F32BF16BF16_RS<gmma::Major::K, gmma::Major::MN>>(d, a, db, std::make_index_sequence<128>{});
}

}  // namespace attn_wgmma
