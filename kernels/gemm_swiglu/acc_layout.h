// acc_layout.h — the register fragment layouts of export/import `acc`: AccLayout
// ("mma_acc(2,4)", mainloop -> swiglu) and WgmmaAccLayout ("wgmma_acc(2)", below;
// mainloop_wgmma -> swiglu built with -DSWIGLU_LAYOUT_WGMMA). Contract: shape =
// ["2", "block_m", "block_n"], dtype = "f32", layout = "mma_acc(2,4)" or "wgmma_acc(2)",
// space = "reg", scope = "role".
//
// The tensor is two planes of [block_m, block_n] f32: plane 0 = gate (x @ Wg^T), plane 1 =
// up (x @ Wu^T), for the CTA's output tile. PL_EXPORT(acc, frag, row0, col0) passes
// row0 = m0, col0 = n0: the global (row, col) of element [p, 0, 0] of either plane.
//
// "mma_acc(2,4)": the role's 8 warps tile each plane as warps_m = 2 by warps_n = 4.
// For the thread with role-relative index t (0..255; t = threadIdx.x - 32*warp_begin of
// the exporting role):
//   warp = t / 32, lane = t % 32, wm = warp / 4, wn = warp % 4, g = lane / 4, q = lane % 4
//   WM = block_m / 2, WN = block_n / 4, MT = WM / 16, NT = WN / 8
// Each warp holds MT x NT mma.m16n8 accumulator fragments per plane. The thread's float
// array `frag` has 2 * MT * NT * 4 elements; element
//   frag[((p * MT + mt) * NT + nt) * 4 + i]      p in {0,1}, mt < MT, nt < NT, i < 4
// is plane p at
//   row = wm * WM + mt * 16 + g + 8 * (i / 2)
//   col = wn * WN + nt * 8 + 2 * q + (i % 2)
// (i is the mma.sync m16n8 accumulator register order c0..c3). So gate and up elements
// at the same frag offset modulo the plane size are the same (row, col).
#pragma once

namespace gsw {

template <unsigned BM, unsigned BN>
struct AccLayout {
  static constexpr unsigned WARPS_M = 2, WARPS_N = 4, THREADS = 32 * WARPS_M * WARPS_N;
  static constexpr unsigned WM = BM / WARPS_M, WN = BN / WARPS_N;
  static constexpr unsigned MT = WM / 16, NT = WN / 8;
  static_assert(WM % 16 == 0 && WN % 8 == 0, "tile too small for mma_acc(2,4)");
  static constexpr unsigned PLANE = MT * NT * 4;  // floats per plane per thread
  static constexpr unsigned FRAG = 2 * PLANE;     // floats per thread
  __host__ __device__ static constexpr unsigned index(unsigned p, unsigned mt, unsigned nt, unsigned i) {
    return ((p * MT + mt) * NT + nt) * 4 + i;
  }
  __host__ __device__ static constexpr unsigned row(unsigned t, unsigned mt, unsigned i) {
    return (t / 32 / WARPS_N) * WM + mt * 16 + (t % 32) / 4 + 8 * (i / 2);
  }
  __host__ __device__ static constexpr unsigned col(unsigned t, unsigned nt, unsigned i) {
    return (t / 32 % WARPS_N) * WN + nt * 8 + 2 * (t % 4) + (i % 2);
  }
};

// "wgmma_acc(2)": the accumulator order of wgmma.m64nNk16 (f32) from two consumer
// warpgroups, planes first. Exported by mainloop_wgmma (one wgmma of N = 2*block_n over the
// contiguous gate + up rows of a stage, so accumulator n8-tile j < block_n/8 is gate and
// j >= block_n/8 is up), imported by swiglu built with -DSWIGLU_LAYOUT_WGMMA
// (swiglu_wgmma.contract.toml). Requires block_m = 128 (warpgroup wg holds rows
// [64*wg, 64*wg + 64)). For role thread t (0..255):
//   wg = t / 128, w = (t / 32) % 4, lane = t % 32, g = lane / 4, q = lane % 4, NT = block_n / 8
// The thread's float array has 2 * NT * 4 = block_n elements; element
//   frag[(p * NT + nt) * 4 + i]      p in {0,1}, nt < NT, i < 4
// is plane p at
//   row = 64 * wg + 16 * w + g + 8 * (i / 2)
//   col = nt * 8 + 2 * q + (i % 2)
// (per n8 tile the same c0..c3 order as mma.sync m16n8; warp w of a warpgroup owns rows
// 16w..16w+15 of its 64-row slab across all columns).
template <unsigned BM, unsigned BN>
struct WgmmaAccLayout {
  static constexpr unsigned WARPGROUPS = 2, THREADS = 128 * WARPGROUPS;
  static_assert(BM == 64 * WARPGROUPS, "wgmma_acc(2): block_m = 128");
  static_assert(BN % 8 == 0 && 2 * BN <= 256, "wgmma N = 2 * block_n <= 256");
  static constexpr unsigned NT = BN / 8;
  static constexpr unsigned PLANE = NT * 4;   // floats per plane per thread
  static constexpr unsigned FRAG = 2 * PLANE; // floats per thread (= block_n)
  __host__ __device__ static constexpr unsigned index(unsigned p, unsigned nt, unsigned i) {
    return (p * NT + nt) * 4 + i;
  }
  __host__ __device__ static constexpr unsigned row(unsigned t, unsigned i) {
    return (t / 128) * 64 + ((t / 32) % 4) * 16 + (t % 32) / 4 + 8 * (i / 2);
  }
  __host__ __device__ static constexpr unsigned col(unsigned t, unsigned nt, unsigned i) {
    return nt * 8 + 2 * (t % 4) + (i % 2);
  }
};

}  // namespace gsw
