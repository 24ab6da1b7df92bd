// The kernel requests that implement one quantizer (the specialisation of kernels/*.cu).
// Today: per-tensor FP8 (current and delayed scaling) from bf16, rowwise and/or transposed.
#pragma once

#include "codegen/nvrtc.h"
#include "ir/tensor_proto.h"

namespace tec::codegen {

// Throws Error(unsupported) for quantizers without a kernel yet.
KernelRequest per_tensor_quantize_kernel(const TensorProto& proto, const std::string& arch);

}  // namespace tec::codegen
