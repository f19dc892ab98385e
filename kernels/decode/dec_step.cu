// dec_step.cu — the decode megakernel's step role (8 warps, dec.h): runs this CTA's share of
// every op of one decode step in schedule order. Each matvec op: wait for the previous op's
// counter, build the op's input vector in shared memory once (RMSNorm of the residual through
// dec_rmsnorm, or a copy of the attention output / SwiGLU activations; O and DOWN also load the
// residual rows their tiles will update), then for each of its tiles take the tile's stages of
// ring `w` (dec_stream loads them), multiply (dec_matvec) and apply the op's epilogue; after its
// last tile the CTA counts them all with one release. Tiles alternate between two y buffers, so
// an epilogue and the next tile's matvec need no barrier between them. ATTN ops belong to the
// attention role; this role only waits for them. The last CTA to finish publishes the argmax
// token, advances the position and zeroes the counters (dec.h). Batch B > 1 (fact `batch`): the
// same schedule over B rows of every activation, each tile multiplied by matvec_batch (dec.h);
// a k-split DOWN op (fact down_chunks) builds xin from its chunk of h and adds its partial sums.
#define PL_COMPONENT dec_step
#include <pipelink.h>

#include <cuda_bf16.h>

#include "dec.h"

// 1: the timeline build (//kernels/decode:dec_step_trace, linked as llama3_1b_trace): thread 0
// stamps each op (dec.h trace_record [k][cta]): the wait begins, the wait ends, the input is
// built, the last tile is done (ns, low 32 bits), the ns spent waiting for ring stages, the loads
// taken. benchmarks/llama_decode_timeline.py reads them; the default build has none of it.
#ifndef DEC_TRACE
#define DEC_TRACE 0
#endif

DEC_MODEL_FACTS();
PL_DECLARE_FACT(batch);
PL_DECLARE_RING(w);
PL_DECLARE_SMEM(xin);
PL_DECLARE_SMEM(y);
PL_DECLARE_BARRIER(step);
PL_DECLARE_WORKSPACE(sync);
PL_DECLARE_WORKSPACE(x);
PL_DECLARE_WORKSPACE(qkv);
PL_DECLARE_WORKSPACE(ao);
PL_DECLARE_WORKSPACE(h);
PL_DECLARE_CALL(embed, unsigned, const void*, float*, unsigned);
PL_DECLARE_CALL(rmsnorm, const float*, const float*, void*, unsigned, float);
PL_DECLARE_CALL(rmsnorm_rows, const float*, const float*, void*, unsigned, float, unsigned, unsigned);
PL_DECLARE_CALL(matvec, const void*, const void*, unsigned, unsigned, float*);
PL_DECLARE_CALL(matvec_batch, const void*, const void*, unsigned, unsigned, float*, unsigned, unsigned);
PL_DECLARE_CALL(swiglu, const float*, const float*, void*, unsigned);
PL_DECLARE_CALL(swiglu_rows, const float*, const float*, void*, unsigned, unsigned, unsigned, unsigned);
PL_DECLARE_CALL(argmax_reset, unsigned);
PL_DECLARE_CALL(argmax, const float*, unsigned, unsigned);
PL_DECLARE_CALL(argmax_rows, const float*, unsigned, unsigned, unsigned, unsigned);
PL_DECLARE_CALL(argmax_publish, unsigned long long*, unsigned);

namespace dec_step {
struct Params {  // [params]: norms, embed, logits, state = "ptr", eps = "f32", op_begin, op_end = "u32"
  const float* norms;
  const uint16_t* embed;
  float* logits;  // f32 [batch][vocab]
  int* state;
  float eps;
  unsigned op_begin, op_end;
};
}  // namespace dec_step

PL_ENTRY(run) {
  using namespace dec_step;
  const Params& p = PL_PARAMS(Params);
  const unsigned t = threadIdx.x - 32u * PL_WARP_BEGIN();
  const dec::Model m{DEC_MODEL_FIELDS, PL_FACT(tile_elems), PL_FACT(down_chunks)};
  const unsigned B = PL_FACT(batch), OPS = dec::ops_base(B);
  if (B > dec::MAX_BATCH) __trap();  // outside accept (folds away)
  if (m.hidden > m.tile_elems || m.inter > m.tile_elems || m.q_dim() > m.tile_elems) __trap();  // a row per tile at least (folds away)
  if (m.inter % (256 * m.down_chunks)) __trap();  // whole 256s a DOWN chunk (the kernel file's choice; folds away)
  unsigned* sync = static_cast<unsigned*>(PL_WORKSPACE(sync));
  unsigned long long* best = reinterpret_cast<unsigned long long*>(sync + dec::BEST);  // a key a sequence
  float* x = static_cast<float*>(PL_WORKSPACE(x));
  float* qkv = static_cast<float*>(PL_WORKSPACE(qkv));
  const uint16_t* ao = static_cast<const uint16_t*>(PL_WORKSPACE(ao));
  uint16_t* h = static_cast<uint16_t*>(PL_WORKSPACE(h));
  uint8_t* ring = pl::smem_base() + PL_RING_BUFFER(w);
  uint64_t* full = reinterpret_cast<uint64_t*>(pl::smem_base() + PL_RING_FULL(w));
  uint64_t* empty = reinterpret_cast<uint64_t*>(pl::smem_base() + PL_RING_EMPTY(w));
  const unsigned depth = PL_RING_DEPTH(w);
  uint16_t* xin = reinterpret_cast<uint16_t*>(PL_SMEM_PTR(xin));
  float* y = reinterpret_cast<float*>(PL_SMEM_PTR(y));
  const unsigned bar = PL_BARRIER(step);
  const unsigned G = gridDim.x, cta = blockIdx.x;
  const dec::OpRange range{PL_FACT(unfused), p.op_begin, p.op_end};

  // thread 0 waits until `word` reaches `need` (acquire), then the role goes on together
  const auto wait = [&](unsigned word, unsigned need) {
    if (t == 0) dec::wait_at_least(sync + word, need);
    pl::named_barrier_sync(bar, dec::THREADS);
  };
  // every thread's writes of this op are done (the barrier), then one release of its n tasks
  const auto signal = [&](unsigned word, unsigned n) {
    pl::named_barrier_sync(bar, dec::THREADS);
    if (t == 0) pl::red_release(sync + word, n);
  };

  PL_CALL(argmax_reset, B);  // this CTA's best of each sequence (shared memory: undefined at launch)
  if (cta == 0 && range.runs(0)) {  // op 0: the embedding rows of the tokens into the residual
    for (unsigned b = 0; b < B; ++b) {
      const unsigned token = __ldcg(reinterpret_cast<const unsigned*>(p.state) + dec::ST_WORDS * b + dec::ST_TOKEN);
      PL_CALL(embed, token, p.embed, x + (size_t)b * m.hidden, m.hidden);
    }
    signal(OPS + 0, 1);
  }
  unsigned k = 1, prev_need = 1, rot = 0, stage = 0, phase = 0, ny = 0;
  // (with DEC_TRACE 0 the timer reads passed in are dead: the default cubin has none)
  const auto stamp = [&](unsigned field, unsigned v) {
    if (DEC_TRACE && t == 0) dec::trace_record(p.state, B, k * G + cta)[field] = v;
  };
  // xin = B rows of src (rows of n elements), or with `chunks` > 1 of their k-chunk `chunk`
  // (n / chunks elements): every 16-byte copy in flight at once (cp.async through L2: other CTAs
  // wrote src; no registers held)
  const auto copy_rows = [&](const uint16_t* src, unsigned n, unsigned chunks, unsigned chunk) {
    const unsigned kc = n / chunks, row = kc / 8, stride = B == 1 ? row : (kc + dec::XIN_PAD) / 8;  // in 16-byte chunks
    const uint4* from = reinterpret_cast<const uint4*>(src + (size_t)chunk * kc);
    for (unsigned c = t; c < B * row; c += dec::THREADS)
      dec::copy16_async(reinterpret_cast<uint4*>(xin) + c / row * stride + c % row, from + (size_t)(c / row) * (n / 8) + c % row);
    dec::copy_async_wait_all();
  };
  // One matvec op: `input(chunk)` builds xin once (after the wait), `epilogue(i, op, y)` takes the
  // rows of tile i (sequence b's at y + b ys). O and DOWN add their rows to the residual: right
  // after the wait, thread (b mine + j) r + row loads row `row` of this CTA's j-th tile of
  // sequence b (when they all fit), so the add at the end of each tile waits on no load.
  const unsigned ys = B > dec::NARROW_BATCH ? m.wide_y_floats() : m.y_floats();  // a sequence's rows in a y buffer
  const auto matvec_op = [&](unsigned kind, unsigned layer, auto input, auto epilogue) {
    const dec::MatOp op = dec::mat_op(m, kind, layer);
    const unsigned first = dec::first_tile(cta, rot, G);
    if (first < op.tiles && range.runs(k)) {
      stamp(0, dec::now_ns());
      if (range.waits_for(k - 1)) wait(OPS + k - 1, prev_need);
      stamp(1, dec::now_ns());
      const bool residual = kind == dec::O || kind == dec::DOWN;
      const bool partial = op.chunks > 1;  // a k-split op: its tiles' sums are added into x (red.add)
      const unsigned mine = (op.tiles - first + G - 1) / G;
      const unsigned per_seq = mine * op.r, hb = t / per_seq, ht = t % per_seq;  // (held rows)
      const bool held = residual && !partial && per_seq * B <= dec::THREADS;
      float held_x = 0.f;
      if (held && t < per_seq * B) held_x = __ldcg(x + (size_t)hb * m.hidden + (first + ht / op.r * G) * op.r + ht % op.r);
      unsigned chunk = dec::tile_chunk(op, first);
      input(chunk);
      pl::named_barrier_sync(bar, dec::THREADS);
      stamp(2, dec::now_ns());
      unsigned j = 0, loads = 0, data_wait = 0;
      for (unsigned i = first; i < op.tiles; i += G, ++j) {
        if (partial && dec::tile_chunk(op, i) != chunk) {  // DOWN's next chunk (never when chunks divides the grid)
          chunk = dec::tile_chunk(op, i);
          copy_rows(h, m.inter, op.chunks, chunk);  // xin is free: the last tile's matvec ended with a barrier
          pl::named_barrier_sync(bar, dec::THREADS);
        }
        float* yb = y + (ny++ & 1u) * B * ys;
        for (unsigned hl = 0; hl < dec::loads_per_tile(op); ++hl) {  // GU: gate rows, then up rows
          const unsigned t0 = DEC_TRACE ? dec::now_ns() : 0u;
          pl::mbar_wait(full + stage, phase);
          if (DEC_TRACE) data_wait += dec::now_ns() - t0, ++loads;
          if (B == 1)
            PL_CALL(matvec, ring + (size_t)stage * m.stage_bytes(), xin, op.r, op.k, yb + hl * op.r);
          else
            PL_CALL(matvec_batch, ring + (size_t)stage * m.stage_bytes(), xin, op.r, op.k, yb + hl * op.r, ys,
                    residual ? 0u : 1u);  // QKV, GU, HEAD: xin = bf16(x w), the rows' RMSNorm factors in their pads
          if (t == 0) pl::mbar_arrive(empty + stage);  // matvec's last barrier: every thread is done with the stage
          if (++stage == depth) stage = 0, phase ^= 1u;
        }
        if (held) {
          if (t < per_seq * B && ht / op.r == j)
            x[(size_t)hb * m.hidden + i * op.r + ht % op.r] = held_x + yb[hb * ys + ht % op.r];
        } else if (partial) {  // chunks of other CTAs add to the same rows
          for (unsigned e = t; e < op.r * B; e += dec::THREADS)
            atomicAdd(x + (size_t)(e / op.r) * m.hidden + dec::tile_row0(op, i) + e % op.r, yb[e / op.r * ys + e % op.r]);
        } else if (residual) {
          for (unsigned e = t; e < op.r * B; e += dec::THREADS) {
            float* xe = x + (size_t)(e / op.r) * m.hidden + i * op.r + e % op.r;
            *xe = __ldcg(xe) + yb[e / op.r * ys + e % op.r];
          }
        } else {
          epilogue(i, op, yb);
        }
      }
      if (kind == dec::HEAD) {  // this CTA's best of each sequence joins the step's, once
        pl::named_barrier_sync(bar, dec::THREADS);
        PL_CALL(argmax_publish, best, B);
      }
      stamp(3, dec::now_ns()), stamp(4, data_wait), stamp(5, loads);
      signal(OPS + k, j);
    }
    rot += op.tiles, prev_need = op.tiles, ++k;
  };
  // xin: batch 1 one vector; batch B rows of k + XIN_PAD elements (dec.h)
  const auto norm_input = [&](const float* w) {
    return [=](unsigned) {
      if (B == 1) PL_CALL(rmsnorm, x, w, xin, m.hidden, p.eps);
      else PL_CALL(rmsnorm_rows, x, w, xin, m.hidden, p.eps, B, m.hidden + dec::XIN_PAD);
    };
  };
  const auto copy_input = [&](const uint16_t* src, unsigned n, unsigned chunks) {  // bf16 written by other CTAs: through L2
    return [=](unsigned chunk) {
      if (B == 1 && chunks == 1) {  // (the timed batch-1 path as it was measured; cp.async there is untried)
        for (unsigned c = t; c < n / 8; c += dec::THREADS)
          reinterpret_cast<uint4*>(xin)[c] = __ldcg(reinterpret_cast<const uint4*>(src) + c);
        return;
      }
      copy_rows(src, n, chunks, chunk);
    };
  };
  const auto residual = [](unsigned, const dec::MatOp&, const float*) {};  // (matvec_op adds it)

  for (unsigned l = 0; l < m.layers; ++l) {
    matvec_op(dec::QKV, l, norm_input(p.norms + (size_t)(2 * l) * m.hidden),
              [&](unsigned i, const dec::MatOp& op, const float* yb) {
                for (unsigned e = t; e < op.r * B; e += dec::THREADS)
                  qkv[(size_t)(e / op.r) * m.qkv_rows() + i * op.r + e % op.r] = yb[e / op.r * ys + e % op.r];
              });
    // ATTN: the attention role's; every CTA's instance counts once
    prev_need = G, ++k;
    matvec_op(dec::O, l, copy_input(ao, m.q_dim(), 1), residual);
    matvec_op(dec::GU, l, norm_input(p.norms + (size_t)(2 * l + 1) * m.hidden),
              [&](unsigned i, const dec::MatOp& op, const float* yb) {
                if (B == 1) PL_CALL(swiglu, yb, yb + op.r, h + i * op.r, op.r);
                else PL_CALL(swiglu_rows, yb, yb + op.r, h + i * op.r, op.r, B, ys, m.inter);
              });
    matvec_op(dec::DOWN, l, copy_input(h, m.inter, m.down_chunks), residual);
  }
  matvec_op(dec::HEAD, 0, norm_input(p.norms + (size_t)(2 * m.layers) * m.hidden),
            [&](unsigned i, const dec::MatOp& op, const float* yb) {
              for (unsigned e = t; e < op.r * B; e += dec::THREADS)
                p.logits[(size_t)(e / op.r) * m.vocab + i * op.r + e % op.r] = yb[e / op.r * ys + e % op.r];
              if (B == 1) PL_CALL(argmax, yb, op.r, i * op.r);
              else PL_CALL(argmax_rows, yb, op.r, i * op.r, B, ys);
            });

  // Unfused: a launch that runs an attention op but not the O op after it waits for the attention
  // roles here, so the counters the last CTA zeroes below are final (fused, every attention op is
  // waited for by its O op; this folds away).
  for (unsigned l = 0; l < m.layers; ++l) {
    const unsigned ka = 2 + 5 * l;
    if (range.runs(ka) && !range.runs(ka + 1)) wait(OPS + ka, G);
  }
  // the step (or this launch's ops) is done here: the last CTA publishes it and leaves every counter zero
  pl::named_barrier_sync(bar, dec::THREADS);
  if (t == 0 && pl::atom_acq_rel(sync + dec::FINISH, 1) == G - 1) {
    // a full cache (the attention roles set the error flag; nothing was appended) publishes
    // nothing, so CUDA-graph replays stop at the capacity instead of running past it
    if (range.runs(m.ops() - 1) && __ldcg(p.state + dec::ST_ERROR) == 0)
      for (unsigned b = 0; b < B; ++b) {
        int* st = p.state + dec::ST_WORDS * b;
        st[dec::ST_TOKEN] = (int)dec::argmax_index(__ldcg(best + b));
        st[dec::ST_POS] = __ldcg(st + dec::ST_POS) + 1;
      }
    for (unsigned wd = 0; wd < dec::sync_words(m.layers, B); ++wd) sync[wd] = 0;
    __threadfence();
  }
}
