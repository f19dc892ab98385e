// Toy role that owns the fact `width` (from -DRELINK_WIDTH), fills a shared buffer of
// `width` floats, syncs its warp on a named barrier and writes the buffer's sum.
#define PL_COMPONENT owner
#include <pipelink.h>
#include "relink_params.h"

#ifndef RELINK_WIDTH
#error "build with -DRELINK_WIDTH=<the contract's fact.width.own>"
#endif
PL_OWN_FACT(width, RELINK_WIDTH);
PL_DECLARE_SMEM(buf);
PL_DECLARE_BARRIER(done);

PL_ENTRY(run) {
  const RelinkParams& p = PL_PARAMS(RelinkParams);
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  float* buf = reinterpret_cast<float*>(PL_SMEM_PTR(buf));
  for (unsigned i = t; i < RELINK_WIDTH; i += 32 * PL_WARPS()) buf[i] = float(i) + 1.0f;
  pl::named_barrier_sync(PL_BARRIER(done), 32 * PL_WARPS());
  if (t == 0) {
    float s = 0.0f;
    for (unsigned i = 0; i < RELINK_WIDTH; ++i) s += buf[i];
    p.out[blockIdx.x * 4 + 0] = s;
  }
}
