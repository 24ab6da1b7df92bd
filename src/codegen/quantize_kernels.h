// The kernel requests that implement one quantizer (the specialisation of kernels/*.cu).
// Today: per-tensor FP8 (current and delayed scaling) from bf16, rowwise and/or transposed,
// and the delayed-scaling history update.
#pragma once

#include "codegen/nvrtc.h"
#include "ir/tensor_proto.h"

namespace tec::codegen {

// Throws Error(unsupported) for quantizers without a kernel yet.
KernelRequest per_tensor_quantize_kernel(const TensorProto& proto, const std::string& arch);

// The delayed-scaling update of every delayed tensor of a plan, in one launch (one block per
// tensor); its argument is an array of {history, scale, fp8_max * 2^-margin, most_recent}.
inline constexpr int kMaxGpuAmaxHistory = 8192;  // the history is rolled in shared memory
KernelRequest delayed_update_kernel(int amax_history_len, const std::string& arch);

}  // namespace tec::codegen
