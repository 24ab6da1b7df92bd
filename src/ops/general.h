// Building and running the general path's loops (ir/general_kernel.h): what the op files that
// describe themselves by a GeneralPlan share, and the CPU reference of every GeneralKernel.
#pragma once

#include "ir/op_registry.h"

namespace tec {

using GeneralFn = std::function<GeneralPlan(const Attributes&, const std::vector<Shape>&)>;

// The strides (elements) at which `operand`, broadcast to `out` (dims aligned to the right),
// is read along out's dims: 0 along a dim it broadcasts.
std::vector<int64_t> broadcast_strides(const Shape& operand, const Shape& out);

// Drops dims of extent 1 and merges a dim into the next where every stride list walks the two
// as one, so that the loops take fewer dims; then refuses more than kGeneralMaxRank (a user
// error naming `what`). `dims` may become empty: a single element.
void merge_dims(std::vector<int64_t>& dims, const std::vector<std::vector<int64_t>*>& strides, const char* what);

// The elementwise loops of TEC_MAP_* function `code` over inputs broadcast to one shape.
GeneralPlan map_plan(int code, const std::vector<Shape>& inputs);

// Runs a plan over inputs on the CPU, in the order the GPU's kernels take (so their bits agree).
HostTensor run_general(const GeneralPlan& plan, const std::vector<HostTensor>& inputs);

// The infer and reference of an op whose GeneralPlan says everything: the output has the plan's
// shape and `dtype(inputs)`; the reference runs the plan.
std::function<InferResult(const InferContext&)> general_infer(GeneralFn general, std::function<DType(const InferContext&)> dtype);
std::function<std::vector<HostTensor>(const Attributes&, const std::vector<HostTensor>&)> general_reference(GeneralFn general);

}  // namespace tec
