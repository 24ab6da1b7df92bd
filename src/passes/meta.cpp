// meta: the fake forward and backward over TensorProtos (ARCHITECTURE.md §5). After it, every
// value has its final shape, dtype and quantizer, and in train mode every node knows what it
// saves (and which of those alias an input) and what its backward reads.
#include "ops/common.h"
#include "passes/passes.h"

namespace tec {

namespace {

std::vector<TensorProto> input_protos(const Graph& g, const Node& node) {
  std::vector<TensorProto> protos;
  for (ValueId in : node.inputs) protos.push_back(g.value(in).proto);
  return protos;
}

// Integers (an MoE layer's expert indices, m_splits, row map, token ids) are routing and
// bools (uint8: masks) are decisions, not values a gradient flows through.
bool carries_gradient(DType dtype) { return dtype != DType::int32 && dtype != DType::int64 && dtype != DType::uint8; }

void check_input_count(const OpDef& def, const Node& node, size_t params, const ErrorContext& ctx) {
  const auto activations = static_cast<int>(node.inputs.size() - params);
  TEC_USER_CHECK(activations >= def.min_inputs && activations <= def.max_inputs, ctx)
      << "op '" << def.name << "' takes " << def.min_inputs
      << (def.max_inputs != def.min_inputs ? " to " + std::to_string(def.max_inputs) : std::string()) << " input(s), got "
      << activations;
}

void run_forward(Graph& g) {
  const OpRegistry& ops = builtin_ops();
  for (Value& v : g.values) {
    if (v.kind == ValueKind::weight) {
      v.proto.requires_grad = g.mode == Mode::train && !v.frozen && carries_gradient(v.proto.dtype);
      v.proto = v.proto.with_quantizer(v.quantizer);
    }
  }
  for (NodeId n = 0; n < static_cast<NodeId>(g.nodes.size()); ++n) {
    const Node& node = g.node(n);
    const OpDef& def = ops.get(node.op);
    const ErrorContext ctx = g.context(n, "meta");
    InferContext infer_ctx{g, node, ctx, input_protos(g, node)};
    // The op's own parameters (a linear's weight), not constants read as operands (a weight
    // value that an ONNX Mul multiplies by).
    const size_t params = def.params ? def.params(node.attrs, DType::fp32).size() : 0;
    check_input_count(def, node, params, ctx);
    InferResult result = with_context(ctx, [&] { return def.infer(infer_ctx); });
    TEC_INTERNAL_CHECK(result.outputs.size() == node.outputs.size(), ctx) << "infer returned the wrong output count";
    bool requires_grad = false;
    for (const auto& in : infer_ctx.inputs) requires_grad |= in.requires_grad;
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      Value& out = g.value(node.outputs[i]);
      TensorProto proto = std::move(result.outputs[i]);
      if (out.quantizer) {
        TEC_INTERNAL_CHECK(!proto.quantizer || *proto.quantizer == *out.quantizer, ctx)
            << "value '" << out.name << "' is quantized twice";
        proto = proto.with_quantizer(out.quantizer);
      }
      proto.requires_grad = requires_grad && carries_gradient(proto.dtype);
      out.proto = std::move(proto);
    }
    Node& mutable_node = g.node(n);
    mutable_node.workspaces = std::move(result.workspaces);
    mutable_node.saved = g.mode == Mode::train && requires_grad ? std::move(result.saved) : std::vector<SavedTensor>{};
  }
}

// Walks the nodes backwards from the outputs, as autodiff will, to fix every gradient's proto.
void run_backward(Graph& g) {
  const OpRegistry& ops = builtin_ops();
  std::vector<std::optional<TensorProto>> grads(g.values.size());
  for (ValueId out : g.outputs)
    if (g.value(out).proto.requires_grad) grads[static_cast<size_t>(out)] = dense_like(g.value(out).proto);
  for (NodeId n = static_cast<NodeId>(g.nodes.size()); n-- > 0;) {
    Node& node = g.node(n);
    bool any_grad = false;
    for (ValueId out : node.outputs) any_grad |= grads[static_cast<size_t>(out)].has_value();
    if (!any_grad) continue;
    const OpDef& def = ops.get(node.op);
    const ErrorContext ctx = g.context(n, "meta");
    if (def.gradient) {  // a graph of other ops (autodiff builds it): a gradient per input that needs one
      for (ValueId in : node.inputs) {
        const TensorProto& proto = g.value(in).proto;
        if (proto.requires_grad && !grads[static_cast<size_t>(in)]) grads[static_cast<size_t>(in)] = dense_like(proto);
      }
      continue;
    }
    TEC_UNSUPPORTED_CHECK(def.infer_backward != nullptr, ctx)
        << "op '" << node.op << "' has no backward; train mode cannot pass a gradient through it";
    BackwardContext bctx{g, node, ctx, input_protos(g, node), node.saved, {}};
    for (ValueId out : node.outputs) {
      const auto& grad = grads[static_cast<size_t>(out)];
      bctx.grad_outputs.push_back(grad ? *grad : dense_like(g.value(out).proto));
    }
    BackwardResult result = with_context(ctx, [&] { return def.infer_backward(bctx); });
    TEC_INTERNAL_CHECK(result.grad_inputs.size() == node.inputs.size(), ctx) << "infer_backward: wrong grad count";
    for (const auto& read : result.reads)
      TEC_INTERNAL_CHECK(read.saved_index >= 0 && static_cast<size_t>(read.saved_index) < node.saved.size(), ctx)
          << "infer_backward reads saved tensor " << read.saved_index << " of " << node.saved.size();
    if (result.grad_reads.empty())
      for (size_t o = 0; o < node.outputs.size(); ++o) result.grad_reads.push_back({static_cast<int>(o), false, false});
    for (const auto& read : result.grad_reads)
      TEC_INTERNAL_CHECK(read.output >= 0 && static_cast<size_t>(read.output) < node.outputs.size(), ctx)
          << "infer_backward reads the gradient of output " << read.output;
    node.backward = BackwardInfo{std::move(result.reads), std::move(result.grad_reads)};
    for (size_t slot = 0; slot < node.inputs.size(); ++slot) {
      const Value& in = g.value(node.inputs[slot]);
      // A model input that asks for its gradient (the plan's output d<name>) where the op gives
      // none (attention's mask) would be an output nothing writes.
      TEC_USER_CHECK(result.grad_inputs[slot] || !in.proto.requires_grad || in.kind != ValueKind::input, ctx)
          << "input '" << in.name << "' asks for its gradient, but op '" << node.op << "' gives none for its input " << slot
          << " (a mask or an index): set \"requires_grad\": false on it";
      if (!result.grad_inputs[slot] || !in.proto.requires_grad) continue;
      auto& acc = grads[static_cast<size_t>(node.inputs[slot])];
      if (acc)  // several readers: their gradients are summed into one buffer
        TEC_INTERNAL_CHECK(acc->shape == result.grad_inputs[slot]->shape, ctx) << "gradient shapes differ";
      else
        acc = result.grad_inputs[slot];
    }
  }
  for (size_t i = 0; i < g.values.size(); ++i) g.values[i].grad = grads[i];
}

}  // namespace

Graph meta(Graph graph) {
  run_forward(graph);
  if (graph.mode == Mode::train) run_backward(graph);
  return graph;
}

}  // namespace tec
