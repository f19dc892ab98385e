// Host parameters of the relink toys (every contract lists them in this order).
#pragma once
struct RelinkParams {
  float* out;   // [gridDim.x * 4] results, one slot per role
  unsigned n;   // blocks
};
