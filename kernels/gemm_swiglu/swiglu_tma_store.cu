// swiglu_tma_store.cu — owner C. SwiGLU epilogue library for the Hopper GEMM family: the
// importer of `acc` ("wgmma_acc(2)": gate and up planes of a [128, block_n] tile, held by
// the 256 threads of the exporting consumer role). It computes silu(gate) * up in f32,
// rounds to bf16, writes the tile into its own shared-memory staging buffer with
// stmatrix (SWIZZLE_128B order, 64-column halves, bank-conflict free) and one thread
// stores it with TMA. The store runs asynchronously: the issuing thread only waits until
// the buffer has been read, and the consumers go on with the next tile. TMA clips the
// store at the tensor's edge, so ragged m and n are written exactly.
// Built with -DSWIGLU_PER_WARPGROUP it imports "wgmma_wg_acc(2)" from ping-pong consumers
// instead (swiglu_tma_store_pp.contract.toml).
// Synchronisation: named barrier `epi` over the 256 importing threads, before writing the
// buffer (the previous store has read it) and before the store (every write is visible
// to the async proxy: each writer fences first).
// The tensor map of `out` is this package's parameter `tmap_out`, filled by its host
// provider swiglu_tma_store_host.py (box [block_m, 64], SWIZZLE_128B).
#define PL_COMPONENT swiglu
#include <pipelink.h>

#include <cuda_bf16.h>
#include <stddef.h>

PL_DECLARE_FACT(block_m);
PL_DECLARE_FACT(block_n);
PL_DECLARE_SMEM(stage);
PL_DECLARE_BARRIER(epi);

namespace swiglu_tma_store {

struct Params {  // the contract's [params]: out = "ptr", m, n = "u32", tmap_out = "tmap"
  void* out;
  uint32_t m, n;
  pl::TensorMap tmap_out;
};
static_assert(offsetof(Params, tmap_out) == 64 && sizeof(Params) == 192, "params layout");

constexpr unsigned THREADS = 256;  // the exporting role: two warpgroups

__device__ __forceinline__ float silu(float g) { return __fdividef(g, 1.0f + __expf(-g)); }

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
               ::"r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}

// Byte offset of (row, col) in the staging buffer: 64-column halves of [128 rows x 128 B],
// 16-byte chunks XOR-swizzled by row % 8 (TMA SWIZZLE_128B).
__device__ __forceinline__ uint32_t stage_offset(unsigned row, unsigned col, unsigned bm) {
  const unsigned half = col / 64, chunk = (col % 64) / 8;
  return half * bm * 128 + row * 128 + ((chunk ^ (row & 7)) << 4);
}

// One warp's 16-row slices of 64 rows [row64, row64 + 64) of the tile: `frag` holds, for n8
// tile nt of the gate (plane 0) and up (plane 1) parts, 4 floats (wgmma m64nN layout).
template <unsigned BN>
__device__ __forceinline__ void store_rows64(const float* frag, unsigned row64, unsigned w, unsigned lane,
                                             uint32_t buf, unsigned bm) {
  constexpr unsigned NT = BN / 8;
  // stmatrix: lane l gives the address of row l % 8 of matrix l / 8; matrices 0/1 are rows
  // 0-7 / 8-15 of n8 tile nt, 2/3 the same of tile nt + 1.
  const unsigned row = row64 + 16 * w + (lane % 8) + 8 * ((lane / 8) & 1);
#pragma unroll
  for (unsigned nt = 0; nt < NT; nt += 2) {
    uint32_t r[4];
#pragma unroll
    for (unsigned j = 0; j < 4; ++j) {  // j: (tile nt + j / 2, rows + 8 * (j % 2))
      const unsigned tile = nt + j / 2, i = 2 * (j % 2);
      const float* g = frag + tile * 4 + i;
      const float* u = frag + (NT + tile) * 4 + i;
      r[j] = pack_bf16x2(silu(g[0]) * u[0], silu(g[1]) * u[1]);
    }
    stmatrix_x4(buf + stage_offset(row, (nt + lane / 16) * 8, bm), r[0], r[1], r[2], r[3]);
  }
}

}  // namespace swiglu_tma_store

#ifndef SWIGLU_PER_WARPGROUP
// "wgmma_acc(2)": the two warpgroups of the exporting role hold rows [64 wg, 64 wg + 64).
PL_IMPORT(acc) {
  using namespace swiglu_tma_store;
  const Params& p = PL_PARAMS(Params);
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  const unsigned bm = PL_FACT(block_m), bn = PL_FACT(block_n);
  const uint32_t buf = pl::smem_addr(pl::smem_base() + PL_SMEM(stage));
  const unsigned bar = PL_BARRIER(epi);
  const float* frag = static_cast<const float*>(pl_frag);
  const unsigned wg = t / 128, w = (t / 32) % 4, lane = t % 32;

  pl::named_barrier_sync(bar, THREADS);  // the previous tile's store has read the buffer
  if (bm == 128 && bn == 128) store_rows64<128>(frag, 64 * wg, w, lane, buf, bm);
  else if (bm == 128 && bn == 64) store_rows64<64>(frag, 64 * wg, w, lane, buf, bm);
  else __trap();  // outside the contract's accept lists
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // st.shared -> TMA reads
  pl::named_barrier_sync(bar, THREADS);
  if (t == 0) {
    for (unsigned half = 0; half < bn / 64; ++half)
      pl::tma_store_2d(&p.tmap_out, pl::smem_base() + PL_SMEM(stage) + half * bm * 128, pl_col0 + half * 64, pl_row0);
    pl::tma_store_commit();
    pl::tma_store_wait_read<0>();  // the buffer is free again (the global writes go on)
  }
}
#else
// "wgmma_wg_acc(2)" (ping-pong consumers): ONE warpgroup holds the whole tile, block_m / 64
// blocks of 64 rows; the two warpgroups call this at different times, so each has its own
// half of the staging buffer and its own barrier (epi0, epi1 over 128 threads).
PL_DECLARE_BARRIER(epi1);
PL_IMPORT(acc) {
  using namespace swiglu_tma_store;
  const Params& p = PL_PARAMS(Params);
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  const unsigned bm = PL_FACT(block_m), bn = PL_FACT(block_n);
  const unsigned wg = t / 128, u = t % 128, w = u / 32, lane = t % 32;
  uint8_t* mine = pl::smem_base() + PL_SMEM(stage) + wg * bm * bn * 2;
  const uint32_t buf = pl::smem_addr(mine);
  const float* frag = static_cast<const float*>(pl_frag);
  auto sync = [&] {  // one instruction per barrier: its id stays a link-time immediate
    if (wg == 0) pl::named_barrier_sync(PL_BARRIER(epi), 128);
    else pl::named_barrier_sync(PL_BARRIER(epi1), 128);
  };

  sync();  // this warpgroup's previous store has read its buffer
  if (bm == 128 && bn == 64) {
    store_rows64<64>(frag, 0, w, lane, buf, bm);
    store_rows64<64>(frag + 2 * (64 / 8) * 4, 64, w, lane, buf, bm);
  } else if (bm == 64 && bn == 128) {
    store_rows64<128>(frag, 0, w, lane, buf, bm);
  } else {
    __trap();  // outside the contract's accept lists
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // st.shared -> TMA reads
  sync();
  if (u == 0) {
    for (unsigned half = 0; half < bn / 64; ++half)
      pl::tma_store_2d(&p.tmap_out, mine + half * bm * 128, pl_col0 + half * 64, pl_row0);
    pl::tma_store_commit();
    pl::tma_store_wait_read<0>();  // the buffer is free again (the global writes go on)
  }
}
#endif
