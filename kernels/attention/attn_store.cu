// attn_store.cu — prefill epilogue: O / l as bf16 into o [B, H, q_len, d] (d = 64, 128 or 256), through
// shared memory and TMA. Runs on the core's threads (import `out`, layout "attn_o(2)" of attn.h):
// each warpgroup normalises its 64 rows, writes them with stmatrix into its own half of the
// staging buffer (SWIZZLE_128B order, 64-column boxes) and one of its threads stores them with
// TMA. Direct 4-byte global stores cost the masked variants 4-11% (against the kernels without
// an epilogue at all), because both warpgroups stalled in them at every tile boundary.
// Synchronisation per warpgroup (barriers epi0 / epi1, 128 threads): before writing its half
// (its previous store has read it) and before the store (every write fenced for the async proxy).
// The storing thread waits for that read at the warpgroup's next tile, not right after the store
// (at once only after the role's last tile, OutFrag::more == 0, before the CTA may exit): the
// wait had held the warpgroup's next GEMMs (0-1.2% on the masked variants).
// The tensor map of o is this package's parameter tmap_o, filled by attn_store_host.py
// ([bh * q_len, d] bf16, boxes [64, 64]). A warpgroup whose 64 rows run past q_len (the last
// Q block of a length that is not a whole number of blocks) stores its rows with plain stores.
// Built with ATTN_VARLEN (attn_varlen_store): o is FlashAttention's varlen layout [tokens_q,
// heads, d], sequence bh / heads at tokens cu_q[b] .. cu_q[b + 1] - 1.
#define PL_COMPONENT attn_store
#include <pipelink.h>

#include <stddef.h>

#include "attn.h"

PL_DECLARE_FACT(block_q);
PL_DECLARE_FACT(head_dim);
PL_DECLARE_SMEM(stage);
PL_DECLARE_BARRIER(epi0);
PL_DECLARE_BARRIER(epi1);

namespace attn_store {
#ifdef ATTN_VARLEN
struct Params {  // attn_varlen_store.contract.toml's [params]
  void* o;
  uint32_t q_len, bh;
  const int* cu_q;  // [B + 1] token offsets of the sequences in o
  uint32_t heads, tokens_q;
  pl::TensorMap tmap_o;
};
#else
struct Params {  // the contract's [params]: o = "ptr", q_len, bh = "u32", tmap_o = "tmap"
  void* o;
  uint32_t q_len, bh;
  pl::TensorMap tmap_o;
};
#endif
static_assert(offsetof(Params, tmap_o) == 64 && sizeof(Params) == 192, "params layout");

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}
// Byte offset of (row, col) in a warpgroup's half: 64-column boxes of [64 rows x 128 B], 16-byte
// chunks XOR-swizzled by row % 8 (TMA SWIZZLE_128B).
__device__ __forceinline__ uint32_t stage_offset(unsigned row, unsigned col) {
  return (col / 64) * (64 * 128) + row * 128 + ((((col % 64) / 8) ^ (row & 7)) << 4);
}
}  // namespace attn_store

PL_IMPORT(out) {
  using namespace attn_store;
  const Params& p = PL_PARAMS(Params);
  const attn::OutFrag& f = *static_cast<const attn::OutFrag*>(pl_frag);
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  const unsigned wg = t / 128, u = t % 128, w = u / 32, lane = t % 32;
  const unsigned d = PL_FACT(head_dim), bh = pl_col0;
  // Staged 128 columns at a time (d = 256: two passes through one 32 KB buffer, so the d = 256
  // kernels' rings and this staging fit in shared memory).
  const unsigned cols = d < 128 ? d : 128, passes = (d + 127) / 128;
  uint8_t* mine = pl::smem_base() + PL_SMEM(stage) + wg * 64 * cols * 2;
  const uint32_t buf = pl::smem_addr(mine);
  auto sync = [&] {  // one instruction per barrier: its id stays a link-time immediate
    if (wg == 0) pl::named_barrier_sync(PL_BARRIER(epi0), 128);
    else pl::named_barrier_sync(PL_BARRIER(epi1), 128);
  };
  float inv[2];
#pragma unroll
  for (unsigned j = 0; j < 2; ++j) inv[j] = f.l[j] > 0.f ? __frcp_rn(f.l[j]) : 0.f;  // a fully masked row gives 0
#pragma unroll
  for (unsigned pass = 0; pass < 2; ++pass) {
    if (pass >= passes) break;
    const unsigned c_pass = 128 * pass;  // the pass's first column
    if (u == 0) pl::tma_store_wait_read<0>();  // the previous store (a pass or a tile ago) has read this half
    sync();
    // stmatrix: lane l gives the address of row l % 8 of matrix l / 8; matrices 0 / 1 are rows
    // 0-7 / 8-15 of n8 tile nt, 2 / 3 the same of tile nt + 1 (o[4 nt + 2 j + e]: row g + 8 j,
    // column 8 nt + 2 qd + e).
    const unsigned row = 16 * w + (lane % 8) + 8 * ((lane / 8) & 1);
#pragma unroll
    for (unsigned nt = 0; nt < 16; nt += 2) {
      if (nt >= cols / 8) break;
      uint32_t r[4];
#pragma unroll
      for (unsigned j = 0; j < 4; ++j) {
        const float* o = f.o + (16 * pass + nt + j / 2) * 4 + 2 * (j % 2);
        r[j] = pack_bf16(o[0] * inv[j % 2], o[1] * inv[j % 2]);
      }
      stmatrix_x4(buf + stage_offset(row, (nt + lane / 16) * 8), r[0], r[1], r[2], r[3]);
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // st.shared -> TMA reads
    sync();
    const unsigned first = pl_row0 + 64 * wg;  // this warpgroup's first row in the head (sequence)
#ifdef ATTN_VARLEN
    // o [tokens_q, heads, d] as 2-D [tokens_q, heads * d]: the head's columns of the sequence's
    // rows, none past tokens_q (cu_q is not read on the host: bad offsets write nothing out of o).
    const unsigned b = bh / p.heads, col0 = (bh - b * p.heads) * d, row_units = p.heads * (d / 8);
    const unsigned s0 = (unsigned)__ldg(p.cu_q + b), s1 = min((unsigned)__ldg(p.cu_q + b + 1), p.tokens_q);
    const unsigned len = s1 > s0 ? s1 - s0 : 0u;
#define ATTN_STORE_ROW0 (int)(s0 + first)
#define ATTN_STORE_UNIT(r, c) (((size_t)s0 + first + (r)) * row_units + (col0 + (c)) / 8)
#else
    const unsigned col0 = 0, len = p.q_len;
#define ATTN_STORE_ROW0 (int)(bh * p.q_len + first)
#define ATTN_STORE_UNIT(r, c) (((size_t)bh * p.q_len + first + (r)) * chunks + (c) / 8)
#endif
    if (first + 64 <= len) {
      if (u == 0) {
        const int row0 = ATTN_STORE_ROW0;
        for (unsigned half = 0; half < cols / 64; ++half)
          pl::tma_store_2d(&p.tmap_o, mine + half * 64 * 128, col0 + c_pass + half * 64, row0);
        pl::tma_store_commit();
        if (!f.more && pass + 1 == passes) pl::tma_store_wait_read<0>();  // the role's last tile: read before the CTA exits
      }
    } else {
      // A Q block past the end of a head's rows (q_len not a whole number of blocks): a TMA box
      // would write into the next head, so the warpgroup copies its rows below q_len from the
      // staging half with 16-byte stores. The next pass's or tile's first sync orders these reads
      // before the half is written again.
      const unsigned rows = len > first ? len - first : 0u, chunks = d / 8, units = cols / 8;
      uint4* o = static_cast<uint4*>(p.o);
      for (unsigned i = u; i < rows * units; i += 128) {
        const unsigned r = i / units, c = (i % units) * 8;
        o[ATTN_STORE_UNIT(r, c_pass + c)] = *reinterpret_cast<const uint4*>(mine + stage_offset(r, c));
      }
      (void)chunks;
    }
  }
#undef ATTN_STORE_ROW0
#undef ATTN_STORE_UNIT
  (void)PL_FACT(block_q);
}
