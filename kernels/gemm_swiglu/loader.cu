// loader.cu — owner A. Producer role of ring `ab` for GEMM + SwiGLU: one warpgroup (4 warps)
// copies the A tile (x) and the gate and up tiles of W for each k-step into one stage of
// the ring with 16-byte cp.async, completing on the stage's `full` mbarrier through
// cp.async.mbarrier.arrive.noinc (one arrival per loader thread: contract arrivals = 128).
// Stage layout: stage_layout.h. Tile sizes are facts owned by another component, read
// through handles; ring depth, buffer and barrier offsets come from the ring handles.
// The dispatcher initializes the ring's mbarriers; this role never does.
// Supported shapes: m % block_m == 0, n % block_n == 0, k % block_k == 0 (the runtime
// rejects others).
#define PL_COMPONENT loader
#include <pipelink.h>

#include "params.h"
#include "stage_layout.h"

PL_DECLARE_FACT(block_m);
PL_DECLARE_FACT(block_n);
PL_DECLARE_FACT(block_k);
PL_DECLARE_RING(ab);

namespace gsw_loader {

constexpr unsigned kThreads = 128;  // [role] warps = 4

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(pl::smem_addr(bar)) : "memory");
}

template <unsigned BM, unsigned BN, unsigned BK>
__device__ __forceinline__ void produce(const GemmSwigluParams& p, unsigned t, uint8_t* buf,
                                        uint64_t* full, uint64_t* empty, unsigned depth) {
  using S = gsw::StageLayout<BM, BN, BK>;
  constexpr unsigned CPR = S::CPR;
  constexpr unsigned RSTEP = kThreads / CPR;  // rows covered by one pass of the warpgroup
  constexpr unsigned PASSES = S::ROWS / RSTEP;
  static_assert(kThreads % CPR == 0 && S::ROWS % RSTEP == 0, "copy mapping");
  static_assert(BM % RSTEP == 0 && BN % RSTEP == 0, "a pass never straddles two tiles");
  // Thread t always copies chunk c = t % CPR of rows r0 + i*RSTEP. Because RSTEP*CPR = 128
  // chunks, the swizzle term (q >> 3) & 7 is the same for every pass: the destination of
  // pass i is my_off + i * 2048 bytes.
  const unsigned c = t % CPR, r0 = t / CPR;
  const uint32_t my_off = S::offset(r0, c);
  const size_t K = p.k;
  const unsigned m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const __nv_bfloat16* a_src = p.x + (size_t)(m0 + r0) * K + c * 8;
  const __nv_bfloat16* g_src = p.w + (size_t)(n0 + r0) * K + c * 8;
  const __nv_bfloat16* u_src = g_src + (size_t)p.n * K;
  const size_t row_step = (size_t)RSTEP * K;
  const unsigned ktiles = p.k / BK;
  const uint32_t buf_addr = pl::smem_addr(buf) + my_off;

  unsigned stage = 0, phase = 0;
  for (unsigned kt = 0; kt < ktiles; ++kt) {
    pl::mbar_wait(empty + stage, phase ^ 1u);  // first pass: a fresh barrier passes parity 1
    const uint32_t dst = buf_addr + stage * S::BYTES;
    const size_t koff = (size_t)kt * BK;
#pragma unroll
    for (unsigned i = 0; i < PASSES; ++i) {
      const unsigned r = i * RSTEP;  // compile-time: which tile this pass is in
      const __nv_bfloat16* src;
      if (r < S::GATE_ROW) src = a_src + (size_t)(r / RSTEP) * row_step;
      else if (r < S::UP_ROW) src = g_src + (size_t)((r - S::GATE_ROW) / RSTEP) * row_step;
      else src = u_src + (size_t)((r - S::UP_ROW) / RSTEP) * row_step;
      cp_async16(dst + i * (RSTEP * CPR * 16), src + koff);
    }
    cp_async_arrive_noinc(full + stage);
    if (++stage == depth) { stage = 0; phase ^= 1u; }
  }
  // Do not leave with copies in flight.
  asm volatile("cp.async.wait_all;" ::: "memory");
}

}  // namespace gsw_loader

PL_ENTRY(run) {
  const GemmSwigluParams& p = PL_PARAMS(GemmSwigluParams);
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  uint8_t* base = pl::smem_base();
  uint8_t* buf = base + PL_RING_BUFFER(ab);
  uint64_t* full = reinterpret_cast<uint64_t*>(base + PL_RING_FULL(ab));
  uint64_t* empty = reinterpret_cast<uint64_t*>(base + PL_RING_EMPTY(ab));
  const unsigned depth = PL_RING_DEPTH(ab);
  const unsigned bm = PL_FACT(block_m), bn = PL_FACT(block_n), bk = PL_FACT(block_k);
  // One instantiation per accepted fact combination; LTO folds the facts and keeps one.
#define GSW_LOADER_CASE(BM, BN, BK) \
  if (bm == BM && bn == BN && bk == BK) return gsw_loader::produce<BM, BN, BK>(p, t, buf, full, empty, depth);
  GSW_LOADER_CASE(128, 64, 32)
  GSW_LOADER_CASE(128, 64, 64)
  GSW_LOADER_CASE(128, 128, 32)
  GSW_LOADER_CASE(128, 128, 64)
  GSW_LOADER_CASE(64, 64, 32)
  GSW_LOADER_CASE(64, 64, 64)
  GSW_LOADER_CASE(64, 128, 32)
  GSW_LOADER_CASE(64, 128, 64)
#undef GSW_LOADER_CASE
  __trap();  // facts outside the contract's accept lists
}
