// attn.h — what the attention components agree on (each side also states it in its contract).
//
// Tensors are [B, H, S, D] bf16 contiguous, read as 2-D [(B*H*S), D] through TMA boxes of
// [128 rows, 64 cols] in SWIZZLE_128B order. A tile of 128 rows (Q block, K block or V
// block) is one ring stage of 32 KiB: d-columns 0..63 in bytes [0, 16K), 64..127 in [16K, 32K).
// Ring `q` carries the Q block of a work tile; ring `kv` carries K_0, V_0, K_1, V_1, ... of the
// KV blocks the variant's callables list, in that order.
//
// Declared interfaces between the core (attn_core), the loader (attn_loader) and a variant
// (a library exporting these callables; the core and loader never know which variant):
//   unsigned tile(t, q_len, bh, info)   1 and info = {q_block, bh, split, n_splits} of this
//                                       CTA's t-th work tile (persistent CTAs), 0: no more
//   unsigned kv_count(q_block, bh, split, q_len, kv_len, aux)   KV blocks this tile visits
//   unsigned kv_block(q_block, bh, split, i, q_len, kv_len, aux)  i-th block | kind << 31
//   float    score(s, q, k, bh, aux)   the (scaled) score of query row q and key k of head bh,
//                                      -inf to mask; called only on blocks of kind 1
// `aux` is one caller-lent pointer the core and loader pass along untouched (block lists,
// document ids, window size, softcap: the variant's own data).
#pragma once
#include <stdint.h>

namespace attn {
constexpr unsigned BLOCK = 128;        // rows of a Q / K / V tile
constexpr unsigned HEAD_DIM = 128;     // d
constexpr unsigned CHUNK_BYTES = BLOCK * 128;   // one 64-column swizzle chunk of a tile
constexpr unsigned TILE_BYTES = 2 * CHUNK_BYTES;  // 32 KiB
constexpr unsigned PARTIAL = 1u << 31;            // kv_block's kind bit: call `score` per element
constexpr unsigned BLOCK_MASK = 0x7FFFFFFFu;

// The core hands each work tile's result to the epilogue as one register fragment.
// Layout "attn_o(2)": role thread t (wg = t / 128, w = (t / 32) % 4, g = (t % 32) / 4,
// q = t % 4) holds o[nt * 4 + i] = unnormalised O at row 64 wg + 16 w + g + 8 (i / 2),
// column 8 nt + 2 q + (i % 2); m[j], l[j] the running max (log2 units) and sum of its rows
// 64 wg + 16 w + g + 8 j. info = the tile's {q_block, bh, split, n_splits}.
struct OutFrag {
  float o[64];
  float m[2];
  float l[2];
  unsigned info[4];
};
}  // namespace attn
