// attn_cp.h — what the context-parallel attention components agree on (attn_cp_loader.cu, the
// zigzag variant attn_cp_causal.cu, attention_cp.py). N ranks, each a process with its GPU.
//
// Zigzag chunks: the causal sequence of S tokens is cut into 2N chunks of C = S / (2N) rows
// (C a multiple of 128); rank r holds chunks r and 2N-1-r, back to back, as its local
// sequence of 2C rows (so every rank has the same causal work). Global row of local row j:
// j < C ? r C + j : (2N-1-r) C + (j - C).
//
// Symmetric buffer (pipelink.peers, one per rank, mapped in every rank at window + s * stride):
//   [K: BH x 2C x 128 bf16][V: BH x 2C x 128 bf16] ... [flags at byte flags_off: FLAG_WORDS u32]
// Every rank's attn_cp_loader reads K/V blocks of rank s straight from that rank's region
// (TMA over one tensor map of the whole window, 256-byte rows), visiting ranks in ring order
// r, r-1, ..., r-N+1 (mod N).
// Flags (u32, in each rank's region): READY + s counts the launches of rank s whose K/V are in
// place (rank s adds 1 to READY + s of every rank, release, system scope, at its launch's start);
// DONE + s counts rank s's launches that finished reading every rank's K/V; GEN / ARR /
// DARR are this rank's launch generation and CTA arrival counts.
//
// aux (u32 words, device memory lent by the caller; attention_cp.visit_table builds it):
//   [0] world N  [1] rank r  [2] C  [3] BH  [4] rows_per_rank (= stride / 256)
//   [5] flags_row (flags_off / 256, the flags' row in a rank's region)  [6] local Q blocks 2C/128
//   [7] row = 1 + S/128; then per local Q block qb, at 8 + qb * row: the count of KV blocks it
//   visits, then their global block indices (| 1 << 31 on the diagonal), in ring order
#pragma once

namespace attn_cp {
constexpr unsigned READY = 0, DONE = 64, GEN = 128, ARR = 129, DARR = 130, FLAG_WORDS = 256;
constexpr unsigned MAX_WORLD = 64;
constexpr unsigned ROW_BYTES = 256;  // one row of K or V (128 bf16)
}  // namespace attn_cp
