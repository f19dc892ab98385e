// attn_core.cu — the attention core: FlashAttention-3-style forward of work tiles (a 128-row
// Q block of one head each; the variant's `tile` hands a persistent CTA its sequence of them)
// by two consumer warpgroups, each owning 64 rows.
// Q arrives through ring `q`, K_i / V_i through ring `kv` (attn_loader, TMA); which KV blocks
// to visit and how to mask or modify scores come only from the variant's callables
// (attn.h): this file is compiled once and linked unchanged into every variant.
// Per KV block, FA3's intra-warpgroup pipelining: S_{i} = Q K_i^T (wgmma SS) is issued before
// O += P_{i-1} V_{i-1} (wgmma RS, P from registers), so the softmax of block i overlaps the
// PV product of block i-1; online softmax in log2 units (exp2 with the scale folded in).
// A tile's last PV goes out with the next tile's first Q K^T (and that block's softmax runs
// under it); O is exported after both, so the tensor cores do not wait for an epilogue.
// No data-dependent branch around a wgmma: a branch made ptxas serialise every wgmma (C7514);
// without a next tile, that Q K^T runs on held stages and is dropped. Inter-warpgroup ping-pong (FA3): named barriers wg0 /
// wg1 hand the tensor cores from one warpgroup's GEMMs to the other's, so one warpgroup's
// softmax runs under the other's GEMMs. A warpgroup whose 64 rows all lie past q_len (decode:
// q_len <= 16) issues no MMA at all and only releases the ring stages.
// The unnormalised O, the row max and sum go to the epilogue through export `out`
// (layout "attn_o(2)", attn.h): a store epilogue for prefill, a split-KV combine for decode.
// The d = 256 build (O is 128 registers a thread) visits one KV block at a time instead.
#define PL_COMPONENT attn_core
#include <pipelink.h>

#include <math.h>

#include "attn.h"
#include "attn_wgmma.h"

PL_OWN_FACT(block_q, attn::BLOCK);
PL_OWN_FACT(head_dim, attn::HEAD_DIM);  // 128, or 64 / 256 in the attn_core_d64 / attn_core_d256 builds
PL_DECLARE_RING(q);
PL_DECLARE_RING(kv);
PL_DECLARE_EXPORT(out);
PL_DECLARE_BARRIER(wg0);
PL_DECLARE_BARRIER(wg1);
PL_DECLARE_CALL_RET(unsigned, tile, unsigned, unsigned, unsigned, const void*, unsigned*);
PL_DECLARE_CALL_RET(unsigned, kv_count, unsigned, unsigned, unsigned, unsigned, unsigned, const void*);
PL_DECLARE_CALL_RET(unsigned, kv_block, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, const void*);
PL_DECLARE_CALL_RET(unsigned, mask_bits, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, const void*);
PL_DECLARE_CALL_RET(unsigned, features, unsigned);
PL_DECLARE_CALL(mod_params, unsigned, const void*, float*);
PL_DECLARE_CALL_RET(float, score_mod, float, unsigned, unsigned, float, float);

namespace attn_core {
struct Params {  // the contract's [params]: aux = "ptr", q_len, kv_len = "u32", scale = "f32", bh = "u32"
  const void* aux;
  uint32_t q_len, kv_len;
  float scale;
  uint32_t bh;
};
constexpr float LOG2E = 1.4426950408889634f;
constexpr unsigned CHUNK16 = attn::CHUNK_BYTES >> 4;  // descriptor units

struct Ring {
  uint32_t buf;
  uint64_t* full;
  uint64_t* empty;
  unsigned depth;
  __device__ __forceinline__ unsigned stage(unsigned idx) const { return idx % depth; }
  __device__ __forceinline__ void wait(unsigned idx) const { pl::mbar_wait(full + idx % depth, (idx / depth) & 1u); }
  __device__ __forceinline__ void release(unsigned idx, bool lane0) const {
    if (lane0) pl::mbar_arrive(empty + idx % depth);
  }
};

constexpr unsigned OREGS = attn::HEAD_DIM / 2;       // O accumulators per thread
// S = Q K^T for one K stage: d / 16 k16-steps over d (64-column swizzle chunks).
// Descriptors step as 32-bit low words under the constant high word (attn_wgmma::desc): as
// 64-bit adds each wgmma took two adds with carry and two moves more.
__device__ __forceinline__ void issue_qk(float* s, uint64_t dq, uint32_t k_addr) {
  const uint32_t qlo = (uint32_t)dq, klo = (uint32_t)attn_wgmma::desc_k_sw128(k_addr);
  attn_wgmma::fence();
#pragma unroll
  for (unsigned ks = 0; ks < attn::HEAD_DIM / 16; ++ks) {
    const uint32_t off = (ks >> 2) * CHUNK16 + (ks & 3u) * 2u;
    attn_wgmma::ss(s, attn_wgmma::desc(qlo + off), attn_wgmma::desc(klo + off), ks);
  }
  attn_wgmma::commit();
}
// O += P V for one V stage: 8 k16-steps over the 128 keys (16 key rows = 2048 B each).
__device__ __forceinline__ void issue_pv(float* o, const uint32_t* p, uint32_t v_addr) {
  const uint32_t vlo = (uint32_t)attn_wgmma::desc_mn_sw128(v_addr, attn::CHUNK_BYTES);
  attn_wgmma::fence();
#pragma unroll
  for (unsigned kk = 0; kk < 8; ++kk) {
    const uint64_t dv = attn_wgmma::desc(vlo + kk * (2048u >> 4));  // 16 key rows = 2048 B
    if constexpr (attn::HEAD_DIM == 256) attn_wgmma::rs256(o, p + 4 * kk, dv);
    else if constexpr (attn::HEAD_DIM == 128) attn_wgmma::rs(o, p + 4 * kk, dv);
    else attn_wgmma::rs64(o, p + 4 * kk, dv);
  }
  attn_wgmma::commit();
}
// exp2 on the SFU (ex2.approx.ftz: 2 ulp, flushes denormals; what FA3 uses).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
}  // namespace attn_core

PL_ENTRY(run) {
  using namespace attn_core;
  const Params& p = PL_PARAMS(Params);
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  const unsigned wg = pl::role_warpgroup(t), w = (t / 32) % 4, g = (t % 32) / 4, qd = t % 4;
  const bool lane0 = (t % 32) == 0;
  uint8_t* base = pl::smem_base();
  const Ring rq{pl::smem_addr(base + PL_RING_BUFFER(q)), reinterpret_cast<uint64_t*>(base + PL_RING_FULL(q)),
                reinterpret_cast<uint64_t*>(base + PL_RING_EMPTY(q)), PL_RING_DEPTH(q)};
  const Ring rkv{pl::smem_addr(base + PL_RING_BUFFER(kv)), reinterpret_cast<uint64_t*>(base + PL_RING_FULL(kv)),
                 reinterpret_cast<uint64_t*>(base + PL_RING_EMPTY(kv)), PL_RING_DEPTH(kv)};

  const float scale_log2 = p.scale * LOG2E;
  // Ping-pong (FA3): a warpgroup waits for its turn before issuing a KV block's GEMMs and
  // passes the turn on after them; warpgroup 1 lets warpgroup 0 go first, and warpgroup 0
  // takes warpgroup 1's last pass at exit, so each barrier sees as many arrivals as syncs.
  // (Ids are PL_BARRIER(...) immediates, so the linked-SASS check sees them.)
  const bool idle = wg == 1 && p.q_len <= 64;  // decode: rows 64..127 are all past q_len
  const bool duo = p.q_len > 64;               // both warpgroups compute
  const unsigned feat = PL_CALL(features, 0u);  // the variant's link-time constant
  const bool mods = feat & attn::SCORE_MOD, early = feat & attn::EARLY_MASK;
  auto turn = [&]() {
    if (duo) {
      if (wg) pl::named_barrier_sync(PL_BARRIER(wg1), 256);
      else pl::named_barrier_sync(PL_BARRIER(wg0), 256);
    }
  };
  auto pass = [&]() {
    if (duo) {
      if (wg) pl::named_barrier_arrive(PL_BARRIER(wg0), 256);
      else pl::named_barrier_arrive(PL_BARRIER(wg1), 256);
    }
  };
  if (duo && wg == 1) pl::named_barrier_arrive(PL_BARRIER(wg0), 256);

  attn::OutFrag f;
  float s[64];
  uint32_t pr[32];
  float alpha[2];
  unsigned kvi = 0;  // ring kv index of the tile's first stage (the loader walks the same tiles)
  // The tile this warpgroup works on (begin_tile sets them from the variant's info).
  unsigned qb = 0, bh = 0, split = 0, n = 0, row0 = 0;
  float prm[2] = {0.f, 0.f};
  auto begin_tile = [&](const unsigned* info) {
    qb = info[0];
    bh = info[1];
    split = info[2];
    n = PL_CALL(kv_count, qb, bh, split, p.q_len, p.kv_len, p.aux);
    row0 = qb * attn::BLOCK + 64 * wg + 16 * w + g;  // this thread's rows: row0, row0 + 8
    if (mods) PL_CALL(mod_params, bh, p.aux, prm);
  };
  // This warpgroup's 64 Q rows in tile it's stage of ring q (stage it % depth).
  auto q_desc = [&](unsigned it) {
    return attn_wgmma::desc_k_sw128(rq.buf + rq.stage(it) * attn::TILE_BYTES + 64 * wg * 128);
  };

  // Modify and mask S of the i-th KV block (kind from kv_block), then the online softmax (into
  // running max m and sum l): new row max, S := exp2(S - max) in place, rescale factor for O.
  // FULL blocks of a variant without score_mod take none of this (features() is a link-time
  // constant); a PARTIAL block costs two mask_bits calls and a select per score.
  // A PARTIAL block's mask words. A variant whose words come from memory (features() has
  // EARLY_MASK: block_sparse, document) gets them asked for right after the block's GEMMs are
  // issued, so its aux loads complete under them; one that computes them from registers (causal,
  // sliding, ...) gets them in the softmax (asked early they cost sliding ~3%: two more live
  // registers across the GEMMs). Asked a block ahead, before the named-barrier turn and the
  // issue, they cost document 3-4%.
  auto mask_of = [&](unsigned kb_kind, unsigned ib, unsigned* bits) {
    bits[0] = bits[1] = ~0u;
    if (kb_kind & attn::PARTIAL) {
      const unsigned k0 = (kb_kind & attn::BLOCK_MASK) * attn::BLOCK + 2 * qd;
      bits[0] = PL_CALL(mask_bits, row0, k0, kb_kind, ib, qb, bh, p.aux);
      bits[1] = PL_CALL(mask_bits, row0 + 8, k0, kb_kind, ib, qb, bh, p.aux);
    }
  };
  auto softmax = [&](unsigned kb_kind, unsigned ib, unsigned* bits, float* alpha, float* m, float* l) {
    const unsigned kb = kb_kind & attn::BLOCK_MASK, k0 = kb * attn::BLOCK + 2 * qd;
    float mul = scale_log2;  // raw scores: exp2(s * scale * log2e - max) as one FFMA
    if (mods) {
#pragma unroll
      for (unsigned i = 0; i < 64; ++i) {
        const unsigned r = row0 + 8 * ((i / 2) % 2), c = k0 + 8 * (i / 4) + (i % 2);
        s[i] = PL_CALL(score_mod, s[i] * p.scale, r, c, prm[0], prm[1]) * LOG2E;
      }
      mul = 1.f;
    }
    if (kb_kind & attn::PARTIAL) {
      if (!early) {
        bits[0] = PL_CALL(mask_bits, row0, k0, kb_kind, ib, qb, bh, p.aux);
        bits[1] = PL_CALL(mask_bits, row0 + 8, k0, kb_kind, ib, qb, bh, p.aux);
      }
#pragma unroll
      for (unsigned i = 0; i < 64; ++i)
        s[i] = (bits[(i / 2) % 2] >> (2 * (i / 4) + (i % 2))) & 1u ? s[i] : -INFINITY;
    }
#pragma unroll
    for (unsigned j = 0; j < 2; ++j) {
      float t[16];  // the row max as a tree (depth 5, not a chain of 16 dependent FMNMX)
#pragma unroll
      for (unsigned nt = 0; nt < 16; ++nt) t[nt] = fmaxf(s[nt * 4 + 2 * j], s[nt * 4 + 2 * j + 1]);
#pragma unroll
      for (unsigned k = 0; k < 8; ++k) t[k] = fmaxf(t[k], t[k + 8]);
#pragma unroll
      for (unsigned k = 0; k < 4; ++k) t[k] = fmaxf(t[k], t[k + 4]);
      t[0] = fmaxf(fmaxf(t[0], t[2]), fmaxf(t[1], t[3]));
      float mx = t[0];
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      mx = fmaxf(m[j], mx * mul);  // scale > 0 (attention.py checks), so max commutes with it
      // The running max moves only when it grows by more than 8 (FlashAttention-4's lazy
      // rescaling): P then stays below 2^8, which bf16 and the f32 sums hold, and O and l need
      // no rescaling (alpha = 1; rescale skips a warp whose rows all keep theirs). From -inf (O
      // and l are still 0) alpha is 1 too. The per-block rescale's FMULs were instructions the
      // softmax could not spare (docs/DECISIONS.md).
      const bool grow = mx > m[j] + 8.f;
      const float mj = grow ? mx : m[j];
      const float use = mj == -INFINITY ? 0.f : mj;  // a row masked so far stays exp2(-inf) = 0
      alpha[j] = grow && m[j] != -INFINITY ? ex2(m[j] - use) : 1.f;
      m[j] = mj;
      float sum = 0.f;
#pragma unroll
      for (unsigned nt = 0; nt < 16; ++nt) {
        s[nt * 4 + 2 * j] = ex2(fmaf(s[nt * 4 + 2 * j], mul, -use));
        s[nt * 4 + 2 * j + 1] = ex2(fmaf(s[nt * 4 + 2 * j + 1], mul, -use));
        sum += s[nt * 4 + 2 * j] + s[nt * 4 + 2 * j + 1];
      }
      l[j] = l[j] * alpha[j] + sum;  // this thread's columns; the quad adds up at the end
    }
  };
  auto to_p = [&]() {
#pragma unroll
    for (unsigned i = 0; i < 32; ++i) pr[i] = pack_bf16(s[2 * i], s[2 * i + 1]);
  };
  auto rescale = [&](const float* alpha) {  // (a warp-uniform branch: no wgmma waits on it)
    if (!__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) return;
#pragma unroll
    for (unsigned i = 0; i < OREGS; ++i) f.o[i] *= alpha[(i / 2) % 2];
  };
  auto fresh = [&]() {  // O, max and sum of a tile before its first block
#pragma unroll
    for (unsigned i = 0; i < (OREGS > 64 ? OREGS : 64); ++i) f.o[i] = 0.f;  // d = 64: o[32..63] unused (the store skips them)
    f.m[0] = f.m[1] = -INFINITY;
    f.l[0] = f.l[1] = 0.f;
  };
  auto kv_stage = [&](unsigned idx) { return rkv.buf + rkv.stage(idx) * attn::TILE_BYTES; };
  auto export_tile = [&](unsigned eqb, unsigned ebh) {
#pragma unroll
    for (unsigned j = 0; j < 2; ++j) {
      f.l[j] += __shfl_xor_sync(0xffffffffu, f.l[j], 1);
      f.l[j] += __shfl_xor_sync(0xffffffffu, f.l[j], 2);
    }
    PL_EXPORT(out, &f, eqb * attn::BLOCK, ebh);
  };

  // Persistent: the variant's `tile` hands this CTA its t-th work tile until there is none.
  // Across tiles: the next tile's first Q K^T (and its softmax) is issued with this tile's last
  // P V, and this tile's O is exported after both (`ahead`: the tile's block 0 is done), so the
  // tensor cores do not wait for a tile's epilogue and first softmax.
  bool ahead = false;
  unsigned it = 0;
  bool have = PL_CALL(tile, 0u, p.q_len, p.bh, p.aux, f.info);
  if (have) begin_tile(f.info);
  if constexpr (attn::HEAD_DIM == 256) {
    // d = 256: one KV block at a time. O is 128 registers a thread here, so S_i and P_{i-1} of
    // the pipelined loop below do not fit beside it within 240; the two warpgroups' ping-pong
    // still overlaps one's softmax with the other's GEMMs.
    while (have) {
      fresh();
      const unsigned eqb = qb, ebh = bh;
      if (idle || n == 0) {
        rq.wait(it);
        for (unsigned i = 0; i < 2 * n; ++i) {
          rkv.wait(kvi + i);
          rkv.release(kvi + i, lane0);
        }
        rq.release(it, lane0);
      } else {
        rq.wait(it);
        for (unsigned i = 0; i < n; ++i) {
          const unsigned ik = kvi + 2 * i, iv = ik + 1;  // K_i, V_i
          const unsigned kind = PL_CALL(kv_block, qb, bh, split, i, p.q_len, p.kv_len, p.aux);
          unsigned bits[2];
          rkv.wait(ik);
          turn();
          issue_qk(s, q_desc(it), kv_stage(ik));
          pass();
          if (early) mask_of(kind, i, bits);
          attn_wgmma::wait<0>();
          attn_wgmma::fence_regs<64>(s);
          rkv.release(ik, lane0);
          softmax(kind, i, bits, alpha, f.m, f.l);
          rescale(alpha);  // O to block i's max before P_i V_i adds to it
          to_p();
          rkv.wait(iv);
          attn_wgmma::fence_regs<32>(pr);
          attn_wgmma::fence_regs<OREGS>(f.o);
          issue_pv(f.o, pr, kv_stage(iv));
          attn_wgmma::wait<0>();
          attn_wgmma::fence_regs<OREGS>(f.o);
          attn_wgmma::fence_regs<32>(pr);
          rkv.release(iv, lane0);
        }
        rq.release(it, lane0);
      }
      kvi += 2 * n;
      unsigned ninfo[4];
      const bool more = PL_CALL(tile, it + 1, p.q_len, p.bh, p.aux, ninfo);
      f.more = more;
      export_tile(eqb, ebh);
      ++it;
      have = more;
      if (more) {
#pragma unroll
        for (unsigned j = 0; j < 4; ++j) f.info[j] = ninfo[j];
        begin_tile(ninfo);
      }
    }
  }  // (have is false here: the pipelined loop below is skipped)
  while (have) {
    if (!ahead) fresh();
    const unsigned eqb = qb, ebh = bh;  // this tile's (begin_tile moves them to the next one)
    unsigned ninfo[4];
    bool more, go = false;
    float nm[2] = {-INFINITY, -INFINITY}, nl[2] = {0.f, 0.f}, nalpha[2];
    if (idle || n == 0) {
      rq.wait(it);
      for (unsigned i = 0; i < 2 * n; ++i) {  // idle (decode rows past q_len): consumed in order
        rkv.wait(kvi + i);
        rkv.release(kvi + i, lane0);
      }
      rq.release(it, lane0);
      kvi += 2 * n;
      more = PL_CALL(tile, it + 1, p.q_len, p.bh, p.aux, ninfo);
      if (more) begin_tile(ninfo);
    } else {
      // No data-dependent branch around a wgmma (the last PV is peeled after the loop): such
      // a branch made ptxas serialise every wgmma of the kernel (C7514).
      unsigned kind, bits[2];
      if (!ahead) {
        rq.wait(it);
        kind = PL_CALL(kv_block, qb, bh, split, 0, p.q_len, p.kv_len, p.aux);
        rkv.wait(kvi);
        turn();
        issue_qk(s, q_desc(it), kv_stage(kvi));
        pass();
        if (early) mask_of(kind, 0, bits);  // its loads land under the Q K^T just issued
        attn_wgmma::wait<0>();
        attn_wgmma::fence_regs<64>(s);
        rkv.release(kvi, lane0);
        softmax(kind, 0, bits, alpha, f.m, f.l);
        to_p();
      }
      if (n > 1) kind = PL_CALL(kv_block, qb, bh, split, 1, p.q_len, p.kv_len, p.aux);  // later: a block ahead
      for (unsigned i = 1; i < n; ++i) {
        const unsigned ik = kvi + 2 * i, iv = ik - 1;  // K_i, V_{i-1}
        rkv.wait(ik);
        turn();
        issue_qk(s, q_desc(it), kv_stage(ik));
        rescale(alpha);  // O to block i-1's max while S_i is computed (FA3's order)
        rkv.wait(iv);
        attn_wgmma::fence_regs<32>(pr);
        issue_pv(f.o, pr, kv_stage(iv));
        pass();
        // Block i + 1's kind, asked for now: its aux loads complete under this
        // block's GEMMs and softmax instead of delaying the next issue (the loop's memory
        // clobbers keep the compiler from hoisting them; asked before the issue, those loads held
        // 14% of the core's stall samples). Block n - 1 asks for itself again (no branch).
        const unsigned inx = i + 1 < n ? i + 1 : i;
        const unsigned kind_nx = PL_CALL(kv_block, qb, bh, split, inx, p.q_len, p.kv_len, p.aux);
        if (early) mask_of(kind, i, bits);  // block i's mask words: their loads land under its GEMMs
        attn_wgmma::wait<1>();  // S_i is ready; PV_{i-1} may still run
        attn_wgmma::fence_regs<64>(s);
        // K_i is released before the softmax. (Released after it on a predicate reading the row
        // sums, ptxas kept the wait for PV_{i-1} below the softmax, so the softmax overlapped its
        // own PV; measured 1.5-3% slower: K's stage went back to the loader later.)
        rkv.release(ik, lane0);
        softmax(kind, i, bits, alpha, f.m, f.l);
        kind = kind_nx;
        attn_wgmma::wait<0>();
        attn_wgmma::fence_regs<OREGS>(f.o);
        attn_wgmma::fence_regs<32>(pr);
        rkv.release(iv, lane0);
        to_p();
      }
      rq.release(it, lane0);  // every Q K^T of the tile is done: the loader may refill the stage
      // The last P V with the next tile's first Q K^T. Without a next tile with blocks, that
      // Q K^T reads stages this warpgroup still holds (the next tile's Q, else this one's;
      // V_{n-1} as K) and its result is dropped: one instruction stream, no branch around a wgmma.
      const unsigned ik = kvi + 2 * n, iv = ik - 1;
      more = PL_CALL(tile, it + 1, p.q_len, p.bh, p.aux, ninfo);
      if (more) begin_tile(ninfo);  // qb, bh, split, n, row0, prm: the next tile's
      go = more && n > 0;
      unsigned nkind = 0, nbits[2];
      if (more) rq.wait(it + 1);
      if (go) {
        nkind = PL_CALL(kv_block, qb, bh, split, 0, p.q_len, p.kv_len, p.aux);
        rkv.wait(ik);
      }
      const uint64_t dqn = q_desc(more ? it + 1 : it);
      const uint32_t kn = kv_stage(go ? ik : iv);
      turn();
      issue_qk(s, dqn, kn);
      rescale(alpha);
      rkv.wait(iv);
      attn_wgmma::fence_regs<32>(pr);
      issue_pv(f.o, pr, kv_stage(iv));
      pass();
      if (go && early) mask_of(nkind, 0, nbits);  // the next tile's block 0, under its Q K^T
      attn_wgmma::wait<1>();  // the next tile's S_0 is ready; this tile's last PV may still run
      attn_wgmma::fence_regs<64>(s);
      rkv.release(ik, go && lane0);
      if (go) softmax(nkind, 0, nbits, nalpha, nm, nl);
      attn_wgmma::wait<0>();
      attn_wgmma::fence_regs<OREGS>(f.o);
      attn_wgmma::fence_regs<32>(pr);
      rkv.release(iv, lane0);
      to_p();  // the next tile's P_0 (unused without one)
      kvi = ik;
    }
    f.more = more;
    export_tile(eqb, ebh);
    ++it;
    have = more;
    ahead = go;
    if (more) {
#pragma unroll
      for (unsigned j = 0; j < 4; ++j) f.info[j] = ninfo[j];
    }
    if (go) {
#pragma unroll
      for (unsigned i = 0; i < 64; ++i) f.o[i] = 0.f;
#pragma unroll
      for (unsigned j = 0; j < 2; ++j) {
        f.m[j] = nm[j];
        f.l[j] = nl[j];
        alpha[j] = nalpha[j];
      }
    }
  }
  if (duo && wg == 0) pl::named_barrier_sync(PL_BARRIER(wg0), 256);  // warpgroup 1's last pass
}
