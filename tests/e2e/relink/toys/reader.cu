// Toy role that reads the fact `width` through its handle, stages `width` floats in its
// own shared buffer, syncs on a named barrier and writes a scaled sum (slot 1).
#define PL_COMPONENT reader
#include <pipelink.h>
#include "relink_params.h"

PL_DECLARE_FACT(width);
PL_DECLARE_SMEM(tmp);
PL_DECLARE_BARRIER(ready);

PL_ENTRY(run) {
  const RelinkParams& p = PL_PARAMS(RelinkParams);
  const unsigned t = pl::role_thread(PL_WARP_BEGIN()), width = PL_FACT(width);
  float* tmp = reinterpret_cast<float*>(PL_SMEM_PTR(tmp));
  for (unsigned i = t; i < width; i += 32 * PL_WARPS()) tmp[i] = 2.0f * float(i);
  pl::named_barrier_sync(PL_BARRIER(ready), 32 * PL_WARPS());
  if (t == 0) {
    float s = 0.0f;
    for (unsigned i = 0; i < width; ++i) s += tmp[i];
    p.out[blockIdx.x * 4 + 1] = s;
  }
}
