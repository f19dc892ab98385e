// dec_rope.cu — the attention role's per-head operations on f32 heads in shared memory.
// rope: rotary position embedding as Hugging Face's Llama applies it ("rotate half"):
// element i of a head turns with element i + head_dim / 2 by the angle pos · inv_freq[i]
// (inv_freq: f32 [head_dim / 2], the model's table with its scaling, from the host). In place on
// `n` consecutive heads of f32 in shared memory, by the calling role's 128 threads; ends with a
// barrier so every thread sees the result.
// headnorm: Qwen3's RMSNorm of each head over head_dim (weight w [head_dim], before RoPE), a
// warp a head; ends with the same barrier.
#define PL_COMPONENT dec_rope
#include <pipelink.h>

PL_DECLARE_FACT(head_dim);
PL_DECLARE_BARRIER(done);

PL_CALLABLE(rope)(unsigned pl_inst, float* v, unsigned n, unsigned pos, const float* inv_freq) {
  const unsigned half = PL_FACT(head_dim) / 2, t = pl::role_thread(PL_WARP_BEGIN());
  for (unsigned i = t; i < n * half; i += 128) {
    const unsigned head = i / half, j = i % half;
    // The f32 angle, as transformers computes it, reduced to [-pi, pi] in f64 (exact enough for
    // any position: sincosf's own reduction of large angles needs a local-memory table).
    const double a = (double)((float)pos * __ldg(inv_freq + j));
    const double two_pi = 6.283185307179586, turns = 0.15915494309189535;  // 1 / (2 pi)
    float s, c;
    __sincosf((float)(a - two_pi * rint(a * turns)), &s, &c);
    float* x = v + head * 2 * half;
    const float x1 = x[j], x2 = x[j + half];
    x[j] = x1 * c - x2 * s;
    x[j + half] = x2 * c + x1 * s;
  }
  pl::named_barrier_sync(PL_BARRIER(done), 128);
}

PL_CALLABLE(headnorm)(unsigned pl_inst, float* v, unsigned n, const float* w, float eps) {
  const unsigned hd = PL_FACT(head_dim), t = pl::role_thread(PL_WARP_BEGIN()), lane = t % 32;
  for (unsigned head = t / 32; head < n; head += 4) {
    float* x = v + head * hd;
    float ss = 0.f;
    for (unsigned i = lane; i < hd; i += 32) ss += x[i] * x[i];
    for (unsigned off = 16; off; off /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    const float r = rsqrtf(ss / (float)hd + eps);
    for (unsigned i = lane; i < hd; i += 32) x[i] = x[i] * r * __ldg(w + i);
  }
  pl::named_barrier_sync(PL_BARRIER(done), 128);
}
