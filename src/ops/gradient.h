// Building an op's backward as a graph of other ops (OpDef::gradient, GradientBuilder): the
// steps the general ops' gradients share.
#pragma once

#include "ir/op_registry.h"

namespace tec {

// The TEC_GRAD_* step `fn` ("tanh", "softmax", "where_true", ... : gradient_map's fn) over
// `inputs`, broadcast; in the dtype of the first input that is no bool.
ValueId gradient_map(GradientBuilder& b, const std::string& fn, std::vector<ValueId> inputs, const std::string& label);

// `v` viewed as `shape` (a reshape node where the shapes differ).
ValueId reshaped(GradientBuilder& b, ValueId v, const Shape& shape, const std::string& label);

// The gradient of an operand that was broadcast to `grad`'s shape: summed over the dims it was
// broadcast along, in `target`'s shape (numpy's rule, dims aligned to the right).
ValueId sum_to_shape(GradientBuilder& b, ValueId grad, const Shape& target, const std::string& label);

// `grad` in `dtype` (a cast where they differ).
ValueId cast_to(GradientBuilder& b, ValueId grad, DType dtype, const std::string& label);

}  // namespace tec
