// attn_varlen_loader.cu — TMA producer of rings `q` and `kv` for a ragged batch (issue 42):
// FlashAttention's varlen layout, q [tokens_q, heads, d] and k, v [tokens_k, heads / kv_group, d]
// bf16, sequence b's tokens cu_q[b] .. cu_q[b + 1] - 1 (cu_k likewise). The same ring protocol
// as attn_loader (attn_producer.h); a tile's rows are a sequence's tokens, read through a 2-D
// map of [tokens, heads * d] at the head's first column, so a tile is one box per 64 columns.
// Work tile bh is head bh % heads of sequence bh / heads. Rows past a sequence's end belong to
// the next one (or read as zero past the tensor): the variant masks them, the store skips them.
#define PL_COMPONENT attn_varlen_loader
#include <pipelink.h>

#include <stddef.h>

#include "attn.h"
#include "attn_producer.h"

ATTN_PRODUCER_DECLARATIONS();

// The contract's [params], in order.
struct AttnVarlenLoaderParams {
  const void* q;
  const void* k;
  const void* v;
  const void* aux;
  const int* cu_q;  // [B + 1] token offsets of the sequences in q
  const int* cu_k;  // [B + 1] in k and v
  uint32_t q_len, kv_len, bh, kv_group, heads, tokens_q, tokens_k;
  pl::TensorMap tmap_q, tmap_k, tmap_v;
};
static_assert(offsetof(AttnVarlenLoaderParams, q_len) == 48 && offsetof(AttnVarlenLoaderParams, tmap_q) == 128 &&
                  sizeof(AttnVarlenLoaderParams) == 512, "params layout (docs/CONTRACTS.md)");

PL_ENTRY(run) {
  if (pl::role_thread(PL_WARP_BEGIN()) != 0) return;
  const AttnVarlenLoaderParams& p = PL_PARAMS(AttnVarlenLoaderParams);
  uint8_t* base = pl::smem_base();
  pl::prefetch_tensor_map(&p.tmap_q);
  pl::prefetch_tensor_map(&p.tmap_k);
  pl::prefetch_tensor_map(&p.tmap_v);
  unsigned info[4];
  const unsigned blk = PL_FACT(block_q), d = PL_FACT(head_dim), bytes = blk * d * 2;  // one tile (attn.h)
  const attn_producer::Rings r = ATTN_PRODUCER_RINGS(base);
  unsigned stage = 0, phase = 0;
  for (unsigned it = 0; PL_CALL(tile, it, p.q_len, p.bh, p.aux, info); ++it) {
    const unsigned qb = info[0], bh = info[1], split = info[2];
    const unsigned b = bh / p.heads, head = bh - b * p.heads;
    attn_producer::load_q(r, it, &p.tmap_q, __ldg(p.cu_q + b) + (int)(qb * blk), d, blk, (int)(head * d));
    const int k0 = __ldg(p.cu_k + b), kcol = (int)(head / p.kv_group * d);  // the group's K/V head
    const unsigned n = PL_CALL(kv_count, qb, bh, split, p.q_len, p.kv_len, p.aux);
    for (unsigned i = 0; i < n; ++i) {
      const unsigned kb = PL_CALL(kv_block, qb, bh, split, i, p.q_len, p.kv_len, p.aux) & attn::BLOCK_MASK;
#pragma unroll 1
      for (unsigned part = 0; part < 2; ++part) {  // K, then V
        attn_producer::claim_stage(r.kv_full + stage, r.kv_empty + stage, phase ^ 1u, bytes);
        attn_producer::load_tile(r.kv_buf + stage * bytes, part ? &p.tmap_v : &p.tmap_k, k0 + (int)(kb * blk),
                                 r.kv_full + stage, d, blk, kcol);
        attn_producer::next_stage(stage, phase, r.kv_depth);
      }
    }
  }
}
