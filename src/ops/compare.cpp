// compare: comparisons and logic elementwise with numpy broadcasting, giving uint8 0 or 1 (ONNX's
// BOOL): equal, less, less_equal, greater, greater_equal, isnan and not (one input), and, or,
// xor. where: b where cond holds, else c (ONNX Where). convert: to another dtype, as ONNX Cast
// to and from BOOL and integers does (to int32 toward zero, to uint8 bools nonzero is 1). All on
// the general path (ir/general_kernel.h), bit for bit on the GPU: what an export's masks and NaN
// guards become when they are computed at run time.
#include <algorithm>

#include "ops/common.h"
#include "ops/general.h"
#include "ops/gradient.h"
#include "tec_math.h"

namespace tec {

namespace {

// In the order of TEC_COMPARE_* (kernels/tec_math.h).
const std::vector<std::string> kCompareFunctions = {"equal",         "less",  "less_equal", "greater", "greater_equal",
                                                    "isnan",         "not",   "and",        "or",      "xor"};
static_assert(TEC_COMPARE_XOR == 9, "kCompareFunctions follows tec_math.h's codes");

int compare_code(const Attributes& attrs) {
  const std::string fn = attrs.get_string("fn", "");
  const auto it = std::find(kCompareFunctions.begin(), kCompareFunctions.end(), fn);
  TEC_USER_CHECK(it != kCompareFunctions.end(), {}) << "unknown compare function '" << fn << "'";
  return static_cast<int>(it - kCompareFunctions.begin());
}

bool takes_one_input(int code) { return code == TEC_COMPARE_ISNAN || code == TEC_COMPARE_NOT; }

GeneralPlan compare_plan(const Attributes& attrs, const std::vector<Shape>& in) {
  const int code = compare_code(attrs);
  TEC_USER_CHECK(in.size() == (takes_one_input(code) ? 1u : 2u), {})
      << "compare '" << attrs.get_string("fn", "") << "' takes " << (takes_one_input(code) ? 1 : 2) << " inputs, got " << in.size();
  return map_plan(TEC_MAP_COMPARE + code, in);
}

GeneralPlan where_plan(const Attributes&, const std::vector<Shape>& in) { return map_plan(TEC_MAP_WHERE, in); }

// Values the general kernels read: high-precision floats, int32 (ids, lengths), uint8 (masks).
void require_general_dtype(const InferContext& ctx, size_t slot) {
  const TensorProto& p = ctx.inputs.at(slot);
  const std::string& name = ctx.graph.value(ctx.node.inputs.at(slot)).name;
  TEC_USER_CHECK(!p.is_quantized() && (p.dtype == DType::fp32 || p.dtype == DType::fp16 || p.dtype == DType::bf16 || p.dtype == DType::int32 || p.dtype == DType::uint8), ctx.error)
      << "input '" << name << "' is " << (p.is_quantized() ? p.quantizer->str() : std::string(to_string(p.dtype)))
      << "; comparisons read fp32, fp16, bf16, int32 or uint8 (bool) values";
}

DType compare_dtype(const InferContext& ctx) {
  for (size_t i = 0; i < ctx.inputs.size(); ++i) require_general_dtype(ctx, i);
  const bool logic = compare_code(ctx.node.attrs) >= TEC_COMPARE_NOT;
  if (ctx.inputs.size() == 2 && !logic)
    TEC_USER_CHECK(ctx.inputs[0].dtype == ctx.inputs[1].dtype, ctx.error)
        << "compare needs equal dtypes, got " << to_string(ctx.inputs[0].dtype) << " and " << to_string(ctx.inputs[1].dtype);
  return DType::uint8;
}

DType where_dtype(const InferContext& ctx) {
  for (size_t i = 0; i < 3; ++i) require_general_dtype(ctx, i);
  TEC_USER_CHECK(ctx.inputs[0].dtype == DType::uint8, ctx.error)
      << "where's condition '" << ctx.graph.value(ctx.node.inputs[0]).name << "' must be uint8 (bool), got " << to_string(ctx.inputs[0].dtype);
  TEC_USER_CHECK(ctx.inputs[1].dtype == ctx.inputs[2].dtype, ctx.error)
      << "where's branches need equal dtypes, got " << to_string(ctx.inputs[1].dtype) << " and " << to_string(ctx.inputs[2].dtype);
  return ctx.inputs[1].dtype;
}

GeneralPlan convert_plan(const Attributes&, const std::vector<Shape>& in) { return map_plan(TEC_MAP_CONVERT, in); }

DType convert_dtype(const InferContext& ctx) {
  require_general_dtype(ctx, 0);
  return *parse_dtype(ctx.node.attrs.get_string("dtype", ""));
}

// The condition takes none; each branch the gradient where it was chosen, summed to its shape.
std::vector<ValueId> gradient_where(GradientBuilder& b) {
  std::vector<ValueId> grads = {-1, -1, -1};
  for (size_t slot : {1u, 2u}) {
    if (!b.proto(b.input(slot)).requires_grad) continue;
    const std::string label = "dinput" + std::to_string(slot);
    const ValueId chosen = gradient_map(b, slot == 1 ? "where_true" : "where_false", {b.input(0), b.grad_output()}, label + "_chosen");
    grads[slot] = sum_to_shape(b, chosen, b.proto(b.input(slot)).shape, label);
  }
  return grads;
}

// Between floats, the gradient converted back; integers and bools carry none (meta).
std::vector<ValueId> gradient_convert(GradientBuilder& b) {
  return {cast_to(b, b.grad_output(), b.proto(b.input(0)).dtype, "dinput")};
}

}  // namespace

void register_compare_ops(OpRegistry& registry) {
  registry.add(OpDef{
      .name = "convert",
      .summary = "x in another dtype: int32 (toward zero, saturating), uint8 (a bool: nonzero is 1), fp32, fp16, bf16 (general path)",
      .attrs = {{"dtype", AttrType::string_, std::nullopt, {"int32", "uint8", "fp32", "fp16", "bf16"}, "output dtype"}},
      .infer = general_infer(convert_plan, convert_dtype),
      .gradient = gradient_convert,
      .reference = general_reference(convert_plan),
      .general = convert_plan,
  });
  registry.add(OpDef{
      .name = "compare",
      .summary = "a (fn) b elementwise with broadcasting, uint8 0/1: equal, less, less_equal, greater, greater_equal, "
                 "isnan (one input), not (one input), and, or, xor (general path)",
      .min_inputs = 1,
      .max_inputs = 2,
      .attrs = {{"fn", AttrType::string_, std::nullopt, kCompareFunctions, "the function"}},
      .infer = general_infer(compare_plan, compare_dtype),
      .reference = general_reference(compare_plan),
      .general = compare_plan,
  });
  registry.add(OpDef{
      .name = "where",
      .summary = "b where cond (uint8) is nonzero, else c, with broadcasting (general path)",
      .min_inputs = 3,
      .max_inputs = 3,
      .infer = general_infer(where_plan, where_dtype),
      .gradient = gradient_where,
      .reference = general_reference(where_plan),
      .general = where_plan,
  });
}

}  // namespace tec
