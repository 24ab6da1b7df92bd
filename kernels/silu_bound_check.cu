// tests/gpu only: the largest relative difference between tec_fast_silu and tec_silu over
// every bf16 x that kernels/row.cu's fast path trusts (|x| <= 16, |silu(x)| >= 2^-100), one x
// per thread (65536 threads). worst[0]: the relative difference's float bits (atomically
// maxed: non-negative floats order as their bits); worst[1]: that x's bf16 bits; worst[2]: how
// many x were tried.
#include "common.cuh"
#include "tec_math.h"

extern "C" __global__ void tec_silu_bound_check(unsigned* worst) {
  const unsigned bits = blockIdx.x * blockDim.x + threadIdx.x;
  if (bits > 0xFFFFu) return;
  const float x = __uint_as_float(bits << 16);
  const float exact = tec_silu(x);
  if (!(fabsf(x) <= 16.0f && fabsf(exact) >= 7.88860905e-31f)) return;
  atomicAdd(&worst[2], 1u);
  const float relative = (float)(fabs((double)tec_fast_silu(x) - (double)exact) / fabs((double)exact));
  const unsigned previous = atomicMax(&worst[0], __float_as_uint(relative));
  if (__float_as_uint(relative) > previous) worst[1] = bits;  // a race between two new maxima only blurs the example
}
