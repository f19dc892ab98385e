// expert.cu — owner X. Role: the expert FFN of every routed slot (gate/up + SwiGLU export, then
// down), as two wgmma warpgroups fed by TMA (weights) and cp.async (rows).
// Solo mode gives each warpgroup its own units of block_m rows and its own ring; team mode
// (from T = 4096 or 256 rows an expert, one rank) puts both on one 128-row unit and one ring, so a weight
// stage is read from L2 once per 128 rows: that pays at large T and costs at small T, where the
// padding to 128 rows and one weight stream per SM instead of two dominate.
// Units are interleaved over the grid and walked in two passes (gate/up, then down); every
// warpgroup finishes its gate/up units first, so readiness waits never form a cycle.
// The rows are scattered (token xrow[r] of x on one rank, xs when world > 1, hs for down), so
// no tensor map can describe them: the consuming threads copy them, and their copies arrive on
// the stage's mbarrier beside the TMA's expect-tx, so one wait covers both operands.
// Owns the tile geometry (block_m <= 64 with the wgmma always m64, block_h, block_n): the
// contract's `own` values come from the same defines. Reads the model's hidden and inter
// (kernel facts): they fold into the k-loops' trip counts, strides and the tile arithmetic at
// link time; experts and top_k size the schedule and the workspaces (accept).
#define PL_COMPONENT moe_expert
#include <pipelink.h>

#include <cuda_bf16.h>
#include <stddef.h>
#include <stdint.h>

#include "../gemm/wgmma.h"
#include "moe_shapes.h"

#ifndef EXPERT_BLOCK_M
#define EXPERT_BLOCK_M 64
#endif
#ifndef EXPERT_BLOCK_H
#define EXPERT_BLOCK_H 64
#endif
#ifndef EXPERT_BLOCK_N
#define EXPERT_BLOCK_N 128
#endif
#ifndef EXPERT_STAGES
#define EXPERT_STAGES 4
#endif
#ifndef EXPERT_TEAM_STAGES
#define EXPERT_TEAM_STAGES 6
#endif
// Team mode from T = 4096, or earlier from EXPERT_TEAM_MIN_ROWS routed rows an expert on average
// (T top_k / experts: facts but T): a 128-row unit then pads little, and its weight tile serves
// twice the rows of a solo one (docs/DECISIONS.md has both bounds' measurements).
// EXPERT_TEAM_MIN_T, where set (the experiments' team and solo builds), fixes T instead.
#ifndef EXPERT_TEAM_MAX_T
#define EXPERT_TEAM_MAX_T 4096
#endif
#ifndef EXPERT_TEAM_MIN_ROWS
#define EXPERT_TEAM_MIN_ROWS 256
#endif

namespace moe_expert {
constexpr unsigned BM = EXPERT_BLOCK_M, BH = EXPERT_BLOCK_H, BN = EXPERT_BLOCK_N;
static_assert(BM == 16 || BM == 32 || BM == 64, "block_m: 16, 32 or 64 (one wgmma m64)");
static_assert(BH == 32 || BH == 64, "block_h: 32 or 64 (gate/up wgmma N = 2 * block_h)");
static_assert(BN == 64 || BN == 128, "block_n: 64 or 128 (down wgmma N)");
// Both modes' stage counts size the smem claims ([smem.stages], [smem.bars]): the contract
// computes them from the owned facts expert_stages and team_stages, so a stage count changed
// here but not there (or there but not here) is P-FACT-VALUE at pack, never an overflow into
// another claim.
constexpr unsigned ROW = 128;  // a stage row: 64 bf16 of k = one swizzle row
constexpr unsigned B_ROWS = 2 * BH > BN ? 2 * BH : BN;
// The two ways to run the warpgroups (see the top): WGS warpgroups per unit and ring.
template <unsigned WGS>
struct Mode {
  static constexpr unsigned THREADS = 128 * WGS;
  static constexpr unsigned ROWS = WGS == 1 ? BM : 128;  // a unit's rows (team: whole block_m tiles)
  static constexpr unsigned STAGES = WGS == 1 ? EXPERT_STAGES : EXPERT_TEAM_STAGES;
  static constexpr unsigned A_BYTES = 64 * WGS * ROW;
  static constexpr unsigned STAGE = A_BYTES + B_ROWS * ROW;  // multiple of 1024 (swizzle atom)
  static_assert(STAGES >= 2 && STAGES <= 12, "stages: 2 .. 12 (accept: inter >= 768, 12 k-steps)");
};
using Solo = Mode<1>;
using Team = Mode<2>;
static_assert(Team::ROWS % BM == 0, "a team unit is whole block_m tiles");
// The smem claims hold either mode: [smem.stages] is the larger of 2 * Solo::STAGES * Solo::STAGE
// and Team::STAGES * Team::STAGE, [smem.bars] one mbarrier per stage of the larger.

struct Params {  // [params]: w13, w2, x = "ptr", t, rank, world = "u32", b13 = "ptr", tmap_w13, tmap_w2 = "tmap"
  const __nv_bfloat16* w13;
  const __nv_bfloat16* w2;
  const __nv_bfloat16* x;
  unsigned t, rank, world;
  const __nv_bfloat16* b13;  // [experts, 2 inter] gate, then up biases (fact biases), else unread
  pl::TensorMap tmap_w13;  // [experts * 2 * inter, hidden] bf16, box [block_h, 64], SWIZZLE_128B
  pl::TensorMap tmap_w2;   // [experts * hidden, inter] bf16, box [block_n, 64], SWIZZLE_128B
};
static_assert(offsetof(Params, tmap_w13) == 64 && offsetof(Params, tmap_w2) == 192 && sizeof(Params) == 320,
              "params layout (docs/CONTRACTS.md: natural alignment, tmap = 128 B aligned to 64)");

// The launch's schedule, one copy per CTA in shared memory (claim `sched`), written once by
// the role's first warp: per expert its rows (count), its first row in dispatch's layout
// (block_m tiles) and its first unit in each pass. Held in registers (4 a lane each) it was
// live through every unit, the SwiGLU export included, where the budget is tightest, and
// tile geometries spilled there. A unit reads it a few times. C chunks of 128 experts (the
// counters' layout, moe_shapes.h); slots past [fact.experts] hold 0 rows. The claim is
// sched_bytes (one chunk's table) times the model's chunks (the contract).
template <unsigned C>
struct Sched {
  static constexpr unsigned EXPERTS = moe::EXPERT_SLOTS * C;
  unsigned count[EXPERTS], first_row[EXPERTS], first[2][EXPERTS];
};
// Lane l's four values of a per-expert table (experts 4 l .. 4 l + 3 of a chunk), as count[] was held.
__device__ __forceinline__ uint4 lane4(const unsigned* table, unsigned lane) {
  return reinterpret_cast<const uint4*>(table)[lane];
}
__device__ __forceinline__ void store4(unsigned* table, const unsigned* v, unsigned lane) {
  reinterpret_cast<uint4*>(table)[lane] = make_uint4(v[0], v[1], v[2], v[3]);
}

// Work unit u of pass `pass` with `blocks` column blocks per row tile of `rows`: expert e has
// ceil(count[e] / rows) * blocks units from first[pass][e]; sets e, its row count, the column
// block and the row tile (fastest).
struct Unit {
  unsigned e, count, block, tile;
};
template <unsigned ROWS, unsigned C>
__device__ __forceinline__ Unit locate(unsigned u, const Sched<C>& s, unsigned pass, unsigned blocks, unsigned lane) {
  unsigned hit = 4 * C;  // value 4 c + i of this lane: expert 128 c + 4 lane + i
#pragma unroll
  for (unsigned k = 0; k < C; ++k) {
    const uint4 c = lane4(s.count + moe::EXPERT_SLOTS * k, lane), f = lane4(s.first[pass] + moe::EXPERT_SLOTS * k, lane);
    const unsigned count[4] = {c.x, c.y, c.z, c.w}, first[4] = {f.x, f.y, f.z, f.w};
#pragma unroll
    for (unsigned i = 0; i < 4; ++i)
      if (u >= first[i] && u < first[i] + moe::ceil_div(count[i], ROWS) * blocks) hit = 4 * k + i;
  }
  const unsigned src = __ffs(__ballot_sync(0xffffffffu, hit < 4 * C)) - 1;
  const unsigned h = __shfl_sync(0xffffffffu, hit, src);
  const unsigned e = C == 1 ? 4 * src + h : h / 4 * moe::EXPERT_SLOTS + 4 * src + h % 4;
  const unsigned cnt = s.count[e], local = u - s.first[pass][e], tiles = moe::ceil_div(cnt, ROWS);
  return {e, cnt, local / tiles, local % tiles};
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, unsigned bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
// The stage's mbarrier counts this thread's arrival once its cp.async copies so far have landed
// (noinc: the barrier's expected count includes every ring thread).
__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(pl::smem_addr(bar)) : "memory");
}
// wgmma::desc_sw128(addr) as its two words: the low one varies with the address, the high one
// (stride 1024 B, SWIZZLE_128B) is a constant.
__device__ __forceinline__ uint32_t desc_lo(uint32_t smem_addr) { return (uint32_t)wgmma::desc_sw128(smem_addr); }
__device__ __forceinline__ uint64_t desc(uint32_t lo) {
  return (uint64_t)lo | (wgmma::desc_sw128(0) & 0xFFFFFFFF00000000ull);
}
// cp.async writes are generic-proxy writes; wgmma reads through the async proxy.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// A ring (one per warpgroup solo, one per team): stages at `smem`, one mbarrier each at
// `full`; `it` counts the k-steps it consumed (stage it % STAGES, mbarrier parity it / STAGES % 2);
// `primed_b` / `primed_a`: the weight (B) tiles / this thread's row (A) chunks of the next
// unit's first STAGES - 1 k-steps are in flight (each stage's chunks with their mbarrier arrival).
// `row[j]`: where the A-operand row of this thread's tile row t / 8 + THREADS / 8 * j in the unit
// being loaded starts, in 16-B chunks of the A workspace (row · K / 8; NO_ROW past its valid
// rows); resolved once per unit, so the k-loop does one 32-bit add and one wide multiply-add per
// chunk and no index loads. The offsets fit 32 bits with room: the largest A workspace, xs at 8
// ranks of 65,536 tokens (moe_ep.capacity_rows), has about 2^22 rows of 256 chunks.
// `t`: the thread's index among the ring's threads (team: warpgroup t / 128 reads A rows 64 t / 128 ..).
struct Ring {
  uint8_t* smem;
  uint64_t* full;
  unsigned it, t;
  bool primed_b, primed_a;
  unsigned row[4];
};
constexpr unsigned NO_ROW = ~0u;
// One unit's operands, in three words (registers are tight): the weight tile's first row b
// (`parts` boxes of the map at rows b and b + part_stride), the first of its rows in the A
// workspace, and `meta` = valid rows | VALID (the unit exists) | READY (its readiness counter
// was complete when checked, so its rows may be loaded ahead) | its expert << expert_shift<C> (so the
// expert is not a division of b by the model's row count, a link-time value): 8 bits up to 256
// experts, 9 up to 384.
struct Tile {
  int b;
  unsigned row0, meta;
};
constexpr unsigned VALID = 1u << 16, READY = 1u << 17;
template <unsigned C>
constexpr unsigned expert_shift = C <= 2 ? 24 : 23;
static_assert(moe::MAX_EXPERTS <= 1u << (32 - expert_shift<moe::MAX_CHUNKS>), "the expert fits above meta's flags");
template <unsigned C>
__device__ __forceinline__ unsigned expert_of(const Tile& t) { return t.meta >> expert_shift<C>; }
// Whether every lane of the warp already acquired the unit's readiness counter complete (the
// READY bit of its check a unit ago): then the unit starts without another L2 round trip.
__device__ __forceinline__ bool known_ready(const Tile& t) { return __all_sync(0xffffffffu, t.meta & READY); }
// Which experts' readiness counters of a pass this warp has acquired complete: lane l holds
// bits 4 c + i for experts 128 c + 4 l + i (like count[]). One refresh reads all counters (16 B a
// lane a chunk, one acquire each), so a unit's check costs an L2 round trip only while some
// expert is still incomplete; an acquire per unit stalled every unit's start on one.
template <unsigned C>
struct Known {
  unsigned bits;
  __device__ __forceinline__ bool has(unsigned e) const {
    return __shfl_sync(0xffffffffu, bits, e / 4) >> moe::bit_of<C>(e) & 1u;
  }
  // counters[e] >= count[e] * scale; the warp barrier orders every lane's later loads after
  // each lane's acquire (any lane may load any expert's rows).
  __device__ __forceinline__ void refresh(const unsigned* counters, const Sched<C>& s, unsigned scale, bool sys,
                                          unsigned lane) {
#pragma unroll
    for (unsigned k = 0; k < C; ++k) {
      const uint4 c = moe::ld_acquire4(counters + moe::EXPERT_SLOTS * k + 4 * lane, sys);
      const uint4 n = lane4(s.count + moe::EXPERT_SLOTS * k, lane);
      const unsigned v[4] = {c.x, c.y, c.z, c.w}, count[4] = {n.x, n.y, n.z, n.w};
#pragma unroll
      for (unsigned i = 0; i < 4; ++i) bits |= v[i] >= count[i] * scale ? 1u << (4 * k + i) : 0u;
    }
    __syncwarp();
  }
};
// A readiness count owed to the consumers (HREADY of a warp's h rows, YDONE of a unit's ys
// rows), released one unit late: by then the stores have reached L2, so the release does
// not stall the warpgroup's next wgmma on a fence (one release, not a fence in every warp).
// The caller orders the stores before the release by a barrier over the storing threads.
// The counter is held as its word in the launch's counter set (`cur`), not as a pointer: a
// register fewer through the SwiGLU export. add = 0: nothing owed.
struct Pending {
  unsigned word, add;
  __device__ __forceinline__ void release(unsigned* counters, bool by_me) {
    if (by_me && add) moe::red_release(counters + word, add);
    add = 0;
  }
};

// acc[N/2] (wgmma m64nN layout) = A[64 rows of lda, K] · B[N rows, K]ᵀ for unit `w`: A rows
// >= w.rows zero (cp.async); B = `parts` boxes of N / parts rows of `map` (TMA).
// The pipeline runs on across units: the stages this unit frees in its last STAGES - 1
// k-steps are refilled with the warpgroup's next unit of the pass (`next`): its weights
// always (they wait for nothing), its rows when `next.ready`. So a unit starts with its first
// stages in flight, and the weight stream runs on through readiness waits.
// `sync` is the ring's named barrier (an immediate id per warpgroup, or the team's; see PL_ENTRY).
// The weight tile of k-step k into ring position r.it + kt (thread 0 issues the TMA).
template <class M, unsigned N, unsigned PARTS>
__device__ __forceinline__ void load_b(Ring& r, unsigned kt, unsigned k, const pl::TensorMap* map, const Tile& b,
                                       int part_stride) {
  const unsigned s = (r.it + kt) % M::STAGES;
  uint8_t* st = r.smem + s * M::STAGE;
  if (r.t == 0) {
    pl::mbar_arrive_expect_tx(r.full + s, N * ROW);
    pl::tma_load_2d(st + M::A_BYTES, map, (int)(k * 64), b.b, r.full + s);
    if (PARTS == 2)
      pl::tma_load_2d(st + M::A_BYTES + (N / 2) * ROW, map, (int)(k * 64), b.b + part_stride, r.full + s);
  }
}
// Before a pass's first readiness wait: the first unit's weights need no readiness.
template <class M, unsigned N, unsigned PARTS>
__device__ __forceinline__ void prime(Ring& r, const pl::TensorMap* map, const Tile& first, int part_stride) {
  if (!(first.meta & VALID)) return;
#pragma unroll
  for (unsigned kt = 0; kt < M::STAGES - 1; ++kt) load_b<M, N, PARTS>(r, kt, kt, map, first, part_stride);
  r.primed_b = true;
}

// Ring rows of unit t: row0 + i, or xrow[row0 + i] when `xrow` is given (after the unit's
// readiness acquire by this thread: plain L2 loads, the rows were written in this launch).
template <class M>
__device__ __forceinline__ void resolve_rows(Ring& r, const Tile& t, const unsigned* xrow, unsigned K) {
#pragma unroll
  for (unsigned j = 0; j < 4; ++j) {
    const unsigned i = r.t / 8 + M::THREADS / 8 * j;
    r.row[j] = i >= (t.meta & 0xFFFFu) ? NO_ROW : (xrow ? __ldcg(xrow + t.row0 + i) : t.row0 + i) * (K / 8);
  }
}

// K (the model's hidden or inter, a fact) and part_stride fold to immediates at link time; the
// contracts accept K >= 768, so KT >= 12 >= STAGES: the ring is filled from one unit.
template <class M, unsigned N, unsigned PARTS, class Sync>
__device__ __forceinline__ void mainloop(float* acc, Ring& r, const __nv_bfloat16* a, const unsigned* xrow,
                                         const pl::TensorMap* map, const Tile& w, const Tile& next, const Sync& sync,
                                         unsigned K, int part_stride) {
  const unsigned KT = K / 64;
  constexpr unsigned STAGES = M::STAGES;
  auto load_a = [&](unsigned kt) {  // this thread's chunks of the rows in r.row
    const unsigned k = kt < KT ? kt : kt - KT;
    const uint32_t base = pl::smem_addr(r.smem + (r.it + kt) % STAGES * M::STAGE);
#pragma unroll
    for (unsigned j = 0; j < 4; ++j) {  // 64 rows per warpgroup x 8 chunks of 16 B: 4 per thread
      const unsigned c = r.t + M::THREADS * j, row = c / 8, ch = c % 8;
      const bool ok = r.row[j] != NO_ROW;
      const uint4* src = reinterpret_cast<const uint4*>(a) + (ok ? r.row[j] + k * 8 + ch : 0u);
      cp_async16(base + row * ROW + ((ch ^ (row & 7)) << 4), src, ok ? 16u : 0u);
    }
    cp_async_arrive(r.full + (r.it + kt) % STAGES);
  };
  auto load = [&](unsigned kt) {
    if (kt >= KT) {  // the next unit's first k-steps (this unit's last row load was kt - 1)
      if (next.meta & VALID) load_b<M, N, PARTS>(r, kt, kt - KT, map, next, part_stride);
      if (next.meta & READY) {
        if (kt == KT) resolve_rows<M>(r, next, xrow, K);
        load_a(kt);
      }
      return;
    }
    if (!(r.primed_b && kt < STAGES - 1)) load_b<M, N, PARTS>(r, kt, kt, map, w, part_stride);
    if (!(r.primed_a && kt < STAGES - 1)) load_a(kt);
  };
  if (!r.primed_a) resolve_rows<M>(r, w, xrow, K);
#pragma unroll
  for (unsigned i = 0; i < N / 2; ++i) acc[i] = 0.f;
  sync();  // every warp's wgmma of the last unit read its stages
#pragma unroll
  for (unsigned kt = 0; kt < STAGES - 1; ++kt) load(kt);
#pragma unroll 1
  for (unsigned kt = 0; kt < KT; ++kt) {
    const unsigned n = r.it + kt, s = n % STAGES;
    // The stage's weights (TMA, expect-tx) and every ring thread's A chunks (cp.async, one
    // arrival each) have landed: no cp.async group wait and no barrier before the wgmma.
    pl::mbar_wait(r.full + s, (n / STAGES) & 1u);
    fence_proxy_async();  // the chunks were written through the generic proxy; wgmma reads async
    const uint32_t sa = pl::smem_addr(r.smem + s * M::STAGE);
    const uint32_t a_wg = M::THREADS == 256 ? (r.t & 128u) * 64u : 0u;  // 64 rows x 128 B per warpgroup
    // The descriptors' low words only: k16 step kk adds 32 B (2 in the address field, which
    // stays below 2^16), and the high word is a constant, so no 64-bit adds on the way to the wgmma.
    const uint32_t da = desc_lo(sa + a_wg), db = desc_lo(sa + M::A_BYTES);
    wgmma::fence();
#pragma unroll
    for (unsigned kk = 0; kk < 4; ++kk) wgmma::mma_m64k16<N>(acc, desc(da + 2 * kk), desc(db + 2 * kk), 1u);
    wgmma::commit();
    wgmma::wait<1>();  // k-step kt - 1's wgmma is done; k-step kt's runs on while we refill
    wgmma::fence_operands<N / 2>(acc);
    sync();  // ... in every warp: the stage of k-step kt - 1 is free
    load(kt + STAGES - 1);
  }
  wgmma::wait<0>();
  wgmma::fence_operands<N / 2>(acc);
  r.it += KT;  // (the next unit's row chunks stay in flight: their arrivals complete its stages)
  r.primed_b = next.meta & VALID;
  r.primed_a = next.meta & READY;
}
// The model's gate/up biases (gpt-oss), added to a warp's accumulator before its export: in the
// "moe_gu16" layout (expert_acc.h) element (p NH + nt) 4 + i is column 8 nt + 2 q + i % 2 of plane
// p (gate, up), biased by b[p inter + that column]. (The down biases are the combine's: added
// here they spilled the epilogue.)
template <unsigned NH>
__device__ __forceinline__ void add_gateup_bias(float* acc, const __nv_bfloat16* b, unsigned inter, unsigned lane) {
  const unsigned q = lane % 4;
#pragma unroll
  for (unsigned p = 0; p < 2; ++p)
#pragma unroll
    for (unsigned nt = 0; nt < NH; ++nt) {
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(b + p * inter + 8 * nt + 2 * q));
#pragma unroll
      for (unsigned i = 0; i < 4; ++i) acc[(p * NH + nt) * 4 + i] += i % 2 ? f.y : f.x;
    }
}
// A warp's 16 rows x N columns of an m64nN accumulator (rows g and g + 8 of lane 4 g + q,
// columns 8 j + 2 q, 8 j + 2 q + 1) rounded to bf16 into `out` (row stride hidden) at row0, col0;
// rows >= valid are not written. Each 4 x 4 block of a quad's bf16 pairs (4 column groups of 8)
// is transposed by two xor-shuffle steps so that lane q stores group 4 m + q of its row as
// one 16-B store: a warp's store writes 8 rows x 64 B (8 instructions a row pair, not 32 of
// 4 B): the 4-B stores, not the epilogue's wait, were what the down pass paid for.
template <unsigned N>
__device__ __forceinline__ void store_rows16(const float* acc, __nv_bfloat16* out, unsigned hidden, unsigned row0,
                                             unsigned col0, unsigned valid, unsigned lane) {
  const unsigned g = lane / 4, q = lane % 4;
  const bool b0 = q & 1u, b1 = q & 2u;
#pragma unroll
  for (unsigned h = 0; h < 2; ++h) {  // rows g, g + 8
    const unsigned r = g + 8 * h;
#pragma unroll
    for (unsigned m = 0; m < N / 32; ++m) {
      uint32_t a[4];
#pragma unroll
      for (unsigned jj = 0; jj < 4; ++jj) {
        const __nv_bfloat162 v = __floats2bfloat162_rn(acc[4 * (4 * m + jj) + 2 * h], acc[4 * (4 * m + jj) + 2 * h + 1]);
        a[jj] = *reinterpret_cast<const uint32_t*>(&v);
      }
      // lane bit 0 <-> word bit 0, then lane bit 1 <-> word bit 1: a[i] = lane 4 g + i's word q.
#pragma unroll
      for (unsigned p = 0; p < 2; ++p) {
        const uint32_t got = __shfl_xor_sync(0xffffffffu, b0 ? a[2 * p] : a[2 * p + 1], 1);
        if (b0) a[2 * p] = got;
        else a[2 * p + 1] = got;
      }
#pragma unroll
      for (unsigned p = 0; p < 2; ++p) {
        const uint32_t got = __shfl_xor_sync(0xffffffffu, b1 ? a[p] : a[p + 2], 2);
        if (b1) a[p] = got;
        else a[p + 2] = got;
      }
      if (r < valid && (hidden % N == 0 || col0 + 8 * (4 * m + q) < hidden))  // (whole blocks: folds away)
        *reinterpret_cast<uint4*>(out + (size_t)(row0 + r) * hidden + col0 + 8 * (4 * m + q)) =
            make_uint4(a[0], a[1], a[2], a[3]);
    }
  }
}
}  // namespace moe_expert

PL_OWN_FACT(block_m, moe_expert::BM);
PL_OWN_FACT(block_h, moe_expert::BH);
PL_OWN_FACT(block_n, moe_expert::BN);
PL_OWN_FACT(expert_stages, moe_expert::Solo::STAGES);  // with team_stages, sizes the smem claims (contract)
PL_OWN_FACT(team_stages, moe_expert::Team::STAGES);
PL_OWN_FACT(sched_bytes, (unsigned)sizeof(moe_expert::Sched<1>));  // one chunk's table: sizes [smem.sched] (x chunks)
PL_DECLARE_FACT(top_k);
PL_DECLARE_FACT(hidden);
PL_DECLARE_FACT(inter);
PL_DECLARE_FACT(experts);
PL_DECLARE_FACT_BOOL(biases);
PL_DECLARE_EXPORT(acc);
PL_DECLARE_WORKSPACE(sync);
PL_DECLARE_WORKSPACE(xs);
PL_DECLARE_WORKSPACE(xrow);
PL_DECLARE_WORKSPACE(hs);
PL_DECLARE_WORKSPACE(ys);
PL_DECLARE_SMEM(stages);
PL_DECLARE_SMEM(bars);
PL_DECLARE_SMEM(sched);
PL_DECLARE_BARRIER(wg0);
PL_DECLARE_BARRIER(wg1);
PL_DECLARE_BARRIER(team);

namespace moe_expert {
// The role over C chunks of 128 experts' counters (moe_shapes.h).
template <unsigned C>
__device__ __forceinline__ void run_chunks(unsigned pl_inst, const void* pl_params) {
  const Params& p = PL_PARAMS(Params);
  const unsigned lane = threadIdx.x % 32;
  const unsigned rt = pl::role_thread(PL_WARP_BEGIN()), wg = rt / 128, warp = rt / 32;
  const unsigned warps = PL_WARPS();
  const unsigned nw = gridDim.x * warps;
  // Each barrier by its own handle, so the linked SASS names the placed ids.
  const auto team_sync = [&]() { pl::named_barrier_sync(PL_BARRIER(team), 256); };
  const auto wg_sync = [&]() {
    if (wg) pl::named_barrier_sync(PL_BARRIER(wg1), 128);
    else pl::named_barrier_sync(PL_BARRIER(wg0), 128);
  };
  if (rt == 0) {
    pl::prefetch_tensor_map(&p.tmap_w13);
    pl::prefetch_tensor_map(&p.tmap_w2);
  }
  unsigned* sync = static_cast<unsigned*>(PL_WORKSPACE(sync));
  bool last;
  unsigned gen;
  const unsigned set = moe::enter(sync, moe::EXPERT, nw, lane, last, gen);
  unsigned* cur = sync + moe::SET(set, C);
  const __nv_bfloat16* xs = static_cast<const __nv_bfloat16*>(PL_WORKSPACE(xs));
  const unsigned* xrow = static_cast<const unsigned*>(PL_WORKSPACE(xrow));
  const __nv_bfloat16* hs = static_cast<const __nv_bfloat16*>(PL_WORKSPACE(hs));
  __nv_bfloat16* ys = static_cast<__nv_bfloat16*>(PL_WORKSPACE(ys));

  // Outside the accepted values (L-FACT-ACCEPT stops such a link; these fold away).
  const unsigned experts = PL_FACT(experts);
  if (PL_FACT(top_k) > 8 || experts > Sched<C>::EXPERTS) __trap();
  const unsigned hidden = PL_FACT(hidden);
  const unsigned inter = PL_FACT(inter);
  // down's last column block is part of one where hidden % block_n != 0 (accept: whole 64s): its
  // weight rows past the expert's are the next expert's, or zeros past the last (TMA), and its
  // columns past hidden are not stored.
  const unsigned hblocks = inter / BH, nblocks = moe::ceil_div(hidden, BN);
  unsigned count[4 * C], padded[4 * C], first_row[4 * C];  // value 4 c + i: expert 128 c + 4 lane + i
  if (p.world == 1) {
    // One warp polls ROUTED and the role's barrier hands its acquire on (the CUTLASS semaphore
    // pattern): 132 pollers of the word the router's finisher releases, not 1,056. (Per unit,
    // READY and HREADY stay polled by every warp: one poller there was slower at large T.)
    if (warp == 0) moe::wait_at_least(cur + moe::ROUTED, p.t);
    team_sync();
#pragma unroll
    for (unsigned c = 0; c < C; ++c)
#pragma unroll
      for (unsigned i = 0; i < 4; ++i) count[4 * c + i] = __ldcg(cur + moe::COUNTS + moe::EXPERT_SLOTS * c + 4 * lane + i);
  } else {  // this rank's experts only: their rows from every rank (the count exchange)
    moe::gather_counts<C>(sync, set, gen + 1, p.rank, p.world, lane, count, padded);
#pragma unroll
    for (unsigned c = 0; c < C; ++c) {
      const bool mine = (moe::EXPERT_SLOTS * c + 4 * lane) / (experts / p.world) == p.rank;
#pragma unroll
      for (unsigned i = 0; i < 4; ++i) count[4 * c + i] = mine ? count[4 * c + i] : 0u;
    }
  }
  // (after the exchange: no rank still reads this rank's other-set YDONE, moe_shapes.h)
  if (last) {
    // The set through an empty asm: what the optimiser may assume of it (0 or 1) once made
    // the separately linked and the single-unit builds select different instructions here
    // (fused_kernel_sass_test).
    unsigned s = set;
    asm("" : "+r"(s));
    moe::finish_launch(sync, moe::EXPERT, s, C, moe::HREADY(C), 2 * Sched<C>::EXPERTS, lane);
  }
  unsigned total;
#pragma unroll
  for (unsigned i = 0; i < 4 * C; ++i) padded[i] = moe::ceil_div(count[i], BM) * BM;
  moe::exclusive_scan<C>(padded, first_row, lane, total);  // dispatch's layout: block_m tiles
  const bool one_rank = p.world == 1;
  Sched<C>& sched = *reinterpret_cast<Sched<C>*>(pl::smem_base() + PL_SMEM(sched));

  // Both passes in mode M (Solo or Team), chosen once per launch by T.
  const auto passes = [&](auto mode) {
    using M = decltype(mode);
    constexpr bool TEAM = M::THREADS == 256;
    constexpr unsigned ROWS = M::ROWS;
    const unsigned gwg = TEAM ? blockIdx.x : wg * gridDim.x + blockIdx.x;  // unit u -> SM u % grid
    const unsigned nwg = TEAM ? gridDim.x : 2 * gridDim.x;
    const unsigned r0 = TEAM ? 16 * warp : 16 * (warp % 4);  // this warp's rows of a unit (wgmma m64 layout)
    Ring ring{pl::smem_base() + PL_SMEM(stages) + (TEAM ? 0u : wg * M::STAGES * M::STAGE),
              reinterpret_cast<uint64_t*>(pl::smem_base() + PL_SMEM(bars)) + (TEAM ? 0u : wg * M::STAGES), 0,
              TEAM ? rt : rt % 128, false, false, {}};
    const auto ring_sync = [&]() {
      if constexpr (TEAM) team_sync();
      else wg_sync();
    };
    // The ring's first thread initialises its mbarriers; every other thread of the role uses
    // them (arrives, waits) only after the role's barrier below, and thread 0 primes after it.
    if (ring.t == 0) {
      for (unsigned s = 0; s < M::STAGES; ++s) pl::mbar_init(ring.full + s, 1 + M::THREADS);  // TMA's + each thread's cp.async
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
      fence_proxy_async();
    }
    // The schedule: the role's first warp writes it, the role's barrier publishes it. Every
    // warp counts the pass's units (tiles x blocks) itself.
    unsigned tiles[4 * C], first[4 * C], tiles_total;
#pragma unroll
    for (unsigned i = 0; i < 4 * C; ++i) tiles[i] = moe::ceil_div(count[i], ROWS);
    moe::exclusive_scan<C>(tiles, first, lane, tiles_total);
    if (warp == 0) {
#pragma unroll
      for (unsigned c = 0; c < C; ++c) {
        const unsigned k = moe::EXPERT_SLOTS * c, *fc = first + 4 * c;
        store4(sched.count + k, count + 4 * c, lane);
        store4(sched.first_row + k, first_row + 4 * c, lane);
#pragma unroll
        for (unsigned pass = 0; pass < 2; ++pass) {
          const unsigned blocks = pass == 0 ? hblocks : nblocks;
          const unsigned f[4] = {fc[0] * blocks, fc[1] * blocks, fc[2] * blocks, fc[3] * blocks};
          store4(sched.first[pass] + k, f, lane);
        }
      }
    }
    team_sync();

    // Pass 1: gate/up ([gate; up] rows of w13 as one N = 2 * block_h tile), SwiGLU into hs.
    unsigned total = tiles_total * hblocks;
    // Unit u of pass 1: [gate; up] rows of w13, x rows of xs; `check`: test READY now.
    Known<C> known{0};
    const auto gateup_tile = [&](unsigned u, bool check) {
      if (u >= total) return Tile{0, 0, 0};
      const Unit w = locate<ROWS, C>(u, sched, 0, hblocks, lane);
      const unsigned cnt = w.count, row0 = sched.first_row[w.e] + w.tile * ROWS;
      if (check && !known.has(w.e)) known.refresh(cur + moe::READY(C), sched, 1, p.world > 1, lane);
      const bool ready = check && known.has(w.e);
      return Tile{(int)(w.e * 2 * inter + w.block * BH), row0,
                  min(ROWS, cnt - w.tile * ROWS) | VALID | (ready ? READY : 0u) | w.e << expert_shift<C>};
    };
    Tile tile = gateup_tile(gwg, false);
    prime<M, 2 * BH, 2>(ring, &p.tmap_w13, tile, (int)inter);
    moe::stamp(sync, moe::GATEUP_BEGIN, lane);  // (before the first readiness wait: the loop has no room)
    Pending pending{};
    // The loop's unit is `tile` (the last unit's `next`): what the epilogue needs is decoded
    // from its three words after the main loop, so nothing else is live through it.
    for (unsigned u = gwg; u < total; u += nwg) {
      if (!known_ready(tile)) {
        const unsigned e = expert_of<C>(tile), cnt = sched.count[e];
        if (p.world > 1) {  // rows from other GPUs: system scope
          while (moe::ld_acquire_sys(cur + moe::READY(C) + e) < cnt) __nanosleep(64);
          __syncwarp();
        } else {
          moe::wait_at_least(cur + moe::READY(C) + e, cnt);
        }
      }
      const Tile next = gateup_tile(u + nwg, true);
      float acc[BH];  // m64 x n(2 BH): BH floats per thread
      mainloop<M, 2 * BH, 2>(acc, ring, one_rank ? p.x : xs, one_rank ? xrow : nullptr, &p.tmap_w13, tile, next,
                             ring_sync, hidden, (int)inter);
      const Tile done = tile;
      tile = next;
      pending.release(cur, lane == 0);  // the last unit's HREADY (its h rows were stored a unit ago)
      const unsigned valid = done.meta & 0xFFFFu, e = expert_of<C>(done);
      // Solo: rows >= block_m belong to the next tile. Team: a unit's rows past its valid ones
      // may be the next expert's (whole block_m tiles of padding are never read): only warps
      // with a valid row export (their 16 rows lie in one block_m tile of this expert).
      if (r0 < (TEAM ? valid : BM)) {
        if (valid > r0) pending = {moe::HREADY(C) + e, min(16u, valid - r0) * BH};
        if (PL_FACT(biases))  // (a fact: false folds it away; b13 is laid out as w13's rows)
          add_gateup_bias<BH / 8>(acc, p.b13 + (size_t)done.b, inter, lane);
        PL_EXPORT(acc, acc, done.row0 + r0, (unsigned)done.b - e * 2 * inter);  // (w13 row = h column)
      }
    }
    __syncwarp();  // the warp's h rows are stored before lane 0 releases them
    pending.release(cur, lane == 0);

    moe::stamp(sync, moe::GATEUP_END, lane);

    // Pass 2: down projection into ys.
    total = tiles_total * nblocks;
    // Unit u of pass 2: rows of w2, h rows of hs; `check`: test HREADY now.
    const auto down_tile = [&](unsigned u, bool check) {
      if (u >= total) return Tile{0, 0, 0};
      const Unit w = locate<ROWS, C>(u, sched, 1, nblocks, lane);
      const unsigned cnt = w.count, row0 = sched.first_row[w.e] + w.tile * ROWS;
      if (check && !known.has(w.e)) known.refresh(cur + moe::HREADY(C), sched, inter, false, lane);
      const bool ready = check && known.has(w.e);
      return Tile{(int)(w.e * hidden + w.block * BN), row0,
                  min(ROWS, cnt - w.tile * ROWS) | VALID | (ready ? READY : 0u) | w.e << expert_shift<C>};
    };
    known = {0};
    tile = down_tile(gwg, false);
    prime<M, BN, 1>(ring, &p.tmap_w2, tile, 0);
    moe::stamp(sync, moe::DOWN_BEGIN, lane);
    for (unsigned u = gwg; u < total; u += nwg) {  // (the unit is `tile`, as in pass 1)
      if (!known_ready(tile)) {
        const unsigned e = expert_of<C>(tile);
        moe::wait_at_least(cur + moe::HREADY(C) + e, sched.count[e] * inter);
      }
      const Tile next = down_tile(u + nwg, true);
      float acc[BN / 2];
      mainloop<M, BN, 1>(acc, ring, hs, nullptr, &p.tmap_w2, tile, next, ring_sync, inter, 0);
      const Tile done = tile;
      tile = next;
      const unsigned valid = done.meta & 0xFFFFu, e = expert_of<C>(done), row0 = done.row0;
      const unsigned col0 = (unsigned)done.b - e * hidden;  // (w2 row = ys column)
      // One rank: the last unit's YDONE, by one thread. Its ys rows were stored before this
      // unit's ring barriers, so the release covers every thread's stores (CUTLASS's
      // semaphore pattern), and they have long reached L2: no thread waits on a fence here.
      pending.release(cur, ring.t == 0);
      store_rows16<BN>(acc, ys, hidden, row0 + r0, col0, valid - min(valid, r0), lane);
      // combine counts block_m tiles: a team unit is ceil(valid / block_m) of them
      const unsigned tiles = TEAM ? moe::ceil_div(valid, BM) : 1u;
      if (p.world > 1) {  // combine may read ys from another GPU: every thread's stores fenced at system scope
        moe::fence_sys();
        ring_sync();  // the whole unit is stored
        if (ring.t == 0) moe::red_release_sys(cur + moe::YDONE(C) + e, tiles);
      } else {
        pending = {moe::YDONE(C) + e, tiles};
      }
    }
    ring_sync();  // every thread's ys rows are stored before the ring's thread 0 releases them
    pending.release(cur, ring.t == 0);
  };
  // (Team mode on one rank only: expert parallelism's gathered rows stay on the tested solo path.)
#ifdef EXPERT_TEAM_MIN_T
  const unsigned team_min_t = EXPERT_TEAM_MIN_T;
#else
  const unsigned team_min_t =  // (facts: a constant)
      min(EXPERT_TEAM_MAX_T, moe::ceil_div(EXPERT_TEAM_MIN_ROWS * experts, PL_FACT(top_k)));
#endif
  if (p.t >= team_min_t && p.world == 1) passes(Team{});
  else passes(Solo{});
  moe::stamp(sync, moe::DOWN_END, lane);
}
}  // namespace moe_expert

MOE_CHUNKED_ENTRY(moe_expert, run)
