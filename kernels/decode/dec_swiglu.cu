// dec_swiglu.cu — the MLP activation of a tile's rows: h[j] = bf16(silu(g[j]) · u[j]) for
// j < n (gate and up sums in f32), by threads 0 .. n - 1 of the calling role.
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
