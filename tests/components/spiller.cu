// A role whose dynamically indexed local array lives in local memory (L-REGS unless
// `link --spills=warning`).
#define PL_COMPONENT spiller
#include <pipelink.h>

struct Params {
  float* out;
  unsigned k;
};

PL_ENTRY(run) {
  const Params& p = PL_PARAMS(Params);
  volatile float buf[512];  // too large for registers: local memory
  for (unsigned i = 0; i < 512; ++i) buf[i] = i * 0.5f + p.k;
  p.out[threadIdx.x] = buf[(p.k + threadIdx.x) % 512];
}
