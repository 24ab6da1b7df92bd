// What the GPU tests share: checked CUDA calls, the visible skip without a device, and
// loading an NVRTC cubin the way the runtime will (cudaLibraryLoadData, never libcuda).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CHECK_CUDA(call)                                                                                    \
  do {                                                                                                      \
    const cudaError_t err_ = (call);                                                                        \
    if (err_ != cudaSuccess) {                                                                              \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::exit(1);                                                                                         \
    }                                                                                                       \
  } while (0)

namespace tec::plan {
struct Profile;
struct Step;
}  // namespace tec::plan
namespace tec::runtime {
class Session;
}  // namespace tec::runtime

namespace tec::gpu_test {

// Whether every buffer the step's ops write (and the amax each delayed-scaling output stages)
// holds the same bytes in two arena images: the CPU reference's and the GPU's after the step.
bool step_outputs_equal(const plan::Profile& profile, const plan::Step& step, const uint8_t* cpu, const uint8_t* gpu);
// The bytes of every buffer of the named tensors, downloaded in order.
std::vector<uint8_t> tensor_bytes(const runtime::Session& s, const std::vector<std::string>& names, cudaStream_t stream);

struct Library {
  cudaLibrary_t library = nullptr;
  explicit Library(const std::vector<uint8_t>& cubin) {
    CHECK_CUDA(cudaLibraryLoadData(&library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  }
  ~Library() { cudaLibraryUnload(library); }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  const void* kernel(const char* name) const {
    cudaKernel_t k;
    CHECK_CUDA(cudaLibraryGetKernel(&k, library, name));
    return reinterpret_cast<const void*>(k);
  }
};

// Each test returns its number of failed cases.
int quantize_per_tensor_test(const std::string& arch);
int fp8_encode_test(const std::string& arch);
int silu_bound_test(const std::string& arch);
int delayed_update_test(const std::string& arch);
int train_plans_test(const std::string& arch);
int moe_test(const std::string& arch);
int embedding_test(const std::string& arch);  // in moe_gpu_test.cpp: token ids, like routing, are index data
int plans_test(const std::string& arch);  // TEC_GPU_TEST_SMALL=1 skips examples/mlp.json
int session_leak_test();
int tuning_test();
int tensor_parallel_test(const std::string& arch);  // the NCCL cases skip, saying so, without NCCL; the run without 2 GPUs

}  // namespace tec::gpu_test
