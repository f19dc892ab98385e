// dec_embed.cu — the embedding lookup: x[i] = f32(table[token, i]) for i < n (the bf16
// [vocab, n] table), the residual stream's start, by the calling role's 256 threads.
#define PL_COMPONENT dec_embed
#include <pipelink.h>

PL_CALLABLE(embed)(unsigned pl_inst, unsigned token, const void* table, float* x, unsigned n) {
  const uint16_t* row = static_cast<const uint16_t*>(table) + (size_t)token * n;
  for (unsigned i = pl::role_thread(PL_WARP_BEGIN()); i < n; i += 256) x[i] = __uint_as_float((unsigned)__ldg(row + i) << 16);
}
