// dec_attn_split.cu — split-KV GQA decode attention, the decode megakernel's attention role
// (4 warps; package dec_attn, the same interface as dec_attn_simple.cu). Per layer, once the
// QKV op's counter is complete: each task takes one KV head and one chunk of the positions
// 0 .. pos, for the head's `heads / kv_heads` query heads at once (each K/V row is read once per
// group). Queries and the new key get RoPE (dec_rope); the chunk holding `pos` writes the new
// key and value to the cache and uses them from shared memory. A chunk's partial (max, sum,
// unnormalised output) goes to workspace `part`; the last chunk of a head to finish (counter
// `arr`, acquire-release) merges them into `ao` and zeroes its counter. Every CTA's role counts
// once on the ATTN op's counter per layer, with or without tasks.
#define PL_COMPONENT dec_attn
#include <pipelink.h>

#include "dec.h"
#include "dec_attn.h"

DEC_ATTN_DECLARATIONS();
PL_OWN_FACT(max_group, dec_attn::MAX_GROUP);  // sizes the group's shared-memory claims
PL_DECLARE_SMEM(pr);
PL_DECLARE_SMEM(red);
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
// 1: a task first asks L2 to prefetch its chunk's keys and values (cp.async.bulk.prefetch), so a
// chunk of several blocks reads them from L2 block after block instead of waiting on HBM each
// time (the package dec_attn_split_kvpf, linked as llama3_1b_kvpf; not measured yet).
#ifndef DEC_ATTN_KV_PREFETCH
#define DEC_ATTN_KV_PREFETCH 0
#endif

namespace dec_attn {
constexpr unsigned MAX_CHUNKS = 32;  // chunks per KV head: `part` holds this many slots a head
constexpr unsigned BLOCK = THREADS;  // positions scored at once: one a thread
constexpr unsigned PREFETCH_PIECE = 16384;  // bytes a bulk L2 prefetch asks for at once
__device__ __forceinline__ void prefetch_l2(const void* src, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}
// Each thread's first VPRE value chunks of a block (all of them at head_dim 64) are loaded with
// its key row, before the scores, so a block costs one round trip to memory, not two.
constexpr unsigned VPRE = 8;
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
  float* pr = reinterpret_cast<float*>(PL_SMEM_PTR(pr));   // [g][BLOCK]
  float* red = reinterpret_cast<float*>(PL_SMEM_PTR(red)); // [2][g][4] + the merge flag
  float* o = reinterpret_cast<float*>(PL_SMEM_PTR(o));     // [g][hd]
  const unsigned bar = PL_BARRIER(attn);
  const auto sync_role = [&]() { pl::named_barrier_sync(bar, THREADS); };

  const unsigned pos = (unsigned)__ldcg(p.state + dec::ST_POS);
  const bool ok = pos < p.max_seq;
  const dec::OpRange range{PL_FACT(unfused), p.op_begin, p.op_end};
  // only a launch that runs an attention op flags a full cache (unfused, the HEAD launch's last
  // CTA advances the position while this role may still be reading it; fused, this folds away)
  if (!ok && range.runs_attention(m.layers) && cta == 0 && t == 0) p.state[dec::ST_ERROR] = 1;
  const unsigned len = ok ? pos + 1 : 0;
  // chunks a head: enough to give every CTA a task, positions in whole 64s
  const unsigned per_head = min(MAX_CHUNKS, max(1u, G / m.kv_heads));
  const unsigned cs = ((len + per_head - 1) / per_head + 63) / 64 * 64;
  const unsigned nch = len ? (len + cs - 1) / cs : 0, tasks = m.kv_heads * nch;
  const float scale = rsqrtf((float)hd) * 1.4426950408889634f;  // softmax in base 2
  const unsigned DCH = hd / 8, NSETS = THREADS / DCH, dch = t % DCH, pset = t / DCH;

  unsigned* rec = nullptr;
  // (a macro: with DEC_TRACE 0 its value is not even evaluated, so the default build's code is
  // the same as without the stamps)
#define DEC_ATTN_STAMP(field, v)          \
  do {                                    \
    if (DEC_TRACE && t == 0) rec[field] = (v); \
  } while (0)
  for (unsigned l = 0; l < m.layers; ++l) {
    const unsigned kq = 1 + 5 * l;
    if (!range.runs(kq + 1)) continue;
    if (DEC_TRACE) rec = dec::trace_record(p.state, (m.ops() + l) * G + cta);
    if (cta < tasks) {
      DEC_ATTN_STAMP(0, dec::now_ns());
      DEC_ATTN_STAMP(6, nch);
    }
    if (cta < tasks && range.waits_for(kq)) {
      if (t == 0) dec::wait_at_least(sync + dec::OPS + kq, dec::mat_op(m, dec::QKV, l).tiles);
      sync_role();
    }
    if (cta < tasks) DEC_ATTN_STAMP(1, dec::now_ns());
    for (unsigned j = cta; j < tasks; j += G) {
      const unsigned kvh = j / nch, c = j % nch, c0 = c * cs, c1 = min(len, c0 + cs);
      if (DEC_ATTN_KV_PREFETCH && t == 0) {  // (positions c0 .. c1: whole 64s from c0, 16-byte aligned)
        const size_t first = ((size_t)(l * m.kv_heads + kvh) * p.max_seq + c0) * hd;
        const unsigned bytes = (c1 - c0) * hd * 2;
        for (unsigned off = 0; off < bytes; off += PREFETCH_PIECE) {
          const unsigned n = min(PREFETCH_PIECE, bytes - off);
          prefetch_l2(reinterpret_cast<const uint8_t*>(p.kcache + first) + off, n);
          prefetch_l2(reinterpret_cast<const uint8_t*>(p.vcache + first) + off, n);
        }
      }
      load_heads(q, kn, vn, qkv, m, kvh, t, PL_FACT(qk_norm), sync_role,
                 [&](float* v, unsigned n, unsigned which) {
                   PL_CALL(headnorm, v, n, p.qk_norms + (size_t)(2 * l + which) * hd, p.eps);
                 },
                 [&](float* v, unsigned n) { PL_CALL(rope, v, n, pos, p.inv_freq); });
      const size_t head_off = (size_t)(l * m.kv_heads + kvh) * p.max_seq * hd;
      uint16_t* kc = p.kcache + head_off;
      uint16_t* vc = p.vcache + head_off;
      if (c1 == len)  // this chunk holds pos: the new key and value into the cache
        for (unsigned i = t; i < hd; i += THREADS) kc[(size_t)pos * hd + i] = to_bf16(kn[i]), vc[(size_t)pos * hd + i] = to_bf16(vn[i]);
      for (unsigned i = t; i < g * hd; i += THREADS) q[i] *= scale;
      sync_role();
      DEC_ATTN_STAMP(2, dec::now_ns());

      float mrun[MAX_GROUP], lrun[MAX_GROUP], acc[MAX_GROUP][8];
#pragma unroll
      for (unsigned hh = 0; hh < MAX_GROUP; ++hh) {
        mrun[hh] = -INFINITY, lrun[hh] = 0.f;
#pragma unroll
        for (unsigned e = 0; e < 8; ++e) acc[hh][e] = 0.f;
      }
      for (unsigned b = c0; b < c1; b += BLOCK) {
        const unsigned n = min(BLOCK, c1 - b), pp = b + t;
        uint4 vpre[VPRE];
#pragma unroll
        for (unsigned u = 0; u < VPRE; ++u) {
          const unsigned i = pset + u * NSETS;
          vpre[u] = i < n && b + i != pos ? *reinterpret_cast<const uint4*>(vc + (size_t)(b + i) * hd + dch * 8)
                                          : make_uint4(0, 0, 0, 0);
        }
        float s[MAX_GROUP];
#pragma unroll
        for (unsigned hh = 0; hh < MAX_GROUP; ++hh) s[hh] = t < n ? 0.f : -INFINITY;
        if (t < n) {
          for (unsigned d = 0; d < hd; d += 8) {
            float kf[8];
            if (pp == pos) {
#pragma unroll
              for (unsigned e = 0; e < 8; ++e) kf[e] = kn[d + e];
            } else {
              const uint4 w = *reinterpret_cast<const uint4*>(kc + (size_t)pp * hd + d);
              const unsigned ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
              for (unsigned e = 0; e < 4; ++e) kf[2 * e] = bf16_lo(ws[e]), kf[2 * e + 1] = bf16_hi(ws[e]);
            }
#pragma unroll
            for (unsigned hh = 0; hh < MAX_GROUP; ++hh)
              if (hh < g)
#pragma unroll
                for (unsigned e = 0; e < 8; ++e) s[hh] += q[hh * hd + d + e] * kf[e];
          }
        }
        // the block's max per head, then the probabilities and their sum
#pragma unroll
        for (unsigned hh = 0; hh < MAX_GROUP; ++hh) {
          if (hh >= g) break;
          float v = s[hh];
          for (unsigned off = 16; off; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
          if (lane == 0) red[hh * 4 + warp] = v;
        }
        sync_role();
        float alpha[MAX_GROUP];
#pragma unroll
        for (unsigned hh = 0; hh < MAX_GROUP; ++hh) {
          if (hh >= g) break;
          const float mb = fmaxf(fmaxf(red[hh * 4], red[hh * 4 + 1]), fmaxf(red[hh * 4 + 2], red[hh * 4 + 3]));
          const float mnew = fmaxf(mrun[hh], mb);
          alpha[hh] = exp2f(mrun[hh] - mnew);
          const float ph = t < n ? exp2f(s[hh] - mnew) : 0.f;
          pr[hh * BLOCK + t] = ph;
          float v = ph;
          for (unsigned off = 16; off; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
          if (lane == 0) red[4 * MAX_GROUP + hh * 4 + warp] = v;
          mrun[hh] = mnew;
        }
        sync_role();
#pragma unroll
        for (unsigned hh = 0; hh < MAX_GROUP; ++hh) {
          if (hh >= g) break;
          const float* r2 = red + 4 * MAX_GROUP + hh * 4;
          lrun[hh] = lrun[hh] * alpha[hh] + (r2[0] + r2[1] + r2[2] + r2[3]);
#pragma unroll
          for (unsigned e = 0; e < 8; ++e) acc[hh][e] *= alpha[hh];
        }
        for (unsigned i = pset, u = 0; i < n; i += NSETS, ++u) {
          const unsigned vp = b + i;
          float vf[8];
          if (vp == pos) {
#pragma unroll
            for (unsigned e = 0; e < 8; ++e) vf[e] = vn[dch * 8 + e];
          } else {
            uint4 w;
            if (u < VPRE) {
#pragma unroll
              for (unsigned v = 0; v < VPRE; ++v)  // (a register, not a local array indexed at run time)
                if (v == u) w = vpre[v];
            } else {
              w = *reinterpret_cast<const uint4*>(vc + (size_t)vp * hd + dch * 8);
            }
            const unsigned ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (unsigned e = 0; e < 4; ++e) vf[2 * e] = bf16_lo(ws[e]), vf[2 * e + 1] = bf16_hi(ws[e]);
          }
#pragma unroll
          for (unsigned hh = 0; hh < MAX_GROUP; ++hh) {
            if (hh >= g) break;
            const float pv = pr[hh * BLOCK + i];
#pragma unroll
            for (unsigned e = 0; e < 8; ++e) acc[hh][e] += pv * vf[e];
          }
        }
        sync_role();  // pr and red are rewritten by the next block
      }
      DEC_ATTN_STAMP(3, dec::now_ns());
      // the position sets' sums into o: lanes of one column chunk within a warp, then across warps
      for (unsigned i = t; i < g * hd; i += THREADS) o[i] = 0.f;
#pragma unroll
      for (unsigned hh = 0; hh < MAX_GROUP; ++hh) {
        if (hh >= g) break;
#pragma unroll
        for (unsigned e = 0; e < 8; ++e)
          for (unsigned off = DCH; off < 32; off *= 2) acc[hh][e] += __shfl_xor_sync(0xffffffffu, acc[hh][e], off);
      }
      if (t == 0)  // every thread holds the same sums; smem lets a thread pick its head's
#pragma unroll
        for (unsigned hh = 0; hh < MAX_GROUP; ++hh)
          if (hh < g) red[hh] = lrun[hh];
      sync_role();
      if (lane < DCH)
#pragma unroll
        for (unsigned hh = 0; hh < MAX_GROUP; ++hh) {
          if (hh >= g) break;
#pragma unroll
          for (unsigned e = 0; e < 8; ++e) atomicAdd(o + hh * hd + dch * 8 + e, acc[hh][e]);
        }
      sync_role();
      if (nch == 1) {
        for (unsigned i = t; i < g * hd; i += THREADS) ao[kvh * g * hd + i] = to_bf16(o[i] / red[i / hd]);
        DEC_ATTN_STAMP(4, dec::now_ns());
        DEC_ATTN_STAMP(7, 1);
        continue;  // o is zeroed behind a barrier by the next task
      }
      // a chunk's slot: o [g][hd], then (max, sum) per head
      float* slot = part + (size_t)(kvh * MAX_CHUNKS + c) * g * (hd + 2);
      for (unsigned i = t; i < g * hd; i += THREADS) slot[i] = o[i];
      if (t == 0)
#pragma unroll
        for (unsigned hh = 0; hh < MAX_GROUP; ++hh)
          if (hh < g) slot[g * hd + 2 * hh] = mrun[hh], slot[g * hd + 2 * hh + 1] = lrun[hh];
      sync_role();
      unsigned* last_flag = reinterpret_cast<unsigned*>(red + 8 * MAX_GROUP);
      if (t == 0) {
        __threadfence();
        *last_flag = pl::atom_acq_rel(arr + kvh, 1) == nch - 1;
      }
      sync_role();
      if (*last_flag) {
        const float* head_slots = part + (size_t)kvh * MAX_CHUNKS * g * (hd + 2);
        for (unsigned i = t; i < g * hd; i += THREADS) {
          const unsigned hh = i / hd, stride = g * (hd + 2);
          float M = -INFINITY;
          for (unsigned cc = 0; cc < nch; ++cc) M = fmaxf(M, __ldcg(head_slots + cc * stride + g * hd + 2 * hh));
          float L = 0.f, O = 0.f;
          for (unsigned cc = 0; cc < nch; ++cc) {
            const float e = exp2f(__ldcg(head_slots + cc * stride + g * hd + 2 * hh) - M);
            L += __ldcg(head_slots + cc * stride + g * hd + 2 * hh + 1) * e;
            O += __ldcg(head_slots + cc * stride + i) * e;
          }
          ao[kvh * g * hd + i] = to_bf16(O / L);
        }
        if (t == 0) arr[kvh] = 0;
      }
      DEC_ATTN_STAMP(4, dec::now_ns());
      DEC_ATTN_STAMP(7, *last_flag);
      sync_role();
    }
    if (cta < tasks) sync_role();  // every thread's writes of this layer, then one release
    if (t == 0) pl::red_release(sync + dec::OPS + kq + 1, 1);
    if (cta < tasks) DEC_ATTN_STAMP(5, dec::now_ns());
  }
}
