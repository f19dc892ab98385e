// Owner of the typed-facts test: a u64 beyond 2^32, a negative i32 and a bool.
#define PL_COMPONENT typed_owner
#include <pipelink.h>

PL_OWN_FACT_U64(big, 5000000000ull);
PL_OWN_FACT_I32(offset, -7);
PL_OWN_FACT_BOOL(flag, true);

struct Params {
  unsigned* sink;
};

PL_ENTRY(run) {
  const Params& p = PL_PARAMS(Params);
  if (threadIdx.x == 32 * PL_WARP_BEGIN()) p.sink[blockIdx.x] = 1u;
}
