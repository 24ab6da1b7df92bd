// On the GPU: kernels/row.cu's fast SiLU trusts tec_fast_silu within 1e-6 of tec_silu, relative,
// for every bf16 x with |x| <= 16 (its midpoint windows and amax marks are sized from that
// bound, with a margin of 12x or more). This checks the bound on all of them.
#include <cstdio>
#include <cstring>

#include "codegen/nvrtc.h"
#include "gpu_util.h"

namespace tec::gpu_test {

int silu_bound_test(const std::string& arch) {
  const codegen::KernelCompiler compiler(codegen::default_cache_dir());
  const auto cubin = compiler.compile({codegen::KernelRequest{"silu_bound_check.cu", {}, arch}}).at(0).cubin;
  const Library library(cubin);
  const void* kernel = library.kernel("tec_silu_bound_check");
  unsigned* worst;
  CHECK_CUDA(cudaMalloc(&worst, 12));
  CHECK_CUDA(cudaMemset(worst, 0, 12));
  void* args[] = {&worst};
  CHECK_CUDA(cudaLaunchKernel(kernel, dim3(256), dim3(256), args, 0, nullptr));
  CHECK_CUDA(cudaGetLastError());
  unsigned got[3];
  CHECK_CUDA(cudaMemcpy(got, worst, 12, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaFree(worst));
  float relative, x;
  std::memcpy(&relative, &got[0], 4);
  const unsigned x_bits = got[1] << 16;
  std::memcpy(&x, &x_bits, 4);
  const bool ok = got[2] > 20000 && relative <= 1e-6f;
  std::printf("%-4s fast silu: |tec_fast_silu - tec_silu| / |tec_silu| <= %.3g (bound 1e-6) over %u bf16 x, worst at x = %.6g\n",
              ok ? "ok" : "FAIL", relative, got[2], x);
  return ok ? 0 : 1;
}

}  // namespace tec::gpu_test
