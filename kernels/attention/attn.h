// attn.h — what the attention components agree on (each side also states it in its contract).
//
// Tensors are [B, H, S, D] bf16 contiguous (D = 64, 128 or 256), read as 2-D [(B*H*S), D] through
// TMA boxes of [128 rows, 64 cols] in SWIZZLE_128B order. A tile of 128 rows (Q block, K block
// or V block) is one ring stage of D/64 chunks of 16 KiB: d-columns 0..63 in bytes [0, 16K),
// 64..127 in [16K, 32K), and so on.
// Ring `q` carries the Q block of a work tile; ring `kv` carries K_0, V_0, K_1, V_1, ... of the
// KV blocks the variant's callables list, in that order.
//
// Declared interfaces between the core (attn_core), the loader (attn_loader) and a variant
// (a library exporting these callables; the core and loader never know which variant):
//   unsigned tile(t, q_len, bh, info)   1 and info = {q_block, bh, split, n_splits} of this
//                                       CTA's t-th work tile (persistent CTAs), 0: no more
//   unsigned kv_count(q_block, bh, split, q_len, kv_len, aux)   KV blocks this tile visits
//   unsigned kv_block(q_block, bh, split, i, q_len, kv_len, aux)  i-th block | PARTIAL if some
//                                       of its scores are masked (FULL blocks: no mask math)
//   unsigned mask_bits(q, k0, kind, i, q_block, bh, aux)  once per PARTIAL block and row (two
//                                       rows a thread): bit 2 nt + e set iff key k0 + 8 nt + e
//                                       is visible to query q (k0 = 128 kb + 2 (t % 4); the 32
//                                       keys one thread holds of the row, attn_o(2) layout)
//   unsigned features(0)                a constant: SCORE_MOD if the variant modifies scores,
//                                       EARLY_MASK if its mask_bits read memory (asked early)
//   void     mod_params(bh, aux, prm)   once per tile (SCORE_MOD only): prm[0], prm[1]
//   float    score_mod(x, q, k, prm0, prm1)  every visited score (SCORE_MOD only): x = the
//                                       scaled score, returns the modified one
// `aux` is one caller-lent pointer the core and loader pass along untouched (block lists,
// document ranges, window size, softcap, ALiBi slopes: the variant's own data). No per-element
// call reads memory: whatever a mask or score needs is fetched once per block or per tile.
#pragma once
#include <stdint.h>

#ifndef ATTN_HEAD_DIM
#define ATTN_HEAD_DIM 128  // the core's build: 128 (attn_core), 64 (attn_core_d64) or 256 (attn_core_d256)
#endif
#ifndef ATTN_BLOCK_Q
#define ATTN_BLOCK_Q 128   // the core's build (fact block_q); the interfaces below assume 128
#endif

namespace attn {
// BLOCK, HEAD_DIM, CHUNK_BYTES and TILE_BYTES are the core's build: it owns them as facts
// block_q and head_dim (PL_OWN_FACT). Every other component reads the linked facts through
// PL_FACT (tests/kernels/test_attention_mutations.py checks no other source names these constants), so
// a reader cannot hold a value the link did not check.
constexpr unsigned BLOCK = ATTN_BLOCK_Q;  // rows of a Q / K / V tile
constexpr unsigned HEAD_DIM = ATTN_HEAD_DIM;  // d of the core's build
constexpr unsigned CHUNK_BYTES = BLOCK * 128;   // one 64-column swizzle chunk of a tile
constexpr unsigned TILE_BYTES = HEAD_DIM / 64 * CHUNK_BYTES;  // 32 KiB (d = 128), 16 / 64 KiB (d = 64 / 256)
static_assert(HEAD_DIM == 64 || HEAD_DIM == 128 || HEAD_DIM == 256, "the core is built for d = 64, 128 or 256");
constexpr unsigned PARTIAL = 1u << 31;            // kv_block's kind bit: mask_bits per row
constexpr unsigned SCORE_MOD = 1u;                // features(): score_mod on every visited score
constexpr unsigned EARLY_MASK = 2u;               // features(): mask_bits as the block's GEMMs go out
constexpr unsigned BLOCK_MASK = 0x7FFFFFFFu;

// The core hands each work tile's result to the epilogue as one register fragment.
// Layout "attn_o(2)": role thread t (wg = t / 128, w = (t / 32) % 4, g = (t % 32) / 4,
// q = t % 4) holds o[nt * 4 + i] = unnormalised O at row 64 wg + 16 w + g + 8 (i / 2),
// column 8 nt + 2 q + (i % 2) (nt < D / 8: o[0..D / 2 - 1] are used); m[j], l[j] the running max (log2 units) and sum of its rows
// 64 wg + 16 w + g + 8 j. info = the tile's {q_block, bh, split, n_splits}; more = 1 unless it
// is the role's last tile.
// One size for every build (the epilogues are compiled once and read the linked head_dim).
struct OutFrag {
  float o[128];
  float m[2];
  float l[2];
  unsigned info[4];
  unsigned more;  // 1: this role exports another tile after this one (an epilogue may defer a wait to it)
};
}  // namespace attn
