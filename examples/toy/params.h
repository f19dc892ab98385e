// Host parameters shared by the toy components (each contract lists them in this order).
#pragma once
struct ToyParams {
  const float* in;   // [blocks * tiles * tile] input
  float* out;        // [blocks * 32 * 4] output
  unsigned tiles;    // tiles per block
};
