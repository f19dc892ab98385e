// Toy role with no facts: two warps, a fixed shared buffer and a named barrier (slot 3).
#define PL_COMPONENT extra
#include <pipelink.h>
#include "relink_params.h"

PL_DECLARE_SMEM(ping);
PL_DECLARE_BARRIER(pong);

PL_ENTRY(run) {
  const RelinkParams& p = PL_PARAMS(RelinkParams);
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  unsigned* ping = reinterpret_cast<unsigned*>(PL_SMEM_PTR(ping));
  ping[t] = t;
  pl::named_barrier_sync(PL_BARRIER(pong), 32 * PL_WARPS());
  if (t == 0) {
    unsigned s = 0;
    for (unsigned i = 0; i < 32 * PL_WARPS(); ++i) s += ping[i];
    p.out[blockIdx.x * 4 + 3] = float(s);
  }
}
