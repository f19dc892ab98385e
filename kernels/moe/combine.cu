// combine.cu — owner C. Role: out[t] = Σ_k weight_k · ys[row(t, k)] in f32, rounded to
// bf16, one warp per token. A token waits (YDONE, acquire) until the expert owner has
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
  const unsigned T = p.t, S = T * top_k;
  const unsigned* route_e = static_cast<const unsigned*>(PL_WORKSPACE(route));
  const float* route_w = reinterpret_cast<const float*>(route_e + S);
  const unsigned* rows = static_cast<const unsigned*>(PL_WORKSPACE(rows));
  const float* ys = static_cast<const float*>(PL_WORKSPACE(ys));

  moe::wait_at_least(cur + moe::ROUTED, T);
  for (unsigned tok = gw; tok < T; tok += nw) {
    unsigned e = 0;
    float w = 0.f;
    if (lane < top_k) e = __ldcg(route_e + tok * top_k + lane), w = __ldcg(route_w + tok * top_k + lane);
    for (unsigned k = 0; k < top_k; ++k) {
      const unsigned ek = __shfl_sync(0xffffffffu, e, k);
      const unsigned tiles = moe::ceil_div(__ldcg(cur + moe::COUNTS + ek), bm);
      moe::wait_at_least(cur + moe::YDONE + ek, tiles * blocks);
    }
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
        const float4* y = reinterpret_cast<const float4*>(ys + (size_t)rk * moe::HIDDEN + c);
        const float4 a = __ldcg(y), b = __ldcg(y + 1);
        acc[0] += wk * a.x, acc[1] += wk * a.y, acc[2] += wk * a.z, acc[3] += wk * a.w;
        acc[4] += wk * b.x, acc[5] += wk * b.y, acc[6] += wk * b.z, acc[7] += wk * b.w;
      }
      uint4 o;
      __nv_bfloat162 h0 = __floats2bfloat162_rn(acc[0], acc[1]), h1 = __floats2bfloat162_rn(acc[2], acc[3]);
      __nv_bfloat162 h2 = __floats2bfloat162_rn(acc[4], acc[5]), h3 = __floats2bfloat162_rn(acc[6], acc[7]);
      o.x = *reinterpret_cast<unsigned*>(&h0), o.y = *reinterpret_cast<unsigned*>(&h1);
      o.z = *reinterpret_cast<unsigned*>(&h2), o.w = *reinterpret_cast<unsigned*>(&h3);
      *reinterpret_cast<uint4*>(p.out + (size_t)tok * moe::HIDDEN + c) = o;
    }
  }
}
