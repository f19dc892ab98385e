// attn_cp_loader.cu — communication component of context-parallel attention (attn_cp.h): the
// TMA producer of the core's rings `q` and `kv`, like attn_loader, except that K/V blocks come
// from every rank's region of a peer-mapped symmetric buffer (pipelink.peers): the variant's
// kv_block gives a global KV block, this component maps it to its owner rank s and row, and
// waits once per launch, before the first block of s, until s has published that its K/V are
// in place (READY counters, system scope). CTA 0 publishes this rank's READY to every rank at
// the start; at the end every CTA drains its rings (the core has read every stage) and the
// last one publishes DONE to every rank (callers wait on DONE before overwriting K/V).
// The core (attn_core) is unchanged; it never knows the data came from other GPUs.
#define PL_COMPONENT attn_cp_loader
#include <pipelink.h>

#include <stddef.h>

#include "attn.h"
#include "attn_cp.h"
#include "attn_producer.h"

ATTN_PRODUCER_DECLARATIONS();

struct AttnCpLoaderParams {  // the contract's [params], in order
  const void* q;
  uint8_t* kv;  // the symmetric buffer's window: rank s's region at kv + s * stride_rows * 256
  const void* aux;
  uint32_t q_len, kv_len, bh, world, rank, stride_rows, flags_row;
  pl::TensorMap tmap_q, tmap_kv;
};
static_assert(offsetof(AttnCpLoaderParams, q_len) == 24 && offsetof(AttnCpLoaderParams, tmap_q) == 64 &&
                  sizeof(AttnCpLoaderParams) == 320, "params layout (docs/CONTRACTS.md)");

namespace {
constexpr unsigned ACCEPTED_HEAD_DIM = 128;  // the contract accepts only that: two boxes per tile
using pl::ld_acquire_sys;  // pipelink.h: system-scope flags (peers are other GPUs)
using pl::red_release_sys;
using pl::atom_acq_rel;
__device__ __forceinline__ unsigned* flags_of(const AttnCpLoaderParams& p, unsigned s) {
  return reinterpret_cast<unsigned*>(p.kv + ((size_t)s * p.stride_rows + p.flags_row) * attn_cp::ROW_BYTES);
}
}  // namespace

PL_ENTRY(run) {
  using namespace attn_cp;
  if (pl::role_thread(PL_WARP_BEGIN()) != 0) return;
  const AttnCpLoaderParams& p = PL_PARAMS(AttnCpLoaderParams);
  uint8_t* base = pl::smem_base();
  pl::prefetch_tensor_map(&p.tmap_q);
  pl::prefetch_tensor_map(&p.tmap_kv);
  unsigned* mine = flags_of(p, p.rank);
  // this launch's epoch: the generation word read before arriving; the last CTA to arrive bumps it
  const unsigned epoch = *reinterpret_cast<volatile unsigned*>(mine + GEN) + 1;
  if (atom_acq_rel(mine + ARR, 1) == gridDim.x - 1) {
    mine[ARR] = 0;
    __threadfence();
    mine[GEN] = epoch;
  }
  if (blockIdx.x == 0) {  // this rank's K/V were written before the launch (stream order)
    asm volatile("fence.acq_rel.sys;" ::: "memory");
    for (unsigned s = 0; s < p.world; ++s) red_release_sys(flags_of(p, s) + READY + p.rank, 1);
  }
  uint64_t ready_seen = 1ull << p.rank;  // ranks already waited for in this launch (world <= 64)

  unsigned info[4];
  const unsigned blk = PL_FACT(block_q), bytes = blk * PL_FACT(head_dim) * 2;  // one tile (attn.h)
  const unsigned c = p.kv_len / 2, cb = c / blk, n2 = 2 * p.world;
  uint64_t* qfull = reinterpret_cast<uint64_t*>(base + PL_RING_FULL(q));
  uint64_t* qempty = reinterpret_cast<uint64_t*>(base + PL_RING_EMPTY(q));
  uint8_t* buf = base + PL_RING_BUFFER(kv);
  uint64_t* full = reinterpret_cast<uint64_t*>(base + PL_RING_FULL(kv));
  uint64_t* empty = reinterpret_cast<uint64_t*>(base + PL_RING_EMPTY(kv));
  const unsigned depth = PL_RING_DEPTH(kv);
  unsigned stage = 0, phase = 0, it = 0;
  for (; PL_CALL(tile, it, p.q_len, p.bh, p.aux, info); ++it) {
    const unsigned qb = info[0], bh = info[1], split = info[2];
    attn_producer::claim_stage(qfull, qempty, (it & 1u) ^ 1u, bytes);  // ring q has one stage
    attn_producer::load_tile(base + PL_RING_BUFFER(q), &p.tmap_q, (int)(bh * p.q_len + qb * blk), qfull,
                             ACCEPTED_HEAD_DIM, blk);
    const unsigned n = PL_CALL(kv_count, qb, bh, split, p.q_len, p.kv_len, p.aux);
    for (unsigned i = 0; i < n; ++i) {
      const unsigned gb = PL_CALL(kv_block, qb, bh, split, i, p.q_len, p.kv_len, p.aux) & attn::BLOCK_MASK;
      const unsigned ch = gb / cb, s = ch < p.world ? ch : n2 - 1 - ch;
      const unsigned j = (ch < p.world ? 0u : c) + (gb % cb) * blk;  // row in the owner's local sequence
      if (!(ready_seen >> s & 1ull)) {
        while (ld_acquire_sys(mine + READY + s) < epoch) __nanosleep(256);
        asm volatile("fence.proxy.async.global;" ::: "memory");  // TMA reads after the acquire
        ready_seen |= 1ull << s;
      }
      const size_t region = (size_t)s * p.stride_rows;
#pragma unroll 1
      for (unsigned part = 0; part < 2; ++part) {  // K, then V
        const int row = (int)(region + ((size_t)part * p.bh + bh) * p.kv_len + j);
        attn_producer::claim_stage(full + stage, empty + stage, phase ^ 1u, bytes);
        attn_producer::load_tile(buf + stage * bytes, &p.tmap_kv, row, full + stage, ACCEPTED_HEAD_DIM, blk);
        attn_producer::next_stage(stage, phase, depth);
      }
    }
  }
  // drain: the core has released every stage (so every TMA read of this CTA is complete)
  attn_producer::drain(empty, stage, phase, depth);
  pl::mbar_wait(qempty, (it & 1u) ^ 1u);
  if (atom_acq_rel(mine + DARR, 1) == gridDim.x - 1) {  // the last CTA of this rank to finish
    mine[DARR] = 0;
    asm volatile("fence.acq_rel.sys;" ::: "memory");
    for (unsigned s = 0; s < p.world; ++s) red_release_sys(flags_of(p, s) + DONE + p.rank, 1);
  }
}
