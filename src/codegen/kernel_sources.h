// The CUDA C++ templates of kernels/, embedded in the binary at build time, so that
// te-compile needs no source tree to generate code.
#pragma once

#include <string>
#include <vector>

namespace tec::codegen {

struct KernelSource {
  std::string name;  // file name under kernels/, e.g. "quantize_per_tensor.cu"
  std::string text;
};

const std::vector<KernelSource>& kernel_sources();

}  // namespace tec::codegen
