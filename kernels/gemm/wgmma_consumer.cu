// wgmma_consumer.cu — owner B. Consumer role of ring `ab` for the Hopper GEMM family: two
// warpgroups compute persistent work units cooperatively (warpgroup g owns rows
// [64g, 64g + 64) of a [block_m = 128, b_parts * block_n] tile) with
// wgmma.mma_async.m64nNk16 bf16 -> f32, N = b_parts * block_n, both operands read from
// the stage through K-major SWIZZLE_128B descriptors (tma_gemm.h, wgmma.h).
// Units come from callable `unit` (tile_scheduler), in the order the loader uses: a unit is
// a tile's k-steps [k_begin, k_end).
// The ring walk and the stream-K fix-up are ring_consumer.h's (shared with wgmma_pingpong and
// cute_consumer; the walk is expanded in place, RING_CONSUMER_WALK). Per
// k-step: 4 wgmmas (k = 0, 16, 32, 48),
// commit, keep one group in flight; lane 0 of each warp releases a stage on `empty` (8
// arrivals), on every CTA of the cluster. After a unit, a whole tile's accumulators go to the
// importer of `acc` (the epilogue), whose stores overlap the loader already filling the next
// unit's stages; a contributor's go to workspace `partials`, counted in `flags`. Named barrier
// `fixup` (the role's 256 threads) orders the fix-up.
// Owns block_m, block_n, block_k, b_parts (compile-time: -DCONSUMER_BLOCK_N=..,
// -DCONSUMER_B_PARTS=..).
// Export `acc`: [b_parts, block_m, block_n] f32 in layout "wgmma_acc(b_parts)": role thread
// t, wg = t / 128, w = (t / 32) % 4, lane = t % 32, g = lane / 4, q = lane % 4,
// NT = block_n / 8; frag[(p * NT + nt) * 4 + i] is part p at
//   row = 64 wg + 16 w + g + 8 (i / 2),  col = 8 nt + 2 q + (i % 2).
// PL_EXPORT passes row0 = m0, col0 = n0 of the tile; rows >= m or cols >= n are padding
// the importer must not store.
#define PL_COMPONENT wgmma_consumer
#include <pipelink.h>

#include "ring_consumer.h"
#include "tma_gemm.h"
#include "wgmma.h"

#ifndef CONSUMER_BLOCK_N
#define CONSUMER_BLOCK_N 128
#endif
#ifndef CONSUMER_B_PARTS
#define CONSUMER_B_PARTS 2
#endif

namespace wgmma_consumer {
constexpr unsigned BM = 128, BN = CONSUMER_BLOCK_N, PARTS = CONSUMER_B_PARTS, BK = tma_gemm::BLOCK_K;
constexpr unsigned N = PARTS * BN;   // one wgmma covers every B part: they are contiguous in a stage
constexpr unsigned FRAG = N / 2;     // f32 accumulators per thread: 64 rows x N / 128 threads
constexpr unsigned STAGE = tma_gemm::stage_bytes(BM, BN, PARTS);
static_assert(N == 64 || N == 128 || N == 256, "b_parts * block_n in {64, 128, 256}");
static_assert(STAGE % 1024 == 0 && (BM * 128) % 1024 == 0, "operands start on 1024-byte swizzle atoms");

struct Params {  // the contract's [params]: m, n, k = "u32"
  uint32_t m, n, k;
};
constexpr unsigned THREADS = 256;

}  // namespace wgmma_consumer

PL_OWN_FACT(block_m, wgmma_consumer::BM);
PL_OWN_FACT(block_n, wgmma_consumer::BN);
PL_OWN_FACT(block_k, wgmma_consumer::BK);
PL_OWN_FACT(b_parts, wgmma_consumer::PARTS);
RING_CONSUMER_DECLARATIONS();
PL_DECLARE_BARRIER(fixup);
PL_DECLARE_FACT(cluster_x);

PL_ENTRY(run) {
  using namespace wgmma_consumer;
  const Params& p = PL_PARAMS(Params);
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  const unsigned wg = pl::role_warpgroup(t);
  const bool lane0 = (t % 32) == 0;
  uint8_t* base = pl::smem_base();
  const uint32_t buf = pl::smem_addr(base + PL_RING_BUFFER(ab));
  uint64_t* full = reinterpret_cast<uint64_t*>(base + PL_RING_FULL(ab));
  uint64_t* empty = reinterpret_cast<uint64_t*>(base + PL_RING_EMPTY(ab));
  const unsigned depth = PL_RING_DEPTH(ab);

  // Stage-0 descriptors: this warpgroup's 64 A rows, and all N B rows.
  const uint64_t desc_a0 = wgmma::desc_sw128(buf + 64 * wg * 128);
  const uint64_t desc_b0 = wgmma::desc_sw128(buf + tma_gemm::b_offset(BM, BN, 0));
  constexpr uint64_t kStageStep = STAGE >> 4, kKStep = 32 >> 4;  // descriptor address units

  const unsigned m_tiles = tma_gemm::ceil_div(p.m, BM), n_tiles = tma_gemm::ceil_div(p.n, BN);
  const unsigned k_tiles = tma_gemm::ceil_div(p.k, BK);
  float4* partials = static_cast<float4*>(PL_WORKSPACE(partials));
  unsigned* flags = static_cast<unsigned*>(PL_WORKSPACE(flags));
  const unsigned bar = PL_BARRIER(fixup);
  const unsigned cx = PL_FACT(cluster_x);  // in a cluster, stages are filled by every CTA's loader
  float acc[FRAG];
  unsigned stage = 0, phase = 0;
  for (unsigned iter = 0;; ++iter) {
    unsigned info[4];  // k_begin, k_end, linear tile, first CTA of the tile (tile_scheduler)
    const unsigned tile = PL_CALL(unit, iter, m_tiles, n_tiles, k_tiles, info);
    if (tile == tma_gemm::NO_TILE) break;
    const unsigned k_begin = info[0], k_end = info[1];
    // The previous unit's sums are dead here (exported or stored): saying so keeps them out
    // of registers while the scheduler's arithmetic runs (else ptxas spills at 232).
#pragma unroll
    for (unsigned i = 0; i < FRAG; ++i) acc[i] = 0.f;
    RING_CONSUMER_WALK(pl::mbar_arrive_cluster_ctas(empty + prev, cx),
      const uint64_t so = stage * kStageStep;
      wgmma::fence_operands<FRAG>(acc);
      wgmma::fence();
      _Pragma("unroll")
      for (unsigned ks = 0; ks < BK / 16; ++ks)
        wgmma::mma_m64k16<N>(acc, desc_a0 + so + ks * kKStep, desc_b0 + so + ks * kKStep, (kt != k_begin) | ks);
      wgmma::commit();
      wgmma::wait<1>();  // the previous k-step's wgmmas are done: its stage can be refilled
      wgmma::fence_operands<FRAG>(acc);)
    wgmma::wait<0>();
    wgmma::fence_operands<FRAG>(acc);
    RING_CONSUMER_RELEASE_LAST(pl::mbar_arrive_cluster_ctas(empty + prev, cx));
    if (!ring_consumer::fix_up<FRAG, THREADS>(acc, partials, flags, k_begin, k_end, info, k_tiles, t, cx,
                                              [&] { pl::named_barrier_sync(bar, THREADS); }))
      continue;  // a contributor: the tile's finisher exports it
    PL_EXPORT(acc, acc, (tile >> 16) * BM, (tile & 0xFFFFu) * BN);
  }
}
