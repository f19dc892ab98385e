// dec_attn_split.cu — split-KV GQA decode attention, the decode megakernel's attention role
// (4 warps; package dec_attn, the same interface as dec_attn_simple.cu). Per layer, once the
// QKV op's counter is complete: each task takes one KV head and one chunk of the positions
// 0 .. pos, for the head's `heads / kv_heads` query heads at once (each K/V row is read once per
// group). Queries and the new key get RoPE (dec_rope); the chunk holding `pos` writes the new
// key and value to the cache and uses them from shared memory. A chunk's partial (max, sum,
// unnormalised output) goes to workspace `part`; the last chunk of a head to finish (counter
// `arr`, acquire-release) merges them into `ao` and zeroes its counter. Every CTA's role counts
// once on the ATTN op's counter per layer, with or without tasks. Memory round trips are what a
// task's time goes to, so the loads of a block go out together, the first block's before the
// wait on the QKV op (the cached positions do not depend on it), the next block's while the
// current one is reduced, and the merge loads the partials in batches. Each warp keeps its own
// softmax state (max, sum, P·V by mma) over its 32 positions of a block, so a block has no
// barrier and no round trip through shared memory; the four warps' states merge once a task.
// Batch B > 1 (fact `batch`): the tasks cover each sequence's KV heads and chunks in turn, each
// sequence at its own position, in its own cache, partial slots and counters.
#define PL_COMPONENT dec_attn
#include <pipelink.h>

#include "dec.h"
#include "dec_attn.h"

DEC_ATTN_DECLARATIONS();
PL_DECLARE_FACT(batch);
PL_OWN_FACT(max_group, dec_attn::MAX_GROUP);  // sizes the group's shared-memory claims
PL_DECLARE_SMEM(pr);
PL_DECLARE_SMEM(red);
PL_DECLARE_SMEM(seqs);
PL_DECLARE_WORKSPACE(part);
PL_DECLARE_WORKSPACE(arr);

// 1: the timeline build (dec_attn_split_trace, linked as llama3_1b_trace): thread 0 of a CTA
// with a task stamps its layer (dec.h trace_record [ops G + l G + cta]): the wait begins, the
// wait ends, the task's queries and new key are ready (after RoPE and the cache append), its
// blocks are scored, its partial is merged or handed on, the role releases the layer; then the
// number of chunks a head and whether this CTA merged. The default build has none of it.
#ifndef DEC_TRACE
#define DEC_TRACE 0
#endif
// Blocks of a task that thread 0 asks L2 for ahead of the one being scored (cp.async.bulk
// prefetch of the keys' and the values' contiguous runs), at batch <= REG_BATCH: a task's blocks
// then come sooner at long contexts, while at batch 32 the lookahead made the step slower (its
// 32 input rows are read through L2 by every CTA). 0: none (docs/DECISIONS.md has the figures).
#ifndef DEC_KV_AHEAD
#define DEC_KV_AHEAD 2
#endif
namespace dec_attn {
constexpr unsigned MAX_CHUNKS = 32;  // chunks per KV head: `part` holds this many slots a head
constexpr unsigned BLOCK = THREADS;  // positions scored at once: 32 a warp
constexpr unsigned MAX_HD = 128;     // [fact.head_dim] accept
// A lane's VPRE value rows of a block (their first 16 bytes: all of them at head_dim 64) are
// loaded with its key rows, before the scores, so a block costs one round trip to memory, not two.
constexpr unsigned VPRE = 8;
constexpr unsigned MERGE_BATCH = 16;  // partials the merging task loads at once (one round trip a batch)
// Batches up to this keep every sequence's position in registers; larger ones (which would spill
// the role's budget) keep position, first task, chunks and chunk size a sequence in [smem.seqs].
constexpr unsigned REG_BATCH = 8;

// The scores by mma.sync m16n8k16 (bf16 operands, f32 sums): rows are the group's query heads
// (rows from g on zero), columns the block's positions, warp w taking positions 32 w .. 32 w + 31
// as TILES n8 tiles. Lane (gid, qd) = (lane / 4, lane % 4) loads position 32 w + 8 i + gid of
// tile i, dims [qd hd / 4, (qd + 1) hd / 4) of its key row, and holds the queries' same dims: the
// mma's k order is a permutation of the head's dims that both operands share, so a lane's keys are
// whole 16-byte runs of the row, as the per-thread rows were. Each f32 query is the sum of two
// bf16 halves (A's rows gid and gid + 8 of one mma), so the scores keep the f32 queries' precision.
constexpr unsigned TILES = 4;              // n8 tiles a warp: 32 positions
constexpr unsigned KPRE_CH = 2;            // a lane's 16-byte runs of a row preloaded (all of them at head_dim 64)
constexpr unsigned MAX_CH = MAX_HD / 32;   // its runs at head_dim 128
struct BlockRows {
  uint4 k[TILES][KPRE_CH];
  uint4 v[VPRE];
};
__device__ __forceinline__ void load_keys(BlockRows& r, const uint16_t* kc, unsigned b, unsigned n, unsigned hd,
                                          unsigned t) {
  const unsigned lane = t % 32, gid = lane / 4, qd = lane % 4;
#pragma unroll
  for (unsigned i = 0; i < TILES; ++i) {
    const unsigned pp = t / 32 * 32 + 8 * i + gid;
#pragma unroll
    for (unsigned c = 0; c < KPRE_CH; ++c)
      if (c * 32 < hd)
        r.k[i][c] = pp < n ? *reinterpret_cast<const uint4*>(kc + (size_t)(b + pp) * hd + qd * (hd / 4) + 8 * c)
                           : make_uint4(0u, 0u, 0u, 0u);
  }
}
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
  return (unsigned)to_bf16(lo) | (unsigned)to_bf16(hi) << 16;
}
__device__ __forceinline__ unsigned word_of(const uint4& w, unsigned j) {
  return j == 0 ? w.x : j == 1 ? w.y : j == 2 ? w.z : w.w;
}
// P·V by mma: lane (gid, qd)'s value row r < 8 is block position 32 w + 16 (r / 4) + 8 (r / 2 % 2)
// + 2 qd + r % 2: the positions of its P words as the P·V mma's A (k pairs 2 qd and 2 qd + 8 of the
// k16 steps s = r / 4, from the score tiles 2 s and 2 s + 1); it holds dims hd / 8 gid .. of them,
// whole 16-byte runs, so the mma's column n of n-tile t is dim hd / 8 n + t. Past the block's end
// the rows are zeros (their P is 0, and 0 times a stale NaN would not be).
__device__ __forceinline__ unsigned warp_value_row(unsigned t, unsigned r) {
  return t / 32 * 32 + 16 * (r / 4) + 8 * (r / 2 % 2) + 2 * (t % 4) + r % 2;
}
__device__ __forceinline__ void load_warp_values(BlockRows& r, const uint16_t* vc, unsigned b, unsigned n, unsigned hd,
                                                 unsigned t) {
  static_assert(VPRE == 8, "a lane's eight value rows of a block");
#pragma unroll
  for (unsigned u = 0; u < VPRE; ++u) {
    const unsigned i = warp_value_row(t, u);
    r.v[u] = i < n ? *reinterpret_cast<const uint4*>(vc + (size_t)(b + i) * hd + hd / 8 * (t % 32 / 4))
                   : make_uint4(0u, 0u, 0u, 0u);
  }
}
}  // namespace dec_attn

PL_ENTRY(run) {
  using namespace dec_attn;
  const Params& p = PL_PARAMS(Params);
  const unsigned t = threadIdx.x - 32u * PL_WARP_BEGIN(), lane = t % 32, warp = t / 32;
  const dec::Model m{PL_FACT(hidden), PL_FACT(layers), PL_FACT(heads), PL_FACT(kv_heads), PL_FACT(head_dim), 0, 0,
                     PL_FACT(tile_elems)};  // (inter and vocab: no attention code reads them)
  const unsigned hd = m.head_dim, g = m.heads / m.kv_heads, G = gridDim.x, cta = blockIdx.x;
  if (g > MAX_GROUP || m.heads % m.kv_heads || hd % 64 || hd > 128) __trap();  // outside accept (folds away)
  unsigned* sync = static_cast<unsigned*>(PL_WORKSPACE(sync));
  const float* qkv = static_cast<const float*>(PL_WORKSPACE(qkv));
  uint16_t* ao = static_cast<uint16_t*>(PL_WORKSPACE(ao));
  float* part = static_cast<float*>(PL_WORKSPACE(part));
  unsigned* arr = static_cast<unsigned*>(PL_WORKSPACE(arr));
  float* q = reinterpret_cast<float*>(PL_SMEM_PTR(q));     // [g][hd]
  float* kn = reinterpret_cast<float*>(PL_SMEM_PTR(kv));   // [hd]: the new key, then the new value
  float* vn = kn + hd;
  float* pr = reinterpret_cast<float*>(PL_SMEM_PTR(pr));   // [g][hd]: warps 1 and 3's sums at the merge
  float* red = reinterpret_cast<float*>(PL_SMEM_PTR(red)); // [2][g][4] + the merge flag
  float* o = reinterpret_cast<float*>(PL_SMEM_PTR(o));     // [g][hd]
  const unsigned bar = PL_BARRIER(attn);
  const auto sync_role = [&]() { pl::named_barrier_sync(bar, THREADS); };

  const unsigned B = PL_FACT(batch), OPS = dec::ops_base(B);
  if (B > dec::MAX_BATCH) __trap();  // outside accept (folds away)
  // chunks a head: enough to give every CTA a task, positions in whole 64s
  const unsigned per_head = min(MAX_CHUNKS, max(1u, G / (m.kv_heads * B)));
  const auto chunk_size = [&](unsigned len) { return ((len + per_head - 1) / per_head + 63) / 64 * 64; };
  const auto chunks = [&](unsigned len) { return len ? (len + chunk_size(len) - 1) / chunk_size(len) : 0u; };
  // every sequence's position, in registers (the loops over the batch unroll: B is a fact), or
  // past REG_BATCH in seqs[4 s], with its first task, chunks and chunk size in seqs[4 s + 1 .. 3]
  // and the task count and the full-cache flag in seqs[4 B], seqs[4 B + 1]: thread 0 writes them
  // all (a handful of predicates held by one thread, not B of them by every thread)
  unsigned posv[REG_BATCH];
  unsigned* seqs = reinterpret_cast<unsigned*>(PL_SMEM_PTR(seqs));
  bool ok = true;
  unsigned tasks = 0;
  if (B <= REG_BATCH) {
#pragma unroll
    for (unsigned s = 0; s < REG_BATCH; ++s) {
      posv[s] = s < B ? (unsigned)__ldcg(p.state + dec::ST_WORDS * s + dec::ST_POS) : 0u;
      ok = ok && posv[s] < p.max_seq;
    }
  } else {
    posv[0] = 0;  // (read only at batch 1)
    if (t == 0) {
      unsigned full = 0, first = 0;
#pragma unroll 1
      for (unsigned s = 0; s < B; ++s) {
        const unsigned pos = (unsigned)__ldcg(p.state + dec::ST_WORDS * s + dec::ST_POS);
        seqs[4 * s] = pos, full |= pos >= p.max_seq;
      }
#pragma unroll 1
      for (unsigned s = 0; s < B; ++s) {
        const unsigned len = full ? 0 : seqs[4 * s] + 1, n = chunks(len);
        seqs[4 * s + 1] = first, seqs[4 * s + 2] = n, seqs[4 * s + 3] = chunk_size(len);
        first += m.kv_heads * n;
      }
      seqs[4 * B] = first, seqs[4 * B + 1] = full;
    }
    sync_role();
    tasks = seqs[4 * B], ok = seqs[4 * B + 1] == 0;
  }
  const dec::OpRange range{PL_FACT(unfused), p.op_begin, p.op_end};
  // only a launch that runs an attention op flags a full cache (unfused, the HEAD launch's last
  // CTA advances the position while this role may still be reading it; fused, this folds away)
  if (!ok && range.runs_attention(m.layers) && cta == 0 && t == 0) p.state[dec::ST_ERROR] = 1;
  if (B <= REG_BATCH) {
#pragma unroll
    for (unsigned s = 0; s < REG_BATCH; ++s)
      if (s < B) tasks += m.kv_heads * chunks(ok ? posv[s] + 1 : 0);
  }
  const float scale = rsqrtf((float)hd) * 1.4426950408889634f;  // softmax in base 2

  unsigned* rec = nullptr;
  // (a macro: with DEC_TRACE 0 its value is not even evaluated, so the default build's code is
  // the same as without the stamps)
#define DEC_ATTN_STAMP(field, v)          \
  do {                                    \
    if (DEC_TRACE && t == 0) rec[field] = (v); \
  } while (0)
  // task j's chunk: sequence sq (its position pos, len positions in nch chunks a head), KV head
  // kvh, chunk c of it, positions c0 .. c1 (the same before and after the wait)
  struct Chunk {
    unsigned sq, kvh, c, c0, c1, pos, len, nch;
  };
  const unsigned len0 = ok ? posv[0] + 1 : 0, cs0 = chunk_size(len0), nch0 = chunks(len0);
  const auto chunk = [&](unsigned j) {
    if (B == 1) {  // (folds: the one sequence's sizes, computed once)
      const unsigned c = j % nch0;
      return Chunk{0, j / nch0, c, c * cs0, min(len0, c * cs0 + cs0), posv[0], len0, nch0};
    }
    Chunk r{0, 0, 0, 0, 0, 0, 0, 0};
    if (B > REG_BATCH) {
#pragma unroll 1
      for (unsigned s = 0; s < B; ++s) {
        const unsigned first = seqs[4 * s + 1], n = seqs[4 * s + 2], cs = seqs[4 * s + 3];
        if (j >= first && j - first < m.kv_heads * n) {
          const unsigned jj = j - first, c = jj % n, pos = seqs[4 * s], len = pos + 1;  // (a full cache has no tasks)
          r = Chunk{s, jj / n, c, c * cs, min(len, c * cs + cs), pos, len, n};
        }
      }
      return r;
    }
    unsigned first = 0;
#pragma unroll
    for (unsigned s = 0; s < REG_BATCH; ++s) {
      if (s >= B) break;
      const unsigned len = ok ? posv[s] + 1 : 0, n = chunks(len), cs = chunk_size(len), tb = m.kv_heads * n;
      if (j >= first && j - first < tb) {
        const unsigned jj = j - first, c = jj % n;
        r = Chunk{s, jj / n, c, c * cs, min(len, c * cs + cs), posv[s], len, n};
      }
      first += tb;
    }
    return r;
  };
  // a sequence's cache: [batch][layers][kv_heads][max_seq][head_dim] (dec_attn.h)
  const auto head_off = [&](unsigned sq, unsigned l, unsigned kvh) {
    return ((size_t)(sq * m.layers + l) * m.kv_heads + kvh) * p.max_seq * hd;
  };
  BlockRows rows;
  // thread 0: the block at position b of a task's chunk into L2 (nothing past the chunk)
  const bool kv_ahead = DEC_KV_AHEAD && B <= REG_BATCH;
  const auto prefetch_block = [&](size_t off, unsigned b, unsigned c1) {
    if (kv_ahead && t == 0 && b < c1) {
      const unsigned bytes = min(BLOCK, c1 - b) * hd * 2u;  // positions b .. of the head's keys and values
      dec::prefetch_l2(p.kcache + off + (size_t)b * hd, bytes);
      dec::prefetch_l2(p.vcache + off + (size_t)b * hd, bytes);
    }
  };
  const auto load_first_block = [&](unsigned l, const Chunk& ch) {
    const size_t off = head_off(ch.sq, l, ch.kvh);
    load_keys(rows, p.kcache + off, ch.c0, min(BLOCK, ch.c1 - ch.c0), hd, t);
    load_warp_values(rows, p.vcache + off, ch.c0, min(BLOCK, ch.c1 - ch.c0), hd, t);
#pragma unroll
    for (unsigned a = 1; a <= DEC_KV_AHEAD; ++a) prefetch_block(off, ch.c0 + a * BLOCK, ch.c1);
  };
  for (unsigned l = 0; l < m.layers; ++l) {
    const unsigned kq = 1 + 5 * l;
    if (!range.runs(kq + 1)) continue;
    if (DEC_TRACE) rec = dec::trace_record(p.state, B, (m.ops() + l) * G + cta);
    if (cta < tasks) {
      DEC_ATTN_STAMP(0, dec::now_ns());
      DEC_ATTN_STAMP(6, chunk(cta).nch);
      // The first block of this CTA's first task needs nothing of this step: its loads go out
      // before the wait, so they arrive while the QKV op finishes.
      load_first_block(l, chunk(cta));
    }
    if (cta < tasks && range.waits_for(kq)) {
      if (t == 0) dec::wait_at_least(sync + OPS + kq, dec::mat_op(m, dec::QKV, l).tiles);
      sync_role();
    }
    if (cta < tasks) DEC_ATTN_STAMP(1, dec::now_ns());
    for (unsigned j = cta; j < tasks; j += G) {
      const Chunk ch = chunk(j);
      const unsigned sq = ch.sq, kvh = ch.kvh, c = ch.c, c0 = ch.c0, c1 = ch.c1, pos = ch.pos, len = ch.len,
                     nch = ch.nch;
      uint16_t* kc = p.kcache + head_off(sq, l, kvh);
      uint16_t* vc = p.vcache + head_off(sq, l, kvh);
      uint16_t* aos = ao + (size_t)sq * m.q_dim();
      const unsigned hs = sq * m.kv_heads + kvh;  // the sequence's head: its partial slots and counter
      if (j != cta) load_first_block(l, ch);  // a later task of this CTA (only with more tasks than CTAs)
      load_heads(q, kn, vn, qkv + (size_t)sq * m.qkv_rows(), m, kvh, t, PL_FACT(qk_norm), sync_role,
                 [&](float* v, unsigned n, unsigned which) {
                   PL_CALL(headnorm, v, n, p.qk_norms + (size_t)(2 * l + which) * hd, p.eps);
                 },
                 [&](float* v, unsigned n) { PL_CALL(rope, v, n, pos, p.inv_freq); });
      if (c1 == len)  // this chunk holds pos: the new key and value into the cache
        for (unsigned i = t; i < hd; i += THREADS) kc[(size_t)pos * hd + i] = to_bf16(kn[i]), vc[(size_t)pos * hd + i] = to_bf16(vn[i]);
      DEC_ATTN_STAMP(2, dec::now_ns());  // (rope ends with a barrier: q and the new key are ready)
      // The queries as the mma's A words, once a task, in `o` (free until the blocks' sums):
      // word f = ks * 32 + lane holds {hi, hi, lo, lo} halves of the lane's row-gid dims
      // qd hd / 4 + 4 ks .. + 3 (32 hd bytes: o's size).
      uint4* qa = reinterpret_cast<uint4*>(o);
      for (unsigned f = t; f < hd / 16 * 32; f += THREADS) {
        const unsigned ks = f / 32, gq = f % 32 / 4, qq = f % 4;
        uint4 w = make_uint4(0u, 0u, 0u, 0u);
        if (gq < g) {
          const float* x = q + gq * hd + qq * (hd / 4) + 4 * ks;
          float rest[4];
#pragma unroll
          for (unsigned e = 0; e < 4; ++e) rest[e] = x[e] - __uint_as_float((unsigned)to_bf16(x[e]) << 16);
          w = make_uint4(pack_bf16(x[0], x[1]), pack_bf16(x[2], x[3]), pack_bf16(rest[0], rest[1]),
                         pack_bf16(rest[2], rest[3]));
        }
        qa[f] = w;
      }
      sync_role();
      const unsigned gid = lane / 4, qd = lane % 4;
      // this warp's running max and sum of head gid over its positions, and its P·V sums as the
      // mma's C tiles (n-tile t: dims hd / 8 (2 qd + j) + t, [j] the probabilities' bf16 high
      // halves' sums, [2 + j] their low halves', A's rows gid + 8)
      const unsigned DPL = hd / 8;
      float mw = -INFINITY, lw = 0.f, pacc[MAX_HD / 8][4];
#pragma unroll
      for (unsigned u = 0; u < MAX_HD / 8; ++u)
#pragma unroll
        for (unsigned e = 0; e < 4; ++e) pacc[u][e] = 0.f;
      // Block b's rows are in `rows` when it begins: the next block's keys are loaded once the
      // scores are taken, its values once the sums are, so each block's round trip overlaps the
      // one before it.
      for (unsigned b = c0; b < c1; b += BLOCK) {
        const unsigned n = min(BLOCK, c1 - b), nb = b + BLOCK, nn = nb < c1 ? min(BLOCK, c1 - nb) : 0;
        if (b != c0) {  // (the first block's went with its loads)
          const unsigned ahead = (b - c0) / BLOCK + DEC_KV_AHEAD, blocks = (c1 - c0 + BLOCK - 1) / BLOCK;
          if (ahead < blocks) prefetch_block(head_off(sq, l, kvh), c0 + ahead * BLOCK, c1);
        }
        // head gid's scores at positions 32 warp + 8 i + 2 qd + j (mma's C layout)
        float sc[TILES][2];
        {
          uint4 krest[TILES][MAX_CH - KPRE_CH];  // the rest of a longer row (head_dim 128), all at once
#pragma unroll
          for (unsigned i = 0; i < TILES; ++i) {
            const unsigned row = warp * 32 + 8 * i + gid;
#pragma unroll
            for (unsigned c = KPRE_CH; c < MAX_CH; ++c)
              if (c * 32 < hd)
                krest[i][c - KPRE_CH] =
                    row < n ? *reinterpret_cast<const uint4*>(kc + (size_t)(b + row) * hd + qd * (hd / 4) + 8 * c)
                            : make_uint4(0u, 0u, 0u, 0u);
            if (b == c0 && b + row == pos)  // the stale row at pos (the first block's loads went out before
                                            // the cache append; later ones come after it): the new key
#pragma unroll
              for (unsigned c = 0; c < MAX_CH; ++c) {
                if (c * 32 >= hd) break;
                const float* x = kn + qd * (hd / 4) + 8 * c;
                const uint4 w = make_uint4(pack_bf16(x[0], x[1]), pack_bf16(x[2], x[3]), pack_bf16(x[4], x[5]),
                                           pack_bf16(x[6], x[7]));
                if (c < KPRE_CH) rows.k[i][c] = w;
                else krest[i][c - KPRE_CH] = w;
              }
          }
          float cacc[TILES][4];
#pragma unroll
          for (unsigned i = 0; i < TILES; ++i)
#pragma unroll
            for (unsigned e = 0; e < 4; ++e) cacc[i][e] = 0.f;
#pragma unroll
          for (unsigned ks = 0; ks < MAX_HD / 16; ++ks) {
            if (ks * 16 >= hd) break;
            const uint4 a = qa[ks * 32 + lane];
#pragma unroll
            for (unsigned i = 0; i < TILES; ++i) {
              const unsigned c = ks / 2;
              const uint4& w = c < KPRE_CH ? rows.k[i][c] : krest[i][c - KPRE_CH];
              const unsigned b_lo = word_of(w, 2 * (ks % 2)), b_hi = word_of(w, 2 * (ks % 2) + 1);
              // the queries' high halves in A's row gid, their low halves in row gid + 8: one mma
              dec::mma_k16_rows16(cacc[i], a.x, a.z, a.y, a.w, b_lo, b_hi);
            }
          }
#pragma unroll
          for (unsigned i = 0; i < TILES; ++i)
#pragma unroll
            for (unsigned j = 0; j < 2; ++j) {
              const float dot = cacc[i][j] + cacc[i][2 + j];  // (rows gid and gid + 8: the two halves)
              sc[i][j] = gid < g && warp * 32 + 8 * i + 2 * qd + j < n ? dot * scale : -INFINITY;
            }
        }
        if (nn) load_keys(rows, kc, nb, nn, hd, t);
        {
          float mb = -INFINITY;  // head gid's max over the warp's 32 positions: the lane's eight, its quad's
#pragma unroll
          for (unsigned i = 0; i < TILES; ++i) mb = fmaxf(mb, fmaxf(sc[i][0], sc[i][1]));
          mb = fmaxf(mb, __shfl_xor_sync(0xffffffffu, mb, 1));
          mb = fmaxf(mb, __shfl_xor_sync(0xffffffffu, mb, 2));
          const float mnew = fmaxf(mw, mb);
          const float alpha = mnew == -INFINITY ? 1.f : exp2f(mw - mnew);  // (nothing scored yet: sums are 0)
          // P as the mma's A words: each probability the sum of two bf16 halves, the high ones in A's
          // row gid, the low ones in row gid + 8 (one mma for both), so the sums keep f32
          // probabilities' precision, as the scores keep the queries'
          unsigned pbig[TILES], psmall[TILES];
          float ls = 0.f;
#pragma unroll
          for (unsigned i = 0; i < TILES; ++i) {
            float ph[2];
#pragma unroll
            for (unsigned j = 0; j < 2; ++j) ph[j] = sc[i][j] == -INFINITY ? 0.f : exp2f(sc[i][j] - mnew), ls += ph[j];
            pbig[i] = pack_bf16(ph[0], ph[1]);
            psmall[i] = pack_bf16(ph[0] - bf16_lo(pbig[i]), ph[1] - bf16_hi(pbig[i]));
          }
          ls += __shfl_xor_sync(0xffffffffu, ls, 1);
          ls += __shfl_xor_sync(0xffffffffu, ls, 2);
          lw = lw * alpha + ls, mw = mnew;
#pragma unroll
          for (unsigned u = 0; u < MAX_HD / 8; ++u) {
            if (u >= DPL) break;
#pragma unroll
            for (unsigned e = 0; e < 4; ++e) pacc[u][e] *= alpha;
          }
          uint4 vrest[VPRE];  // the second 16 bytes of each row's dims (head_dim 128), loaded here
#pragma unroll
          for (unsigned r = 0; r < VPRE; ++r) {
            const unsigned i = warp_value_row(t, r);
            if (DPL > 8)
              vrest[r] = i < n ? *reinterpret_cast<const uint4*>(vc + (size_t)(b + i) * hd + DPL * gid + 8)
                               : make_uint4(0u, 0u, 0u, 0u);
            if (b == c0 && b + i == pos)  // the stale row at pos (the first block's): the new value
#pragma unroll
              for (unsigned c = 0; c < MAX_HD / 64; ++c) {
                if (8 * c >= DPL) break;
                const float* x = vn + DPL * gid + 8 * c;
                const uint4 w = make_uint4(pack_bf16(x[0], x[1]), pack_bf16(x[2], x[3]), pack_bf16(x[4], x[5]),
                                           pack_bf16(x[6], x[7]));
                if (c == 0) rows.v[r] = w;
                else vrest[r] = w;
              }
          }
#pragma unroll
          for (unsigned s = 0; s < 2; ++s)
#pragma unroll
            for (unsigned c = 0; c < MAX_HD / 64; ++c) {
              if (8 * c >= DPL) break;
              const uint4* w = c == 0 ? rows.v + 4 * s : vrest + 4 * s;  // k rows 2 qd, 2 qd + 1, 2 qd + 8, 2 qd + 9
#pragma unroll
              for (unsigned e = 0; e < 8; ++e) {
                const unsigned sel = e % 2 ? 0x7632u : 0x5410u;  // element e of both rows: their low or high halves
                const unsigned b0 = __byte_perm(word_of(w[0], e / 2), word_of(w[1], e / 2), sel);
                const unsigned b1 = __byte_perm(word_of(w[2], e / 2), word_of(w[3], e / 2), sel);
                dec::mma_k16_rows16(pacc[8 * c + e], pbig[2 * s], psmall[2 * s], pbig[2 * s + 1], psmall[2 * s + 1], b0, b1);
              }
            }
        }
        if (nn) load_warp_values(rows, vc, nb, nn, hd, t);
      }
      DEC_ATTN_STAMP(3, dec::now_ns());
      // the four warps' states: each warp's sums rescaled to the task's max, then added through o
      // and pr in two rounds (after the barrier below no warp reads the queries in o any more)
      if (qd == 0 && gid < g) red[gid * 4 + warp] = mw, red[4 * MAX_GROUP + gid * 4 + warp] = lw;
      sync_role();
      float mtask = -INFINITY, ltask = 0.f;  // head gid's (finite: a chunk scores at least one position)
      {
        const unsigned hh = min(gid, g - 1);
#pragma unroll
        for (unsigned w = 0; w < 4; ++w) mtask = fmaxf(mtask, red[hh * 4 + w]);
#pragma unroll
        for (unsigned w = 0; w < 4; ++w) {
          const float mv = red[hh * 4 + w];
          ltask += mv == -INFINITY ? 0.f : red[4 * MAX_GROUP + hh * 4 + w] * exp2f(mv - mtask);
        }
        const float f = mw == -INFINITY ? 0.f : exp2f(mw - mtask);
#pragma unroll
        for (unsigned u = 0; u < MAX_HD / 8; ++u) {
          if (u >= DPL) break;
          pacc[u][0] = (pacc[u][0] + pacc[u][2]) * f, pacc[u][1] = (pacc[u][1] + pacc[u][3]) * f;
        }
      }
      float* half = warp % 2 ? pr : o;  // warps 0, 2 into o; 1, 3 into pr
      for (unsigned round = 0; round < 2; ++round) {
        if (gid < g && warp / 2 == round)
#pragma unroll
          for (unsigned u = 0; u < MAX_HD / 8; ++u) {
            if (u >= DPL) break;
#pragma unroll
            for (unsigned j = 0; j < 2; ++j) {
              float* d = half + gid * hd + DPL * (2 * qd + j) + u;
              *d = round ? *d + pacc[u][j] : pacc[u][j];
            }
          }
        // every thread has read red's maxima and sums before the first round's barrier
        if (round == 1 && warp == 0 && qd == 0 && gid < g) red[gid] = ltask;
        sync_role();
      }
      for (unsigned i = t; i < g * hd; i += THREADS) o[i] += pr[i];
      sync_role();
      if (nch == 1) {
        for (unsigned i = t; i < g * hd; i += THREADS) aos[kvh * g * hd + i] = to_bf16(o[i] / red[i / hd]);
        DEC_ATTN_STAMP(4, dec::now_ns());
        DEC_ATTN_STAMP(7, 1);
        continue;  // (the next task writes o after its own barriers)
      }
      // a chunk's slot: o [g][hd], then (max, sum) per head
      const unsigned stride = g * (hd + 2);
      float* slot = part + (size_t)(hs * MAX_CHUNKS + c) * stride;
      for (unsigned i = t; i < g * hd; i += THREADS) slot[i] = o[i];
      if (warp == 0 && qd == 0 && gid < g) slot[g * hd + 2 * gid] = mtask, slot[g * hd + 2 * gid + 1] = ltask;
      sync_role();
      unsigned* last_flag = reinterpret_cast<unsigned*>(red + 8 * MAX_GROUP);
      if (t == 0)  // (the barrier, then a release: every thread's slot writes go before the count)
        *last_flag = pl::atom_acq_rel(arr + hs, 1) == nch - 1;
      sync_role();
      if (*last_flag) {  // the head's chunks, MERGE_BATCH at a time: their loads go out together
        const float* head_slots = part + (size_t)hs * MAX_CHUNKS * stride;
        for (unsigned i = t; i < g * hd; i += THREADS) {
          const float* stats = head_slots + g * hd + 2 * (i / hd);
          float M = -INFINITY, L = 0.f, O = 0.f;
          for (unsigned cb = 0; cb < nch; cb += MERGE_BATCH) {
            float mv[MERGE_BATCH], lv[MERGE_BATCH], ov[MERGE_BATCH];
#pragma unroll
            for (unsigned u = 0; u < MERGE_BATCH; ++u) {
              const bool in = cb + u < nch;
              mv[u] = in ? __ldcg(stats + (cb + u) * stride) : -INFINITY;
              lv[u] = in ? __ldcg(stats + (cb + u) * stride + 1) : 0.f;
              ov[u] = in ? __ldcg(head_slots + (cb + u) * stride + i) : 0.f;
            }
            float mb = M;  // finite: every chunk scores at least one position
#pragma unroll
            for (unsigned u = 0; u < MERGE_BATCH; ++u) mb = fmaxf(mb, mv[u]);
            const float a = exp2f(M - mb);
            L *= a, O *= a;
#pragma unroll
            for (unsigned u = 0; u < MERGE_BATCH; ++u) {
              const float e = exp2f(mv[u] - mb);
              L += lv[u] * e, O += ov[u] * e;
            }
            M = mb;
          }
          aos[kvh * g * hd + i] = to_bf16(O / L);
        }
        if (t == 0) arr[hs] = 0;
      }
      DEC_ATTN_STAMP(4, dec::now_ns());
      DEC_ATTN_STAMP(7, *last_flag);
      sync_role();
    }
    if (cta < tasks) sync_role();  // every thread's writes of this layer, then one release
    if (t == 0) pl::red_release(sync + OPS + kq + 1, 1);
    if (cta < tasks) DEC_ATTN_STAMP(5, dec::now_ns());
  }
}
