// stream_k.h — the consumers' side of tile_scheduler's stream-K fixup (wgmma_consumer,
// wgmma_pingpong, cute_consumer): a contributor unit leaves its partial sums in its CTA's slot
// of workspace `partials`, the finisher adds the slots of the CTAs before it. A slot holds
// the THREADS threads' FRAG accumulators as float4s, float4 i of thread t at [i][t]
// (coalesced). `Frag` is anything indexable with [] (a float array, a CuTe register tensor).
#pragma once
#include <cuda_runtime.h>

namespace stream_k {

template <unsigned FRAG, unsigned THREADS, class Frag>
__device__ __forceinline__ void store_partial(float4* slot, const Frag& acc, unsigned t) {
#pragma unroll
  for (unsigned i = 0; i < FRAG / 4; ++i)
    __stcg(slot + i * THREADS + t, make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
}
template <unsigned FRAG, unsigned THREADS, class Frag>
__device__ __forceinline__ void add_partial(const float4* slot, Frag& acc, unsigned t) {
#pragma unroll
  for (unsigned i = 0; i < FRAG / 4; ++i) {
    const float4 v = __ldcg(slot + i * THREADS + t);
    acc[4 * i] += v.x, acc[4 * i + 1] += v.y, acc[4 * i + 2] += v.z, acc[4 * i + 3] += v.w;
  }
}

}  // namespace stream_k
