#include "runtime/gemm.h"

#include "core/error.h"
#include "runtime/session.h"

namespace tec::runtime {

void check_cublas(cublasStatus_t s, const char* call, const std::string& step) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(ErrorKind::device, ErrorContext{"runtime", step, "", ""},
                std::string(call) + " failed: " + cublasLtGetStatusName(s) + " (" + cublasLtGetStatusString(s) + ")");
}

cudaDataType_t cuda_type(DType d) {
  switch (d) {
    case DType::bf16: return CUDA_R_16BF;
    case DType::fp16: return CUDA_R_16F;
    case DType::fp32: return CUDA_R_32F;
    case DType::fp8_e4m3: return CUDA_R_8F_E4M3;
    case DType::fp8_e5m2: return CUDA_R_8F_E5M2;
    default: break;
  }
  throw Error(ErrorKind::unsupported, ErrorContext{"runtime", "", "", ""}, "no cuBLASLt type for " + std::string(to_string(d)));
}

bool is_fp8(DType d) { return d == DType::fp8_e4m3 || d == DType::fp8_e5m2; }

cublasLtEpilogue_t epilogue_of(const std::string& e) {
  if (e == "bias") return CUBLASLT_EPILOGUE_BIAS;
  if (e == "gelu") return CUBLASLT_EPILOGUE_GELU;
  if (e == "gelu_bias") return CUBLASLT_EPILOGUE_GELU_BIAS;
  if (e == "relu") return CUBLASLT_EPILOGUE_RELU;
  if (e == "relu_bias") return CUBLASLT_EPILOGUE_RELU_BIAS;
  return CUBLASLT_EPILOGUE_DEFAULT;
}

cudaDataType_t c_type_of(const plan::Gemm& g) {
  if (!is_fp8(g.d_type)) return cuda_type(g.d_type);
  return g.bias >= 0 && g.bias_type == DType::fp16 ? CUDA_R_16F : CUDA_R_16BF;
}

void set_strided_batch(const plan::Gemm& g, const std::array<cublasLtMatrixLayout_t, 4>& layouts, const std::string& step) {
  const auto count = static_cast<int32_t>(g.batch);
  const int64_t strides[4] = {g.batch_stride_a, g.batch_stride_b, g.m * g.n, g.m * g.n};
  for (size_t o = 0; o < layouts.size(); ++o) {
    check_cublas(cublasLtMatrixLayoutSetAttribute(layouts[o], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
                 "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)", step);
    check_cublas(cublasLtMatrixLayoutSetAttribute(layouts[o], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[o], sizeof strides[o]),
                 "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)", step);
  }
}

std::string cublaslt_version() {
  const size_t v = cublasLtGetVersion();  // major * 10000 + minor * 100 + patch
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

}  // namespace tec::runtime
