// Elementwise ops: add (residual), bias, scale (TE's ConstantScale), l2norm, dropout.
#include <cmath>

#include "ops/common.h"
#include "tec_math.h"

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
  if (ctx.inputs.size() == 2)  // train plans: the step counter that varies the mask
    TEC_USER_CHECK(ctx.inputs[1].shape == Shape({1}) && ctx.inputs[1].dtype == DType::fp32, ctx.error)
        << "dropout's second input is the step counter, an fp32 [1]; got " << ctx.inputs[1].shape.str() << " "
        << to_string(ctx.inputs[1].dtype);
  // The keep-mask, one byte per element, is what the backward needs.
  return InferResult{{dense_like(x)}, {{"mask", TensorProto::dense(x.shape, DType::uint8), -1}}, {}};
}

std::vector<HostTensor> reference_add(const Attributes&, const std::vector<HostTensor>& in) {
  HostTensor out = in[0];
  for (size_t i = 0; i < out.values.size(); ++i) out.values[i] += in[1].values[i];
  return {std::move(out)};
}

std::vector<HostTensor> reference_bias(const Attributes&, const std::vector<HostTensor>& in) {
  HostTensor out = in[0];
  const size_t k = in[1].values.size();
  for (size_t i = 0; i < out.values.size(); ++i) out.values[i] += in[1].values[i % k];
  return {std::move(out)};
}

std::vector<HostTensor> reference_scale(const Attributes& attrs, const std::vector<HostTensor>& in) {
  HostTensor out = in[0];
  const auto s = static_cast<float>(attrs.get_float("scale", 1.0));
  for (float& v : out.values) v *= s;
  return {std::move(out)};
}

std::vector<HostTensor> reference_l2norm(const Attributes& attrs, const std::vector<HostTensor>& in) {
  HostTensor out = in[0];
  const int64_t m = out.shape.rows(), k = out.shape.cols();
  const auto eps = static_cast<float>(attrs.get_float("eps", 1e-6));
  HostTensor rnorms{Shape{m}, std::vector<float>(static_cast<size_t>(m))};
  for (int64_t r = 0; r < m; ++r) {
    // Summed in the GPU row kernel's order (tec_row_sum_order), so that both compute the same bits.
    const float* row = &out.values[static_cast<size_t>(r * k)];
    const float sum = tec_row_sum_order(k, [&](long long i) { return row[i] * row[i]; });
    const float rnorm = 1.0f / std::sqrt(sum + eps);
    rnorms.values[static_cast<size_t>(r)] = rnorm;
    for (int64_t i = 0; i < k; ++i) out.values[static_cast<size_t>(r * k + i)] *= rnorm;
  }
  return {std::move(out), std::move(rnorms)};
}

// in: dy. dx = dy, db = the column sums of dy (tec_column_sum_order).
std::vector<HostTensor> backward_bias(const Attributes&, const std::vector<HostTensor>& in) {
  const HostTensor& dy = in[0];
  const int64_t m = dy.shape.rows(), k = dy.shape.cols();
  HostTensor db{Shape{k}, std::vector<float>(static_cast<size_t>(k))};
  tec_column_sum_order(m, k, db.values.data(), [&](int64_t r, int64_t i) { return dy.values[static_cast<size_t>(r * k + i)]; });
  return {dy, std::move(db)};
}

// in: x, rnorm, dy. With y = x rnorm: dx = rnorm (dy - y sum(dy y)).
std::vector<HostTensor> backward_l2norm(const Attributes&, const std::vector<HostTensor>& in) {
  const HostTensor& x = in[0];
  const HostTensor& dy = in[2];
  const int64_t m = x.shape.rows(), k = x.shape.cols();
  HostTensor dx{x.shape, std::vector<float>(x.values.size())};
  for (int64_t r = 0; r < m; ++r) {
    const float rnorm = in[1].values[static_cast<size_t>(r)];
    const size_t row = static_cast<size_t>(r * k);
    const float dot = tec_row_sum_order(k, [&](int64_t i) { return dy.values[row + i] * x.values[row + i] * rnorm; });
    for (int64_t i = 0; i < k; ++i) dx.values[row + i] = rnorm * (dy.values[row + i] - x.values[row + i] * rnorm * dot);
  }
  return {std::move(dx)};
}

// Training: keep each element with probability 1 - p (tec_dropout_keep), scaled by 1/(1-p);
// returns y and the keep-mask (0/1). A train plan's step counter (second input) makes a new
// mask every step. Inference: the identity.
std::vector<HostTensor> reference_dropout(const Attributes& attrs, const std::vector<HostTensor>& in) {
  if (!attrs.get_bool("training", false)) return {in[0]};
  const auto p = static_cast<float>(attrs.get_float("p", 0.1));
  const auto step = in.size() > 1 ? static_cast<unsigned long long>(in[1].values.at(0)) : 0ull;
  const unsigned long long seed = tec_dropout_seed(static_cast<unsigned long long>(attrs.get_int("seed", 0)), step);
  const float keep_scale = 1.0f / (1.0f - p);
  HostTensor y = in[0];
  HostTensor mask{y.shape, std::vector<float>(y.values.size())};
  for (size_t i = 0; i < y.values.size(); ++i) {
    const bool keep = tec_dropout_keep(seed, i, p);
    mask.values[i] = keep ? 1.0f : 0.0f;
    y.values[i] = keep ? y.values[i] * keep_scale : 0.0f;
  }
  return {std::move(y), std::move(mask)};
}

// in: mask, dy. dx = dy mask / (1 - p).
std::vector<HostTensor> backward_dropout(const Attributes& attrs, const std::vector<HostTensor>& in) {
  const float keep_scale = 1.0f / (1.0f - static_cast<float>(attrs.get_float("p", 0.1)));
  HostTensor dx = in[1];
  for (size_t i = 0; i < dx.values.size(); ++i) dx.values[i] = in[0].values[i] != 0.0f ? dx.values[i] * keep_scale : 0.0f;
  return {std::move(dx)};
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
      .reference = reference_add,
      .gradient_passes_through = true,
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
      .infer_backward = elementwise_backward,
      .reference = reference_bias,
      .backward_reference = backward_bias,
  });
  registry.add(OpDef{
      .name = "scale",
      .summary = "x * scale, a compile-time constant",
      .attrs = {{"scale", AttrType::float_, std::nullopt, {}, "the factor"}},
      .infer = infer_same_shape,
      // dx = dy * scale: the forward's own op (its row kernel on the GPU).
      .gradient = [](GradientBuilder& b) {
        Attributes attrs;
        attrs.values["scale"] = b.attrs().get_float("scale", 1.0);
        return std::vector<ValueId>{b.emit("scale", {b.grad_output()}, std::move(attrs), "dinput")};
      },
      .reference = reference_scale,
  });
  registry.add(OpDef{
      .name = "l2norm",
      .summary = "x * rsqrt(sum(x^2) + eps) over the last dim",
      .attrs = {{"eps", AttrType::float_, AttrValue{1e-6}, {}, "added to the sum of squares"}},
      .infer = infer_l2norm,
      .infer_backward = elementwise_backward,
      .reference = reference_l2norm,
      .backward_reference = backward_l2norm,
  });
  registry.add(OpDef{
      .name = "dropout",
      .summary = "zero elements with probability p and scale the rest by 1/(1-p); identity in inference",
      .max_inputs = 2,
      .attrs = {{"p", AttrType::float_, AttrValue{0.1}, {}, "drop probability in [0, 1)"},
                {"seed", AttrType::int_, AttrValue{int64_t{0}}, {}, "random seed"},
                {"training", AttrType::bool_, AttrValue{false}, {},
                 "draw the mask (set by te-compile --mode train); false: the identity"}},
      .check_attributes =
          [](const Attributes& a, const ErrorContext& ctx) {
            const double p = a.get_float("p", 0);
            TEC_USER_CHECK(p >= 0 && p < 1, ctx) << "p must be in [0, 1), got " << p;
          },
      .infer = infer_dropout,
      .infer_backward = elementwise_backward,
      .reference = reference_dropout,
      .backward_reference = backward_dropout,
  });
}

}  // namespace tec
