// tests/gpu only: counts the floats on which the two FP8 encodings of kernels/common.cuh
// disagree (tec_encode_fp8, the reference's integer arithmetic, against sm_89's conversion
// instruction that the kernels use), over the float bit patterns [base, base + gridDim.x *
// blockDim.x * TEC_PER_THREAD). slot: mismatches[0] counts, mismatches[1] keeps one bit pattern.
#include "common.cuh"

#define TEC_PER_THREAD 64

extern "C" __global__ void tec_fp8_encode_check(unsigned long long base, unsigned long long* mismatches) {
  const unsigned long long first = base + ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) * TEC_PER_THREAD;
  unsigned long long count = 0;
  u32 example = 0;
  for (int k = 0; k < TEC_PER_THREAD; ++k) {
    const u32 bits = (u32)(first + k);
    const float x = __uint_as_float(bits);
    const bool e4m3_differs = tec_encode_fp8<3, 7, 0x7Eu>(x) != tec_encode_fp8_hardware<true>(x);
    const bool e5m2_differs = tec_encode_fp8<2, 15, 0x7Bu>(x) != tec_encode_fp8_hardware<false>(x);
    if (e4m3_differs || e5m2_differs) {
      ++count;
      example = bits;
    }
  }
  if (count) {
    atomicAdd(&mismatches[0], count);
    mismatches[1] = example;
  }
}
