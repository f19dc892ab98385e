// attn_combine.cu — split-KV decode epilogue (contract: attn_combine.contract.toml).
// Each tile (split s of the `splits` of head bh, info[2] and info[3]: the variant's) writes its
// rows' normalised O and log2-sum-exp into slot bh * p.splits + s of workspace `partials`
// (param `splits`: the slot stride, at least every head's split count; the uniform variant's
// splits are all equal to it, stream-K's vary by head), then thread 0 counts on the head's
// counter (acq_rel). The CTA
// whose count completes the head merges every split's slot (weights exp2(lse_s - max)),
// writes bf16 O and resets the counter to zero for the next launch. No CTA waits for
// another, so any grid size is safe. With one split a head's O is this CTA's alone: it goes
// out as bf16 straight from the registers (decode B = 64, KV = 4K: 2.5% faster).
// Built twice: attn_combine (head_dim 64 or 128: one merged row a thread) and, with
// ATTN_COMBINE_TWO_ROWS, attn_combine_d256 (head_dim 256: two), so the d <= 128 build's code is
// the one measured before d = 256 existed.
#define PL_COMPONENT attn_combine
#include <pipelink.h>

#include <math.h>

#include "attn.h"

PL_DECLARE_FACT(block_q);
PL_DECLARE_FACT(head_dim);
PL_DECLARE_WORKSPACE(partials);
PL_DECLARE_WORKSPACE(counters);
PL_DECLARE_SMEM(last);
PL_DECLARE_BARRIER(sync);

namespace attn_combine {
struct Params {  // o = "ptr"; q_len, bh, splits = "u32"
  uint4* o;      // 8 bf16 per uint4
  uint32_t q_len, bh, splits;
};
constexpr unsigned ROWS = 16;  // decode rows (attention.py: q_len <= 16); this component's own
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ unsigned add_acq_rel(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
}  // namespace attn_combine

PL_IMPORT(out) {
  using namespace attn_combine;
  const Params& p = PL_PARAMS(Params);
  const attn::OutFrag& f = *static_cast<const attn::OutFrag*>(pl_frag);
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  const unsigned g = (t % 32) / 4, qd = t % 4;
  const unsigned bh = f.info[1], split = f.info[2], splits = f.info[3];  // splits <= p.splits
  const unsigned rows = min(p.q_len, ROWS);
  // The linked head_dim (the core's fact: 64, 128 or 256), never a compile-time copy of it. It folds
  // to an immediate at link time; the fragment's loops stay unrolled over 32 column tiles with a
  // guard, so f.o keeps constant indices (registers).
  const unsigned D = PL_FACT(head_dim), SLOT = ROWS * D + ROWS;  // floats per slot
  float* ws = static_cast<float*>(PL_WORKSPACE(partials));
  unsigned* counters = static_cast<unsigned*>(PL_WORKSPACE(counters));
  // Warp 0 holds the tile's rows 0..15 (attn_o(2)): `pair(r, c, x, y)` gets row r's normalised
  // O at columns c, c + 1, `row(r, j)` each row after its columns.
  const auto each_row = [&](auto&& pair, auto&& row) {
    if (t >= 32) return;
#pragma unroll
    for (unsigned j = 0; j < 2; ++j) {
      const unsigned r = g + 8 * j;
      if (r >= rows) continue;
      const float inv = f.l[j] > 0.f ? 1.f / f.l[j] : 0.f;
#pragma unroll
      for (unsigned nt = 0; nt < 32; ++nt)
        if (8 * nt < D) pair(r, 8 * nt + 2 * qd, f.o[nt * 4 + 2 * j] * inv, f.o[nt * 4 + 2 * j + 1] * inv);
      row(r, j);
    }
  };
  if (splits == 1) {  // this CTA's O is its head's: bf16 straight out, no slot, count or merge
    uint32_t* o = reinterpret_cast<uint32_t*>(p.o);
    each_row([&](unsigned r, unsigned c, float x, float y) {
               o[(((size_t)bh * p.q_len + r) * D + c) / 2] = pack_bf16(x, y);
             },
             [](unsigned, unsigned) {});
    return;
  }
  float* slot = ws + ((size_t)bh * p.splits + split) * SLOT;
  each_row([&](unsigned r, unsigned c, float x, float y) {
             __stcg(reinterpret_cast<float2*>(slot + r * D + c), make_float2(x, y));
           },
           [&](unsigned r, unsigned j) {
             if (qd == 0) __stcg(slot + ROWS * D + r, f.l[j] > 0.f ? f.m[j] + __log2f(f.l[j]) : -INFINITY);
           });
  // Publish: the barrier orders every thread's slot stores before thread 0's release (the
  // count's acq_rel is cumulative), and its acquire before the merging threads' loads (CUTLASS's
  // semaphore pattern). No per-thread fences: each was a wait on the critical path.
  const unsigned bar = PL_BARRIER(sync);
  unsigned* last = reinterpret_cast<unsigned*>(PL_SMEM_PTR(last));
  pl::named_barrier_sync(bar, 256);
  if (t == 0) {
    const bool is_last = add_acq_rel(counters + bh, 1) == splits - 1;
    if (is_last) counters[bh] = 0;  // every split has counted: ready for the next launch
    *last = is_last;
  }
  pl::named_barrier_sync(bar, 256);
  if (!*last) return;
  const unsigned G = D / 8, c0 = (t % G) * 8;  // 16 rows x D / 8 groups of 8 columns
#ifdef ATTN_COMBINE_TWO_ROWS
  // The d = 256 build (attn_combine_d256): 32 groups, so a thread merges rows r and r + 8.
  for (unsigned r = t / G; r < rows; r += 256 / G) {
#else
  const unsigned r = t / G;
  if (r >= rows) return;
#endif
  const float* head = ws + (size_t)bh * p.splits * SLOT;
  // One pass, online (running max), four splits' loads in flight at a time: one L2 round trip
  // per four splits, where a max pass and then a sum pass took two per split group.
  constexpr unsigned BATCH = 4;
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f}, sum = 0.f, mx = -INFINITY;
  for (unsigned s0 = 0; s0 < splits; s0 += BATCH) {
    float lse[BATCH];
    float4 a[BATCH], b[BATCH];
#pragma unroll
    for (unsigned i = 0; i < BATCH; ++i) {
      const float* sl = head + min(s0 + i, splits - 1) * SLOT;
      lse[i] = s0 + i < splits ? __ldcg(sl + ROWS * D + r) : -INFINITY;
      a[i] = __ldcg(reinterpret_cast<const float4*>(sl + r * D + c0));
      b[i] = __ldcg(reinterpret_cast<const float4*>(sl + r * D + c0 + 4));
    }
#pragma unroll
    for (unsigned i = 0; i < BATCH; ++i) {
      if (!(lse[i] > -INFINITY)) continue;  // an empty split (or past the last) adds nothing
      const float m = fmaxf(mx, lse[i]), keep = exp2f(mx - m), wgt = exp2f(lse[i] - m);
      mx = m;
      sum = sum * keep + wgt;
      const float x[8] = {a[i].x, a[i].y, a[i].z, a[i].w, b[i].x, b[i].y, b[i].z, b[i].w};
#pragma unroll
      for (unsigned c = 0; c < 8; ++c) acc[c] = acc[c] * keep + wgt * x[c];
    }
  }
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  p.o[((size_t)bh * p.q_len + r) * (D / 8) + c0 / 8] =
      make_uint4(pack_bf16(acc[0] * inv, acc[1] * inv), pack_bf16(acc[2] * inv, acc[3] * inv),
                 pack_bf16(acc[4] * inv, acc[5] * inv), pack_bf16(acc[6] * inv, acc[7] * inv));
#ifdef ATTN_COMBINE_TWO_ROWS
  }
#endif
  (void)PL_FACT(block_q);
}
