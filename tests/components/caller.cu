// A one-warp role that calls the callable `scale` on its block's slice of `data`.
#define PL_COMPONENT caller
#include <pipelink.h>

PL_DECLARE_CALL(scale, float*, unsigned);

struct CallerParams {
  float* data;
  unsigned n;
};

PL_ENTRY(run) {
  const CallerParams& p = PL_PARAMS(CallerParams);
  PL_CALL(scale, p.data + blockIdx.x * p.n, p.n);
}
