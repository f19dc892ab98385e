// combine.cu — owner C. Role: out[t] = Σ_k weight_k · ys[row(t, k)] (ys bf16, the sum in
// f32), rounded to bf16, one warp per token. A token waits (YDONE, acquire) until the expert owner has
// finished every down-projection tile of each of its experts: ceil(count / block_m) row
// tiles × 2048 / block_n column blocks (the expert owner's geometry, read as facts).
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
struct Params {  // [params]: out = "ptr", t = "u32"
  __nv_bfloat16* out;
  unsigned t;
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
  const unsigned set = moe::enter(sync, moe::COMBINE, nw, lane, last);
  if (last) moe::finish_launch(sync, moe::COMBINE, set, 0, 0, lane);
  const unsigned* cur = sync + moe::SET(set);
  bool first = true;
  const unsigned T = p.t, S = T * top_k;
  const unsigned* route_e = static_cast<const unsigned*>(PL_WORKSPACE(route));
  const float* route_w = reinterpret_cast<const float*>(route_e + S);
  const unsigned* rows = static_cast<const unsigned*>(PL_WORKSPACE(rows));
  const __nv_bfloat16* ys = static_cast<const __nv_bfloat16*>(PL_WORKSPACE(ys));

  moe::wait_at_least(cur + moe::ROUTED, T);
  for (unsigned tok = gw; tok < T; tok += nw) {
    unsigned e = 0;
    float w = 0.f;
    if (lane < top_k) {  // lane k waits for its expert's tiles (all top_k waits at once)
      e = __ldcg(route_e + tok * top_k + lane), w = __ldcg(route_w + tok * top_k + lane);
      const unsigned tiles = moe::ceil_div(__ldcg(cur + moe::COUNTS + e), bm);
      while (moe::ld_acquire(cur + moe::YDONE + e) < tiles * blocks) __nanosleep(64);
    }
    __syncwarp();
    if (first) moe::stamp(sync, moe::COMBINE_BEGIN, lane), first = false;
    // rows[] was written before the READY release that the expert acquired: visible now.
    unsigned r = 0;
    if (lane < top_k) r = __ldcg(rows + tok * top_k + lane);
#pragma unroll
    for (unsigned j = 0; j < moe::HIDDEN / 256; ++j) {
      const unsigned c = j * 256 + lane * 8;
      float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (unsigned k = 0; k < top_k; ++k) {
        const unsigned rk = __shfl_sync(0xffffffffu, r, k);
        const float wk = __shfl_sync(0xffffffffu, w, k);
        const uint4 y = __ldcg(reinterpret_cast<const uint4*>(ys + (size_t)rk * moe::HIDDEN + c));
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
