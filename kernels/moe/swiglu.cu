// swiglu.cu — owner G. SwiGLU library of the MoE expert: imports the expert's gate/up
// accumulators (`acc`, layout "moe_gu16", expert_acc.h: 16 rows per warp) and writes h = silu(gate) * up,
// rounded to bf16, into the kernel-scope workspace `hs` (row stride inter). It runs in the
// exporting warp; the expert signals HREADY after the import returns.
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

namespace moe_swiglu {
__device__ __forceinline__ float silu(float x) { return __fdividef(x, 1.0f + __expf(-x)); }
__device__ __forceinline__ float silu_mul(float gate, float up) { return silu(gate) * up; }
}  // namespace moe_swiglu

PL_IMPORT(acc) {
  using namespace moe_swiglu;
  __nv_bfloat16* hs = static_cast<__nv_bfloat16*>(PL_WORKSPACE(hs));
  const float* f = static_cast<const float*>(pl_frag);
  const unsigned bh = PL_FACT(block_h);
  if (PL_FACT(top_k) > 8 || PL_FACT(experts) > 384) __trap();  // outside accept (folds away)
  if (PL_FACT(block_m) % 16) __trap();  // a warp's 16 rows lie in one tile (sizes hs too)
  // One instantiation per accepted block_h; the linked fact folds this to one branch.
  if (bh == 32) return moe_gu::store_h<4>(f, hs, PL_FACT(inter), pl_row0, pl_col0, silu_mul);
  if (bh == 64) return moe_gu::store_h<8>(f, hs, PL_FACT(inter), pl_row0, pl_col0, silu_mul);
  __trap();  // outside the contract's accept list
}
