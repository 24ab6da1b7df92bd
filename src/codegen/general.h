// The general path's launches (ir/general_kernel.h): an op's GeneralPlan as kernels/general.cu
// kernels, for any shape. lower.cpp calls it for a step whose op has OpDef::general.
#pragma once

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

}  // namespace tec::codegen
