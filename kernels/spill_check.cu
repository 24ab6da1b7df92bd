// tests/codegen/nvrtc_test.cpp only: a kernel that spills registers, so that the report of
// ptxas's spill warnings (te-compile's, and the kernel cache's on a hit) has one to report
// whatever tec's real kernels need. 128 values stay live across a loop, and a block of 1024
// threads leaves each thread 64 registers.
extern "C" __global__ void __launch_bounds__(1024, 1) tec_spill_check(const float* in, float* out, int rounds) {
  float v[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) v[i] = in[threadIdx.x + i * 1024];
  for (int r = 0; r < rounds; ++r)
#pragma unroll
    for (int i = 0; i < 128; ++i) v[i] = fmaf(v[i], v[(i + 1) % 128], v[(i + 37) % 128]);
#pragma unroll
  for (int i = 0; i < 128; ++i) out[threadIdx.x + i * 1024] = v[i];
}
