// dec_step.cu — the decode megakernel's step role (8 warps, dec.h): runs this CTA's share of
// every op of one decode step in schedule order. Each matvec op: wait for the previous op's
// counter, build the op's input vector in shared memory once (RMSNorm of the residual through
// dec_rmsnorm, or a copy of the attention output / SwiGLU activations), then for each of its
// tiles take the next stage of ring `w` (dec_stream loads it), multiply (dec_matvec), apply
// the op's epilogue and count the tile. ATTN ops belong to the attention role; this role only
// waits for them. The last CTA to finish publishes the argmax token, advances the position and
// zeroes the counters (dec.h).
#define PL_COMPONENT dec_step
#include <pipelink.h>

#include <cuda_bf16.h>

#include "dec.h"

// 1: each CTA releases an op's counter once, adding its tile count, after its last tile of the op
// (every reader waits for the whole count, so it sees the same thing); 0: one release per tile.
// The package //kernels/decode:dec_step_op_release is this source built with 1, timed beside the
// default as //kernels/decode:llama3_1b_op_release (benchmarks/llama_decode_bench.py bench).
#ifndef DEC_RELEASE_PER_OP
#define DEC_RELEASE_PER_OP 0
#endif

DEC_MODEL_FACTS();
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
PL_DECLARE_CALL(matvec, const void*, const void*, unsigned, unsigned, float*);
PL_DECLARE_CALL(swiglu, const float*, const float*, void*, unsigned);
PL_DECLARE_CALL(argmax, const float*, unsigned, unsigned, unsigned long long*);

namespace dec_step {
struct Params {  // [params]: norms, embed, logits, state = "ptr", eps = "f32", op_begin, op_end = "u32"
  const float* norms;
  const uint16_t* embed;
  float* logits;
  int* state;
  float eps;
  unsigned op_begin, op_end;
};
}  // namespace dec_step

PL_ENTRY(run) {
  using namespace dec_step;
  const Params& p = PL_PARAMS(Params);
  const unsigned t = threadIdx.x - 32u * PL_WARP_BEGIN();
  const dec::Model m{DEC_MODEL_FIELDS, PL_FACT(tile_elems)};
  if (m.hidden > m.tile_elems || m.inter > m.tile_elems || m.q_dim() > m.tile_elems) __trap();  // a row per tile at least (folds away)
  unsigned* sync = static_cast<unsigned*>(PL_WORKSPACE(sync));
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
  const unsigned token = __ldcg(reinterpret_cast<const unsigned*>(p.state) + dec::ST_TOKEN);
  const dec::OpRange range{PL_FACT(unfused), p.op_begin, p.op_end};

  // thread 0 waits until `word` reaches `need` (acquire), then the role goes on together
  const auto wait = [&](unsigned word, unsigned need) {
    if (t == 0) dec::wait_at_least(sync + word, need);
    pl::named_barrier_sync(bar, dec::THREADS);
  };
  // every thread's writes of this task are done (the barrier), then one release
  const auto signal = [&](unsigned word) {
    pl::named_barrier_sync(bar, dec::THREADS);
    if (t == 0) pl::red_release(sync + word, 1);
  };

  if (cta == 0 && range.runs(0)) {  // op 0: the embedding row of the token into the residual
    PL_CALL(embed, token, p.embed, x, m.hidden);
    signal(dec::OPS + 0);
  }
  unsigned k = 1, prev_need = 1, rot = 0, stage = 0, phase = 0;
  // One matvec op: `input` builds xin once (after the wait), `epilogue(i, y)` takes tile i's rows.
  const auto matvec_op = [&](unsigned kind, unsigned layer, auto input, auto epilogue) {
    const dec::MatOp op = dec::mat_op(m, kind, layer);
    const unsigned first = dec::first_tile(cta, rot, G);
    if (first < op.tiles && range.runs(k)) {
      if (range.waits_for(k - 1)) wait(dec::OPS + k - 1, prev_need);
      input();
      pl::named_barrier_sync(bar, dec::THREADS);
      unsigned tiles = 0;
      for (unsigned i = first; i < op.tiles; i += G) {
        pl::mbar_wait(full + stage, phase);
        PL_CALL(matvec, ring + (size_t)stage * m.stage_bytes(), xin, op.tile_rows, op.k, y);
        if (t == 0) pl::mbar_arrive(empty + stage);  // matvec's last barrier: every thread is done with the stage
        if (++stage == depth) stage = 0, phase ^= 1u;
        epilogue(i, op);
        if (DEC_RELEASE_PER_OP)  // the epilogue has read y before the next tile's matvec clears it
          pl::named_barrier_sync(bar, dec::THREADS), ++tiles;
        else
          signal(dec::OPS + k);
      }
      if (DEC_RELEASE_PER_OP && t == 0) pl::red_release(sync + dec::OPS + k, tiles);  // (the barrier above)
    }
    rot += op.tiles, prev_need = op.tiles, ++k;
  };
  const auto norm_input = [&](const float* w) {
    return [=]() { PL_CALL(rmsnorm, x, w, xin, m.hidden, p.eps); };
  };
  const auto copy_input = [&](const uint16_t* src, unsigned n) {  // bf16 written by other CTAs: through L2
    return [=]() {
      for (unsigned c = t; c < n / 8; c += dec::THREADS)
        reinterpret_cast<uint4*>(xin)[c] = __ldcg(reinterpret_cast<const uint4*>(src) + c);
    };
  };
  const auto add_residual = [&](unsigned i, const dec::MatOp& op) {
    if (t < op.r) x[i * op.r + t] = __ldcg(x + i * op.r + t) + y[t];
  };

  for (unsigned l = 0; l < m.layers; ++l) {
    matvec_op(dec::QKV, l, norm_input(p.norms + (size_t)(2 * l) * m.hidden), [&](unsigned i, const dec::MatOp& op) {
      if (t < op.r) qkv[i * op.r + t] = y[t];
    });
    // ATTN: the attention role's; every CTA's instance counts once
    prev_need = G, ++k;
    matvec_op(dec::O, l, copy_input(ao, m.q_dim()), add_residual);
    matvec_op(dec::GU, l, norm_input(p.norms + (size_t)(2 * l + 1) * m.hidden), [&](unsigned i, const dec::MatOp& op) {
      PL_CALL(swiglu, y, y + op.r, h + i * op.r, op.r);
    });
    matvec_op(dec::DOWN, l, copy_input(h, m.inter), add_residual);
  }
  unsigned long long* best = reinterpret_cast<unsigned long long*>(sync + dec::BEST);
  matvec_op(dec::HEAD, 0, norm_input(p.norms + (size_t)(2 * m.layers) * m.hidden), [&](unsigned i, const dec::MatOp& op) {
    if (t < op.r) p.logits[i * op.r + t] = y[t];
    PL_CALL(argmax, y, op.r, i * op.r, best);
  });

  // Unfused: a launch that runs an attention op but not the O op after it waits for the attention
  // roles here, so the counters the last CTA zeroes below are final (fused, every attention op is
  // waited for by its O op; this folds away).
  for (unsigned l = 0; l < m.layers; ++l) {
    const unsigned ka = 2 + 5 * l;
    if (range.runs(ka) && !range.runs(ka + 1)) wait(dec::OPS + ka, G);
  }
  // the step (or this launch's ops) is done here: the last CTA publishes it and leaves every counter zero
  pl::named_barrier_sync(bar, dec::THREADS);
  if (t == 0 && pl::atom_acq_rel(sync + dec::FINISH, 1) == G - 1) {
    // a full cache (the attention roles set the error flag; nothing was appended) publishes
    // nothing, so CUDA-graph replays stop at the capacity instead of running past it
    if (range.runs(m.ops() - 1) && __ldcg(p.state + dec::ST_ERROR) == 0) {
      const unsigned long long b = __ldcg(best);
      p.state[dec::ST_TOKEN] = (int)dec::argmax_index(b);
      p.state[dec::ST_POS] = __ldcg(p.state + dec::ST_POS) + 1;
    }
    for (unsigned wd = 0; wd < dec::sync_words(m.layers); ++wd) sync[wd] = 0;
    __threadfence();
  }
}
