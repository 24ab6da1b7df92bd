// gradient_map: the elementwise steps of the general ops' gradients (kernels/tec_math.h's
// TEC_GRAD_*), one general-path map each, bit for bit on the GPU; and the helpers that build
// gradients out of ops (ops/gradient.h). The gradient of each op lives beside the op.
#include "ops/gradient.h"

#include <algorithm>

#include "ops/common.h"
#include "ops/general.h"
#include "tec_math.h"

namespace tec {

namespace {

// In the order of TEC_GRAD_* (kernels/tec_math.h), with the operands each reads.
const std::vector<std::string> kGradientFunctions = {"sigmoid",      "tanh",     "erf",          "sqrt",         "reciprocal", "exp",
                                                     "log",          "abs",      "cos",          "sin",          "div_divisor", "pow_base",
                                                     "pow_exponent", "softmax",  "where_true",   "where_false",  "max"};
static_assert(TEC_GRAD_MAX == 16, "kGradientFunctions follows tec_math.h's codes");

int gradient_code(const Attributes& attrs) {
  const std::string fn = attrs.get_string("fn", "");
  const auto it = std::find(kGradientFunctions.begin(), kGradientFunctions.end(), fn);
  TEC_USER_CHECK(it != kGradientFunctions.end(), {}) << "unknown gradient function '" << fn << "'";
  return static_cast<int>(it - kGradientFunctions.begin());
}

size_t operand_count(int code) { return (code >= TEC_GRAD_DIV_DIVISOR && code <= TEC_GRAD_SOFTMAX) || code == TEC_GRAD_MAX ? 3 : 2; }

GeneralPlan gradient_map_plan(const Attributes& attrs, const std::vector<Shape>& in) {
  const int code = gradient_code(attrs);
  TEC_INTERNAL_CHECK(in.size() == operand_count(code), {})
      << "gradient_map '" << attrs.get_string("fn", "") << "' reads " << operand_count(code) << " operands, got " << in.size();
  return map_plan(TEC_MAP_GRAD + code, in);
}

DType gradient_dtype(const InferContext& ctx) {
  for (const TensorProto& p : ctx.inputs)
    if (p.dtype != DType::uint8) return p.dtype;
  TEC_INTERNAL_CHECK(false, ctx.error) << "gradient_map without a float operand";
  return DType::fp32;
}

}  // namespace

ValueId gradient_map(GradientBuilder& b, const std::string& fn, std::vector<ValueId> inputs, const std::string& label) {
  Attributes attrs;
  attrs.values["fn"] = fn;
  return b.emit("gradient_map", std::move(inputs), std::move(attrs), label);
}

ValueId reshaped(GradientBuilder& b, ValueId v, const Shape& shape, const std::string& label) {
  if (b.proto(v).shape == shape) return v;
  Attributes attrs;
  attrs.values["shape"] = shape.dims;
  return b.emit("reshape", {v}, std::move(attrs), label);
}

ValueId sum_to_shape(GradientBuilder& b, ValueId grad, const Shape& target, const std::string& label) {
  const Shape from = b.proto(grad).shape;
  if (from == target) return grad;
  TEC_INTERNAL_CHECK(from.rank() >= target.rank(), {}) << "a gradient of " << from.str() << " summed to " << target.str();
  const size_t skipped = from.rank() - target.rank();
  std::vector<int64_t> axes;
  for (size_t d = 0; d < from.rank(); ++d)
    if (d < skipped || (target.dims[d - skipped] == 1 && from.dims[d] != 1)) axes.push_back(static_cast<int64_t>(d));
  ValueId summed = grad;
  if (!axes.empty()) {
    Attributes attrs;
    attrs.values["fn"] = std::string("sum");
    attrs.values["axes"] = axes;
    attrs.values["keepdims"] = true;
    summed = b.emit("reduce", {grad}, std::move(attrs), label);
  }
  return reshaped(b, summed, target, label + "_shape");
}

ValueId cast_to(GradientBuilder& b, ValueId grad, DType dtype, const std::string& label) {
  if (b.proto(grad).dtype == dtype) return grad;
  Attributes attrs;
  attrs.values["dtype"] = std::string(to_string(dtype));
  return b.emit("cast", {grad}, std::move(attrs), label);
}

void register_gradient_ops(OpRegistry& registry) {
  registry.add(OpDef{
      .name = "gradient_map",
      .summary = "an elementwise step of a general op's gradient (kernels/tec_math.h's TEC_GRAD_*), made by autodiff (general path)",
      .min_inputs = 2,
      .max_inputs = 3,
      .attrs = {{"fn", AttrType::string_, std::nullopt, kGradientFunctions, "the step"}},
      .infer = general_infer(gradient_map_plan, gradient_dtype),
      .reference = general_reference(gradient_map_plan),
      .general = gradient_map_plan,
      .compiler_only = true,
  });
}

}  // namespace tec
