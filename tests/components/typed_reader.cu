// Reader of the typed-facts test: each handle returns its fact's C type, folded by LTO.
#define PL_COMPONENT typed_reader
#include <pipelink.h>

PL_DECLARE_FACT_U64(big);
PL_DECLARE_FACT_I32(offset);
PL_DECLARE_FACT_BOOL(flag);

struct Params {
  long long* out;
};

PL_ENTRY(run) {
  const Params& p = PL_PARAMS(Params);
  if (threadIdx.x == 32 * PL_WARP_BEGIN()) {
    const long long v = static_cast<long long>(PL_FACT(big)) + PL_FACT(offset);
    p.out[blockIdx.x] = PL_FACT(flag) ? v : -v;
  }
}
