// attention_in_16_bits: cuDNN's SDPA, tec's attention on the GPU, takes q, k, v (and an
// additive mask) in bf16 or fp16 only. An fp32 model's attention (an ONNX export from
// transformers, which is fp32 by default) would otherwise have no GPU code at all. Its
// attention reads bf16 copies of q, k, v and the mask and writes bf16, cast back to fp32 for
// its readers: for the GPU and the CPU reference alike (the reference runs the same plan), as
// the FP8 recipes store an fp32 bias in bf16. The lowering's note on the attention says so.
// Train plans too: the casts' gradients (OpDef::gradient) take dq, dk, dv back to fp32; meta
// runs again over the new nodes.
#include <map>

#include "ops/common.h"
#include "passes/passes.h"

namespace tec {

namespace {

// An attention over fp32 q, k, v that cuDNN could run in bf16: head dims that are multiples
// of 8 (the lowering's rule; one that is not stays fp32, on the CPU reference, the lowering
// saying why, rather than losing precision for nothing).
bool reads_fp32(const Graph& graph, const Node& node) {
  if (node.op != "attention" || node.computes_backward || node.outputs.size() != 1) return false;
  const int64_t head_dim = node.attrs.get_int("head_dim", 0), v_head_dim = node.attrs.get_int("v_head_dim", 0);
  if (head_dim % 8 != 0 || v_head_dim % 8 != 0) return false;
  for (size_t slot = 0; slot < node.inputs.size() && slot < 3; ++slot) {
    const TensorProto& p = graph.value(node.inputs[slot]).proto;
    if (p.dtype != DType::fp32 || p.quantizer) return false;
  }
  return graph.value(node.outputs[0]).proto.dtype == DType::fp32;
}

std::string unique_name(const Graph& graph, const std::string& base) {
  std::string name = base;
  for (int suffix = 2; graph.find_value(name); ++suffix) name = base + std::to_string(suffix);
  return name;
}

ValueId add_bf16_value(Graph& graph, const std::string& base, const Value& like, const std::string& source) {
  Value v;
  v.name = unique_name(graph, base);
  v.proto = TensorProto::dense(like.proto.shape, DType::bf16);
  v.source = source;
  return graph.add_value(std::move(v));
}

Node cast_node(std::string name, ValueId in, ValueId out, DType to, const std::string& source) {
  Node cast;
  cast.name = std::move(name);
  cast.op = "cast";
  cast.inputs = {in};
  cast.outputs = {out};
  cast.source = source;
  cast.attrs.values["dtype"] = std::string(to_string(to));
  return cast;
}

}  // namespace

Graph attention_in_16_bits(Graph graph) {
  bool any = false;
  for (const Node& n : graph.nodes) any = any || reads_fp32(graph, n);
  if (!any) return graph;
  std::vector<Node> old_nodes = std::move(graph.nodes);
  graph.nodes.clear();
  std::map<ValueId, ValueId> bf16_copy;  // an fp32 value -> its bf16 cast, shared by the attentions reading it
  for (Node& node : old_nodes) {
    if (!reads_fp32(graph, node)) {
      graph.add_node(std::move(node));
      continue;
    }
    for (ValueId& in : node.inputs) {
      if (graph.value(in).proto.dtype != DType::fp32) continue;
      auto found = bf16_copy.find(in);
      if (found == bf16_copy.end()) {
        const ValueId copy = add_bf16_value(graph, graph.value(in).name + ".bf16", graph.value(in), node.source);
        graph.add_node(cast_node(graph.value(copy).name, in, copy, DType::bf16, node.source));
        found = bf16_copy.emplace(in, copy).first;
      }
      in = found->second;
    }
    const ValueId fp32_out = node.outputs[0];
    const ValueId bf16_out = add_bf16_value(graph, graph.value(fp32_out).name + ".bf16", graph.value(fp32_out), node.source);
    node.outputs[0] = bf16_out;
    const std::string source = node.source;
    graph.add_node(std::move(node));
    graph.add_node(cast_node(unique_name(graph, graph.value(fp32_out).name + ".to_fp32"), bf16_out, fp32_out, DType::fp32, source));
  }
  verify(graph);
  return graph.mode == Mode::train ? meta(std::move(graph)) : graph;
}

}  // namespace tec
