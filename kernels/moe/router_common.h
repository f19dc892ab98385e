// router_common.h — what the router packages share (router.cu, router_grouped.cu): the router's
// launch set and a tile's completion count in `sync` (moe_shapes.h), and the k-step operand
// loads: cp.async copies of a k16 slice of W_r and of a tile's x rows into a ring stage, and the
// k-split count. A stage's slice is 32 B a W_r row (row r at r * 32), its x rows 32 B each.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

#include "moe_shapes.h"

namespace router_common {
// The router's launch set: the launch's last warp to enter zeroes the other set's ROUTED and
// COUNTS; returns this set's counters. `chunks`: moe::chunks(experts), the counters' layout (a fact).
__device__ __forceinline__ unsigned* enter_launch(unsigned* sync, unsigned warps, unsigned lane, unsigned chunks) {
  bool last;
  const unsigned set = moe::enter(sync, moe::ROUTER, warps, lane, last);
  if (last) moe::finish_launch(sync, moe::ROUTER, set, chunks, moe::ROUTED, moe::READY(chunks) - moe::ROUTED, lane);
  moe::stamp(sync, moe::KERNEL_BEGIN, lane);
  moe::stamp(sync, moe::ROUTER_BEGIN, lane);
  return sync + moe::SET(set, chunks);
}
// After this warp's partial logits of `tile` are stored: whether it is the last of the tile's
// `arrivals` (it then zeroes the count for the next launch and routes the tile).
__device__ __forceinline__ bool finishes_tile(unsigned* sync, unsigned tile, unsigned arrivals, unsigned lane,
                                              unsigned chunks) {
  __threadfence();
  __syncwarp();
  unsigned old = 0;
  if (lane == 0) old = moe::atom_acq_rel(sync + moe::BLOCKCNT(chunks) + tile, 1);
  old = __shfl_sync(0xffffffffu, old, 0);
  if (old != arrivals - 1) return false;
  if (lane == 0) sync[moe::BLOCKCNT(chunks) + tile] = 0;
  return true;
}
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ uint2 lds64(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(addr) : "memory");
  return v;
}
// Rows [64 half, 64 half + 64) of W_r's k16 slice at k into the stage at dst: 128 chunks of
// 16 B (chunk c: row c / 2, 16 B column c % 2), lane l taking c = l + 32 i, 16 rows further
// each time. The caller commits the cp.async group. Rows past `experts` (a model with fewer
// than the router's SLOTS) are zero-filled, reading nothing.
template <unsigned SLOTS>
__device__ __forceinline__ void fill_half(uint32_t dst, const __nv_bfloat16* w, unsigned hidden, unsigned experts,
                                          unsigned k, unsigned half, unsigned lane) {
  const unsigned row = 64 * half + lane / 2;
  const __nv_bfloat16* src = w + (size_t)row * hidden + k + 8 * (lane % 2);
  dst += row * 32 + (lane % 2) * 16;
  if (experts >= SLOTS) {  // (a fact: one branch folds away)
#pragma unroll
    for (unsigned i = 0; i < 4; ++i) cp_async16(dst + i * 512, src + (size_t)i * 16 * hidden);
    return;
  }
#pragma unroll
  for (unsigned i = 0; i < 4; ++i) {
    const bool valid = row + 16 * i < experts;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst + i * 512),
                 "l"(valid ? src + (size_t)i * 16 * hidden : w), "r"(valid ? 16u : 0u)
                 : "memory");
  }
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// The warp's tile's x rows [k, k + 16) into its part of the stage at dst: 32 chunks of 16 B,
// lane l taking row l / 2, column l % 2; rows past T are zero-filled (source size 0).
__device__ __forceinline__ void fill_x(uint32_t dst, const __nv_bfloat16* x, unsigned hidden, unsigned t0, unsigned T,
                                       unsigned k, unsigned lane) {
  const unsigned row = lane / 2;
  const bool valid = t0 + row < T;
  const __nv_bfloat16* src = x + (size_t)(valid ? t0 + row : 0) * hidden + k + 8 * (lane % 2);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst + row * 32 + (lane % 2) * 16), "l"(src),
               "r"(valid ? 16u : 0u)
               : "memory");
}

// Splits per tile pair: the largest power of two <= max_splits with pairs * splits <= ctas.
__device__ __forceinline__ unsigned splits_for(unsigned pairs, unsigned ctas, unsigned max_splits) {
  unsigned ks = 1;
  while (ks < max_splits && pairs * ks * 2 <= ctas) ks *= 2;
  return ks;
}
}  // namespace router_common
