// dec_attn_simple.cu — the simple GQA decode attention of the decode megakernel (package
// dec_attn, the same contract and interface as dec_attn_split.cu): one task a KV head, on CTA
// kv_head mod grid, over all positions 0 .. pos. Each warp takes every 4th position: its lanes
// hold head_dim / 32 elements of each of the group's queries, a key's dot products reduce across
// the warp, and the warp keeps its own online softmax; the 4 warps merge at the end. Queries
// and the new key get RoPE (dec_rope); the new key and value go to the cache and are used from
// shared memory.
#define PL_COMPONENT dec_attn
#include <pipelink.h>

#include "dec.h"
#include "dec_attn.h"

DEC_ATTN_DECLARATIONS();
PL_DECLARE_FACT(batch);  // accept [1]: this package serves one sequence
PL_OWN_FACT(max_group, dec_attn::MAX_GROUP);  // sizes the group's shared-memory claims
PL_DECLARE_SMEM(ml);

namespace dec_attn {
constexpr unsigned WARPS = THREADS / 32, MAX_E = 4;  // elements of a head a lane holds: head_dim / 32
}

PL_ENTRY(run) {
  using namespace dec_attn;
  const Params& p = PL_PARAMS(Params);
  const unsigned t = threadIdx.x - 32u * PL_WARP_BEGIN(), lane = t % 32, warp = t / 32;
  const dec::Model m{PL_FACT(hidden), PL_FACT(layers), PL_FACT(heads), PL_FACT(kv_heads), PL_FACT(head_dim), 0, 0,
                     PL_FACT(tile_elems)};  // (inter and vocab: no attention code reads them)
  const unsigned hd = m.head_dim, g = m.heads / m.kv_heads, E = hd / 32, cta = blockIdx.x;
  if (g > MAX_GROUP || m.heads % m.kv_heads || hd % 64 || hd > 128) __trap();  // outside accept (folds away)
  unsigned* sync = static_cast<unsigned*>(PL_WORKSPACE(sync));
  const float* qkv = static_cast<const float*>(PL_WORKSPACE(qkv));
  uint16_t* ao = static_cast<uint16_t*>(PL_WORKSPACE(ao));
  float* q = reinterpret_cast<float*>(PL_SMEM_PTR(q));    // [g][hd]
  float* kn = reinterpret_cast<float*>(PL_SMEM_PTR(kv));  // [hd] new key, [hd] new value
  float* vn = kn + hd;
  float* ml = reinterpret_cast<float*>(PL_SMEM_PTR(ml));  // [WARPS][g][2]: each warp's max and sum
  float* o = reinterpret_cast<float*>(PL_SMEM_PTR(o));    // [g][hd]: the warps' rescaled sums
  const unsigned bar = PL_BARRIER(attn);
  const auto sync_role = [&]() { pl::named_barrier_sync(bar, THREADS); };

  const unsigned pos = (unsigned)__ldcg(p.state + dec::ST_POS);
  const bool ok = pos < p.max_seq;
  const dec::OpRange range{PL_FACT(unfused), p.op_begin, p.op_end};
  // only a launch that runs an attention op flags a full cache (unfused, the HEAD launch's last
  // CTA advances the position while this role may still be reading it; fused, this folds away)
  if (!ok && range.runs_attention(m.layers) && cta == 0 && t == 0) p.state[dec::ST_ERROR] = 1;
  const float scale = rsqrtf((float)hd) * 1.4426950408889634f;

  for (unsigned l = 0; l < m.layers; ++l) {
    const unsigned kq = 1 + 5 * l;
    if (!range.runs(kq + 1)) continue;
    for (unsigned kvh = cta; ok && kvh < m.kv_heads; kvh += gridDim.x) {  // a grid smaller than kv_heads loops
      if (range.waits_for(kq)) {
        if (t == 0) dec::wait_at_least(sync + dec::ops_base(PL_FACT(batch)) + kq, dec::mat_op(m, dec::QKV, l).tiles);
        sync_role();
      }
      load_heads(q, kn, vn, qkv, m, kvh, t, PL_FACT(qk_norm), sync_role,
                 [&](float* v, unsigned n, unsigned which) {
                   PL_CALL(headnorm, v, n, p.qk_norms + (size_t)(2 * l + which) * hd, p.eps);
                 },
                 [&](float* v, unsigned n) { PL_CALL(rope, v, n, pos, p.inv_freq); });
      const size_t head_off = (size_t)(l * m.kv_heads + kvh) * p.max_seq * hd;
      const uint16_t* kc = p.kcache + head_off;
      const uint16_t* vc = p.vcache + head_off;
      for (unsigned i = t; i < hd; i += THREADS)
        p.kcache[head_off + (size_t)pos * hd + i] = to_bf16(kn[i]), p.vcache[head_off + (size_t)pos * hd + i] = to_bf16(vn[i]);
      // lane's elements lane E .. lane E + E - 1 of each query, scaled for base-2 softmax
      float qr[MAX_GROUP][MAX_E], acc[MAX_GROUP][MAX_E], mw[MAX_GROUP], lw[MAX_GROUP];
#pragma unroll
      for (unsigned hh = 0; hh < MAX_GROUP; ++hh) {
        mw[hh] = -INFINITY, lw[hh] = 0.f;
#pragma unroll
        for (unsigned e = 0; e < MAX_E; ++e) {
          qr[hh][e] = hh < g && e < E ? q[hh * hd + lane * E + e] * scale : 0.f;
          acc[hh][e] = 0.f;
        }
      }
      for (unsigned pp = warp; pp <= pos; pp += WARPS) {
        float kf[MAX_E], vf[MAX_E];
#pragma unroll
        for (unsigned e = 0; e < MAX_E; ++e) {
          if (e >= E) break;
          const unsigned d = lane * E + e;
          if (pp == pos) {
            kf[e] = kn[d], vf[e] = vn[d];
          } else {
            kf[e] = __uint_as_float((unsigned)kc[(size_t)pp * hd + d] << 16);
            vf[e] = __uint_as_float((unsigned)vc[(size_t)pp * hd + d] << 16);
          }
        }
#pragma unroll
        for (unsigned hh = 0; hh < MAX_GROUP; ++hh) {
          if (hh >= g) break;
          float s = 0.f;
#pragma unroll
          for (unsigned e = 0; e < MAX_E; ++e)
            if (e < E) s += qr[hh][e] * kf[e];
          for (unsigned off = 16; off; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
          const float mnew = fmaxf(mw[hh], s), alpha = exp2f(mw[hh] - mnew), pv = exp2f(s - mnew);
          lw[hh] = lw[hh] * alpha + pv;
#pragma unroll
          for (unsigned e = 0; e < MAX_E; ++e)
            if (e < E) acc[hh][e] = acc[hh][e] * alpha + pv * vf[e];
          mw[hh] = mnew;
        }
      }
      // merge the warps: each rescales its sums to the common max
      if (lane == 0)
#pragma unroll
        for (unsigned hh = 0; hh < MAX_GROUP; ++hh)
          if (hh < g) ml[(warp * g + hh) * 2] = mw[hh], ml[(warp * g + hh) * 2 + 1] = lw[hh];
      for (unsigned i = t; i < g * hd; i += THREADS) o[i] = 0.f;
      sync_role();
#pragma unroll
      for (unsigned hh = 0; hh < MAX_GROUP; ++hh) {
        if (hh >= g) break;
        float M = -INFINITY;
        for (unsigned w = 0; w < WARPS; ++w) M = fmaxf(M, ml[(w * g + hh) * 2]);
        const float f = mw[hh] == -INFINITY ? 0.f : exp2f(mw[hh] - M);  // a warp with no position adds nothing
#pragma unroll
        for (unsigned e = 0; e < MAX_E; ++e)
          if (e < E) atomicAdd(o + hh * hd + lane * E + e, acc[hh][e] * f);
      }
      sync_role();
      for (unsigned i = t; i < g * hd; i += THREADS) {
        const unsigned hh = i / hd;
        float M = -INFINITY, L = 0.f;
        for (unsigned w = 0; w < WARPS; ++w) M = fmaxf(M, ml[(w * g + hh) * 2]);
        for (unsigned w = 0; w < WARPS; ++w) {
          const float mwv = ml[(w * g + hh) * 2];
          if (mwv != -INFINITY) L += ml[(w * g + hh) * 2 + 1] * exp2f(mwv - M);
        }
        ao[kvh * g * hd + i] = to_bf16(o[i] / L);
      }
      sync_role();  // every thread's writes of this layer, then one release
    }
    if (t == 0) pl::red_release(sync + dec::ops_base(PL_FACT(batch)) + kq + 1, 1);
  }
}
