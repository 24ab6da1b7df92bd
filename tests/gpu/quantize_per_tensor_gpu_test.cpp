// On the GPU: the NVRTC-compiled per-tensor FP8 quantize kernels (amax -> scale -> cast, with
// the transposed copy) must write exactly the bytes of the CPU reference (data, transposed
// data, scale_inv, and delayed scaling's staged amax), on seeded random bf16 data, with
// outputs poisoned before each of several runs.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "codegen/quantize_kernels.h"
#include "core/random.h"
#include "reference/convert.h"
#include "reference/quantize.h"
#include "gpu_util.h"

namespace tec::gpu_test {

namespace {

struct Case {
  Shape shape;
  Quantizer quantizer;
  Usage usage;
};

// Runs the three kernels and returns the buffers as the reference lays them out.
std::map<BufferRole, std::vector<uint8_t>> run_on_gpu(const TensorProto& proto, const std::vector<uint16_t>& x_bits,
                                                      const std::vector<uint8_t>& cubin, float delayed_scale,
                                                      float& staged_amax) {
  const Library library(cubin);
  const void* amax_kernel = library.kernel("tec_amax");
  const void* scale_kernel = library.kernel("tec_scale_from_amax");
  const void* cast_kernel = library.kernel("tec_cast");
  const long long m = proto.shape.rows(), k = proto.shape.cols(), n = m * k;
  uint16_t* x;
  uint8_t *data, *transposed;
  float *amax, *scale, *scale_inv, *history0;
  CHECK_CUDA(cudaMalloc(&x, n * 2));
  CHECK_CUDA(cudaMalloc(&data, n));
  CHECK_CUDA(cudaMalloc(&transposed, n));
  CHECK_CUDA(cudaMalloc(&amax, 4));
  CHECK_CUDA(cudaMalloc(&scale, 4));
  CHECK_CUDA(cudaMalloc(&scale_inv, 4));
  CHECK_CUDA(cudaMalloc(&history0, 4));
  CHECK_CUDA(cudaMemcpy(x, x_bits.data(), n * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemset(data, 0xFF, n));  // poison
  CHECK_CUDA(cudaMemset(transposed, 0xFF, n));
  CHECK_CUDA(cudaMemset(scale_inv, 0xFF, 4));
  CHECK_CUDA(cudaMemcpy(history0, &staged_amax, 4, cudaMemcpyHostToDevice));
  const bool delayed = proto.quantizer->kind == QuantizerKind::fp8_delayed;
  if (delayed) {
    CHECK_CUDA(cudaMemcpy(scale, &delayed_scale, 4, cudaMemcpyHostToDevice));
  } else {
    CHECK_CUDA(cudaMemset(amax, 0, 4));
    void* amax_args[] = {&x, const_cast<long long*>(&n), &amax};
    CHECK_CUDA(cudaLaunchKernel(amax_kernel, dim3(264), dim3(256), amax_args, 0, nullptr));
    void* scale_args[] = {&amax, &scale};
    CHECK_CUDA(cudaLaunchKernel(scale_kernel, dim3(1), dim3(1), scale_args, 0, nullptr));
  }
  long long mm = m, kk = k;
  void* cast_args[] = {&x, &mm, &kk, &scale, &data, &transposed, &scale_inv, &history0};
  const dim3 grid(static_cast<unsigned>((k + 31) / 32), static_cast<unsigned>((m + 31) / 32));
  CHECK_CUDA(cudaLaunchKernel(cast_kernel, grid, dim3(32, 8), cast_args, 0, nullptr));
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  std::map<BufferRole, std::vector<uint8_t>> out;
  for (const auto& b : proto.buffers()) out[b.role].resize(static_cast<size_t>(b.bytes));
  if (out.count(BufferRole::data)) CHECK_CUDA(cudaMemcpy(out[BufferRole::data].data(), data, n, cudaMemcpyDeviceToHost));
  if (out.count(BufferRole::columnwise_data))
    CHECK_CUDA(cudaMemcpy(out[BufferRole::columnwise_data].data(), transposed, n, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(out[BufferRole::scale_inv].data(), scale_inv, 4, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(&staged_amax, history0, 4, cudaMemcpyDeviceToHost));
  for (void* p : std::initializer_list<void*>{x, data, transposed, amax, scale, scale_inv, history0}) CHECK_CUDA(cudaFree(p));
  return out;
}

}  // namespace

int quantize_per_tensor_test(const std::string& arch) {
  const std::vector<Case> cases = {
      {{1000, 4160}, Quantizer::fp8_current(DType::fp8_e4m3), {true, true}},
      {{4, 250, 4160}, Quantizer::fp8_current(DType::fp8_e4m3), {true, false}},
      {{16, 4096}, Quantizer::fp8_current(DType::fp8_e4m3), {true, true}},
      {{2048, 4096}, Quantizer::fp8_current(DType::fp8_e5m2), {true, true}},
      {{37, 100}, Quantizer::fp8_current(DType::fp8_e4m3, true, 1e-6f), {true, true}},
      {{2048, 4096}, Quantizer::fp8_delayed(DType::fp8_e4m3), {true, true}},
      {{1000, 4160}, Quantizer::fp8_delayed(DType::fp8_e5m2), {false, true}},
  };
  const codegen::KernelCompiler compiler(codegen::default_cache_dir());
  int failures = 0, seed = 0;
  for (const Case& c : cases) {
    const TensorProto proto = TensorProto::dense(c.shape, DType::bf16).with_quantizer(c.quantizer).update_usage(c.usage);
    const auto cubin = compiler.compile({codegen::per_tensor_quantize_kernel(proto, arch)}).at(0).cubin;
    std::vector<float> x = random_weight(static_cast<uint64_t>(++seed), "x", c.shape.numel(), 0.0f, 3.0f);
    x[7] = 0.0f;
    x[11] = -1e-30f;  // subnormal territory for the cast
    std::vector<uint16_t> bits(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      bits[i] = reference::float_to_bf16(x[i]);
      x[i] = reference::bf16_to_float(bits[i]);
    }
    const float delayed_scale = 37.5f;
    // The reference.
    reference::QuantizedTensor want(proto);
    float want_staged = 0.25f;
    reference::quantize(proto, x, want.spans(), {}, reference::QuantizeState{delayed_scale, &want_staged});
    bool same = true;
    for (int run = 0; run < 3; ++run) {  // repeated runs must give the same bytes
      float staged = 0.25f;
      const auto got = run_on_gpu(proto, bits, cubin, delayed_scale, staged);
      for (const auto& [role, bytes] : want.storage) {
        const auto& g = got.at(role);
        size_t mismatches = 0, first = 0;
        for (size_t i = 0; i < bytes.size(); ++i)
          if (bytes[i] != g[i] && mismatches++ == 0) first = i;
        if (mismatches) {
          same = false;
          std::printf("  %s %s %s: %zu of %zu bytes differ, first at %zu (gpu %02x, reference %02x)\n", c.shape.str().c_str(),
                      c.quantizer.str().c_str(), std::string(to_string(role)).c_str(), mismatches, bytes.size(), first,
                      g[first], bytes[first]);
        }
      }
      if (c.quantizer.kind == QuantizerKind::fp8_delayed && std::memcmp(&staged, &want_staged, 4) != 0) {
        same = false;
        std::printf("  staged amax: gpu %g, reference %g\n", staged, want_staged);
      }
    }
    std::printf("%-4s quantize %-18s %-52s rowwise=%d columnwise=%d\n", same ? "ok" : "FAIL", c.shape.str().c_str(),
                c.quantizer.str().c_str(), c.usage.rowwise, c.usage.columnwise);
    failures += !same;
  }
  return failures;
}

}  // namespace tec::gpu_test
