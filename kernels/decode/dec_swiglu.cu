// dec_swiglu.cu — the MLP activation of a tile's rows: h[j] = bf16(silu(g[j]) · u[j]) for
// j < n (gate and up sums in f32), by threads 0 .. n - 1 of the calling role (256 threads).
#define PL_COMPONENT dec_swiglu
#include <pipelink.h>

namespace dec_swiglu {
constexpr unsigned THREADS = 256;
// bf16(silu(a) · b), rounded to nearest even
__device__ __forceinline__ uint16_t silu_mul_bf16(float a, float b) {
  const unsigned bits = __float_as_uint(a / (1.f + __expf(-a)) * b);
  return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}
}  // namespace dec_swiglu

PL_CALLABLE(swiglu)(unsigned pl_inst, const float* g, const float* u, void* h, unsigned n) {
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  if (t < n) static_cast<uint16_t*>(h)[t] = dec_swiglu::silu_mul_bf16(g[t], u[t]);
}

// swiglu_rows: the same for `rows` sequences at once, thread t taking row t / n, element t % n:
// g, u of row b at g + b ystride, u + b ystride; its h at h + b hstride
PL_CALLABLE(swiglu_rows)(unsigned pl_inst, const float* g, const float* u, void* h, unsigned n, unsigned rows,
                         unsigned ystride, unsigned hstride) {
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  for (unsigned e = t; e < rows * n; e += dec_swiglu::THREADS) {
    const unsigned b = e / n, j = e % n;
    static_cast<uint16_t*>(h)[(size_t)b * hstride + j] = dec_swiglu::silu_mul_bf16(g[b * ystride + j], u[b * ystride + j]);
  }
}
