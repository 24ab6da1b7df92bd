// The GPU tests (label gpu). Without a CUDA device the binary prints why and exits 77, which
// ctest reports as skipped, never as passed.
#include "gpu_util.h"

#include <set>
#include <string>

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a run cut short by a timeout still shows how far it got
  // TEC_GPU_TEST_ONLY=<group> runs one group alone.
  const char* only = std::getenv("TEC_GPU_TEST_ONLY");
  const std::set<std::string> groups = {"encode", "quantize", "delayed", "plans", "train", "moe", "embedding", "leak", "tuning", "tp"};
  if (only && !groups.count(only)) {
    // A misspelt group would otherwise run nothing and report that everything passed.
    std::string names;
    for (const std::string& g : groups) names += (names.empty() ? "" : ", ") + g;
    std::printf("TEC_GPU_TEST_ONLY=%s names no group (%s)\n", only, names.c_str());
    return 2;
  }
  int devices = 0;
  const cudaError_t probe = cudaGetDeviceCount(&devices);
  if (probe != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: no CUDA device (%s); GPU tests run on the lent H100 (docs/testing.md)\n",
                probe != cudaSuccess ? cudaGetErrorString(probe) : "0 devices");
    return 77;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const std::string arch = "sm_" + std::to_string(prop.major * 10 + prop.minor);
  std::printf("device: %s (%s)\n", prop.name, arch.c_str());
  auto wanted = [&](const char* group) { return !only || std::string(only) == group; };
  int failures = 0;
  if (wanted("encode")) failures += tec::gpu_test::fp8_encode_test(arch);
  if (wanted("encode")) failures += tec::gpu_test::silu_bound_test(arch);
  if (wanted("quantize")) failures += tec::gpu_test::quantize_per_tensor_test(arch);
  if (wanted("delayed")) failures += tec::gpu_test::delayed_update_test(arch);
  if (wanted("plans")) failures += tec::gpu_test::plans_test(arch);
  if (wanted("train")) failures += tec::gpu_test::train_plans_test(arch);
  if (wanted("moe")) failures += tec::gpu_test::moe_test(arch);
  if (wanted("embedding")) failures += tec::gpu_test::embedding_test(arch);
  if (wanted("leak")) failures += tec::gpu_test::session_leak_test();
  if (wanted("tuning")) failures += tec::gpu_test::tuning_test();
  if (wanted("tp")) failures += tec::gpu_test::tensor_parallel_test(arch);
  if (only) std::printf("(TEC_GPU_TEST_ONLY=%s: the other groups did not run)\n", only);
  std::printf("GPU tests: %s (%d failed case groups)\n", failures ? "FAILED" : "all passed", failures);
  return failures ? 1 : 0;
}
