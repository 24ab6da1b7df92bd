// layernorm and rmsnorm over the last dim. Both save their input and gamma (aliases, no new
// buffer) plus per-row FP32 statistics for the backward.
#include <cmath>

#include "ops/common.h"
#include "tec_math.h"

namespace tec {

namespace {

std::vector<AttrSpec> norm_attrs() {
  return {
      {"hidden", AttrType::int_, std::nullopt, {}, "the normalized (last) dim"},
      {"eps", AttrType::float_, AttrValue{1e-5}, {}, "added to the variance"},
      {"zero_centered_gamma", AttrType::bool_, AttrValue{false}, {}, "gamma is stored as gamma - 1"},
  };
}

void check_norm_attributes(const Attributes& attrs, const ErrorContext& ctx) {
  TEC_USER_CHECK(attrs.get_int("hidden", 0) >= 1, ctx) << "hidden must be positive, got " << attrs.get_int("hidden", 0);
  const double eps = attrs.get_float("eps", 0);
  TEC_USER_CHECK(eps > 0 && eps < 1, ctx) << "eps must be in (0, 1), got " << eps;
}

std::vector<ParamSpec> norm_params(const Attributes& attrs, DType dtype, bool with_bias) {
  const int64_t h = attrs.get_int("hidden", 0);
  const float gamma_mean = attrs.get_bool("zero_centered_gamma", false) ? 0.0f : 1.0f;
  std::vector<ParamSpec> params{{"weight", Shape{h}, dtype, gamma_mean, 0.1f}};
  if (with_bias) params.push_back({"bias", Shape{h}, dtype, 0.0f, 0.02f});
  return params;
}

InferResult infer_norm(const InferContext& ctx, bool layernorm) {
  require_rank_at_least(ctx, 0, 1);
  require_high_precision(ctx, 0);
  require_last_dim(ctx, 0, ctx.node.attrs.get_int("hidden", 0), "hidden");
  const TensorProto& x = ctx.inputs[0];
  InferResult r;
  r.outputs.push_back(dense_like(x));
  r.saved.push_back(save_input(ctx, 0, "input"));
  r.saved.push_back(save_input(ctx, 1, "gamma"));
  if (layernorm) r.saved.push_back({"mean", row_stat(x), -1});
  r.saved.push_back({"rsigma", row_stat(x), -1});
  return r;
}

// Row statistics in fp32, summed in the GPU row kernel's order (tec_row_sum_order), so that
// a norm + quantize step matches the GPU bit for bit.
std::vector<HostTensor> reference_norm(const Attributes& attrs, const std::vector<HostTensor>& in, bool layernorm) {
  const HostTensor& x = in[0];
  const int64_t m = x.shape.rows(), k = x.shape.cols();
  const auto eps = static_cast<float>(attrs.get_float("eps", 1e-5));
  const float gamma_offset = attrs.get_bool("zero_centered_gamma", false) ? 1.0f : 0.0f;
  HostTensor y{x.shape, std::vector<float>(x.values.size())};
  for (int64_t r = 0; r < m; ++r) {
    const float* row = &x.values[static_cast<size_t>(r * k)];
    float mean = 0.0f;
    if (layernorm) mean = tec_row_sum_order(k, [&](int64_t i) { return row[i]; }) / static_cast<float>(k);
    const float var = tec_row_sum_order(k, [&](int64_t i) { return (row[i] - mean) * (row[i] - mean); });
    const float rsigma = 1.0f / std::sqrt(var / static_cast<float>(k) + eps);
    for (int64_t i = 0; i < k; ++i) {
      float v = (row[i] - mean) * rsigma * (in[1].values[static_cast<size_t>(i)] + gamma_offset);
      if (layernorm) v += in[2].values[static_cast<size_t>(i)];
      y.values[static_cast<size_t>(r * k + i)] = v;
    }
  }
  return {std::move(y)};
}

}  // namespace

void register_norm_ops(OpRegistry& registry) {
  registry.add(OpDef{
      .name = "layernorm",
      .summary = "(x - mean) * rsigma * gamma + beta over the last dim",
      .attrs = norm_attrs(),
      .check_attributes = check_norm_attributes,
      .params = [](const Attributes& a, DType d) { return norm_params(a, d, true); },
      .infer = [](const InferContext& ctx) { return infer_norm(ctx, true); },
      .infer_backward = passthrough_backward,
      .reference = [](const Attributes& a, const std::vector<HostTensor>& in) { return reference_norm(a, in, true); },
  });
  registry.add(OpDef{
      .name = "rmsnorm",
      .summary = "x * rsqrt(mean(x^2) + eps) * gamma over the last dim",
      .attrs = norm_attrs(),
      .check_attributes = check_norm_attributes,
      .params = [](const Attributes& a, DType d) { return norm_params(a, d, false); },
      .infer = [](const InferContext& ctx) { return infer_norm(ctx, false); },
      .infer_backward = passthrough_backward,
      .reference = [](const Attributes& a, const std::vector<HostTensor>& in) { return reference_norm(a, in, false); },
  });
}

}  // namespace tec
