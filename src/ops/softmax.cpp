// softmax: exp(x - max) / sum exp(x - max) along one axis (ONNX Softmax, opset 13), on the
// general path (ir/general_kernel.h): GPU and reference agree bit for bit. What an export's
// attention becomes when no pattern takes it, and a router's or a classifier's softmax.
#include "ops/common.h"
#include "ops/general.h"
#include "ops/gradient.h"

namespace tec {

namespace {

GeneralPlan softmax_plan(const Attributes& attrs, const std::vector<Shape>& in) {
  const Shape& x = in.at(0);
  const auto rank = static_cast<int64_t>(x.rank());
  const int64_t axis = attrs.get_int("axis", -1);
  TEC_USER_CHECK(rank >= 1, {}) << "softmax of a scalar";
  TEC_USER_CHECK(axis >= -rank && axis < rank, {}) << "softmax axis " << axis << " is out of range for rank " << rank;
  const auto a = static_cast<size_t>(axis < 0 ? axis + rank : axis);
  GeneralPlan p;
  p.kernel = GeneralKernel::softmax;
  p.out_dims = x.dims;
  p.n = x.dims[a];
  for (size_t d = a + 1; d < x.rank(); ++d) p.inner *= x.dims[d];
  p.rows = x.numel() / p.n;
  return p;
}

// dx = y (dy - sum(dy y)) along the axis.
std::vector<ValueId> gradient_softmax(GradientBuilder& b) {
  const ValueId dy = b.grad_output(), y = b.output();
  Attributes mul, sum;
  mul.values["fn"] = std::string("mul");
  sum.values["fn"] = std::string("sum");
  sum.values["axes"] = std::vector<int64_t>{b.attrs().get_int("axis", -1)};
  sum.values["keepdims"] = true;
  const ValueId dot = b.emit("reduce", {b.emit("binary", {dy, y}, std::move(mul), "doutput_times_output")}, std::move(sum), "doutput_dot_output");
  return {gradient_map(b, "softmax", {dy, y, dot}, "dinput")};
}

}  // namespace

void register_softmax_ops(OpRegistry& registry) {
  registry.add(OpDef{
      .name = "softmax",
      .summary = "exp(x - max) / sum(exp(x - max)) along axis (general path: any axis, any shape)",
      .attrs = {{"axis", AttrType::int_, AttrValue{int64_t{-1}}, {}, "the axis normalized over"}},
      .infer = general_infer(softmax_plan,
                             [](const InferContext& ctx) {
                               require_high_precision(ctx, 0);
                               return ctx.inputs[0].dtype;
                             }),
      .gradient = gradient_softmax,
      .reference = general_reference(softmax_plan),
      .general = softmax_plan,
  });
}

}  // namespace tec
