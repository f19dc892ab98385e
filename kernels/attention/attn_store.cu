// attn_store.cu — prefill epilogue: O / l as bf16 into o [B, H, q_len, d] (rows < q_len; d = 128 or 64).
// Runs on the core's threads (import `out`, layout "attn_o(2)" of attn.h).
#define PL_COMPONENT attn_store
#include <pipelink.h>

#include "attn.h"

PL_DECLARE_FACT(block_q);
PL_DECLARE_FACT(head_dim);

namespace attn_store {
struct Params {  // o = "ptr", q_len = "u32"
  uint32_t* o;   // bf16 pairs
  uint32_t q_len;
};
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
}  // namespace attn_store

PL_IMPORT(out) {
  using namespace attn_store;
  const Params& p = PL_PARAMS(Params);
  const attn::OutFrag& f = *static_cast<const attn::OutFrag*>(pl_frag);
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  const unsigned wg = t / 128, w = (t / 32) % 4, g = (t % 32) / 4, qd = t % 4;
  const unsigned d = PL_FACT(head_dim), bh = pl_col0;
#pragma unroll
  for (unsigned j = 0; j < 2; ++j) {
    const unsigned r = pl_row0 + 64 * wg + 16 * w + g + 8 * j;
    if (r >= p.q_len) continue;
    const float inv = f.l[j] > 0.f ? 1.f / f.l[j] : 0.f;  // a fully masked row gives 0
    uint32_t* row = p.o + ((size_t)bh * p.q_len + r) * (d / 2);
#pragma unroll
    for (unsigned nt = 0; nt < 16; ++nt) {  // d / 8 column groups (d = 64: o[0..31])
      if (nt >= d / 8) break;
      row[4 * nt + qd] = pack_bf16(f.o[nt * 4 + 2 * j] * inv, f.o[nt * 4 + 2 * j + 1] * inv);
    }
  }
  (void)PL_FACT(block_q);
}
