// On the GPU: the kernels encode FP8 with sm_89's conversion instruction; the CPU reference
// (and tec_encode_fp8 in kernels/common.cuh) with integer arithmetic. Both E4M3 and E5M2 must
// agree on every one of the 2^32 float bit patterns: NaNs, infinities, subnormals, the
// saturation edge and every rounding tie.
#include <cstdio>

#include "codegen/nvrtc.h"
#include "gpu_util.h"

namespace tec::gpu_test {

int fp8_encode_test(const std::string& arch) {
  const codegen::KernelCompiler compiler(codegen::default_cache_dir());
  const auto cubin = compiler.compile({codegen::KernelRequest{"fp8_encode_check.cu", {}, arch}}).at(0).cubin;
  const Library library(cubin);
  const void* kernel = library.kernel("tec_fp8_encode_check");
  unsigned long long* mismatches;
  CHECK_CUDA(cudaMalloc(&mismatches, 16));
  CHECK_CUDA(cudaMemset(mismatches, 0, 16));
  constexpr unsigned kBlocks = 1u << 14, kThreads = 256, kPerThread = 64;  // TEC_PER_THREAD
  constexpr unsigned long long kPerLaunch = 1ull * kBlocks * kThreads * kPerThread;  // 2^28
  for (unsigned long long base = 0; base < (1ull << 32); base += kPerLaunch) {
    void* args[] = {&base, &mismatches};
    CHECK_CUDA(cudaLaunchKernel(kernel, dim3(kBlocks), dim3(kThreads), args, 0, nullptr));
  }
  CHECK_CUDA(cudaGetLastError());
  unsigned long long got[2];
  CHECK_CUDA(cudaMemcpy(got, mismatches, 16, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaFree(mismatches));
  std::printf("%-4s fp8 encode: the conversion instruction and the integer encoding on all 2^32 floats (E4M3, E5M2)",
              got[0] ? "FAIL" : "ok");
  if (got[0]) std::printf(": %llu differ, e.g. bits 0x%08llx", got[0], got[1]);
  std::printf("\n");
  return got[0] ? 1 : 0;
}

}  // namespace tec::gpu_test
