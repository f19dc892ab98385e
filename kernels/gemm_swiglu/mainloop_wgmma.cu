// mainloop_wgmma.cu — owner B, wgmma variant. Consumer role of ring `ab` for GEMM + SwiGLU,
// an alternative to mainloop.cu (same ring, same stage layout, same facts; a different
// accumulator layout). Two consumer warpgroups (8 warps); warpgroup wg computes rows
// [64*wg, 64*wg + 64) of the [block_m, block_n] gate and up tiles with
// wgmma.mma_async.m64nNk16.f32.bf16.bf16 (sm_90a), N = 2*block_n: one wgmma covers the gate
// and up rows, which are contiguous in a stage (stage_layout.h: A tile, gate tile, up tile).
// Both operands come from shared memory through matrix descriptors built at run time from
// the ring's buffer offset: K-major, 128-byte swizzle. The loader's stage layout stores
// 16-byte chunk c of row r at r*128 + 16*(c ^ (r % 8)) when block_k = 64, i.e. exactly
// wgmma's SWIZZLE_128B K-major atom (8 rows x 128 B, chunk XOR row%8, swizzle taken from
// address bits [7,10) of the shared address), provided every stage starts 1024-byte
// aligned: the contract's ring align is 1024 and stage_bytes is a multiple of 1024.
// Descriptor: start address >> 4, leading byte offset unused (1) for a swizzled K-major
// operand whose K extent (16 bf16 = 32 B) lies inside one 128-B row, stride byte offset
// 1024 (from one 8-row group to the next), base offset 0, layout type 1 (SWIZZLE_128B).
// The k16 steps inside a 64-wide stage advance the start address by 32 B.
//
// Pipeline per k-step: wait full[s]; wgmma.fence; 4 wgmmas (k = 0, 16, 32, 48); commit;
// wait_group 1 (the previous k-step's group has completed), then every thread arrives on
// the previous stage's `empty` (contract arrivals = 256). After the loop wait_group 0 and
// release the last stage. A stage is released only after the wgmmas reading it completed.
// The loader fills stages with cp.async (generic proxy) and wgmma reads them through the
// async proxy, so each consumer thread issues fence.proxy.async.shared::cta after it has
// acquired `full[s]` and before its wgmmas read the stage.
//
// Export `acc`: layout "wgmma_acc(2)" (acc_layout.h, gsw::WgmmaAccLayout): the wgmma
// accumulator order, planes first. Import it with swiglu built -DSWIGLU_LAYOUT_WGMMA
// (swiglu_wgmma.contract.toml).
// Owns block_m, block_n, block_k (compile-time; -DMAINLOOP_BLOCK_M/N/K as mainloop.cu).
// Supported: block_m = 128, block_n in {64, 128}, block_k = 64; shapes m % block_m == 0,
// n % block_n == 0, k % block_k == 0 (the runtime rejects others).
#define PL_COMPONENT mainloop_wgmma
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

namespace gsw_mainloop_wgmma {

constexpr unsigned BM = MAINLOOP_BLOCK_M, BN = MAINLOOP_BLOCK_N, BK = MAINLOOP_BLOCK_K;
static_assert(BM == 128, "block_m = 128 (two warpgroups of 64 rows)");
static_assert(BN == 64 || BN == 128, "block_n in {64, 128} (one wgmma of N = 2*block_n <= 256)");
static_assert(BK == 64, "block_k = 64: one stage row is one 128-byte swizzle row");
using S = gsw::StageLayout<BM, BN, BK>;
using L = gsw::WgmmaAccLayout<BM, BN>;
static_assert(S::CPR == 8, "128-byte rows");
static_assert(S::offset(9, 3) == 9 * 128 + 16 * (3 ^ 1) && S::offset(15, 7) == 15 * 128 + 16 * (7 ^ 7) &&
                  S::offset(130, 0) == 130 * 128 + 16 * 2,
              "stage layout = SWIZZLE_128B K-major atoms (chunk ^ row % 8)");
static_assert(S::BYTES % 1024 == 0 && (S::GATE_ROW * 128) % 1024 == 0 && (64 * 128) % 1024 == 0,
              "every operand start is an 8-row (1024-byte) atom boundary");
static_assert(L::FRAG == BN, "accumulator floats per thread");

// Shared-memory matrix descriptor (sm_90 GMMA): K-major, SWIZZLE_128B.
__device__ __forceinline__ uint64_t make_desc(uint32_t smem_addr) {
  return (uint64_t)((smem_addr & 0x3FFFFu) >> 4)  // start address, bits [0,14)
         | ((uint64_t)1 << 16)                     // leading byte offset (unused here)
         | ((uint64_t)(1024u >> 4) << 32)          // stride byte offset: 8 rows x 128 B
         | ((uint64_t)1 << 62);                    // layout type 1 = SWIZZLE_128B
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
// Keeps the compiler from moving accumulator reads/writes across the asynchronous wgmmas.
template <unsigned R>
__device__ __forceinline__ void fence_operands(float* d) {
#pragma unroll
  for (unsigned i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// D[64 x 128] (f32, registers) += A[64 x 16] (bf16, smem desc) * B[128 x 16]^T (bf16, smem desc).
__device__ __forceinline__ void wgmma_m64n128k16(float* d, uint64_t da, uint64_t db) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(1));
}

// D[64 x 256] (f32, registers) += A[64 x 16] (bf16, smem desc) * B[256 x 16]^T (bf16, smem desc).
__device__ __forceinline__ void wgmma_m64n256k16(float* d, uint64_t da, uint64_t db) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(da), "l"(db), "r"(1));
}


__device__ __forceinline__ void wgmma_tile(float* d, uint64_t da, uint64_t db) {
  if constexpr (BN == 64) wgmma_m64n128k16(d, da, db);
  else wgmma_m64n256k16(d, da, db);
}

}  // namespace gsw_mainloop_wgmma

PL_ENTRY(run) {
  using namespace gsw_mainloop_wgmma;
  const GemmSwigluParams& p = PL_PARAMS(GemmSwigluParams);
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  const unsigned wg = t / 128;  // consumer warpgroup: rows [64*wg, 64*wg + 64) of the tile
  uint8_t* base = pl::smem_base();
  const uint32_t buf = pl::smem_addr(base + PL_RING_BUFFER(ab));
  uint64_t* full = reinterpret_cast<uint64_t*>(base + PL_RING_FULL(ab));
  uint64_t* empty = reinterpret_cast<uint64_t*>(base + PL_RING_EMPTY(ab));
  const unsigned depth = PL_RING_DEPTH(ab);

  float acc[L::FRAG];
#pragma unroll
  for (unsigned i = 0; i < L::FRAG; ++i) acc[i] = 0.f;

  // Descriptors of stage 0: A rows of this warpgroup, and the gate + up rows (N = 2*block_n).
  const uint64_t desc_a0 = make_desc(buf + S::offset(S::A_ROW + 64 * wg, 0));
  const uint64_t desc_b0 = make_desc(buf + S::offset(S::GATE_ROW, 0));
  constexpr uint64_t kStageStep = S::BYTES >> 4, kKStep = 32 >> 4;  // in descriptor address units

  const unsigned ktiles = p.k / BK;
  unsigned stage = 0, phase = 0, prev = 0;
  for (unsigned kt = 0; kt < ktiles; ++kt) {
    pl::mbar_wait(full + stage, phase);
    fence_proxy_async();  // cp.async (generic proxy) writes -> wgmma (async proxy) reads
    const uint64_t so = stage * kStageStep;
    fence_operands<L::FRAG>(acc);
    wgmma_fence();
#pragma unroll
    for (unsigned ks = 0; ks < BK / 16; ++ks) wgmma_tile(acc, desc_a0 + so + ks * kKStep, desc_b0 + so + ks * kKStep);
    wgmma_commit();
    wgmma_wait<1>();  // the previous k-step's wgmmas are done: its stage can be refilled
    fence_operands<L::FRAG>(acc);
    if (kt > 0) pl::mbar_arrive(empty + prev);
    prev = stage;
    if (++stage == depth) { stage = 0; phase ^= 1u; }
  }
  wgmma_wait<0>();
  fence_operands<L::FRAG>(acc);
  if (ktiles > 0) pl::mbar_arrive(empty + prev);

  PL_EXPORT(acc, acc, blockIdx.y * BM, blockIdx.x * BN);
}
