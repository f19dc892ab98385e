// params.h — the one host-parameter struct shared by loader, mainloop and swiglu.
//
// Every contract of this composition declares the same [params] table in this order:
//   x = "ptr", w = "ptr", out = "ptr", m = "u32", n = "u32", k = "u32"
// and reads it with PL_PARAMS(GemmSwigluParams). The field order, types and offsets below
// are the C layout of that table (ptr = 8 bytes, u32 = 4 bytes, natural alignment).
#pragma once
#include <stdint.h>
#include <stddef.h>
#include <cuda_bf16.h>

struct GemmSwigluParams {
  const __nv_bfloat16* x;  // [m, k] row-major
  const __nv_bfloat16* w;  // [2n, k] row-major (nn.Linear): rows 0..n-1 gate, n..2n-1 up
  __nv_bfloat16* out;      // [m, n] row-major: silu(x @ Wg^T) * (x @ Wu^T)
  uint32_t m, n, k;        // m % block_m == 0, n % block_n == 0, k % block_k == 0
};
static_assert(offsetof(GemmSwigluParams, x) == 0, "params layout");
static_assert(offsetof(GemmSwigluParams, w) == 8, "params layout");
static_assert(offsetof(GemmSwigluParams, out) == 16, "params layout");
static_assert(offsetof(GemmSwigluParams, m) == 24, "params layout");
static_assert(offsetof(GemmSwigluParams, n) == 28, "params layout");
static_assert(offsetof(GemmSwigluParams, k) == 32, "params layout");
static_assert(sizeof(GemmSwigluParams) == 40, "params layout");
