// The guard's mutation test: a role that claims 256 B of shared memory ([smem.buf]) and
// writes 256 + 4 * extra bytes of it. With extra = 0 it keeps to its claim; with extra > 0 it
// writes past it, which `link --guard` must catch and name (tests/linker/test_guard.py).
#define PL_COMPONENT overrun
#include <pipelink.h>

PL_DECLARE_SMEM(buf);

struct Params {
  unsigned* out;
  unsigned extra;
};

PL_ENTRY(run) {
  const Params& p = PL_PARAMS(Params);
  unsigned* buf = reinterpret_cast<unsigned*>(PL_SMEM_PTR(buf));
  const unsigned t = threadIdx.x - 32 * PL_WARP_BEGIN();
  for (unsigned i = t; i < 64 + p.extra; i += 32) buf[i] = i + 1;
  __syncwarp();
  if (t == 0) p.out[blockIdx.x] = buf[7];
}
