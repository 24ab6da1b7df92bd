// The general path's launches (ir/general_kernel.h): an op's GeneralPlan as kernels/general.cu
// kernels, for any shape. lower.cpp calls it for a step whose op has OpDef::general.
#pragma once

#include <optional>

#include "codegen/lower.h"
#include "ir/general_kernel.h"

namespace tec::codegen {

struct GeneralOperand {
  std::string buffer;
  DType dtype = DType::fp32;
};

// The launches that compute `plan` for step `step` from `inputs` into `out` (the plan's shape,
// unquantized). Empty, with `why_not` set, where a dtype has no general kernel.
std::vector<Launch> general_launches(const GeneralPlan& plan, const std::vector<GeneralOperand>& inputs, const GeneralOperand& out,
                                     int step, ModuleTable& modules, std::string& why_not);

// A general matmul as cuBLASLt GEMMs, where its operands allow: one strided batch (or none,
// or a broadcast right operand, whose batches fold into the left operand's rows) of 16- or
// 32-bit matrices with 16-byte rows. nullopt for any other matmul (the general kernel's).
std::optional<GemmLaunch> matmul_gemm(const GeneralPlan& plan, const std::vector<GeneralOperand>& inputs, const GeneralOperand& out);
// "a strided batch of 8 cuBLASLt GEMMs (...)", for the step's report.
std::string describe(const GemmLaunch& gemm);
// `count` elements copied as they are into a tensor of shape `out` (a view of integers or bools).
GeneralPlan copy_plan(int64_t count, const Shape& out);

}  // namespace tec::codegen
