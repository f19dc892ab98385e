// attn_loader.cu — TMA producer of rings `q` and `kv` for the attention core. One thread:
// for each of the CTA's work tiles (callable `tile`, persistent), the Q block into ring `q`,
// then K and V of every KV block the variant lists (callables `kv_count`, `kv_block`) into
// ring `kv`, K before V. The next tile's loads start as soon as the core frees the stages.
// Tensor maps come from attn_loader_host.py (boxes [128, 64], SWIZZLE_128B). Work tile bh reads
// K/V head bh / kv_group: the prefill tile orders put a group's heads on neighbouring CTAs, so
// a K/V tile comes from DRAM once per group and from L2 for the others.
#define PL_COMPONENT attn_loader
#include <pipelink.h>

#include <stddef.h>

#include "attn.h"
#include "attn_producer.h"

ATTN_PRODUCER_DECLARATIONS();

// The contract's [params], in order.
struct AttnLoaderParams {
  const void* q;
  const void* k;
  const void* v;
  const void* aux;
  uint32_t q_len, kv_len, bh, kv_group;  // kv_group: query heads per K/V head (grouped-query attention)
  pl::TensorMap tmap_q, tmap_k, tmap_v;
};
static_assert(offsetof(AttnLoaderParams, q_len) == 32 && offsetof(AttnLoaderParams, tmap_q) == 64 &&
                  sizeof(AttnLoaderParams) == 448, "params layout (docs/CONTRACTS.md)");

PL_ENTRY(run) {
  if (pl::role_thread(PL_WARP_BEGIN()) != 0) return;
  const AttnLoaderParams& p = PL_PARAMS(AttnLoaderParams);
  uint8_t* base = pl::smem_base();
  pl::prefetch_tensor_map(&p.tmap_q);
  pl::prefetch_tensor_map(&p.tmap_k);
  pl::prefetch_tensor_map(&p.tmap_v);
  unsigned info[4];
  const unsigned blk = PL_FACT(block_q), bytes = blk * PL_FACT(head_dim) * 2;  // one tile (attn.h)
  const attn_producer::Rings r = ATTN_PRODUCER_RINGS(base);  // ring q: tile t + 1's Q loads under tile t
  unsigned stage = 0, phase = 0;
  for (unsigned it = 0; PL_CALL(tile, it, p.q_len, p.bh, p.aux, info); ++it) {
    const unsigned qb = info[0], bh = info[1], split = info[2];
    attn_producer::load_q(r, it, &p.tmap_q, (int)(bh * p.q_len + qb * blk), PL_FACT(head_dim), blk);
    const unsigned n = PL_CALL(kv_count, qb, bh, split, p.q_len, p.kv_len, p.aux);
    const unsigned kv_head = bh / p.kv_group;  // the g query heads of a group read one K/V head
    for (unsigned i = 0; i < n; ++i) {
      const unsigned kb = PL_CALL(kv_block, qb, bh, split, i, p.q_len, p.kv_len, p.aux) & attn::BLOCK_MASK;
      const int row = (int)(kv_head * p.kv_len + kb * blk);
#pragma unroll 1
      for (unsigned part = 0; part < 2; ++part) {  // K, then V
        attn_producer::claim_stage(r.kv_full + stage, r.kv_empty + stage, phase ^ 1u, bytes);
        attn_producer::load_tile(r.kv_buf + stage * bytes, part ? &p.tmap_v : &p.tmap_k, row, r.kv_full + stage,
                                 PL_FACT(head_dim), blk);
        attn_producer::next_stage(stage, phase, r.kv_depth);
      }
    }
  }
}
