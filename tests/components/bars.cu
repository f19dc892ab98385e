// A role that syncs on eight named barriers: two instances need 16 ids (L-BARRIER).
#define PL_COMPONENT bars
#include <pipelink.h>

PL_DECLARE_BARRIER(b0);
PL_DECLARE_BARRIER(b1);
PL_DECLARE_BARRIER(b2);
PL_DECLARE_BARRIER(b3);
PL_DECLARE_BARRIER(b4);
PL_DECLARE_BARRIER(b5);
PL_DECLARE_BARRIER(b6);
PL_DECLARE_BARRIER(b7);

PL_ENTRY(run) {
  const unsigned n = 32 * PL_WARPS();
  pl::named_barrier_sync(PL_BARRIER(b0), n);
  pl::named_barrier_sync(PL_BARRIER(b1), n);
  pl::named_barrier_sync(PL_BARRIER(b2), n);
  pl::named_barrier_sync(PL_BARRIER(b3), n);
  pl::named_barrier_sync(PL_BARRIER(b4), n);
  pl::named_barrier_sync(PL_BARRIER(b5), n);
  pl::named_barrier_sync(PL_BARRIER(b6), n);
  pl::named_barrier_sync(PL_BARRIER(b7), n);
}
