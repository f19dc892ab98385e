// swiglu_clamped.cu — gpt-oss's activation as a library of the MoE expert, the same interface as
// swiglu.cu (imports `acc`, layout "moe_gu16" of expert_acc.h; writes `hs`): the composition picks
// it for gpt-oss in place of SwiGLU, and no other owner changes. Per element, as gpt-oss's
// reference implementation defines it (its gate/up columns de-interleaved by moe_convert.py):
//   gate = min(gate, LIMIT), up = clamp(up, -LIMIT, LIMIT), h = gate * sigmoid(ALPHA * gate) * (up + 1)
// rounded to bf16 (the expert added the model's gate/up biases before the export).
#define PL_COMPONENT moe_swiglu
#include <pipelink.h>

#include <cuda_bf16.h>

#include "expert_acc.h"

PL_DECLARE_FACT(block_m);
PL_DECLARE_FACT(block_h);
PL_DECLARE_FACT(inter);  // the model's expert intermediate size: hs's row stride
PL_DECLARE_WORKSPACE(hs);
PL_DECLARE_FACT(top_k);  // sizes `hs` (contract)
PL_DECLARE_FACT(experts);  // sizes `hs` (contract): each expert's rows padded to block_m

namespace moe_swiglu_clamped {
constexpr float LIMIT = 7.0f, ALPHA = 1.702f;  // gpt-oss: swiglu_limit, the sigmoid's gain
__device__ __forceinline__ float act(float gate, float up) {
  gate = fminf(gate, LIMIT);
  up = fminf(fmaxf(up, -LIMIT), LIMIT);
  return __fdividef(gate, 1.0f + __expf(-ALPHA * gate)) * (up + 1.0f);
}
}  // namespace moe_swiglu_clamped

PL_IMPORT(acc) {
  using namespace moe_swiglu_clamped;
  __nv_bfloat16* hs = static_cast<__nv_bfloat16*>(PL_WORKSPACE(hs));
  const float* f = static_cast<const float*>(pl_frag);
  const unsigned bh = PL_FACT(block_h);
  if (PL_FACT(top_k) > 8 || PL_FACT(experts) > 384) __trap();  // outside accept (folds away)
  if (PL_FACT(block_m) % 16) __trap();  // a warp's 16 rows lie in one tile (sizes hs too)
  if (bh == 32) return moe_gu::store_h<4>(f, hs, PL_FACT(inter), pl_row0, pl_col0, act);
  if (bh == 64) return moe_gu::store_h<8>(f, hs, PL_FACT(inter), pl_row0, pl_col0, act);
  __trap();  // outside the contract's accept list
}
