// combine.cu — owner C. Role: out[t] = Σ_k weight_k · ys[row(t, k)] (ys bf16, the sum in
// f32), rounded to bf16, one warp per token. A token waits (YDONE, acquire) until the expert owner has
// finished every down-projection tile of each of its experts: ceil(count / block_m) row
// tiles × 2048 / block_n column blocks (the expert owner's geometry, read as facts).
// With world > 1 ranks (moe_shapes.h) the expert's rank may be another GPU: the count is the
// total over ranks (the count exchange), and YDONE and the ys rows are the owner's, read
// through `peers` (per rank {xs, sync, ys}) with system-scope acquires.
#define PL_COMPONENT moe_combine
#include <pipelink.h>

#include <cuda_bf16.h>

#include "moe_shapes.h"

PL_DECLARE_FACT(top_k);
PL_DECLARE_FACT(block_m);
PL_DECLARE_FACT(block_n);
PL_DECLARE_WORKSPACE(sync);
PL_DECLARE_WORKSPACE(route);
PL_DECLARE_WORKSPACE(rows);
PL_DECLARE_WORKSPACE(ys);

namespace moe_combine {
struct Params {  // [params]: out = "ptr", t, rank, world = "u32", peers = "ptr"
  __nv_bfloat16* out;
  unsigned t, rank, world;
  const unsigned long long* peers;
};
}  // namespace moe_combine

PL_ENTRY(run) {
  using namespace moe_combine;
  const Params& p = PL_PARAMS(Params);
  const unsigned lane = threadIdx.x % 32;
  const unsigned warps = PL_WARPS();
  const unsigned gw = blockIdx.x * warps + (threadIdx.x / 32 - PL_WARP_BEGIN()), nw = gridDim.x * warps;
  const unsigned top_k = PL_FACT(top_k), bm = PL_FACT(block_m), blocks = moe::HIDDEN / PL_FACT(block_n);
  unsigned* sync = static_cast<unsigned*>(PL_WORKSPACE(sync));
  bool last;
  unsigned gen;
  const unsigned set = moe::enter(sync, moe::COMBINE, nw, lane, last, gen);
  if (last) moe::finish_launch(sync, moe::COMBINE, set, 0, 0, lane);
  const unsigned* cur = sync + moe::SET(set);
  bool first = true;
  const unsigned T = p.t, S = T * top_k;
  const unsigned* route_e = static_cast<const unsigned*>(PL_WORKSPACE(route));
  const float* route_w = reinterpret_cast<const float*>(route_e + S);
  const unsigned* rows = static_cast<const unsigned*>(PL_WORKSPACE(rows));
  const __nv_bfloat16* ys = static_cast<const __nv_bfloat16*>(PL_WORKSPACE(ys));

  const unsigned world = p.world;
  moe::wait_at_least(cur + moe::ROUTED, T);
  if (world > 1) {  // every rank's counts of this launch
    unsigned tot[4], below[4];
    moe::gather_counts(sync, set, gen + 1, p.rank, world, lane, tot, below);
  }
  for (unsigned tok = gw; tok < T; tok += nw) {
    unsigned e = 0;
    float w = 0.f;
    const __nv_bfloat16* src = ys;  // lane k: its expert's ys (this rank's or the owner's)
    if (lane < top_k) {  // lane k waits for its expert's tiles (all top_k waits at once)
      e = __ldcg(route_e + tok * top_k + lane), w = __ldcg(route_w + tok * top_k + lane);
      if (world == 1) {
        const unsigned tiles = moe::ceil_div(__ldcg(cur + moe::COUNTS + e), bm);
        while (moe::ld_acquire(cur + moe::YDONE + e) < tiles * blocks) __nanosleep(64);
      } else {
        unsigned cnt = 0;
        for (unsigned r = 0; r < world; ++r) cnt += __ldcg(sync + moe::EX_COUNTS(set, r) + e);
        const unsigned owner = e / (moe::EXPERTS / world);
        const unsigned* done = cur + moe::YDONE + e;
        if (owner != p.rank) {
          done = reinterpret_cast<const unsigned*>(p.peers[moe::PEER_WORDS * owner + moe::PEER_SYNC]) +
                 moe::SET(set) + moe::YDONE + e;
          src = reinterpret_cast<const __nv_bfloat16*>(p.peers[moe::PEER_WORDS * owner + moe::PEER_YS]);
        }
        const unsigned tiles = moe::ceil_div(cnt, bm);
        while (moe::ld_acquire_sys(done) < tiles * blocks) __nanosleep(64);
      }
    }
    __syncwarp();
    if (first) moe::stamp(sync, moe::COMBINE_BEGIN, lane), first = false;
    // rows[] was written before the READY release that the expert acquired: visible now.
    if (lane < top_k) src += (size_t)__ldcg(rows + tok * top_k + lane) * moe::HIDDEN;
#pragma unroll
    for (unsigned j = 0; j < moe::HIDDEN / 256; ++j) {
      const unsigned c = j * 256 + lane * 8;
      float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (unsigned k = 0; k < top_k; ++k) {
        const auto* yk = reinterpret_cast<const __nv_bfloat16*>(
            __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(src), k));
        const float wk = __shfl_sync(0xffffffffu, w, k);
        const uint4 y = __ldcg(reinterpret_cast<const uint4*>(yk + c));
        const unsigned yw[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
        for (unsigned i = 0; i < 4; ++i) {
          const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&yw[i]));
          acc[2 * i] += wk * f.x, acc[2 * i + 1] += wk * f.y;
        }
      }
      uint4 o;
      __nv_bfloat162 h0 = __floats2bfloat162_rn(acc[0], acc[1]), h1 = __floats2bfloat162_rn(acc[2], acc[3]);
      __nv_bfloat162 h2 = __floats2bfloat162_rn(acc[4], acc[5]), h3 = __floats2bfloat162_rn(acc[6], acc[7]);
      o.x = *reinterpret_cast<unsigned*>(&h0), o.y = *reinterpret_cast<unsigned*>(&h1);
      o.z = *reinterpret_cast<unsigned*>(&h2), o.w = *reinterpret_cast<unsigned*>(&h3);
      *reinterpret_cast<uint4*>(p.out + (size_t)tok * moe::HIDDEN + c) = o;
    }
  }
  moe::stamp(sync, moe::COMBINE_END, lane);
  moe::stamp(sync, moe::KERNEL_END, lane);
}
