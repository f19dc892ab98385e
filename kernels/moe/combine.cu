// combine.cu — owner C. Role: out[t] = Σ_k weight_k · ys[row(t, k)] (ys bf16, the sum in
// f32), rounded to bf16, one warp per token, or per 1/parts of a token's columns when there
// are fewer tokens than warps (T = 1: one warp loaded the 8 ys rows in 8 dependent rounds,
// ~8 us after the last expert was done; 8 warps load them in one). A token is ready (YDONE,
// acquire) once the expert owner has finished every down-projection tile of each of its
// experts: ceil(count / block_m) row tiles × hidden / block_n column blocks (the expert owner's
// geometry and the model's hidden, read as facts). Each warp combines its units in the order
// they become ready (a sweep that skips the others).
// With world > 1 ranks (moe_shapes.h) the expert's rank may be another GPU: the count is the
// total over ranks (the count exchange), and YDONE and the ys rows are the owner's, read
// through `peers` (per rank {xs, sync, ys}) with system-scope acquires.
#define PL_COMPONENT moe_combine
#include <pipelink.h>

#include <cuda_bf16.h>

#include <type_traits>

#include "moe_shapes.h"

PL_DECLARE_FACT(top_k);
PL_DECLARE_FACT(block_m);
PL_DECLARE_FACT(block_n);
PL_DECLARE_FACT(hidden);
PL_DECLARE_FACT(experts);
PL_DECLARE_FACT_BOOL(biases);
PL_DECLARE_WORKSPACE(sync);
PL_DECLARE_WORKSPACE(route);
PL_DECLARE_WORKSPACE(rows);
PL_DECLARE_WORKSPACE(ys);

namespace moe_combine {
struct Params {  // [params]: out, b2 = "ptr", t, rank, world = "u32", peers = "ptr"
  __nv_bfloat16* out;
  const __nv_bfloat16* b2;  // [experts, hidden] the experts' down biases (fact biases), else unread
  unsigned t, rank, world;
  const unsigned long long* peers;
};
constexpr unsigned MAX_TOP_K = 8;  // [fact.top_k] accept = [1, 2, 4, 8]: a choice per lane, 32 / top_k tokens a test
}  // namespace moe_combine

namespace moe_combine {
// The role over C chunks of 128 experts' counters (moe_shapes.h).
template <unsigned C>
__device__ __forceinline__ void run_chunks(unsigned pl_inst, const void* pl_params) {
  const Params& p = PL_PARAMS(Params);
  const unsigned lane = threadIdx.x % 32;
  const unsigned warps = PL_WARPS();
  const unsigned gw = blockIdx.x * warps + (threadIdx.x / 32 - PL_WARP_BEGIN()), nw = gridDim.x * warps;
  const unsigned hidden = PL_FACT(hidden), experts = PL_FACT(experts);
  const bool biases = PL_FACT(biases);  // (a fact: false folds the down-bias adds away)
  // the expert's down tiles per row tile: its last column block may be part of one (hidden % block_n)
  const unsigned top_k = PL_FACT(top_k), bm = PL_FACT(block_m), blocks = moe::ceil_div(hidden, PL_FACT(block_n));
  unsigned* sync = static_cast<unsigned*>(PL_WORKSPACE(sync));
  bool last;
  unsigned gen;
  const unsigned set = moe::enter(sync, moe::COMBINE, nw, lane, last, gen);
  if (last) moe::finish_launch(sync, moe::COMBINE, set, C, 0, 0, lane);
  if (top_k > MAX_TOP_K || 32 % top_k || experts > moe::EXPERT_SLOTS * C) __trap();  // outside accept (folds away)
  const unsigned* cur = sync + moe::SET(set, C);
  bool first = true;
  const unsigned T = p.t, S = T * top_k;
  const unsigned* route_e = static_cast<const unsigned*>(PL_WORKSPACE(route));
  const float* route_w = reinterpret_cast<const float*>(route_e + S);
  const unsigned* rows = static_cast<const unsigned*>(PL_WORKSPACE(rows));
  const __nv_bfloat16* ys = static_cast<const __nv_bfloat16*>(PL_WORKSPACE(ys));

  const unsigned world = p.world;
  // Work units: (token, column part); parts = a power of two that divides the row's chunks.
  // A chunk is 256 columns, 8 a lane (one uint4); a row of hidden % 256 != 0 (accept: whole
  // 64s) ends in a part chunk whose lanes past the row load and store nothing.
  const unsigned CHUNKS = moe::ceil_div(hidden, 256);
  const bool whole = hidden % 256 == 0;  // (a fact: folds away)
  unsigned shift = 0;  // parts = 1 << shift
  const unsigned max_parts = CHUNKS & (0u - CHUNKS);  // the largest power of two that divides CHUNKS
  while ((1u << shift) < max_parts && T << (shift + 1) <= nw) ++shift;
  const unsigned parts = 1u << shift, per_part = CHUNKS >> shift;
  const unsigned units = T * parts, n = units > gw ? moe::ceil_div(units - gw, nw) : 0u;
  if (n == 0) return;  // nothing to combine: this warp need not poll
  // Combine reads nothing before the experts are done, so it polls ROUTED slowly.
  moe::wait_at_least(cur + moe::ROUTED, T, 1024);
  if (world > 1) {  // every rank's counts of this launch
    unsigned tot[4 * C], below[4 * C];
    moe::gather_counts<C>(sync, set, gen + 1, p.rank, world, lane, tot, below);
  }
  // Several ranks: lane k's expert of choice k is done, all its down tiles counted on its
  // owner's YDONE (system scope; one rank: done_bits below).
  const auto choice_done = [&](unsigned e) {
    unsigned cnt = 0;
    // (not unrolled: unrolled or not as the optimiser judged the code around it, the linked and
    // the single-unit builds came out different)
#pragma unroll 1
    for (unsigned r = 0; r < world; ++r) cnt += __ldcg(sync + moe::EX_COUNTS(set, r, C) + e);
    const unsigned owner = e / (experts / world);
    const unsigned* done = cur + moe::YDONE(C) + e;
    if (owner != p.rank)
      done = reinterpret_cast<const unsigned*>(p.peers[moe::PEER_WORDS * owner + moe::PEER_SYNC]) + moe::SET(set, C) + moe::YDONE(C) + e;
    return moe::ld_acquire_sys(done) >= moe::ceil_div(cnt, bm) * blocks;
  };
  // One rank: which experts this warp has acquired done, lane l holding bit 4 c + i for expert
  // 128 c + 4 l + i (like the expert's Known). A refresh reads all YDONE counters and counts at
  // once (16 B a lane each, a chunk of 128 experts at a time), and runs only when a group of units has a pending choice whose
  // bit is not set: testing each pending choice's counter instead (ncu at T = 16384)
  // made 96 M L2 sector requests a launch to the few lines that hold YDONE and COUNTS, 16% of
  // the kernel's warp samples, the slices the expert's loads and signals also use. Bits stay
  // set, so once a warp has seen every expert done it reads no counter again. The warp
  // barrier orders every lane's later ys loads after each lane's acquire (any lane may read
  // any expert's rows).
  unsigned done_bits = 0;
  const auto refresh_done = [&]() {
    moe::for_chunks<C>([&](unsigned k) {
      const uint4 y = moe::ld_acquire4(cur + moe::YDONE(C) + moe::EXPERT_SLOTS * k + 4 * lane);
      const uint4 c = __ldcg(reinterpret_cast<const uint4*>(cur + moe::COUNTS + moe::EXPERT_SLOTS * k + 4 * lane));
      const unsigned yv[4] = {y.x, y.y, y.z, y.w}, cv[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
      for (unsigned i = 0; i < 4; ++i) done_bits |= yv[i] >= moe::ceil_div(cv[i], bm) * blocks ? 1u << (4 * k + i) : 0u;
    });
    __syncwarp();
  };
  // out[tok]'s columns of part `part` from its top_k ys rows (every choice's expert done,
  // acquired by this warp).
  const auto combine = [&](unsigned tok, unsigned part) {
    // Lane k < top_k: choice k's weight and ys row (this rank's ys or the owner's); the
    // other lanes hold lane 0's, so every lane computes the same way before the shuffles.
    const unsigned k = lane < top_k ? lane : 0u;
    const unsigned e = __ldcg(route_e + tok * top_k + k);
    const float w = __ldcg(route_w + tok * top_k + k);
    const __nv_bfloat16* src = ys;
    if (world > 1 && e / (experts / world) != p.rank)
      src = reinterpret_cast<const __nv_bfloat16*>(p.peers[moe::PEER_WORDS * (e / (experts / world)) + moe::PEER_YS]);
    // rows[] was written before the READY release that the expert acquired: visible now.
    src += (size_t)__ldcg(rows + tok * top_k + k) * hidden;
    __syncwarp();
    const __nv_bfloat16* yk[MAX_TOP_K];
    float wk[MAX_TOP_K];
    unsigned ek[MAX_TOP_K];
#pragma unroll
    for (unsigned k = 0; k < MAX_TOP_K; ++k) {  // (choices past top_k: lane k's copy of choice 0, never summed)
      yk[k] = reinterpret_cast<const __nv_bfloat16*>(__shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(src), k));
      wk[k] = __shfl_sync(0xffffffffu, w, k);
      ek[k] = 0u;
      if (biases) ek[k] = __shfl_sync(0xffffffffu, e, k);  // (a fact: every lane or none; false folds it away)
    }
    // U chunks of 256 columns at a time: all U x top_k row loads are in flight together. The
    // sum is latency-bound (a warp's loads, then its adds): one chunk at a time took 8 L2/DRAM
    // round trips a token, the combine's tail after the last expert ~195 us at T = 16384.
    const auto chunks = [&](unsigned j, auto u) {
      constexpr unsigned U = decltype(u)::value;
      uint4 y[U][MAX_TOP_K];
#pragma unroll
      for (unsigned k = 0; k < MAX_TOP_K; ++k)
#pragma unroll
        for (unsigned v = 0; v < U; ++v)
          if (k < top_k)
            y[v][k] = whole || (j + v) * 256 + lane * 8 < hidden
                          ? __ldcg(reinterpret_cast<const uint4*>(yk[k] + (j + v) * 256 + lane * 8))
                          : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (unsigned v = 0; v < U; ++v) {
        float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (unsigned k = 0; k < MAX_TOP_K; ++k) {
          if (k >= top_k) break;  // (a fact: folds away at top_k = 8)
          const unsigned yw[4] = {y[v][k].x, y[v][k].y, y[v][k].z, y[v][k].w};
#pragma unroll
          for (unsigned i = 0; i < 4; ++i) {
            const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&yw[i]));
            acc[2 * i] += wk[k] * f.x, acc[2 * i + 1] += wk[k] * f.y;
          }
          if (biases && (whole || (j + v) * 256 + lane * 8 < hidden)) {  // Σ_k w_k (y_k + b2[e_k]): the down bias
            const uint4 b = __ldg(reinterpret_cast<const uint4*>(p.b2 + (size_t)ek[k] * hidden + (j + v) * 256 + lane * 8));
            const unsigned bw[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (unsigned i = 0; i < 4; ++i) {
              const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bw[i]));
              acc[2 * i] += wk[k] * f.x, acc[2 * i + 1] += wk[k] * f.y;
            }
          }
        }
        uint4 o;
        __nv_bfloat162 h0 = __floats2bfloat162_rn(acc[0], acc[1]), h1 = __floats2bfloat162_rn(acc[2], acc[3]);
        __nv_bfloat162 h2 = __floats2bfloat162_rn(acc[4], acc[5]), h3 = __floats2bfloat162_rn(acc[6], acc[7]);
        o.x = *reinterpret_cast<unsigned*>(&h0), o.y = *reinterpret_cast<unsigned*>(&h1);
        o.z = *reinterpret_cast<unsigned*>(&h2), o.w = *reinterpret_cast<unsigned*>(&h3);
        if (whole || (j + v) * 256 + lane * 8 < hidden)
          *reinterpret_cast<uint4*>(p.out + (size_t)tok * hidden + (j + v) * 256 + lane * 8) = o;
      }
    };
    unsigned j = part * per_part;
    const unsigned end = j + per_part;
#pragma unroll 1
    for (; j + 2 <= end; j += 2) chunks(j, std::integral_constant<unsigned, 2>{});
    if (j < end) chunks(j, std::integral_constant<unsigned, 1>{});
  };
  // This warp's units gw + j nw, j < n, in the order their experts finish: sweep them,
  // combining every unit whose token's top_k experts are done, skipping the others, until none is
  // left (in token order, a warp would wait on a token whose last expert finishes late while
  // tokens behind it are ready; experts finish over the whole down pass). Readiness is tested
  // 32 / top_k units at a time, lane g top_k + k testing choice k of unit g's token. Windows of
  // 1024 units: lane l keeps bit m for window unit l + 32 m.
  const unsigned GROUP = 32 / top_k;
  // While none of its units is ready a warp sleeps 256 ns, doubling up to 1 us: each refresh
  // reads the few L2 lines that hold YDONE and COUNTS, in slices the expert's weight stream
  // also needs, and 512 warps refreshing every 256 ns made the step 1.7-4.6% slower at
  // T = 128-1024. A longer cap (2 us) cost 1% at T = 1, where the
  // last expert's finish is then seen later; a cap that depends on T made the linked SASS
  // differ from the control's.
  constexpr unsigned CAP = 1024;
  unsigned backoff = 256;
  for (unsigned w0 = 0; w0 < n; w0 += 1024) {
    const unsigned wn = min(1024u, n - w0);
    unsigned done = 0, left = wn;
    while (left) {
      unsigned progressed = 0;
      for (unsigned j0 = 0; j0 < wn; j0 += GROUP) {
        const unsigned j = j0 + lane / top_k;
        const unsigned seen = __shfl_sync(0xffffffffu, done, j % 32);  // (every lane: a full-warp shuffle)
        const bool pending = j < wn && !(seen >> (j / 32) & 1u);
        bool ok;
        if (world == 1) {  // (every lane: full-warp shuffles and ballot)
          const unsigned e = pending ? __ldcg(route_e + ((gw + (w0 + j) * nw) >> shift) * top_k + lane % top_k) : 0u;
          const auto known = [&]() { return __shfl_sync(0xffffffffu, done_bits, e / 4) >> moe::bit_of<C>(e) & 1u; };
          unsigned bit = known();  // (outside the && below: every lane must shuffle)
          if (__any_sync(0xffffffffu, pending && !bit)) {
            refresh_done();
            bit = known();
          }
          ok = pending && bit;
        } else {
          ok = pending && choice_done(__ldcg(route_e + ((gw + (w0 + j) * nw) >> shift) * top_k + lane % top_k));
        }
        const unsigned pend = __ballot_sync(0xffffffffu, pending), bad = __ballot_sync(0xffffffffu, pending && !ok);
        for (unsigned g = 0; g < GROUP; ++g) {
          const unsigned bits = (1u << top_k) - 1u;
          if (!(pend >> (g * top_k) & bits) || (bad >> (g * top_k) & bits)) continue;
          const unsigned jg = j0 + g;
          if (first) moe::stamp(sync, moe::COMBINE_BEGIN, lane), first = false;
          const unsigned unit = gw + (w0 + jg) * nw;
          combine(unit >> shift, unit & (parts - 1));
          if (lane == jg % 32) done |= 1u << (jg / 32);
          --left, ++progressed;
        }
      }
      if (!progressed) __nanosleep(backoff), backoff = min(2 * backoff, CAP);
      else backoff = 256;
    }
  }
  moe::stamp(sync, moe::COMBINE_END, lane);
  moe::stamp(sync, moe::KERNEL_END, lane);
}
}  // namespace moe_combine

MOE_CHUNKED_ENTRY(moe_combine, run)
