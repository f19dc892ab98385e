// wgmma.h — sm_90a warpgroup MMA helpers shared by the wgmma consumers (owner B): the
// shared-memory matrix descriptor for K-major SWIZZLE_128B tiles (tma_gemm.h's stage layout),
// and m64nNk16 bf16 -> f32 for N = 64, 128, 256 over CuTe's SM90 GMMA atoms and fences
// (the instructions are CUTLASS's; this header only picks them and spreads a register array
// over their per-register arguments).
#pragma once
#include <stdint.h>

#include <utility>

#include <cute/arch/mma_sm90_gmma.hpp>

namespace wgmma {

namespace gmma = cute::SM90::GMMA;

// Descriptor of a K-major SWIZZLE_128B operand starting at a 1024-byte aligned 8-row atom:
// start address >> 4, leading byte offset unused (1) because a k16 slice (32 B) lies in
// one 128-byte row, stride byte offset 1024 (8 rows x 128 B), layout type 1 = SWIZZLE_128B.
// Advancing K by 16 elements adds 32 B, i.e. 2 to the descriptor.
__device__ __forceinline__ uint64_t desc_sw128(uint32_t smem_addr) {
  return (uint64_t)((smem_addr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024u >> 4) << 32) |
         ((uint64_t)1 << 62);
}
__device__ __forceinline__ void fence() { cute::warpgroup_arrive(); }
__device__ __forceinline__ void commit() { cute::warpgroup_commit_batch(); }
template <int N>
__device__ __forceinline__ void wait() { cute::warpgroup_wait<N>(); }
// Keeps the compiler from moving accumulator reads/writes across the asynchronous wgmmas.
template <unsigned R>
__device__ __forceinline__ void fence_operands(float* d) {
#pragma unroll
  for (unsigned i = 0; i < R; ++i) cute::warpgroup_fence_operand(d[i]);
}

// D {=, +=} A (smem desc) * B^T (smem desc) with both operands K-major: the atom takes the
// accumulator as N/2 separate float& arguments, d[0] .. d[N/2 - 1].
template <class Atom, size_t... I>
__device__ __forceinline__ void mma_ss(float* d, uint64_t da, uint64_t db, uint32_t scale_d, std::index_sequence<I...>) {
  Atom::fma(da, db, d[I]..., static_cast<gmma::ScaleOut>(scale_d));
}

// One m64nNk16 for N in {64, 128, 256}: D[64 x N] (f32, registers) {=, +=} A[64 x 16] *
// B[N x 16]^T (bf16, smem descs). scale_d = 0 overwrites D (a tile's first k-step), 1 accumulates.
template <unsigned N>
__device__ __forceinline__ void mma_m64k16(float* d, uint64_t da, uint64_t db, uint32_t scale_d) {
  static_assert(N == 64 || N == 128 || N == 256, "wgmma N");
  constexpr auto K = gmma::Major::K;
  using Atom = std::conditional_t<N == 64, gmma::MMA_64x64x16_F32BF16BF16_SS<K, K>,
               std::conditional_t<N == 128, gmma::MMA_64x128x16_F32BF16BF16_SS<K, K>,
                                  gmma::MMA_64x256x16_F32BF16BF16_SS<K, K>>>;
  mma_ss<Atom>(d, da, db, scale_d, std::make_index_sequence<N / 2>{});
}

}  // namespace wgmma
