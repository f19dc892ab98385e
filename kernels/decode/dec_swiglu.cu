// dec_swiglu.cu — the MLP activation of a tile's rows: h[j] = bf16(silu(g[j]) · u[j]) for
// j < n (gate and up sums in f32), by threads 0 .. n - 1 of the calling role (256 threads).
#define PL_COMPONENT dec_swiglu
#include <pipelink.h>

PL_CALLABLE(swiglu)(unsigned pl_inst, const float* g, const float* u, void* h, unsigned n) {
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  if (t < n) {
    const float a = g[t], r = a / (1.f + __expf(-a)) * u[t];
    const unsigned bits = __float_as_uint(r);
    static_cast<uint16_t*>(h)[t] = (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  }
}

// swiglu_rows: the same for `rows` sequences at once, thread t taking row t / n, element t % n:
// g, u of row b at g + b ystride, u + b ystride; its h at h + b hstride (n rows <= 256 / rows)
PL_CALLABLE(swiglu_rows)(unsigned pl_inst, const float* g, const float* u, void* h, unsigned n, unsigned rows,
                         unsigned ystride, unsigned hstride) {
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  for (unsigned e = t; e < rows * n; e += 256) {
    const unsigned b = e / n, j = e % n;
    const float a = g[b * ystride + j], r = a / (1.f + __expf(-a)) * u[b * ystride + j];
    const unsigned bits = __float_as_uint(r);
    static_cast<uint16_t*>(h)[(size_t)b * hstride + j] = (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  }
}
