// usage: decides which copies (rowwise, columnwise) each quantized tensor needs
// (ARCHITECTURE.md §5, LAYOUTS.md §0). Forward readers need rowwise; a backward GEMM that
// reads a saved alias transposed (wgrad, dgrad) needs columnwise. Then every buffer of
// every tensor is checked against its format's rules.
#include "ops/common.h"
#include "passes/passes.h"

namespace tec {

namespace {

// Every proto a graph holds, with the context that names it, for validation.
void validate_buffers(const Graph& g) {
  for (ValueId id = 0; id < static_cast<ValueId>(g.values.size()); ++id) {
    const Value& v = g.value(id);
    ErrorContext ctx = v.producer >= 0 ? g.context(v.producer, "usage") : ErrorContext{"usage", v.name, "", v.source};
    with_context(ctx, [&] {
      (void)v.proto.buffers(g.target);
      if (v.grad) (void)v.grad->buffers(g.target);
    });
  }
  for (NodeId n = 0; n < static_cast<NodeId>(g.nodes.size()); ++n) {
    const Node& node = g.node(n);
    with_context(g.context(n, "usage"), [&] {
      for (const auto& s : node.saved) (void)s.proto.buffers(g.target);
      for (const auto& w : node.workspaces) (void)w.proto.buffers(g.target);
    });
  }
}

}  // namespace

Graph usage(Graph graph) {
  std::vector<Usage> needed(graph.values.size(), Usage{false, false});
  const auto readers = graph.consumers();
  for (size_t v = 0; v < graph.values.size(); ++v)
    if (!readers[v].empty() || graph.is_output(static_cast<ValueId>(v))) needed[v].rowwise = true;

  for (Node& node : graph.nodes) {
    if (!node.backward) continue;
    for (const auto& read : node.backward->reads) {
      SavedTensor& saved = node.saved[static_cast<size_t>(read.saved_index)];
      if (saved.aliases_input < 0) continue;
      Usage& u = needed[static_cast<size_t>(node.inputs[static_cast<size_t>(saved.aliases_input)])];
      u = u | read.usage;
    }
  }

  for (size_t v = 0; v < graph.values.size(); ++v) {
    Value& value = graph.values[v];
    if (!value.proto.is_quantized()) continue;
    Usage u = needed[v];
    if (!u.rowwise && !u.columnwise) u.rowwise = true;  // unread values still get a rowwise copy
    value.proto = value.proto.update_usage(u);
  }

  // A saved alias is a view of its input with only the copies the backward reads: the
  // forward may drop the rest once it is done (the planner's business).
  for (Node& node : graph.nodes) {
    for (size_t i = 0; i < node.saved.size(); ++i) {
      SavedTensor& saved = node.saved[i];
      if (saved.aliases_input < 0) continue;
      const TensorProto& input = graph.value(node.inputs[static_cast<size_t>(saved.aliases_input)]).proto;
      Usage read{false, false};
      if (node.backward)
        for (const auto& r : node.backward->reads)
          if (r.saved_index == static_cast<int>(i)) read = read | r.usage;
      saved.proto = input.is_quantized() && (read.rowwise || read.columnwise) ? input.update_usage(read) : input;
    }
  }
  validate_buffers(graph);
  return graph;
}

}  // namespace tec
