// attn_paged_loader.cu — TMA producer of rings `q` and `kv` for split-KV decode over a paged KV
// cache (issue 42), for split-KV decode and for chunked prefill over a cached prefix. The same
// ring protocol as attn_loader (attn_producer.h); only K/V rows
// differ: the cache is FlashInfer's HND layout, k and v each [num_pages, kv_heads, page_size, D]
// (read as 2-D [pool_rows, D]), and `pages` is the block table [B, max_pages] int32. A KV block
// of 128 keys is 128 / page_size pages, each one TMA box of page_size rows (per 64-column chunk)
// into its rows of the stage: the SWIZZLE_128B pattern repeats every 8 rows, so a page's box
// lands as the whole tile's would. Work tile bh reads K/V head bh / kv_group of sequence
// bh / (kv_group * kv_heads). Pages past a sequence's length load the sequence's first page:
// their keys are masked, and a valid page holds finite values.
#define PL_COMPONENT attn_paged_loader
#include <pipelink.h>

#include <stddef.h>

#include "attn.h"
#include "attn_producer.h"

ATTN_PRODUCER_DECLARATIONS();

// The contract's [params], in order.
struct AttnPagedLoaderParams {
  const void* q;
  const void* k;
  const void* v;
  const void* aux;  // {work heads a sequence, q_len, seq_lens[B]} (attention.py; the variant's too)
  const int* pages;
  uint32_t q_len, kv_len, bh, kv_group, max_pages, kv_heads, page_size, pool_rows;
  pl::TensorMap tmap_q, tmap_k, tmap_v;
};
static_assert(offsetof(AttnPagedLoaderParams, q_len) == 40 && offsetof(AttnPagedLoaderParams, tmap_q) == 128 &&
                  sizeof(AttnPagedLoaderParams) == 512, "params layout (docs/CONTRACTS.md)");

PL_ENTRY(run) {
  // One warp: lane 0 issues every barrier operation and TMA; the lanes fetch a KV block's page
  // numbers together (lane j page j), once for its K and V. Fetched one after another by one
  // thread, a block of 16-token pages waited on 16 dependent block-table loads.
  const unsigned lane = pl::role_thread(PL_WARP_BEGIN());
  if (lane >= 32) return;
  const AttnPagedLoaderParams& p = PL_PARAMS(AttnPagedLoaderParams);
  uint8_t* base = pl::smem_base();
  if (lane == 0) {
    pl::prefetch_tensor_map(&p.tmap_q);
    pl::prefetch_tensor_map(&p.tmap_k);
    pl::prefetch_tensor_map(&p.tmap_v);
  }
  unsigned info[4];
  const unsigned blk = PL_FACT(block_q), d = PL_FACT(head_dim), bytes = blk * d * 2;  // one tile (attn.h)
  const attn_producer::Rings r = ATTN_PRODUCER_RINGS(base);
  const unsigned ps = p.page_size, per = blk / ps;  // pages a KV block spans (host: 16 .. 128, so per <= 8)
  unsigned stage = 0, phase = 0;
  for (unsigned it = 0; PL_CALL(tile, it, p.q_len, p.bh, p.aux, info); ++it) {
    const unsigned qb = info[0], bh = info[1], split = info[2];
    if (lane == 0) attn_producer::load_q(r, it, &p.tmap_q, (int)(bh * p.q_len + qb * blk), d, blk);
    // bh counts query heads (prefill: kv_group of them a K/V head) or K/V heads (decode runs a
    // group as rows: kv_group 1); either way bh / kv_group is sequence b's K/V head `head`.
    const unsigned kvh = bh / p.kv_group, b = kvh / p.kv_heads, head = kvh - b * p.kv_heads;
    const unsigned seq = min(__ldg(static_cast<const unsigned*>(p.aux) + 2 + b), p.kv_len);
    const int* table = p.pages + (size_t)b * p.max_pages;
    const unsigned n = PL_CALL(kv_count, qb, bh, split, p.q_len, p.kv_len, p.aux);
    for (unsigned i = 0; i < n; ++i) {
      const unsigned kb = PL_CALL(kv_block, qb, bh, split, i, p.q_len, p.kv_len, p.aux) & attn::BLOCK_MASK;
      const unsigned tok = kb * blk + lane * ps;
      const unsigned my_page =
          lane < per ? (unsigned)__ldg(table + (tok < seq ? min(tok / ps, p.max_pages - 1) : 0u)) : 0u;
#pragma unroll 1
      for (unsigned part = 0; part < 2; ++part) {  // K, then V
        if (lane == 0) attn_producer::claim_stage(r.kv_full + stage, r.kv_empty + stage, phase ^ 1u, bytes);
        const pl::TensorMap* map = part ? &p.tmap_v : &p.tmap_k;
        uint8_t* dst = r.kv_buf + stage * bytes;
#pragma unroll 1
        for (unsigned j = 0; j < per; ++j) {
          const unsigned page = __shfl_sync(0xffffffffu, my_page, j);
          const int row = (int)((page * p.kv_heads + head) * ps);
          if (lane == 0) attn_producer::load_tile(dst + j * ps * 128, map, row, r.kv_full + stage, d, blk);
        }
        attn_producer::next_stage(stage, phase, r.kv_depth);
      }
    }
  }
}
