// standalone_test.cu — the GEMM + SwiGLU composition linked by hand, as one translation
// unit, until the pipelink linker exists. It defines every handle the three components
// reference (fixed placements: mbarriers at smem 0 / 64, ring buffer at 1024, depth
// TEST_DEPTH), the dispatcher the linker would generate, and a host check against a CPU
// reference.
//
// Build (tile config via the mainloop's overrides):
//   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -I../../tools/pipelink/include \
//        [-DMAINLOOP_BLOCK_M=128 -DMAINLOOP_BLOCK_N=64 -DMAINLOOP_BLOCK_K=64] [-DTEST_DEPTH=4] \
//        standalone_test.cu -o gsw_test
// Run: ./gsw_test               (default shapes)
//      ./gsw_test M N K [M N K ...]
// Separate-compilation control (the linker's path, handles folded by LTO): compile this file
// with -DGSW_SEPARATE -dc -gencode arch=compute_90a,code=lto_90a as the glue object and link
// it with loader.o, mainloop.o, swiglu.o through nvJitLink -lto (see lto_check.py).
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <vector>

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
#ifndef TEST_DEPTH
#define TEST_DEPTH 4
#endif

constexpr unsigned kBM = MAINLOOP_BLOCK_M, kBN = MAINLOOP_BLOCK_N, kBK = MAINLOOP_BLOCK_K;
constexpr unsigned kDepth = TEST_DEPTH;
constexpr unsigned kFullOff = 0, kEmptyOff = 64, kBufOff = 1024;  // depth <= 8
constexpr unsigned kStageBytes = gsw::stage_bytes(kBM, kBN, kBK);
constexpr unsigned kSmemBytes = kBufOff + kDepth * kStageBytes;
static_assert(kDepth >= 2 && kDepth <= 8, "depth");

// ---- what the linker generates: handle definitions -------------------------------------
// Warp placement: loader warps 0-3 (warpgroup 0), mainloop warps 4-11 (warpgroups 1-2).
#define H(sym, val) extern "C" __device__ unsigned sym(unsigned) { return (val); }
H(pl_loader__role__warp_begin, 0)
H(pl_loader__role__warps, 4)
H(pl_loader__fact__block_m, kBM)
H(pl_loader__fact__block_n, kBN)
H(pl_loader__fact__block_k, kBK)
H(pl_loader__ring_depth__ab, kDepth)
H(pl_loader__ring_buffer__ab, kBufOff)
H(pl_loader__ring_full__ab, kFullOff)
H(pl_loader__ring_empty__ab, kEmptyOff)
H(pl_mainloop__role__warp_begin, 4)
H(pl_mainloop__role__warps, 8)
H(pl_mainloop__ring_depth__ab, kDepth)
H(pl_mainloop__ring_buffer__ab, kBufOff)
H(pl_mainloop__ring_full__ab, kFullOff)
H(pl_mainloop__ring_empty__ab, kEmptyOff)
H(pl_swiglu__role__warp_begin, 4)  // the exporting role's (mainloop's) warp range
H(pl_swiglu__role__warps, 8)
H(pl_swiglu__fact__block_m, kBM)
H(pl_swiglu__fact__block_n, kBN)
#undef H
extern "C" __device__ void pl_swiglu__import__acc(unsigned, const void*, void*, unsigned, unsigned);
extern "C" __device__ void pl_mainloop__export__acc(unsigned, const void* params, void* frag, unsigned r0,
                                                    unsigned c0) {
  pl_swiglu__import__acc(0, params, frag, r0, c0);  // direct binding: same layout, registers
}

// ---- the three components, unchanged --------------------------------------------------
#ifndef GSW_SEPARATE
#include "loader.cu"
#undef PL_COMPONENT
#include "mainloop.cu"
#undef PL_COMPONENT
#include "swiglu.cu"
#undef PL_COMPONENT
#else
// -DGSW_SEPARATE -dc: this file is only the glue (handles + dispatcher); the components are
// separate LTO-IR objects and nvJitLink (-lto) links them, as the pipelink linker will.
#define PL_COMPONENT gsw_glue
#include <pipelink.h>
#undef PL_COMPONENT
#endif

static_assert(kBM == MAINLOOP_BLOCK_M && kBN == MAINLOOP_BLOCK_N && kBK == MAINLOOP_BLOCK_K, "facts");

extern "C" __device__ void pl_loader__entry__run(unsigned, const void*);
extern "C" __device__ void pl_mainloop__entry__run(unsigned, const void*);

// ---- what the linker generates: the dispatcher -----------------------------------------
extern "C" __global__ void __launch_bounds__(384, 1) gsw_dispatch(const __grid_constant__ GemmSwigluParams params) {
  uint8_t* smem = pl::smem_base();
  if (threadIdx.x == 0) {
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + kFullOff);
    uint64_t* empty = reinterpret_cast<uint64_t*>(smem + kEmptyOff);
    for (unsigned s = 0; s < kDepth; ++s) {
      pl::mbar_init(full + s, 128);   // producer (loader) arrivals
      pl::mbar_init(empty + s, 256);  // consumer (mainloop) arrivals
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const unsigned wg = threadIdx.x / 128;
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    pl_loader__entry__run(0, &params);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    pl_mainloop__entry__run(0, &params);
  }
}

// ---- host ------------------------------------------------------------------------------
#define CK(x)                                                                               \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__, __LINE__, \
              cudaGetErrorString(e_));                                                      \
      exit(2);                                                                              \
    }                                                                                       \
  } while (0)

static float bf2f(__nv_bfloat16 v) {
  uint16_t b;
  memcpy(&b, &v, 2);
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static __nv_bfloat16 f2bf(float f) {  // round to nearest even
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  uint16_t b = (uint16_t)(u >> 16);
  __nv_bfloat16 v;
  memcpy(&v, &b, 2);
  return v;
}
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float urand() {  // uniform in [-1, 1)
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static bool run_shape(unsigned M, unsigned N, unsigned K) {
  printf("M=%u N=%u K=%u (BM=%u BN=%u BK=%u depth=%u smem=%u): ", M, N, K, kBM, kBN, kBK, kDepth, kSmemBytes);
  if (M % kBM || N % kBN || K % kBK) {
    printf("unsupported shape (needs M%%BM, N%%BN, K%%BK == 0)\n");
    return false;
  }
  std::vector<__nv_bfloat16> hx((size_t)M * K), hw((size_t)2 * N * K), hout((size_t)M * N);
  std::vector<float> fx(hx.size()), fw(hw.size());
  const float ws = 2.0f / sqrtf((float)K);
  for (size_t i = 0; i < hx.size(); ++i) { hx[i] = f2bf(urand()); fx[i] = bf2f(hx[i]); }
  for (size_t i = 0; i < hw.size(); ++i) { hw[i] = f2bf(urand() * ws); fw[i] = bf2f(hw[i]); }

  __nv_bfloat16 *dx, *dw, *dout;
  CK(cudaMalloc(&dx, hx.size() * 2));
  CK(cudaMalloc(&dw, hw.size() * 2));
  CK(cudaMalloc(&dout, hout.size() * 2));
  CK(cudaMemcpy(dx, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dw, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemset(dout, 0xFF, hout.size() * 2));  // poison: 0xFFFF is a bf16 NaN

  GemmSwigluParams p{dx, dw, dout, M, N, K};
  CK(cudaFuncSetAttribute(gsw_dispatch, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  dim3 grid(N / kBN, M / kBM);
  gsw_dispatch<<<grid, 384, kSmemBytes>>>(p);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(hout.data(), dout, hout.size() * 2, cudaMemcpyDeviceToHost));

  // Timing (informational; GSW_ITERS=0 skips it, e.g. under compute-sanitizer).
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const char* iters_env = getenv("GSW_ITERS");
  const int iters = iters_env ? atoi(iters_env) : 20;
  CK(cudaEventRecord(e0));
  for (int i = 0; i < iters; ++i) gsw_dispatch<<<grid, 384, kSmemBytes>>>(p);
  CK(cudaGetLastError());
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  ms = iters > 0 ? ms / iters : 0.f;

  // CPU reference (double accumulation of the bf16-rounded inputs).
  size_t poisoned = 0, bad = 0;
  double max_rel = 0, max_abs = 0, ref_sq = 0;
  std::vector<double> ref((size_t)M * N);
  for (unsigned r = 0; r < M; ++r) {
    const float* xr = &fx[(size_t)r * K];
    for (unsigned c = 0; c < N; ++c) {
      const float* gr = &fw[(size_t)c * K];
      const float* ur = &fw[(size_t)(N + c) * K];
      double g = 0, u = 0;
      for (unsigned k = 0; k < K; ++k) { g += (double)xr[k] * gr[k]; u += (double)xr[k] * ur[k]; }
      const double v = g / (1.0 + exp(-g)) * u;
      ref[(size_t)r * N + c] = v;
      ref_sq += v * v;
    }
  }
  const double rms = sqrt(ref_sq / ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    const float o = bf2f(hout[i]);
    if (isnan(o)) { ++poisoned; continue; }
    const double d = fabs((double)o - ref[i]);
    max_abs = fmax(max_abs, d);
    const double rel = d / (fabs(ref[i]) + 1e-2 * rms);
    max_rel = fmax(max_rel, rel);
    if (rel > 2e-2) ++bad;
  }
  const double tflops = ms > 0 ? 2.0 * M * 2.0 * N * K / (ms * 1e-3) / 1e12 : 0.0;
  const bool ok = poisoned == 0 && bad == 0;
  printf("max_rel=%.3e max_abs=%.3e ref_rms=%.3e unwritten=%zu bad=%zu time=%.4f ms (%.1f TFLOP/s) %s\n", max_rel,
         max_abs, rms, poisoned, bad, ms, tflops, ok ? "PASS" : "FAIL");
  CK(cudaFree(dx));
  CK(cudaFree(dw));
  CK(cudaFree(dout));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return ok;
}

int main(int argc, char** argv) {
  std::vector<unsigned> shapes;
  if (argc > 1) {
    if ((argc - 1) % 3) { fprintf(stderr, "usage: %s [M N K]...\n", argv[0]); return 2; }
    for (int i = 1; i < argc; ++i) shapes.push_back((unsigned)strtoul(argv[i], nullptr, 10));
  } else {
    shapes = {256, 256, 512, 128, 512, 5120, 256, 128, kBK};  // last: fewer k-steps than stages
  }
  bool ok = true;
  for (size_t i = 0; i < shapes.size(); i += 3) ok = run_shape(shapes[i], shapes[i + 1], shapes[i + 2]) && ok;
  printf("%s\n", ok ? "ALL PASS" : "SOME FAILED");
  return ok ? 0 : 1;
}
