// The launch structs' small helpers (codegen/lower.h): names, dtype codes, the module table.
#include "codegen/lower.h"

namespace tec::codegen {

std::string_view to_string(Launch::Kind kind) {
  switch (kind) {
    case Launch::Kind::kernel: return "kernel";
    case Launch::Kind::gemm: return "gemm";
    case Launch::Kind::memset: return "memset";
    case Launch::Kind::delayed_scale_inv: return "delayed_scale_inv";
    case Launch::Kind::delayed_update: return "delayed_update";
    case Launch::Kind::collective: return "collective";
    case Launch::Kind::fork: return "fork";
    case Launch::Kind::join: return "join";
    case Launch::Kind::attention: return "attention";
  }
  return "?";
}

int kernel_dtype_code(DType d) {
  if (d == DType::bf16) return 0;
  if (d == DType::fp16) return 1;
  if (d == DType::fp32) return 2;
  return -1;
}

int ModuleTable::add(const KernelRequest& request) {
  for (size_t i = 0; i < requests_.size(); ++i)
    if (requests_[i].source == request.source && requests_[i].defines == request.defines &&
        requests_[i].arch_specific == request.arch_specific)
      return static_cast<int>(i);
  requests_.push_back(request);
  return static_cast<int>(requests_.size() - 1);
}

}  // namespace tec::codegen
