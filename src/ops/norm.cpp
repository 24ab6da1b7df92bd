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
  HostTensor means{Shape{m}, std::vector<float>(static_cast<size_t>(m))};
  HostTensor rsigmas{Shape{m}, std::vector<float>(static_cast<size_t>(m))};
  for (int64_t r = 0; r < m; ++r) {
    const float* row = &x.values[static_cast<size_t>(r * k)];
    float mean = 0.0f;
    if (layernorm) mean = tec_row_sum_order(k, [&](int64_t i) { return row[i]; }) / static_cast<float>(k);
    const float var = tec_row_sum_order(k, [&](int64_t i) { return (row[i] - mean) * (row[i] - mean); });
    const float rsigma = 1.0f / std::sqrt(var / static_cast<float>(k) + eps);
    means.values[static_cast<size_t>(r)] = mean;
    rsigmas.values[static_cast<size_t>(r)] = rsigma;
    for (int64_t i = 0; i < k; ++i) {
      float v = (row[i] - mean) * rsigma * (in[1].values[static_cast<size_t>(i)] + gamma_offset);
      if (layernorm) v += in[2].values[static_cast<size_t>(i)];
      y.values[static_cast<size_t>(r * k + i)] = v;
    }
  }
  if (layernorm) return {std::move(y), std::move(means), std::move(rsigmas)};
  return {std::move(y), std::move(rsigmas)};
}

// in: x, gamma, [mean], rsigma, dy. With xhat = (x - mean) rsigma and g = dy * gamma:
// dx = rsigma (g - mean(g) - xhat mean(g xhat)) (rmsnorm: no mean(g) term), dgamma = sum over
// rows of dy xhat, dbeta = sum of dy. Row means in the row kernel's order, column sums in the
// column kernels' (tec_column_sum_order), all in fp32.
std::vector<HostTensor> backward_reference_norm(const Attributes& attrs, const std::vector<HostTensor>& in, bool layernorm) {
  const HostTensor& x = in[0];
  const HostTensor& gamma = in[1];
  const HostTensor& rsigmas = in[layernorm ? 3 : 2];
  const HostTensor& dy = in[layernorm ? 4 : 3];
  const int64_t m = x.shape.rows(), k = x.shape.cols();
  const float gamma_offset = attrs.get_bool("zero_centered_gamma", false) ? 1.0f : 0.0f;
  HostTensor dx{x.shape, std::vector<float>(x.values.size())};
  HostTensor dgamma{gamma.shape, std::vector<float>(static_cast<size_t>(k), 0.0f)};
  HostTensor dbeta{gamma.shape, std::vector<float>(static_cast<size_t>(k), 0.0f)};
  std::vector<float> xhat(static_cast<size_t>(k)), g(static_cast<size_t>(k));
  for (int64_t r = 0; r < m; ++r) {
    const float mean = layernorm ? in[2].values[static_cast<size_t>(r)] : 0.0f;
    const float rsigma = rsigmas.values[static_cast<size_t>(r)];
    for (int64_t i = 0; i < k; ++i) {
      const auto e = static_cast<size_t>(r * k + i);
      xhat[static_cast<size_t>(i)] = (x.values[e] - mean) * rsigma;
      g[static_cast<size_t>(i)] = dy.values[e] * (gamma.values[static_cast<size_t>(i)] + gamma_offset);
    }
    const float mean_g = layernorm ? tec_row_sum_order(k, [&](int64_t i) { return g[static_cast<size_t>(i)]; }) / static_cast<float>(k) : 0.0f;
    const float mean_gx =
        tec_row_sum_order(k, [&](int64_t i) { return g[static_cast<size_t>(i)] * xhat[static_cast<size_t>(i)]; }) / static_cast<float>(k);
    for (int64_t i = 0; i < k; ++i)
      dx.values[static_cast<size_t>(r * k + i)] =
          rsigma * (g[static_cast<size_t>(i)] - mean_g - xhat[static_cast<size_t>(i)] * mean_gx);
  }
  // dgamma's xhat as above, recomputed: the same float operations give the same bits.
  const float* means = layernorm ? in[2].values.data() : nullptr;
  tec_column_sum_order(m, k, dgamma.values.data(), [&](int64_t r, int64_t i) {
    const auto e = static_cast<size_t>(r * k + i);
    const float mean = means ? means[r] : 0.0f;
    return dy.values[e] * ((x.values[e] - mean) * rsigmas.values[static_cast<size_t>(r)]);
  });
  if (layernorm)
    tec_column_sum_order(m, k, dbeta.values.data(), [&](int64_t r, int64_t i) { return dy.values[static_cast<size_t>(r * k + i)]; });
  if (layernorm) return {std::move(dx), std::move(dgamma), std::move(dbeta)};
  return {std::move(dx), std::move(dgamma)};
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
      .infer_backward = elementwise_backward,
      .reference = [](const Attributes& a, const std::vector<HostTensor>& in) { return reference_norm(a, in, true); },
      .backward_reference = [](const Attributes& a, const std::vector<HostTensor>& in) { return backward_reference_norm(a, in, true); },
  });
  registry.add(OpDef{
      .name = "rmsnorm",
      .summary = "x * rsqrt(mean(x^2) + eps) * gamma over the last dim",
      .attrs = norm_attrs(),
      .check_attributes = check_norm_attributes,
      .params = [](const Attributes& a, DType d) { return norm_params(a, d, false); },
      .infer = [](const InferContext& ctx) { return infer_norm(ctx, false); },
      .infer_backward = elementwise_backward,
      .reference = [](const Attributes& a, const std::vector<HostTensor>& in) { return reference_norm(a, in, false); },
      .backward_reference = [](const Attributes& a, const std::vector<HostTensor>& in) { return backward_reference_norm(a, in, false); },
  });
}

}  // namespace tec
