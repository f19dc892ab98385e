// swiglu.cu — owner C. Library (no warps of its own): the importer of `acc`. Called by the
// exporting role's threads with their accumulator fragments (two planes: gate, up; layout
// "mma_acc(2,4)", acc_layout.h), it computes silu(gate) * up in f32 and stores bf16 to
// out[m, n] (row-major, leading dimension n) at (row0 + row, col0 + col).
// Reads the tile facts block_m, block_n through handles.
// Supported shapes: m % block_m == 0, n % block_n == 0 (the runtime rejects others).
// Layout option (compile time): by default the import is "mma_acc(2,4)" (gsw::AccLayout,
// contract swiglu.contract.toml, exporter mainloop). Built with -DSWIGLU_LAYOUT_WGMMA it is
// "wgmma_acc(2)" (gsw::WgmmaAccLayout, contract swiglu_wgmma.contract.toml, exporter
// mainloop_wgmma; block_m = 128 only). The component name stays `swiglu`: each kernel
// links one of the two builds.
#define PL_COMPONENT swiglu
#include <pipelink.h>

#include "acc_layout.h"
#include "params.h"

PL_DECLARE_FACT(block_m);
PL_DECLARE_FACT(block_n);

namespace gsw_swiglu {

// g -> -inf: __expf(-g) = inf and __fdividef(g, inf) = -0, the limit of silu.
__device__ __forceinline__ float silu(float g) { return __fdividef(g, 1.0f + __expf(-g)); }

#ifdef SWIGLU_LAYOUT_WGMMA
// "wgmma_acc(2)": each thread holds block_n/8 n8 tiles of rows (row, row + 8) per plane.
template <unsigned BM, unsigned BN>
__device__ __forceinline__ void store(const float* frag, unsigned t, unsigned row0, unsigned col0,
                                      __nv_bfloat16* out, unsigned n) {
  using L = gsw::WgmmaAccLayout<BM, BN>;
#pragma unroll
  for (unsigned nt = 0; nt < L::NT; ++nt)
#pragma unroll
    for (unsigned h = 0; h < 2; ++h) {  // i = 2h, 2h+1: two adjacent columns of one row
      const unsigned i = 2 * h;
      const float g0 = frag[L::index(0, nt, i)], g1 = frag[L::index(0, nt, i + 1)];
      const float u0 = frag[L::index(1, nt, i)], u1 = frag[L::index(1, nt, i + 1)];
      const size_t row = row0 + L::row(t, i), col = col0 + L::col(t, nt, i);
      *reinterpret_cast<__nv_bfloat162*>(out + row * n + col) =
          __floats2bfloat162_rn(silu(g0) * u0, silu(g1) * u1);
    }
}
#else
template <unsigned BM, unsigned BN>
__device__ __forceinline__ void store(const float* frag, unsigned t, unsigned row0, unsigned col0,
                                      __nv_bfloat16* out, unsigned n) {
  using L = gsw::AccLayout<BM, BN>;
#pragma unroll
  for (unsigned mt = 0; mt < L::MT; ++mt)
#pragma unroll
    for (unsigned nt = 0; nt < L::NT; ++nt)
#pragma unroll
      for (unsigned h = 0; h < 2; ++h) {  // i = 2h, 2h+1: two adjacent columns of one row
        const unsigned i = 2 * h;
        const float g0 = frag[L::index(0, mt, nt, i)], g1 = frag[L::index(0, mt, nt, i + 1)];
        const float u0 = frag[L::index(1, mt, nt, i)], u1 = frag[L::index(1, mt, nt, i + 1)];
        const size_t row = row0 + L::row(t, mt, i), col = col0 + L::col(t, nt, i);
        *reinterpret_cast<__nv_bfloat162*>(out + row * n + col) =
            __floats2bfloat162_rn(silu(g0) * u0, silu(g1) * u1);
      }
}
#endif

}  // namespace gsw_swiglu

PL_IMPORT(acc) {
  const GemmSwigluParams& p = PL_PARAMS(GemmSwigluParams);
  // Role-relative thread index of the exporting role. For a library the linker binds
  // warp_begin to the warp range of the role whose threads call this import.
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  const float* frag = static_cast<const float*>(pl_frag);
  const unsigned bm = PL_FACT(block_m), bn = PL_FACT(block_n);
  // One instantiation per accepted fact pair (the fragment is a register array: its size
  // must be compile-time); LTO folds the facts and keeps one.
#define GSW_SWIGLU_CASE(BM, BN) \
  if (bm == BM && bn == BN) return gsw_swiglu::store<BM, BN>(frag, t, pl_row0, pl_col0, p.out, p.n);
  GSW_SWIGLU_CASE(128, 64)
  GSW_SWIGLU_CASE(128, 128)
#ifndef SWIGLU_LAYOUT_WGMMA  // wgmma_acc(2) needs block_m = 128
  GSW_SWIGLU_CASE(64, 64)
  GSW_SWIGLU_CASE(64, 128)
#endif
#undef GSW_SWIGLU_CASE
  __trap();  // facts outside the contract's accept lists
}
