// Pack-measurement component (tests/linker/test_pack.py): owns fact `width`, reads fact `lanes`,
// claims shared memory `stage`, syncs on barrier `sync`, and has 512 B of static
// __shared__ memory that pack must measure.
#define PL_COMPONENT meas
#include <pipelink.h>

#ifndef MEAS_WIDTH
#define MEAS_WIDTH 64
#endif
PL_OWN_FACT(width, MEAS_WIDTH);
PL_DECLARE_FACT(lanes);
PL_DECLARE_SMEM(stage);
PL_DECLARE_BARRIER(sync);

struct MeasParams {
  float* out;
  unsigned n;
};

PL_ENTRY(run) {
  __shared__ float fixed[128];  // 512 B of static shared memory
  const MeasParams& p = PL_PARAMS(MeasParams);
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  float* stage = reinterpret_cast<float*>(PL_SMEM_PTR(stage));
  fixed[t % 128] = float(t * p.n);
  stage[t] = fixed[(t + 1) % 128] * PL_FACT(lanes) + MEAS_WIDTH;
  pl::named_barrier_sync(PL_BARRIER(sync), 32 * PL_WARPS());
  p.out[blockIdx.x * 128 + t] = stage[(t + 7) % (32 * PL_WARPS())];
}
