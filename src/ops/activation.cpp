// Activations: gelu (tanh and erf), relu, silu, and the gated swiglu/geglu that split the
// last dim in half (TE's SwiGLU/GEGLU: act(first half) * second half). Each saves its input.
#include "ops/common.h"
#include "tec_math.h"

namespace tec {

namespace {

using Activation = float (*)(float);

// The functions themselves are shared with the GPU kernels (kernels/tec_math.h), so that
// both compute the same bits.
float gelu_tanh(float x) { return tec_gelu_tanh(x); }
float gelu_erf(float x) { return tec_gelu_erf(x); }
float relu(float x) { return tec_relu(x); }
float silu(float x) { return tec_silu(x); }

// The elementwise function of an activation op, by name and attributes, and its derivative.
Activation activation_function(const std::string& op, const Attributes& attrs) {
  if (op == "gelu") return attrs.get_string("approximate", "tanh") == "tanh" ? gelu_tanh : gelu_erf;
  if (op == "relu") return relu;
  if (op == "silu" || op == "swiglu") return silu;
  return gelu_tanh;  // geglu
}

Activation activation_derivative(const std::string& op, const Attributes& attrs) {
  if (op == "gelu") return attrs.get_string("approximate", "tanh") == "tanh" ? tec_dgelu_tanh : tec_dgelu_erf;
  if (op == "relu") return tec_drelu;
  if (op == "silu" || op == "swiglu") return tec_dsilu;
  return tec_dgelu_tanh;  // geglu
}

// in: x, dy. dx = dy f'(x).
std::vector<HostTensor> backward_unary(const std::string& op, const Attributes& attrs, const std::vector<HostTensor>& in) {
  const Activation df = activation_derivative(op, attrs);
  HostTensor dx = in[1];
  for (size_t i = 0; i < dx.values.size(); ++i) dx.values[i] *= df(in[0].values[i]);
  dx.shape = in[0].shape;
  return {std::move(dx)};
}

// in: x = [a | b], dy. y = f(a) b: da = dy b f'(a), db = dy f(a).
std::vector<HostTensor> backward_gated(const std::string& op, const Attributes& attrs, const std::vector<HostTensor>& in) {
  const Activation f = activation_function(op, attrs);
  const Activation df = activation_derivative(op, attrs);
  const HostTensor& x = in[0];
  const HostTensor& dy = in[1];
  const int64_t m = x.shape.rows(), n = x.shape.cols() / 2;
  HostTensor dx{x.shape, std::vector<float>(x.values.size())};
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const float a = x.values[static_cast<size_t>(r * 2 * n + j)];
      const float b = x.values[static_cast<size_t>(r * 2 * n + n + j)];
      const float g = dy.values[static_cast<size_t>(r * n + j)];
      dx.values[static_cast<size_t>(r * 2 * n + j)] = g * b * df(a);
      dx.values[static_cast<size_t>(r * 2 * n + n + j)] = g * f(a);
    }
  return {std::move(dx)};
}

std::vector<HostTensor> reference_unary(const std::string& op, const Attributes& attrs, const std::vector<HostTensor>& in) {
  const Activation f = activation_function(op, attrs);
  HostTensor out = in[0];
  for (float& v : out.values) v = f(v);
  return {std::move(out)};
}

// act(x[..., :n]) * x[..., n:]
std::vector<HostTensor> reference_gated(const std::string& op, const Attributes& attrs, const std::vector<HostTensor>& in) {
  const Activation f = activation_function(op, attrs);
  const HostTensor& x = in[0];
  const int64_t m = x.shape.rows(), n = x.shape.cols() / 2;
  HostTensor out{x.shape.with_last(n), std::vector<float>(static_cast<size_t>(m * n))};
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j)
      out.values[static_cast<size_t>(r * n + j)] =
          f(x.values[static_cast<size_t>(r * 2 * n + j)]) * x.values[static_cast<size_t>(r * 2 * n + n + j)];
  return {std::move(out)};
}

InferResult infer_unary(const InferContext& ctx) {
  require_high_precision(ctx, 0);
  InferResult r;
  r.outputs.push_back(dense_like(ctx.inputs[0]));
  r.saved.push_back(save_input(ctx, 0, "input"));
  return r;
}

InferResult infer_gated(const InferContext& ctx) {
  require_high_precision(ctx, 0);
  const TensorProto& x = ctx.inputs[0];
  TEC_USER_CHECK(x.shape.cols() % 2 == 0, ctx.error)
      << "gated activation splits the last dim in half; it must be even, got shape " << x.shape.str();
  InferResult r;
  r.outputs.push_back(TensorProto::dense(x.shape.with_last(x.shape.cols() / 2), x.dtype));
  r.saved.push_back(save_input(ctx, 0, "input"));
  return r;
}

OpDef activation(std::string name, std::string summary, bool gated, std::vector<AttrSpec> attrs = {}) {
  const std::string op = name;
  return OpDef{
      .name = std::move(name),
      .summary = std::move(summary),
      .attrs = std::move(attrs),
      .infer = gated ? infer_gated : infer_unary,
      .infer_backward = elementwise_backward,
      .reference = [op, gated](const Attributes& a, const std::vector<HostTensor>& in) {
        return gated ? reference_gated(op, a, in) : reference_unary(op, a, in);
      },
      .backward_reference = [op, gated](const Attributes& a, const std::vector<HostTensor>& in) {
        return gated ? backward_gated(op, a, in) : backward_unary(op, a, in);
      },
  };
}

}  // namespace

void register_activation_ops(OpRegistry& registry) {
  registry.add(activation("gelu", "GELU, tanh approximation (TE's default) or exact erf", false,
                          {{"approximate", AttrType::string_, AttrValue{std::string("tanh")}, {"tanh", "none"},
                            "'tanh' or 'none' (erf)"}}));
  registry.add(activation("relu", "max(x, 0)", false));
  registry.add(activation("silu", "x * sigmoid(x)", false));
  registry.add(activation("swiglu", "silu(x[..., :n]) * x[..., n:], n = K/2", true));
  registry.add(activation("geglu", "gelu_tanh(x[..., :n]) * x[..., n:], n = K/2", true));
}

}  // namespace tec
