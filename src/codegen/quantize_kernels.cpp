#include "codegen/quantize_kernels.h"

#include <sstream>

#include "core/error.h"

namespace tec::codegen {

KernelRequest per_tensor_quantize_kernel(const TensorProto& proto, const std::string& arch) {
  TEC_INTERNAL_CHECK(proto.quantizer.has_value(), {}) << "quantize kernel for an unquantized tensor";
  const Quantizer& q = *proto.quantizer;
  TEC_UNSUPPORTED_CHECK(q.is_per_tensor() && proto.dtype == DType::bf16, {})
      << "no GPU quantize kernel yet for " << q.str() << " from " << to_string(proto.dtype)
      << " (per-tensor FP8 from bf16 only so far)";
  std::ostringstream eps;
  eps.exceptions(std::ios::badbit);  // out of memory throws rather than truncating the define
  eps.precision(9);
  eps << std::scientific << q.amax_epsilon << "f";
  return KernelRequest{"quantize_per_tensor.cu",
                       {"TEC_FP8_E4M3=" + std::string(q.dtype == DType::fp8_e4m3 ? "1" : "0"),
                        "TEC_ROWWISE=" + std::string(proto.usage.rowwise ? "1" : "0"),
                        "TEC_COLUMNWISE=" + std::string(proto.usage.columnwise ? "1" : "0"),
                        "TEC_DELAYED=" + std::string(q.kind == QuantizerKind::fp8_delayed ? "1" : "0"),
                        "TEC_POW2_SCALES=" + std::string(q.force_pow2_scales ? "1" : "0"),
                        "TEC_AMAX_EPSILON=" + eps.str()},
                       arch};
}

KernelRequest delayed_update_kernel(int amax_history_len, const std::string& arch) {
  TEC_UNSUPPORTED_CHECK(amax_history_len >= 1 && amax_history_len <= kMaxGpuAmaxHistory, {})
      << "amax_history_len " << amax_history_len << " has no GPU kernel yet (at most " << kMaxGpuAmaxHistory << ")";
  return KernelRequest{"delayed_scaling_update.cu", {"TEC_HISTORY_LEN=" + std::to_string(amax_history_len)}, arch};
}

}  // namespace tec::codegen
