// The guard's read mutation test: a role that claims 256 B of shared memory ([smem.buf]),
// fills its 64 words through PL_SMEM_AT and reads word 63 + extra back. With extra = 0 it
// keeps to its claim; with extra = 1 it reads one element past it, which writes nothing, so
// only the checked accessor can see it: `link --guard` must trap naming the claim and this
// file's line (tests/test_guard.py).
#define PL_COMPONENT overread
#include <pipelink.h>

PL_DECLARE_SMEM(buf);

struct Params {
  unsigned* out;
  unsigned extra;
};

PL_ENTRY(run) {
  const Params& p = PL_PARAMS(Params);
  const unsigned t = threadIdx.x - 32 * PL_WARP_BEGIN();
  for (unsigned i = t; i < 64; i += 32) PL_SMEM_AT(unsigned, buf, i) = i + 1;
  __syncwarp();
  if (t == 0) p.out[blockIdx.x] = PL_SMEM_AT(unsigned, buf, 63 + p.extra);
}
