// The guard's barrier mutation test: a two-warp role syncs its named barrier through
// PL_BARRIER_SYNC counting 64 >> extra threads. With extra = 0 that is the contract's 64; with
// extra = 1 it is 32, a count held in a register that the linked-SASS check cannot see, and
// `link --guard` must trap naming the barrier and this file's line (tests/test_guard.py).
// Built with -DBADBARRIER_COUNT=<n> the count is an immediate: every link rejects a wrong one
// (L-BARRIER-THREADS).
#define PL_COMPONENT badbarrier
#include <pipelink.h>

PL_DECLARE_BARRIER(sync);

struct Params {
  unsigned* out;
  unsigned extra;
};

PL_ENTRY(run) {
  const Params& p = PL_PARAMS(Params);
  const unsigned t = threadIdx.x - 32 * PL_WARP_BEGIN();
#ifdef BADBARRIER_COUNT
  PL_BARRIER_SYNC(sync, BADBARRIER_COUNT);
#else
  PL_BARRIER_SYNC(sync, 64u >> p.extra);
#endif
  if (t == 0) p.out[blockIdx.x] = 64u >> p.extra;
}
