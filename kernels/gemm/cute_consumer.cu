// cute_consumer.cu — owner D. The consumer role of ring `ab` for the Hopper GEMM family,
// written with CUTLASS's CuTe (headers of the nvidia-cutlass wheel) instead of hand-written
// wgmma asm: same interface as wgmma_consumer (contract cute_consumer.contract.toml), so it
// links with the same tile_scheduler, tma_loader and swiglu_tma_store packages.
//
// CuTe expresses the MMA:
//  * the stage's A [128 x 64] and B [b_parts * block_n x 64] tiles are smem tensors with
//    GMMA::Layout_K_SW128_Atom<bf16> (K-major, SWIZZLE_128B: what TMA wrote, tma_gemm.h);
//  * a TiledMMA of two SM90 GMMA atoms 64 x N x 16 (SS: both operands from smem) stacked
//    along M, one per warpgroup (warpgroup g owns rows [64g, 64g + 64)); N = b_parts * block_n;
//  * make_fragment_A/B turn the stage into GMMA descriptors, partition_fragment_C gives the
//    accumulators; cute::gemm issues the wgmmas, warpgroup_arrive/commit_batch/wait fence them.
// The descriptors are built once for stage 0; stage s is the same descriptors advanced by
// s * stage_bytes (DescriptorIterator offsets count 16-byte units).
//
// The accumulator fragment of an SM90 64xNx16 f32 atom is, per thread, exactly the wgmma
// register order, so `acc` is exported unchanged in layout "wgmma_acc(b_parts)" (see
// wgmma_consumer.cu for the formula) and swiglu_tma_store imports it as it is.
//
// The ring walk and the stream-K fix-up are ring_consumer.h's, shared with wgmma_consumer
// and wgmma_pingpong (the loader and the scheduler do not know which consumer they serve):
// per k-step 4 k16 GMMAs, commit, keep one group in flight, release the previous stage.
#define PL_COMPONENT cute_consumer
#include <pipelink.h>

#include <cute/atom/mma_atom.hpp>
#include <cute/tensor.hpp>

#include "ring_consumer.h"
#include "tma_gemm.h"

#ifndef CONSUMER_BLOCK_N
#define CONSUMER_BLOCK_N 128
#endif
#ifndef CONSUMER_B_PARTS
#define CONSUMER_B_PARTS 2
#endif

namespace cute_consumer {
using namespace cute;

constexpr unsigned BM = 128, BN = CONSUMER_BLOCK_N, PARTS = CONSUMER_B_PARTS, BK = tma_gemm::BLOCK_K;
constexpr unsigned N = PARTS * BN;  // one GMMA covers every B part: they are contiguous in a stage
constexpr unsigned STAGE = tma_gemm::stage_bytes(BM, BN, PARTS);
constexpr unsigned THREADS = 256;
static_assert(N == 128 || N == 256, "b_parts * block_n in {128, 256}");
static_assert(STAGE % 1024 == 0 && tma_gemm::b_offset(BM, BN, 0) % 1024 == 0, "operands start on 1024-byte swizzle atoms");

template <unsigned n> struct Atom;  // bf16 x bf16 -> f32, A and B K-major in smem
template <> struct Atom<128> { using type = SM90_64x128x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>; };
template <> struct Atom<256> { using type = SM90_64x256x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>; };

using Bf16 = bfloat16_t;
using SmemA = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf16>{}, Shape<Int<BM>, Int<BK>>{}));
using SmemB = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf16>{}, Shape<Int<N>, Int<BK>>{}));
using TiledMma = decltype(make_tiled_mma(typename Atom<N>::type{}, Layout<Shape<_2, _1, _1>>{}));

struct Params {  // the contract's [params]: m, n, k = "u32"
  uint32_t m, n, k;
};

}  // namespace cute_consumer

PL_OWN_FACT(block_m, cute_consumer::BM);
PL_OWN_FACT(block_n, cute_consumer::BN);
PL_OWN_FACT(block_k, cute_consumer::BK);
PL_OWN_FACT(b_parts, cute_consumer::PARTS);
RING_CONSUMER_DECLARATIONS();
PL_DECLARE_BARRIER(fixup);
PL_DECLARE_FACT(cluster_x);

PL_ENTRY(run) {
  using namespace cute_consumer;
  const Params& p = PL_PARAMS(Params);
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  const bool lane0 = (t % 32) == 0;
  uint8_t* base = pl::smem_base();
  uint8_t* stage0 = base + PL_RING_BUFFER(ab);
  uint64_t* full = reinterpret_cast<uint64_t*>(base + PL_RING_FULL(ab));
  uint64_t* empty = reinterpret_cast<uint64_t*>(base + PL_RING_EMPTY(ab));
  const unsigned depth = PL_RING_DEPTH(ab);

  TiledMma mma;
  auto thr = mma.get_thread_slice(t);
  Tensor sA = make_tensor(make_smem_ptr(reinterpret_cast<Bf16*>(stage0)), SmemA{});
  Tensor sB = make_tensor(make_smem_ptr(reinterpret_cast<Bf16*>(stage0 + tma_gemm::b_offset(BM, BN, 0))), SmemB{});
  const Tensor tCrA = thr.make_fragment_A(thr.partition_A(sA));  // (MMA, MMA_M, MMA_K = 4) descriptors
  const Tensor tCrB = thr.make_fragment_B(thr.partition_B(sB));
  Tensor acc = partition_fragment_C(mma, Shape<Int<BM>, Int<N>>{});  // (MMA, 1, 1) f32
  static_assert(decltype(size(acc))::value == N / 2, "64 rows x N per warpgroup of 128 threads");

  const unsigned m_tiles = tma_gemm::ceil_div(p.m, BM), n_tiles = tma_gemm::ceil_div(p.n, BN);
  const unsigned k_tiles = tma_gemm::ceil_div(p.k, BK);
  float4* partials = static_cast<float4*>(PL_WORKSPACE(partials));
  unsigned* flags = static_cast<unsigned*>(PL_WORKSPACE(flags));
  const unsigned bar = PL_BARRIER(fixup);
  const unsigned cx = PL_FACT(cluster_x);
  unsigned stage = 0, phase = 0;
  for (unsigned iter = 0;; ++iter) {
    unsigned info[4];  // k_begin, k_end, linear tile, first CTA of the tile (tile_scheduler)
    const unsigned tile = PL_CALL(unit, iter, m_tiles, n_tiles, k_tiles, info);
    if (tile == tma_gemm::NO_TILE) break;
    const unsigned k_begin = info[0], k_end = info[1];
    clear(acc);  // the previous unit's sums are dead: keeps them out of registers meanwhile
    mma.accumulate_ = GMMA::ScaleOut::Zero;
    RING_CONSUMER_WALK(pl::mbar_arrive_cluster_ctas(empty + prev, cx),
      const unsigned advance = stage * (STAGE >> 4);  // descriptors count 16-byte units
      Tensor a = make_tensor(tCrA.data() + advance, tCrA.layout());
      Tensor b = make_tensor(tCrB.data() + advance, tCrB.layout());
      warpgroup_fence_operand(acc);
      warpgroup_arrive();
      _Pragma("unroll")  // CUTE_UNROLL, which expands to a directive a macro argument cannot hold
      for (int kb = 0; kb < size<2>(a); ++kb) {
        cute::gemm(mma, a(_, _, kb), b(_, _, kb), acc);
        mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      warpgroup_wait<1>();  // the previous k-step's GMMAs are done: its stage can be refilled
      warpgroup_fence_operand(acc);)
    warpgroup_wait<0>();
    warpgroup_fence_operand(acc);
    RING_CONSUMER_RELEASE_LAST(pl::mbar_arrive_cluster_ctas(empty + prev, cx));
    if (!ring_consumer::fix_up<N / 2, THREADS>(acc, partials, flags, k_begin, k_end, info, k_tiles, t, cx,
                                               [&] { pl::named_barrier_sync(bar, THREADS); }))
      continue;  // a contributor: the tile's finisher exports it
    PL_EXPORT(acc, raw_pointer_cast(acc.data()), (tile >> 16) * BM, (tile & 0xFFFFu) * BN);
  }
}
