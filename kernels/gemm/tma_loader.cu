// tma_loader.cu — owner A. Producer role of ring `ab` for the Hopper GEMM family: one
// thread of the role's warpgroup walks the persistent tile stream (callable `tile`, from
// the scheduler package) and, for every k-step of every tile, waits for a free stage,
// announces its bytes on the stage's `full` mbarrier (expect-tx) and issues the TMA copies
// of the A tile and the b_parts B tiles (tma_gemm.h). The other threads of the warpgroup
// only exist so the dispatcher can lower the warpgroup's register budget.
// In a cluster (fact cluster_x = 2) the two CTAs work on two tile rows with the same B
// tile: each loads its own A and half of the B rows, multicast into both CTAs' stages, so
// L2 serves B once per cluster. A stage is reused only after the consumers of every CTA in
// the cluster released it (the consumer arrives on all of the cluster's `empty` barriers).
// The tensor maps are parameters (`tmap` type) filled on the host by this package's host
// provider, tma_loader_host.py, from the lent x, w, m, n, k and the tile facts. TMA fills
// rows and columns beyond the tensor with zeros, so m and k need not be tile multiples.
#define PL_COMPONENT tma_loader
#include <pipelink.h>

#include <stddef.h>

#include "tma_gemm.h"

PL_DECLARE_FACT(block_m);
PL_DECLARE_FACT(block_n);
PL_DECLARE_FACT(block_k);
PL_DECLARE_FACT(b_parts);
PL_DECLARE_FACT(cluster_x);
PL_DECLARE_RING(ab);
PL_DECLARE_CALL_RET(unsigned, unit, unsigned, unsigned, unsigned, unsigned, unsigned*);

// The contract's [params], in order: x, w = "ptr"; m, n, k = "u32"; tmap_x, tmap_w = "tmap".
struct TmaLoaderParams {
  const void* x;  // A [m, k] bf16 row-major
  const void* w;  // B [b_parts * n, k] bf16 row-major
  uint32_t m, n, k;
  pl::TensorMap tmap_x;  // box [block_m rows, 64 cols], SWIZZLE_128B
  pl::TensorMap tmap_w;  // box [block_n rows, 64 cols], SWIZZLE_128B
};
static_assert(offsetof(TmaLoaderParams, m) == 16 && offsetof(TmaLoaderParams, tmap_x) == 64 &&
                  offsetof(TmaLoaderParams, tmap_w) == 192 && sizeof(TmaLoaderParams) == 320,
              "params layout (docs/CONTRACTS.md: natural alignment, tmap = 128 B aligned to 64)");

PL_ENTRY(run) {
  if (pl::role_thread(PL_WARP_BEGIN()) != 0) return;
  const TmaLoaderParams& p = PL_PARAMS(TmaLoaderParams);
  const unsigned bm = PL_FACT(block_m), bn = PL_FACT(block_n), bk = PL_FACT(block_k), parts = PL_FACT(b_parts);
  uint8_t* base = pl::smem_base();
  uint8_t* buf = base + PL_RING_BUFFER(ab);
  uint64_t* full = reinterpret_cast<uint64_t*>(base + PL_RING_FULL(ab));
  uint64_t* empty = reinterpret_cast<uint64_t*>(base + PL_RING_EMPTY(ab));
  const unsigned depth = PL_RING_DEPTH(ab);
  const unsigned bytes = tma_gemm::stage_bytes(bm, bn, parts);
  // This CTA's share of the B rows of a stage, in boxes of box_b rows (the host provider
  // encodes the same box): all of them alone, half of them in a cluster of two.
  const unsigned cx = PL_FACT(cluster_x), rank = cx > 1 ? pl::cluster_rank() : 0;
  const unsigned share = parts * bn / cx, box_b = min(bn, share);
  const uint16_t mask = (uint16_t)((1u << cx) - 1u);
  pl::prefetch_tensor_map(&p.tmap_x);
  pl::prefetch_tensor_map(&p.tmap_w);

  const unsigned m_tiles = tma_gemm::ceil_div(p.m, bm), n_tiles = tma_gemm::ceil_div(p.n, bn);
  const unsigned k_tiles = tma_gemm::ceil_div(p.k, bk);
  unsigned stage = 0, phase = 0;
  for (unsigned iter = 0;; ++iter) {
    unsigned info[4];  // k_begin, k_end, linear tile, first CTA (tile_scheduler)
    const unsigned t = PL_CALL(unit, iter, m_tiles, n_tiles, k_tiles, info);
    if (t == tma_gemm::NO_TILE) break;
    const int m0 = (t >> 16) * bm, n0 = (t & 0xFFFFu) * bn;
    for (unsigned kt = info[0]; kt < info[1]; ++kt) {
      pl::mbar_wait(empty + stage, phase ^ 1u);  // first pass: a fresh barrier passes parity 1
      pl::mbar_arrive_expect_tx(full + stage, bytes);
      uint8_t* dst = buf + stage * bytes;
      const int k0 = kt * bk;
      pl::tma_load_2d(dst, &p.tmap_x, k0, m0, full + stage);
      for (unsigned row = rank * share; row < (rank + 1) * share; row += box_b) {  // row of the stage's B
        uint8_t* b_dst = dst + tma_gemm::b_offset(bm, bn, 0) + row * tma_gemm::ROW_BYTES;
        const int w_row = (row / bn) * p.n + n0 + row % bn;
        if (cx > 1) pl::tma_load_2d_multicast(b_dst, &p.tmap_w, k0, w_row, full + stage, mask);
        else pl::tma_load_2d(b_dst, &p.tmap_w, k0, w_row, full + stage);
      }
      if (++stage == depth) { stage = 0; phase ^= 1u; }
    }
  }
}
