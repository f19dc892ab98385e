// dec.h — what the decode megakernel's weight stream (dec_stream) and step (dec_step) agree on:
// the instruction schedule of one decode step, the packed weight layout they both walk, and the
// readiness-counter words of workspace `sync`. Nothing model-specific: every size is a function
// of the model's facts (hidden, layers, heads, kv_heads, head_dim, inter, vocab), which the
// kernel file owns (kernels/decode/decode_models.bzl) and each owner reads through its handles.
//
// The step, in order (op index in brackets; L layers):
//   [0]            EMBED  x = embed[token]                                  1 task
//   per layer l, op 1 + 5 l + ...
//   [+0] QKV   qkv = W_qkv · rmsnorm(x, ln1[l])                          matvec tiles
//   [+1] ATTN  ao = attention(rope(q), cache + rope(k), v); cache[pos] = k, v   the attention package's tasks
//   [+2] O     x += W_o · ao                                               matvec tiles
//   [+3] GU    h = silu(W_gate · n) * (W_up · n), n = rmsnorm(x, ln2[l])    matvec tiles (gate and up rows in one tile)
//   [+4] DOWN  x += W_down · h                                            matvec tiles
//   [1 + 5 L]      HEAD   logits = W_head · rmsnorm(x, norm); argmax          matvec tiles
// Every task of op k waits until op k - 1's counter holds all its tasks (sync word OPS + k - 1),
// then runs; a CTA adds the number of its tasks of op k to op k's counter once, after its last
// one (release: a gpu-scope fence per op, not per tile). A chain of full dependencies: op k - 2's
// writes reach op k through k - 1's acquire and release. The weight stream walks the matvec
// tiles of its CTA in the same order and runs ahead of the counters, bounded only by its ring:
// the next op's (and the next layer's) weights load while the current op still waits.
//
// Tiles: a matvec op's weight matrix is [rows, k] row-major bf16; a tile is r = tile_rows(k)
// consecutive rows (the largest power of two with r k <= tile_elems, at least 1), or for GU r
// gate rows followed by r up rows: the packed layout interleaves them so every tile is
// contiguous. tile_elems is the weight stream's fact (16384: 32 KB); a ring stage holds r rows
// (2 tile_elems bytes), so a GU tile is two loads, its gate rows then its up rows, and every
// stage is full (a stage sized for a whole GU tile would carry plain tiles half empty and hold
// half as many). Tile i of an op goes to CTA (i + rot) mod G, where rot is the number of tiles
// of all earlier matvec ops (so the remainders rotate over the grid). The DOWN op's k may be
// split (fact `down_chunks`, the batched builds'): its tile i = q chunks + c holds rows
// [q r, q r + r) over k-chunk c of inter / chunks elements, contiguous in the packed buffer, and
// adds its partial sums into the residual (red.add). A CTA's tiles are G apart, so with chunks
// dividing G each CTA multiplies one chunk: its input is B rows of that chunk alone.
//
// Batch (fact `batch`, B <= MAX_BATCH sequences a step): the weights stream once and every tile
// multiplies the B input vectors at once (dec_matvec's matvec_batch, tensor cores); the
// activations (x, qkv, ao, h, the logits) hold B rows, xin B rows of the op's k + XIN_PAD
// elements, y B rows of y_floats() a buffer, and the attention role's tasks cover every
// sequence's heads and chunks. Batch 1 takes the single-vector path (the fact folds the choice).
//
// Packed weights (`weights`, bf16, one buffer; kernels/decode/llama_pack.py writes it), per
// layer: W_qkv [q_dim + 2 kv_dim, hidden] (q, k, v rows as Hugging Face's q/k/v_proj),
// W_o [hidden, q_dim], W_gu [2 inter, hidden] (r_h gate rows, then the same r_h up rows, ...),
// W_down [hidden, inter] (with down_chunks c > 1: blocks [r rows, inter / c] in tile order,
// rows-block major). The head is a separate matrix (`head`, [vocab, hidden]: the
// embedding when tied) and the norms a separate f32 buffer (`norms`: ln1[l], ln2[l] for each
// layer, then the final norm, each [hidden]).
//
// sync (u32 words, zero between launches): FINISH counts the CTAs done with the step; the last
// one publishes the token, advances the position and zeroes every word again, so CUDA-graph
// replays need no memset. BEST (u64 a sequence) is the packed argmax of its logits.
#pragma once
#include <stdint.h>

// The model's facts and the schedule's, declared by every role that walks the schedule (a macro:
// it declares the handles of the component being compiled; an unused declaration references
// nothing). Model{DEC_MODEL_FIELDS, tile_elems} reads them.
#define DEC_MODEL_FACTS()    \
  PL_DECLARE_FACT(hidden);   \
  PL_DECLARE_FACT(layers);   \
  PL_DECLARE_FACT(heads);    \
  PL_DECLARE_FACT(kv_heads); \
  PL_DECLARE_FACT(head_dim); \
  PL_DECLARE_FACT(inter);    \
  PL_DECLARE_FACT(vocab);    \
  PL_DECLARE_FACT(tile_elems); \
  PL_DECLARE_FACT(down_chunks); \
  PL_DECLARE_FACT_BOOL(unfused)
#define DEC_MODEL_FIELDS \
  PL_FACT(hidden), PL_FACT(layers), PL_FACT(heads), PL_FACT(kv_heads), PL_FACT(head_dim), PL_FACT(inter), PL_FACT(vocab)

namespace dec {

enum Kind : unsigned { EMBED = 0, QKV, ATTN, O, GU, DOWN, HEAD };

constexpr unsigned THREADS = 256;            // dec_step's role: 8 warps
// xin's rows at batch > 1 are k + XIN_PAD elements apart: 64 bytes past a multiple of 128, so the
// quarter-warp that reads two rows' 64-byte runs at once hits distinct banks
constexpr unsigned XIN_PAD = 32;

// sync words
constexpr unsigned FINISH = 0;
constexpr unsigned BEST = 2;                 // u64 a sequence at words 2 + 2 b, 3 + 2 b
constexpr unsigned MAX_BATCH = 32;           // [fact.batch] accept (dec_step_wide's; dec_step's is 8)
constexpr unsigned NARROW_BATCH = 8;         // batches up to this: dec_step's contract (y_floats)
// op k's counter at word ops_base(batch) + k: past the batch's BEST words, in whole 16s (16 up to batch 7)
__host__ __device__ constexpr unsigned ops_base(unsigned batch) { return (2 + 2 * batch + 15) / 16 * 16; }
__host__ __device__ constexpr unsigned sync_words(unsigned layers, unsigned batch) {
  return ops_base(batch) + 2 + 5 * layers;
}

// state (the caller's int32 [4 batch]): per sequence b, words 4 b + ST_TOKEN (the token in and
// out) and 4 b + ST_POS (the position, its cache length, in and out); word ST_ERROR of sequence
// 0 is the step's error flag (1: a position reached the cache's capacity; nothing was written
// and no sequence advanced). Tokens and positions are published by the launch that runs the
// HEAD op. Batch B > 1: the sequences' positions may differ (a ragged batch).
constexpr unsigned ST_TOKEN = 0, ST_POS = 1, ST_ERROR = 2, ST_WORDS = 4;

struct Model {
  unsigned hidden, layers, heads, kv_heads, head_dim, inter, vocab;
  unsigned tile_elems;  // the weight stream's fact: elements of a plain tile (a ring stage holds two)
  // the kernel file's fact: the DOWN op's k in this many chunks (1 at batch 1; its walk only
  // matters to the roles that take DOWN tiles, the stream and the step)
  unsigned down_chunks = 1;
  __host__ __device__ unsigned stage_bytes() const { return 2 * tile_elems; }
  // floats a sequence in one of the step's two y buffers ([smem.y]: two buffers of batch such
  // rows): a GU tile's 2 r rows with r <= tile_elems / 256 (every k is whole 256s), at least 16
  // (dec_matvec's matvec with fewer than 8 rows adds its warps' sums through y[8 .. 16))
  __host__ __device__ unsigned y_floats() const { return tile_elems / 128; }
  // the same sized by the narrowest k of this model (r <= tile_elems / it), for the batches past
  // 8 (dec_step_wide's [smem.y]): 32 rows of every tile's sums would take the ring's room
  __host__ __device__ unsigned narrowest_k() const {
    const unsigned a = hidden < q_dim() ? hidden : q_dim(), c = inter / down_chunks;
    return a < c ? a : c;
  }
  __host__ __device__ unsigned wide_y_floats() const {
    const unsigned r = tile_elems / narrowest_k(), r2 = 2 * (r < 64 ? r : 64);
    return r2 > 16 ? r2 : 16;
  }
  __host__ __device__ unsigned q_dim() const { return heads * head_dim; }
  __host__ __device__ unsigned kv_dim() const { return kv_heads * head_dim; }
  __host__ __device__ unsigned qkv_rows() const { return q_dim() + 2 * kv_dim(); }
  __host__ __device__ unsigned ops() const { return 2 + 5 * layers; }
  // bf16 elements of one layer in the packed buffer
  __host__ __device__ unsigned long long layer_elems() const {
    return (unsigned long long)qkv_rows() * hidden + (unsigned long long)hidden * q_dim() +
           2ull * inter * hidden + (unsigned long long)hidden * inter;
  }
};

__host__ __device__ inline unsigned tile_rows(unsigned k, unsigned tile_elems) {
  unsigned r = 1;
  while (2 * r * k <= tile_elems) r *= 2;
  return r;
}

// A matvec op: `rows` output rows of a [rows, k] matrix in tiles of `r` rows (GU: 2 r, its
// output rows are pairs of gate and up rows), starting at element `base` of its buffer
// (the packed weights, or the head).
struct MatOp {
  unsigned kind, layer, k, r, tiles, tile_rows;  // tile_rows: rows a tile holds (GU: 2 r)
  unsigned long long base;                        // first element in its buffer
  bool head;                                      // the head buffer, not the packed weights
  unsigned chunks;                                // k-chunks a row holds: tile i covers chunk i % chunks
};
// The first output row of tile i (GU: its first gate row's pair) and the k-chunk it multiplies:
// a k-split op's tiles i = q chunks + c are rows [q r, q r + r), k [c k, c k + k) (the packed
// layout keeps each such block contiguous), so its row sums are partial: the step adds them.
__host__ __device__ inline unsigned tile_row0(const MatOp& op, unsigned i) { return i / op.chunks * op.r; }
__host__ __device__ inline unsigned tile_chunk(const MatOp& op, unsigned i) { return i % op.chunks; }

__host__ __device__ inline MatOp mat_op(const Model& m, unsigned kind, unsigned layer) {
  MatOp op{kind, layer, 0, 0, 0, 0, (unsigned long long)layer * m.layer_elems(), false, 1};
  switch (kind) {
    case QKV:
      op.k = m.hidden, op.r = tile_rows(op.k, m.tile_elems), op.tiles = m.qkv_rows() / op.r;
      break;
    case O:
      op.base += (unsigned long long)m.qkv_rows() * m.hidden;
      op.k = m.q_dim(), op.r = tile_rows(op.k, m.tile_elems), op.tiles = m.hidden / op.r;
      break;
    case GU:
      op.base += (unsigned long long)m.qkv_rows() * m.hidden + (unsigned long long)m.hidden * m.q_dim();
      op.k = m.hidden, op.r = tile_rows(op.k, m.tile_elems), op.tiles = m.inter / op.r;
      break;
    case DOWN:
      op.base += (unsigned long long)m.qkv_rows() * m.hidden + (unsigned long long)m.hidden * m.q_dim() +
                 2ull * m.inter * m.hidden;
      // batch > 1 splits k (the step's xin then holds B rows of inter / down_chunks, not of inter).
      // down_chunks is a power of two, so the chunk's tile holds down_chunks times the rows and
      // the tile count is the unsplit one (written so: the walk's loops then compile the same
      // in the linked kernel and the single-unit control)
      op.chunks = m.down_chunks, op.k = m.inter / op.chunks, op.r = tile_rows(op.k, m.tile_elems);
      op.tiles = m.hidden / tile_rows(m.inter, m.tile_elems);
      break;
    default:  // HEAD
      op.base = 0, op.head = true;
      op.k = m.hidden, op.r = tile_rows(op.k, m.tile_elems), op.tiles = m.vocab / op.r;
      break;
  }
  op.tile_rows = kind == GU ? 2 * op.r : op.r;
  return op;
}

// Ring loads a tile takes: GU its r gate rows, then its r up rows; the others one, r rows. Load h
// of tile i starts at element base + (i tile_rows + h r) k.
__host__ __device__ inline unsigned loads_per_tile(const MatOp& op) { return op.kind == GU ? 2u : 1u; }

// The first of CTA `cta`'s tiles among `tiles` when tile i goes to CTA (i + rot) mod G;
// the next ones are G apart.
__host__ __device__ inline unsigned first_tile(unsigned cta, unsigned rot, unsigned grid) {
  return (cta + grid - rot % grid) % grid;
}

// The matvec ops in schedule order: layer l's QKV, O, GU, DOWN, then the HEAD (index 4 L).
__host__ __device__ inline MatOp nth_mat_op(const Model& m, unsigned n) {
  if (n == 4 * m.layers) return mat_op(m, HEAD, 0);
  const unsigned r = n % 4;
  return mat_op(m, r == 0 ? QKV : r == 1 ? O : r == 2 ? GU : DOWN, n / 4);
}

// The op index of the n-th matvec op (nth_mat_op's order).
__host__ __device__ inline unsigned nth_mat_op_index(const Model& m, unsigned n) {
  if (n == 4 * m.layers) return 1 + 5 * m.layers;
  const unsigned r = n % 4;
  return 1 + 5 * (n / 4) + (r == 0 ? 0u : r + 1u);  // QKV +0, O +2, GU +3, DOWN +4
}

// The unfused baseline (fact `unfused`): the same kernel launched once per op, with the launch's
// ops [begin, end) as parameters. An op outside the range is skipped (its tiles too: the tile
// walk still counts them, so every launch assigns tiles as the fused kernel does); a dependency
// on an op of an earlier launch is met by the kernel boundary, so nothing waits for it. Fused,
// the fact folds every test to true.
struct OpRange {
  bool unfused;
  unsigned begin, end;
  __device__ bool runs(unsigned k) const { return !unfused || (k >= begin && k < end); }
  __device__ bool waits_for(unsigned k) const { return !unfused || k >= begin; }  // the op k's counter
  // whether the launch runs some layer's ATTN op (op 2 + 5 l)
  __device__ bool runs_attention(unsigned layers) const {
    bool any = false;
    for (unsigned l = 0; l < layers; ++l) any |= runs(2 + 5 * l);
    return any;
  }
};

// Spin until the counter at p reaches `need` (acquire at gpu scope). One asm block, so the
// linked kernel and the single-unit control get the same loop (a C++ loop let the optimiser
// pick `> need - 1` in one and `>= need` in the other).
__device__ __forceinline__ void wait_at_least(const unsigned* p, unsigned need) {
  asm volatile(
      "{\n .reg .pred p;\n .reg .u32 v;\n"
      "DEC_WAIT_%=:\n"
      " ld.acquire.gpu.global.u32 v, [%0];\n"
      " setp.lt.u32 p, v, %1;\n"
      " @p nanosleep.u32 32;\n"
      " @p bra DEC_WAIT_%=;\n}\n" ::"l"(p), "r"(need)
      : "memory");
}

// c += A · B for one mma.sync m16n8k16 step (bf16 operands, f32 sums): a0, a2 the lane's A words
// of row gid (k pairs 2 qd and 2 qd + 8), a1, a3 row gid + 8's, b0, b1 its B words (the same k
// pairs, column gid). The split-KV scores and the batched matvec both take each lane's operands
// from one 16-byte run, so their k order is a permutation both operands share.
__device__ __forceinline__ void mma_k16_rows16(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                               unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// the same with A's rows gid + 8 zero
__device__ __forceinline__ void mma_k16(float (&c)[4], unsigned a_lo, unsigned a_hi, unsigned b_lo, unsigned b_hi) {
  mma_k16_rows16(c, a_lo, 0u, a_hi, 0u, b_lo, b_hi);
}

// `bytes` (a multiple of 16) from src into L2, nothing waiting for them (the weight stream's
// lookahead, the attention's next K/V blocks)
__device__ __forceinline__ void prefetch_l2(const void* src, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}

// A 16-byte copy global -> shared through L2 (cp.async.cg: data other CTAs wrote), in flight
// until copy_async_wait_all: a role's copies all go out before it waits once
__device__ __forceinline__ void copy16_async(void* smem_dst, const void* global_src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((unsigned)__cvta_generic_to_shared(smem_dst)),
               "l"(global_src)
               : "memory");
}
__device__ __forceinline__ void copy_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// The timeline builds (DEC_TRACE, benchmarks/llama_decode_timeline.py): stamps of the global
// timer (ns, low 32 bits) in the caller's state buffer past its first TRACE_BASE words. The step
// role writes record [k][cta] of op k, then the attention role record [l][cta] of layer l after
// all of them; each record is TRACE_WORDS u32 (dec_step.cu, dec_attn_split.cu say which). The
// stamps start past the batch's state words: trace_base(batch) (16 up to batch 4).
constexpr unsigned TRACE_BASE = 16, TRACE_WORDS = 8;
__host__ __device__ constexpr unsigned trace_base(unsigned batch) {
  return ST_WORDS * batch > TRACE_BASE ? ST_WORDS * batch : TRACE_BASE;
}
__device__ __forceinline__ unsigned* trace_record(int* state, unsigned batch, unsigned record) {
  return reinterpret_cast<unsigned*>(state) + trace_base(batch) + record * TRACE_WORDS;
}
__device__ __forceinline__ unsigned now_ns() {
  unsigned long long v;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v));
  return (unsigned)v;
}

// ordered key of a float for an unsigned max: larger floats give larger keys
__device__ __forceinline__ unsigned long long argmax_key(float v, unsigned idx) {
  unsigned b = __float_as_uint(v);
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (unsigned long long)b << 32 | (0xffffffffu - idx);  // ties: the smaller index wins
}
__device__ __forceinline__ unsigned argmax_index(unsigned long long key) { return 0xffffffffu - (unsigned)key; }

}  // namespace dec
