// The GPU tests (label gpu). Without a CUDA device the binary prints why and exits 77, which
// ctest reports as skipped, never as passed.
#include "gpu_util.h"

int main() {
  int devices = 0;
  const cudaError_t probe = cudaGetDeviceCount(&devices);
  if (probe != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: no CUDA device (%s); GPU tests run on the lent H100 (README.md, Tests)\n",
                probe != cudaSuccess ? cudaGetErrorString(probe) : "0 devices");
    return 77;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const std::string arch = "sm_" + std::to_string(prop.major * 10 + prop.minor);
  std::printf("device: %s (%s)\n", prop.name, arch.c_str());
  const int failures = tec::gpu_test::quantize_per_tensor_test(arch) + tec::gpu_test::delayed_update_test(arch) +
                       tec::gpu_test::plans_test(arch) + tec::gpu_test::session_leak_test() +
                       tec::gpu_test::tuning_test();
  std::printf("GPU tests: %s (%d failed case groups)\n", failures ? "FAILED" : "all passed", failures);
  return failures ? 1 : 0;
}
