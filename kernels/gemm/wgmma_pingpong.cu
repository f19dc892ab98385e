// wgmma_pingpong.cu — owner B. Ping-pong consumer role of ring `ab` for the Hopper GEMM
// family: the same ring, loader, scheduler and stage layout (tma_gemm.h) as wgmma_consumer,
// but each of the two warpgroups computes whole work units on its own: warpgroup 0 takes
// the units 0, 2, 4, ... of the CTA's stream, warpgroup 1 the units 1, 3, 5, ... While one
// warpgroup runs its mainloop the other runs the epilogue of its previous tile, so the
// tensor cores stay busy during epilogues (cooperative consumers leave them idle there).
// The loader fills stages in unit order, so the warpgroups take turns at the mainloop:
// named barriers `turn0` / `turn1` hand the ring from one to the other (bar.arrive after
// the mainloop, bar.sync before the next), and each warpgroup skips the other's stages.
// Ring walk and stream-K fix-up are ring_consumer.h's (shared with wgmma_consumer and
// cute_consumer); this file supplies the MMA and the turns. A CTA has at most one contributor
// unit; each warpgroup fixes up its own units, with its own named barrier (`fix0`, `fix1`):
// the other may be in its own fix-up.
// Per k-step: BM / 64 x 4 wgmmas m64nNk16 (N = b_parts * block_n), commit, keep one group in
// flight; lane 0 of each of the warpgroup's four warps arrives twice on `empty` (the ring's
// 8 arrivals per stage, as the loader expects).
// Owns block_m, block_n, block_k, b_parts (-DPINGPONG_BLOCK_M, -DPINGPONG_BLOCK_N).
// Export `acc`: [b_parts, block_m, block_n] f32 in layout "wgmma_wg_acc(b_parts)", held
// by the 128 threads of ONE warpgroup (the importer is called by each warpgroup on its
// own): warpgroup thread u = t % 128, w = u / 32, lane = u % 32, g = lane / 4, q = lane % 4,
// NT = block_n / 8; frag[((mb * b_parts + p) * NT + nt) * 4 + i] is part p at
//   row = 64 mb + 16 w + g + 8 (i / 2),  col = 8 nt + 2 q + (i % 2).
#define PL_COMPONENT wgmma_pingpong
#include <pipelink.h>

#include "ring_consumer.h"
#include "tma_gemm.h"
#include "wgmma.h"

#ifndef PINGPONG_BLOCK_M
#define PINGPONG_BLOCK_M 128
#endif
#ifndef PINGPONG_BLOCK_N
#define PINGPONG_BLOCK_N 64
#endif

namespace wgmma_pingpong {
constexpr unsigned BM = PINGPONG_BLOCK_M, BN = PINGPONG_BLOCK_N, PARTS = 2, BK = tma_gemm::BLOCK_K;
constexpr unsigned MB = BM / 64;     // m64 blocks per warpgroup tile
constexpr unsigned N = PARTS * BN;   // one wgmma covers both B parts: they are contiguous in a stage
constexpr unsigned FRAG_MB = N / 2;  // f32 accumulators per thread per m64 block
constexpr unsigned FRAG = MB * FRAG_MB;
constexpr unsigned STAGE = tma_gemm::stage_bytes(BM, BN, PARTS);
static_assert(FRAG <= 128, "a warpgroup holds at most 128 accumulators per thread");
static_assert(N == 128 || N == 256, "b_parts * block_n in {128, 256}");
static_assert(STAGE % 1024 == 0, "stages start on 1024-byte swizzle atoms");
static_assert(FRAG % 4 == 0, "partial sums move as float4 (ring_consumer.h)");

struct Params {  // the contract's [params]: m, n, k = "u32"
  uint32_t m, n, k;
};
constexpr unsigned WG_THREADS = 128, ROLE_THREADS = 256;
static_assert(WG_THREADS == 128, "pl::role_warpgroup counts warpgroups of 128 threads");

// Ring position (stage, phase) after `steps` more k-steps.
__device__ __forceinline__ void advance(unsigned& stage, unsigned& phase, unsigned steps, unsigned depth) {
  stage += steps;
  const unsigned wraps = stage / depth;
  stage -= wraps * depth;
  phase ^= wraps & 1u;
}
}  // namespace wgmma_pingpong

PL_OWN_FACT(block_m, wgmma_pingpong::BM);
PL_OWN_FACT(block_n, wgmma_pingpong::BN);
PL_OWN_FACT(block_k, wgmma_pingpong::BK);
PL_OWN_FACT(b_parts, wgmma_pingpong::PARTS);
RING_CONSUMER_DECLARATIONS();
PL_DECLARE_BARRIER(fix0);
PL_DECLARE_BARRIER(fix1);
PL_DECLARE_BARRIER(turn0);
PL_DECLARE_BARRIER(turn1);

PL_ENTRY(run) {
  using namespace wgmma_pingpong;
  const Params& p = PL_PARAMS(Params);
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  const unsigned wg = pl::role_warpgroup(t);
  const bool lane0 = (t % 32) == 0;
  const ring_consumer::Ring ring = RING_CONSUMER_RING();
  const uint32_t buf = pl::smem_addr(ring.buffer);
  // My turn starts when the other warpgroup's mainloop is done (it arrives on its barrier).
  // Each barrier id appears as a link-time immediate in its own instruction (L-SASS checks them).
  auto wait_turn = [&] {
    if (wg == 0) pl::named_barrier_sync(PL_BARRIER(turn1), ROLE_THREADS);
    else pl::named_barrier_sync(PL_BARRIER(turn0), ROLE_THREADS);
  };
  auto pass_turn = [&] {
    if (wg == 0) pl::named_barrier_arrive(PL_BARRIER(turn0), ROLE_THREADS);
    else pl::named_barrier_arrive(PL_BARRIER(turn1), ROLE_THREADS);
  };
  auto fix_sync = [&] {
    if (wg == 0) pl::named_barrier_sync(PL_BARRIER(fix0), WG_THREADS);
    else pl::named_barrier_sync(PL_BARRIER(fix1), WG_THREADS);
  };

  const uint64_t desc_a0 = wgmma::desc_sw128(buf);
  const uint64_t desc_b0 = wgmma::desc_sw128(buf + tma_gemm::b_offset(BM, BN, 0));
  constexpr uint64_t kStageStep = STAGE >> 4, kKStep = 32 >> 4, kMBlock = (64 * 128) >> 4;

  const unsigned m_tiles = tma_gemm::ceil_div(p.m, BM), n_tiles = tma_gemm::ceil_div(p.n, BN);
  const unsigned k_tiles = tma_gemm::ceil_div(p.k, BK);
  float4* partials = static_cast<float4*>(PL_WORKSPACE(partials));
  unsigned* flags = static_cast<unsigned*>(PL_WORKSPACE(flags));
  const unsigned u = t % WG_THREADS;
  float acc[FRAG];
  unsigned stage = 0, phase = 0, info[4];
  if (wg == 1) {  // warpgroup 1 starts after unit 0's stages
    if (PL_CALL(unit, 0, m_tiles, n_tiles, k_tiles, info) != tma_gemm::NO_TILE)
      advance(stage, phase, info[1] - info[0], ring.depth);
  }
  for (unsigned iter = wg;; iter += 2) {
    const unsigned tile = PL_CALL(unit, iter, m_tiles, n_tiles, k_tiles, info);
    if (tile == tma_gemm::NO_TILE) {
      // The other warpgroup ran unit iter - 1 and arrived on its barrier: take that
      // arrival so no barrier is left half-complete at exit.
      unsigned prev_info[4];
      if (iter > 0 && PL_CALL(unit, iter - 1, m_tiles, n_tiles, k_tiles, prev_info) != tma_gemm::NO_TILE)
        wait_turn();
      break;
    }
    const unsigned k_begin = info[0], k_end = info[1];
    if (iter > 0) wait_turn();  // the ring is mine now
#pragma unroll
    for (unsigned i = 0; i < FRAG; ++i) acc[i] = 0.f;
    ring_consumer::consume_unit(
        ring, stage, phase, k_begin, k_end, lane0,
        [&](unsigned s, bool accumulate) {
          const uint64_t so = s * kStageStep;
          wgmma::fence_operands<FRAG>(acc);
          wgmma::fence();
#pragma unroll
          for (unsigned ks = 0; ks < BK / 16; ++ks)
#pragma unroll
            for (unsigned mb = 0; mb < MB; ++mb)
              wgmma::mma_m64k16<N>(acc + mb * FRAG_MB, desc_a0 + so + mb * kMBlock + ks * kKStep,
                                   desc_b0 + so + ks * kKStep, accumulate | ks);
          wgmma::commit();
          wgmma::wait<1>();  // the previous k-step's wgmmas are done: its stage can be refilled
          wgmma::fence_operands<FRAG>(acc);
        },
        [&] {
          wgmma::wait<0>();
          wgmma::fence_operands<FRAG>(acc);
        },
        [&](unsigned s) { pl::mbar_arrive_count(ring.empty + s, 2); });
    pass_turn();  // the other warpgroup's turn
    // Skip the other warpgroup's next unit in the ring (if it has one).
    unsigned next[4];
    if (PL_CALL(unit, iter + 1, m_tiles, n_tiles, k_tiles, next) != tma_gemm::NO_TILE)
      advance(stage, phase, next[1] - next[0], ring.depth);
    // One CTA per cluster here: every CTA below this one contributed.
    // k_begin / k_end read again from info, as the fix-up here always did (it keeps the SASS).
    if (!ring_consumer::fix_up<FRAG, WG_THREADS>(acc, partials, flags, info[0], info[1], info, k_tiles, u, 1u, fix_sync))
      continue;  // a contributor: the tile's finisher exports it
    PL_EXPORT(acc, acc, (tile >> 16) * BM, (tile & 0xFFFFu) * BN);
  }
}
