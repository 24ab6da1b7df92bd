// On the GPU: the delayed-scaling update kernel (one launch for every delayed tensor) must
// leave histories and scales bit-identical to reference::delayed_scaling_update, including
// the edge cases: nothing staged (amax 0: no roll), NaN and inf amaxes, margins, both
// algorithms, and history lengths 1, 16 and 1024.
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>

#include "codegen/quantize_kernels.h"
#include "gpu_util.h"
#include "reference/quantize.h"

namespace tec::gpu_test {

namespace {
struct DeviceTensor {  // kernels/delayed_scaling_update.cu: TecDelayedTensor
  float* history;
  float* scale;
  float* scale_inv;  // not read by the update
  float scaled_max;
  int most_recent;
  int history_stride;  // 1: a tensor's own history (a grouped tensor's members: the train group's MoE cases)
};
}  // namespace

int delayed_update_test(const std::string& arch) {
  const codegen::KernelCompiler compiler(codegen::default_cache_dir());
  int failures = 0;
  std::mt19937 rng(11);
  for (int len : {1, 16, 1024}) {
    const Library library(compiler.compile({codegen::delayed_update_kernel(len, arch)}).at(0).cubin);
    const int count = 24;
    std::vector<std::vector<float>> histories(count, std::vector<float>(static_cast<size_t>(len)));
    std::vector<float> scales(count), scaled_max(count);
    std::vector<int> most_recent(count);
    std::uniform_real_distribution<float> amax(0.0f, 30.0f);
    for (int i = 0; i < count; ++i) {
      for (float& h : histories[static_cast<size_t>(i)]) h = amax(rng);
      const float staged[] = {0.0f, 3.0f, NAN, INFINITY, 1e-40f, 200.0f};
      histories[static_cast<size_t>(i)][0] = staged[i % 6];
      if (i % 7 == 3) histories[static_cast<size_t>(i)].back() = NAN;
      scales[static_cast<size_t>(i)] = 2.5f;
      const float fp8_max = i % 2 ? 448.0f : 57344.0f;
      const int margin = i % 3;
      scaled_max[static_cast<size_t>(i)] = fp8_max * std::ldexp(1.0f, -margin);
      most_recent[static_cast<size_t>(i)] = (i / 2) % 2;
    }
    // Device copies, then one launch.
    std::vector<DeviceTensor> args(count);
    std::vector<void*> allocations;
    for (int i = 0; i < count; ++i) {
      float *h, *s;
      CHECK_CUDA(cudaMalloc(&h, static_cast<size_t>(len) * 4));
      CHECK_CUDA(cudaMalloc(&s, 4));
      CHECK_CUDA(cudaMemcpy(h, histories[static_cast<size_t>(i)].data(), static_cast<size_t>(len) * 4, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(s, &scales[static_cast<size_t>(i)], 4, cudaMemcpyHostToDevice));
      args[static_cast<size_t>(i)] = {h, s, nullptr, scaled_max[static_cast<size_t>(i)], most_recent[static_cast<size_t>(i)], 1};
      allocations.push_back(h);
      allocations.push_back(s);
    }
    DeviceTensor* device_args;
    CHECK_CUDA(cudaMalloc(&device_args, sizeof(DeviceTensor) * count));
    CHECK_CUDA(cudaMemcpy(device_args, args.data(), sizeof(DeviceTensor) * count, cudaMemcpyHostToDevice));
    int n = count;
    void* launch_args[] = {&device_args, &n};
    CHECK_CUDA(cudaLaunchKernel(library.kernel("tec_delayed_update"), dim3(count), dim3(256), launch_args, 0, nullptr));
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaDeviceSynchronize());
    int wrong = 0;
    for (int i = 0; i < count; ++i) {
      std::vector<float> got(static_cast<size_t>(len));
      float got_scale;
      CHECK_CUDA(cudaMemcpy(got.data(), args[static_cast<size_t>(i)].history, static_cast<size_t>(len) * 4, cudaMemcpyDeviceToHost));
      CHECK_CUDA(cudaMemcpy(&got_scale, args[static_cast<size_t>(i)].scale, 4, cudaMemcpyDeviceToHost));
      std::vector<float> want = histories[static_cast<size_t>(i)];
      float want_scale = scales[static_cast<size_t>(i)];
      // The reference takes fp8_max and margin; scaled_max = fp8_max * 2^-margin as above.
      reference::delayed_scaling_update(want, want_scale, i % 2 ? 448.0f : 57344.0f, i % 3,
                                        most_recent[static_cast<size_t>(i)] ? AmaxAlgo::most_recent : AmaxAlgo::max);
      if (std::memcmp(got.data(), want.data(), got.size() * 4) != 0 || std::memcmp(&got_scale, &want_scale, 4) != 0) {
        ++wrong;
        std::printf("  L=%d tensor %d: scale gpu %g reference %g, history %s\n", len, i, got_scale, want_scale,
                    std::memcmp(got.data(), want.data(), got.size() * 4) ? "differs" : "same");
      }
    }
    for (void* p : allocations) CHECK_CUDA(cudaFree(p));
    CHECK_CUDA(cudaFree(device_args));
    std::printf("%-4s delayed update, amax_history_len=%d, %d tensors in one launch\n", wrong ? "FAIL" : "ok", len, count);
    failures += wrong != 0;
  }
  return failures;
}

}  // namespace tec::gpu_test
