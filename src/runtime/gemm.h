// cuBLASLt for a session's GEMM launches (plan::Gemm): the types, epilogues and layouts the
// session (session.cpp) describes each matmul with.
#pragma once

#include <cublasLt.h>

#include <array>
#include <string>

#include "core/dtype.h"
#include "plan/plan.h"

namespace tec::runtime {

// The workspace every cuBLASLt matmul of a session may use.
inline constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

// Throws ErrorKind::device naming the call and the step when `s` is not success.
void check_cublas(cublasStatus_t s, const char* call, const std::string& step);
cudaDataType_t cuda_type(DType d);  // unsupported error for a type cuBLASLt has no name for
bool is_fp8(DType d);
cublasLtEpilogue_t epilogue_of(const std::string& epilogue);
// C's type: D's, except that an FP8 D still has a C type, which decides the bias type: fp16
// with an fp16 bias, else bf16.
cudaDataType_t c_type_of(const plan::Gemm& g);
// A strided batch of g.batch GEMMs on the layouts of A, B, C and D: A and B advance their
// batch strides, C and D m x n.
void set_strided_batch(const plan::Gemm& g, const std::array<cublasLtMatrixLayout_t, 4>& layouts, const std::string& step);

}  // namespace tec::runtime
