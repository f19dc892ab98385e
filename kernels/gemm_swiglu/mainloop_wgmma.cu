// mainloop_wgmma.cu — owner B, wgmma variant. Consumer role of ring `ab` for GEMM + SwiGLU,
// an alternative to mainloop.cu (same ring, same stage layout, same facts; a different
// accumulator layout). Two consumer warpgroups (8 warps); warpgroup wg computes rows
// [64*wg, 64*wg + 64) of the [block_m, block_n] gate and up tiles with
// wgmma.mma_async.m64nNk16.f32.bf16.bf16 (sm_90a), N = 2*block_n: one wgmma covers the gate
// and up rows, which are contiguous in a stage (stage_layout.h: A tile, gate tile, up tile).
// Both operands come from shared memory through matrix descriptors built at run time from
// the ring's buffer offset: K-major, 128-byte swizzle. The loader's stage layout stores
// 16-byte chunk c of row r at r*128 + 16*(c ^ (r % 8)) when block_k = 64, i.e. exactly
// wgmma's SWIZZLE_128B K-major atom (8 rows x 128 B, chunk XOR row%8, swizzle taken from
// address bits [7,10) of the shared address), provided every stage starts 1024-byte
// aligned: the contract's ring align is 1024 and stage_bytes is a multiple of 1024.
// Descriptor: start address >> 4, leading byte offset unused (1) for a swizzled K-major
// operand whose K extent (16 bf16 = 32 B) lies inside one 128-B row, stride byte offset
// 1024 (from one 8-row group to the next), base offset 0, layout type 1 (SWIZZLE_128B).
// The k16 steps inside a 64-wide stage advance the start address by 32 B.
//
// Pipeline per k-step: wait full[s]; wgmma.fence; 4 wgmmas (k = 0, 16, 32, 48); commit;
// wait_group 1 (the previous k-step's group has completed), then every thread arrives on
// the previous stage's `empty` (contract arrivals = 256). After the loop wait_group 0 and
// release the last stage. A stage is released only after the wgmmas reading it completed.
// The loader fills stages with cp.async (generic proxy) and wgmma reads them through the
// async proxy, so each consumer thread issues fence.proxy.async.shared::cta after it has
// acquired `full[s]` and before its wgmmas read the stage.
//
// Export `acc`: layout "wgmma_acc(2)" (acc_layout.h, gsw::WgmmaAccLayout): the wgmma
// accumulator order, planes first. Import it with swiglu built -DSWIGLU_LAYOUT_WGMMA
// (swiglu_wgmma.contract.toml).
// Owns block_m, block_n, block_k (compile-time; -DMAINLOOP_BLOCK_M/N/K as mainloop.cu).
// Supported: block_m = 128, block_n in {64, 128}, block_k = 64; shapes m % block_m == 0,
// n % block_n == 0, k % block_k == 0 (the runtime rejects others).
#define PL_COMPONENT mainloop_wgmma
#include <pipelink.h>

#include "../gemm/wgmma.h"  // descriptors, fences, m64nNk16 (shared with wgmma_consumer)
#include "acc_layout.h"
#include "params.h"
#include "stage_layout.h"

#ifndef MAINLOOP_BLOCK_M
#define MAINLOOP_BLOCK_M 128
#endif
#ifndef MAINLOOP_BLOCK_N
#define MAINLOOP_BLOCK_N 64
#endif
#ifndef MAINLOOP_BLOCK_K
#define MAINLOOP_BLOCK_K 64
#endif

PL_OWN_FACT(block_m, MAINLOOP_BLOCK_M);
PL_OWN_FACT(block_n, MAINLOOP_BLOCK_N);
PL_OWN_FACT(block_k, MAINLOOP_BLOCK_K);
PL_DECLARE_RING(ab);
PL_DECLARE_EXPORT(acc);

namespace gsw_mainloop_wgmma {

constexpr unsigned BM = MAINLOOP_BLOCK_M, BN = MAINLOOP_BLOCK_N, BK = MAINLOOP_BLOCK_K;
static_assert(BM == 128, "block_m = 128 (two warpgroups of 64 rows)");
static_assert(BN == 64 || BN == 128, "block_n in {64, 128} (one wgmma of N = 2*block_n <= 256)");
static_assert(BK == 64, "block_k = 64: one stage row is one 128-byte swizzle row");
using S = gsw::StageLayout<BM, BN, BK>;
using L = gsw::WgmmaAccLayout<BM, BN>;
static_assert(S::CPR == 8, "128-byte rows");
static_assert(S::offset(9, 3) == 9 * 128 + 16 * (3 ^ 1) && S::offset(15, 7) == 15 * 128 + 16 * (7 ^ 7) &&
                  S::offset(130, 0) == 130 * 128 + 16 * 2,
              "stage layout = SWIZZLE_128B K-major atoms (chunk ^ row % 8)");
static_assert(S::BYTES % 1024 == 0 && (S::GATE_ROW * 128) % 1024 == 0 && (64 * 128) % 1024 == 0,
              "every operand start is an 8-row (1024-byte) atom boundary");
static_assert(L::FRAG == BN, "accumulator floats per thread");

__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

}  // namespace gsw_mainloop_wgmma

PL_ENTRY(run) {
  using namespace gsw_mainloop_wgmma;
  const GemmSwigluParams& p = PL_PARAMS(GemmSwigluParams);
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  const unsigned wg = pl::role_warpgroup(t);  // consumer warpgroup: rows [64*wg, 64*wg + 64) of the tile
  uint8_t* base = pl::smem_base();
  const uint32_t buf = pl::smem_addr(base + PL_RING_BUFFER(ab));
  uint64_t* full = reinterpret_cast<uint64_t*>(base + PL_RING_FULL(ab));
  uint64_t* empty = reinterpret_cast<uint64_t*>(base + PL_RING_EMPTY(ab));
  const unsigned depth = PL_RING_DEPTH(ab);

  float acc[L::FRAG];
#pragma unroll
  for (unsigned i = 0; i < L::FRAG; ++i) acc[i] = 0.f;

  // Descriptors of stage 0: A rows of this warpgroup, and the gate + up rows (N = 2*block_n).
  const uint64_t desc_a0 = wgmma::desc_sw128(buf + S::offset(S::A_ROW + 64 * wg, 0));
  const uint64_t desc_b0 = wgmma::desc_sw128(buf + S::offset(S::GATE_ROW, 0));
  constexpr uint64_t kStageStep = S::BYTES >> 4, kKStep = 32 >> 4;  // in descriptor address units

  const unsigned ktiles = p.k / BK;
  unsigned stage = 0, phase = 0, prev = 0;
  for (unsigned kt = 0; kt < ktiles; ++kt) {
    pl::mbar_wait(full + stage, phase);
    fence_proxy_async();  // cp.async (generic proxy) writes -> wgmma (async proxy) reads
    const uint64_t so = stage * kStageStep;
    wgmma::fence_operands<L::FRAG>(acc);
    wgmma::fence();
#pragma unroll
    for (unsigned ks = 0; ks < BK / 16; ++ks) wgmma::mma_m64k16<2 * BN>(acc, desc_a0 + so + ks * kKStep, desc_b0 + so + ks * kKStep, 1);
    wgmma::commit();
    wgmma::wait<1>();  // the previous k-step's wgmmas are done: its stage can be refilled
    wgmma::fence_operands<L::FRAG>(acc);
    if (kt > 0) pl::mbar_arrive(empty + prev);
    prev = stage;
    if (++stage == depth) { stage = 0; phase ^= 1u; }
  }
  wgmma::wait<0>();
  wgmma::fence_operands<L::FRAG>(acc);
  if (ktiles > 0) pl::mbar_arrive(empty + prev);

  PL_EXPORT(acc, acc, blockIdx.y * BM, blockIdx.x * BN);
}
