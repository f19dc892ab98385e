// mainloop.cu — owner B. Consumer role of ring `ab` for GEMM + SwiGLU: two warpgroups
// (8 warps) compute the gate and up tiles [block_m, block_n] of one output tile with
// mma.sync.m16n8k16 bf16 -> f32, reading each stage with ldmatrix, then hand the f32
// accumulators to the bound importer through PL_EXPORT(acc, ...). Fragment layout:
// acc_layout.h ("mma_acc(2,4)"); stage layout: stage_layout.h.
// Owns the tile facts block_m, block_n, block_k (compile-time; override with
// -DMAINLOOP_BLOCK_M=.. -DMAINLOOP_BLOCK_N=.. -DMAINLOOP_BLOCK_K=..).
// Supported: block_m in {64, 128}, block_n in {64, 128}, block_k in {32, 64};
// shapes m % block_m == 0, n % block_n == 0, k % block_k == 0 (the runtime rejects others).
#define PL_COMPONENT mainloop
#include <pipelink.h>

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

namespace gsw_mainloop {

constexpr unsigned BM = MAINLOOP_BLOCK_M, BN = MAINLOOP_BLOCK_N, BK = MAINLOOP_BLOCK_K;
static_assert(BM == 64 || BM == 128, "block_m in {64, 128}");
static_assert(BN == 64 || BN == 128, "block_n in {64, 128}");
static_assert(BK == 32 || BK == 64, "block_k in {32, 64}");
using S = gsw::StageLayout<BM, BN, BK>;
using L = gsw::AccLayout<BM, BN>;
static_assert(L::NT % 2 == 0, "B fragments are loaded in pairs of n8 tiles");

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void mma_bf16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace gsw_mainloop

PL_ENTRY(run) {
  using namespace gsw_mainloop;
  const GemmSwigluParams& p = PL_PARAMS(GemmSwigluParams);
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  const unsigned warp = t / 32, lane = t % 32;
  const unsigned wm = warp / L::WARPS_N, wn = warp % L::WARPS_N;
  uint8_t* base = pl::smem_base();
  const uint32_t buf = pl::smem_addr(base + PL_RING_BUFFER(ab));
  uint64_t* full = reinterpret_cast<uint64_t*>(base + PL_RING_FULL(ab));
  uint64_t* empty = reinterpret_cast<uint64_t*>(base + PL_RING_EMPTY(ab));
  const unsigned depth = PL_RING_DEPTH(ab);

  float acc[L::FRAG];
#pragma unroll
  for (unsigned i = 0; i < L::FRAG; ++i) acc[i] = 0.f;

  // ldmatrix row/chunk of this lane. A (x4 = a0..a3 of one m16k16 fragment):
  // lanes 0-15 rows 0-15 chunk 0, lanes 16-31 rows 0-15 chunk 1.
  const unsigned a_row = S::A_ROW + wm * L::WM + (lane & 15), a_chunk = lane >> 4;
  // B (x4 = {b0,b1} of n8 tile 2j, then of n8 tile 2j+1): lanes 0-7 n 0-7 chunk 0,
  // 8-15 n 0-7 chunk 1, 16-23 n 8-15 chunk 0, 24-31 n 8-15 chunk 1.
  const unsigned b_row = wn * L::WN + ((lane >> 4) << 3) + (lane & 7), b_chunk = (lane >> 3) & 1;

  const unsigned ktiles = p.k / BK;
  unsigned stage = 0, phase = 0;
  for (unsigned kt = 0; kt < ktiles; ++kt) {
    pl::mbar_wait(full + stage, phase);
    const uint32_t sb = buf + stage * S::BYTES;
#pragma unroll
    for (unsigned ks = 0; ks < BK / 16; ++ks) {
      uint32_t a[L::MT][4];
#pragma unroll
      for (unsigned mt = 0; mt < L::MT; ++mt)
        ldmatrix_x4(sb + S::offset(a_row + mt * 16, ks * 2 + a_chunk), a[mt][0], a[mt][1], a[mt][2], a[mt][3]);
#pragma unroll
      for (unsigned plane = 0; plane < 2; ++plane) {  // 0 = gate, 1 = up
        const unsigned row_base = plane == 0 ? S::GATE_ROW : S::UP_ROW;
        uint32_t b[L::NT][2];
#pragma unroll
        for (unsigned j = 0; j < L::NT / 2; ++j)
          ldmatrix_x4(sb + S::offset(row_base + b_row + j * 16, ks * 2 + b_chunk), b[2 * j][0], b[2 * j][1],
                      b[2 * j + 1][0], b[2 * j + 1][1]);
#pragma unroll
        for (unsigned mt = 0; mt < L::MT; ++mt)
#pragma unroll
          for (unsigned nt = 0; nt < L::NT; ++nt)
            mma_bf16(&acc[L::index(plane, mt, nt, 0)], a[mt], b[nt][0], b[nt][1]);
      }
    }
    pl::mbar_arrive(empty + stage);  // this thread is done reading the stage
    if (++stage == depth) { stage = 0; phase ^= 1u; }
  }

  PL_EXPORT(acc, acc, blockIdx.y * BM, blockIdx.x * BN);
}
