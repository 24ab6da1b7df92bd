// Activations: gelu (tanh and erf), relu, silu, and the gated swiglu/geglu that split the
// last dim in half (TE's SwiGLU/GEGLU: act(first half) * second half). Each saves its input.
#include "ops/common.h"

namespace tec {

namespace {

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
  return OpDef{
      .name = std::move(name),
      .summary = std::move(summary),
      .attrs = std::move(attrs),
      .infer = gated ? infer_gated : infer_unary,
      .infer_backward = passthrough_backward,
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
