// A generic role for placement tests: two shared-memory claims (`buf`, `tmp`) and one
// named barrier (`sync`). Compile with -DWORKER=<name> to get another package of the
// same shape (its contract then says name = "<name>").
#ifndef WORKER
#define WORKER worker
#endif
#define PL_COMPONENT WORKER
#include <pipelink.h>

PL_DECLARE_SMEM(buf);
PL_DECLARE_SMEM(tmp);
PL_DECLARE_BARRIER(sync);

struct WorkerParams {
  unsigned* out;
  unsigned n;
};

PL_ENTRY(run) {
  const WorkerParams& p = PL_PARAMS(WorkerParams);
  const unsigned threads = 32 * PL_WARPS(), t = pl::role_thread(PL_WARP_BEGIN());
  unsigned* buf = reinterpret_cast<unsigned*>(PL_SMEM_PTR(buf));
  unsigned* tmp = reinterpret_cast<unsigned*>(PL_SMEM_PTR(tmp));
  buf[t] = t * p.n + blockIdx.x;
  pl::named_barrier_sync(PL_BARRIER(sync), threads);
  tmp[t] = buf[(t + 1) % threads] + PL_SMEM(buf);
  pl::named_barrier_sync(PL_BARRIER(sync), threads);
  p.out[blockIdx.x * threads + t] = tmp[(t + 3) % threads];
}
