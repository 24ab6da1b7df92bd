// Elementwise ops: add (residual), bias, scale (TE's ConstantScale), l2norm, dropout.
#include "ops/common.h"

namespace tec {

namespace {

InferResult infer_add(const InferContext& ctx) {
  require_high_precision(ctx, 0);
  require_high_precision(ctx, 1);
  const TensorProto& a = ctx.inputs[0];
  const TensorProto& b = ctx.inputs[1];
  TEC_USER_CHECK(a.shape == b.shape, ctx.error)
      << "shape mismatch: add needs equal shapes, got '" << ctx.graph.value(ctx.node.inputs[0]).name << "' "
      << a.shape.str() << " and '" << ctx.graph.value(ctx.node.inputs[1]).name << "' " << b.shape.str();
  TEC_USER_CHECK(a.dtype == b.dtype, ctx.error)
      << "dtype mismatch: add needs equal dtypes, got " << to_string(a.dtype) << " and " << to_string(b.dtype);
  return InferResult{{dense_like(a)}, {}, {}};
}

InferResult infer_bias(const InferContext& ctx) {
  require_high_precision(ctx, 0);
  require_last_dim(ctx, 0, ctx.node.attrs.get_int("features", 0), "features");
  return InferResult{{dense_like(ctx.inputs[0])}, {}, {}};
}

InferResult infer_same_shape(const InferContext& ctx) {
  require_high_precision(ctx, 0);
  return InferResult{{dense_like(ctx.inputs[0])}, {}, {}};
}

InferResult infer_l2norm(const InferContext& ctx) {
  require_high_precision(ctx, 0);
  const TensorProto& x = ctx.inputs[0];
  return InferResult{{dense_like(x)}, {save_input(ctx, 0, "input"), {"rnorm", row_stat(x), -1}}, {}};
}

InferResult infer_dropout(const InferContext& ctx) {
  require_high_precision(ctx, 0);
  const TensorProto& x = ctx.inputs[0];
  // The keep-mask, one byte per element, is what the backward needs.
  return InferResult{{dense_like(x)}, {{"mask", TensorProto::dense(x.shape, DType::uint8), -1}}, {}};
}

}  // namespace

void register_elementwise_ops(OpRegistry& registry) {
  registry.add(OpDef{
      .name = "add",
      .summary = "a + b, equal shapes (the residual add)",
      .min_inputs = 2,
      .max_inputs = 2,
      .infer = infer_add,
      .infer_backward = passthrough_backward,
  });
  registry.add(OpDef{
      .name = "bias",
      .summary = "x + b over the last dim",
      .attrs = {{"features", AttrType::int_, std::nullopt, {}, "the last dim"}},
      .check_attributes =
          [](const Attributes& a, const ErrorContext& ctx) {
            TEC_USER_CHECK(a.get_int("features", 0) >= 1, ctx) << "features must be positive";
          },
      .params = [](const Attributes& a, DType d) {
        return std::vector<ParamSpec>{{"bias", Shape{a.get_int("features", 0)}, d, 0.0f, 0.02f}};
      },
      .infer = infer_bias,
      .infer_backward = passthrough_backward,
  });
  registry.add(OpDef{
      .name = "scale",
      .summary = "x * scale, a compile-time constant",
      .attrs = {{"scale", AttrType::float_, std::nullopt, {}, "the factor"}},
      .infer = infer_same_shape,
      .infer_backward = passthrough_backward,
  });
  registry.add(OpDef{
      .name = "l2norm",
      .summary = "x * rsqrt(sum(x^2) + eps) over the last dim",
      .attrs = {{"eps", AttrType::float_, AttrValue{1e-6}, {}, "added to the sum of squares"}},
      .infer = infer_l2norm,
      .infer_backward = passthrough_backward,
  });
  registry.add(OpDef{
      .name = "dropout",
      .summary = "zero elements with probability p and scale the rest by 1/(1-p); identity in inference",
      .attrs = {{"p", AttrType::float_, AttrValue{0.1}, {}, "drop probability in [0, 1)"},
                {"seed", AttrType::int_, AttrValue{int64_t{0}}, {}, "random seed"}},
      .check_attributes =
          [](const Attributes& a, const ErrorContext& ctx) {
            const double p = a.get_float("p", 0);
            TEC_USER_CHECK(p >= 0 && p < 1, ctx) << "p must be in [0, 1), got " << p;
          },
      .infer = infer_dropout,
      .infer_backward = passthrough_backward,
  });
}

}  // namespace tec
