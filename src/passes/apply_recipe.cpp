// apply_recipe: the first pass. It maps the recipe onto the GEMM operands of the graph.
#include <map>

#include "ops/common.h"
#include "passes/passes.h"

namespace tec {

namespace {

struct Wanted {
  Quantizer quantizer;
  TensorRole role;
};
using WantedMap = std::map<std::pair<NodeId, int>, Wanted>;  // (node, input slot) -> what its GEMM wants

// True when every reader of `id` is a GEMM operand slot wanting exactly `q`.
bool only_gemm_readers(const std::vector<std::pair<NodeId, int>>& readers, const WantedMap& wanted,
                       const Quantizer& q) {
  for (const auto& reader : readers) {
    auto it = wanted.find(reader);
    if (it == wanted.end() || !(it->second.quantizer == q)) return false;
  }
  return !readers.empty();
}

// cuBLASLt's FP8 GEMMs take their bias in bf16 (or fp16 with an fp16 output), never in fp32
// (measured on the H100, cuBLASLt 13.1), as TE's do. An fp32 model's bias is therefore stored
// in bf16 under the per-tensor and block FP8 recipes, for the GPU and the CPU reference alike:
// rounded once, when the plan's constants are made (the lowering's fusion notes say so). The
// error is 2^-9 of the bias, far below what FP8 operands resolve. (MXFP8 and NVFP4 run a 16-bit
// GEMM over dequantized operands on sm_90, which takes an fp32 bias with an fp32 output.)
void store_fp32_biases_in_bf16(Graph& graph) {
  for (const Node& node : graph.nodes) {
    if (node.op != "linear" || !node.attrs.get_bool("bias", true) || node.inputs.size() < 3) continue;
    Value& bias = graph.value(node.inputs[2]);
    if (bias.kind == ValueKind::weight && bias.proto.dtype == DType::fp32) bias.proto = TensorProto::dense(bias.proto.shape, DType::bf16);
  }
}

// fp8-static: every GEMM operand's quantizer is the model's own, per node: the input's scale
// from the linear's input_scale (its ONNX Q/DQ pair), the weight's from its constant's static
// scales (its DequantizeLinear). A weight the model left in float stays so (the model computes
// with it unquantized). Biases keep their dtype: tec adds them in fp32 after the GEMM.
void want_static_quantizers(const Graph& graph, WantedMap& wanted) {
  TEC_UNSUPPORTED_CHECK(graph.mode == Mode::infer, (ErrorContext{"recipe", "", "", graph.source_file}))
      << "fp8-static is an inference recipe (its scales come from a quantized model); train with fp8-current or fp8-delayed";
  for (NodeId n = 0; n < static_cast<NodeId>(graph.nodes.size()); ++n) {
    const Node& node = graph.node(n);
    if (!builtin_ops().get(node.op).gemm_operands) continue;
    const ErrorContext ctx = graph.context(n, "recipe");
    const double input_scale = node.attrs.get_float("input_scale", 0.0);
    TEC_USER_CHECK(input_scale > 0.0, ctx)
        << "fp8-static quantizes with the scales an ONNX model's QuantizeLinear/DequantizeLinear pairs fix, and this GEMM's "
           "input has none (compile with --recipe fp8-current instead)";
    const Value& w = graph.value(node.inputs.at(1));
    TEC_USER_CHECK(w.kind == ValueKind::weight, ctx) << "fp8-static needs a constant weight, and '" << w.name << "' is computed";
    wanted.emplace(std::make_pair(n, 0), Wanted{Quantizer::fp8_static(DType::fp8_e4m3, static_cast<float>(input_scale)), TensorRole::input});
    if (!w.weight || !w.weight->static_scales) continue;
    const auto& scales = *w.weight->static_scales;
    wanted.emplace(std::make_pair(n, 1),
                   Wanted{Quantizer::fp8_static_weight(DType::fp8_e4m3, scales.block_rows, scales.block_cols), TensorRole::weight});
  }
}

}  // namespace

Graph apply_recipe(Graph graph) {
  const OpRegistry& ops = builtin_ops();
  WantedMap wanted;
  if (graph.recipe.kind == RecipeKind::fp8_static) want_static_quantizers(graph, wanted);
  for (NodeId n = 0; n < static_cast<NodeId>(graph.nodes.size()); ++n) {
    const OpDef& def = ops.get(graph.node(n).op);
    if (!def.gemm_operands) continue;
    for (const GemmOperand& operand : def.gemm_operands(graph.node(n)))
      if (auto q = graph.recipe.quantizer_for(operand.role)) wanted.emplace(std::make_pair(n, operand.slot), Wanted{*q, operand.role});
  }
  if (wanted.empty()) return graph;
  const RecipeKind kind = graph.recipe.kind;
  if (kind == RecipeKind::fp8_current || kind == RecipeKind::fp8_delayed || kind == RecipeKind::fp8_block)
    store_fp32_biases_in_bf16(graph);

  const auto readers = graph.consumers();
  // (value, quantizer hash) -> the inserted quantize node's output, shared by all readers.
  std::map<std::pair<ValueId, size_t>, ValueId> inserted;
  std::vector<Node> old_nodes = std::move(graph.nodes);
  graph.nodes.clear();
  for (NodeId n = 0; n < static_cast<NodeId>(old_nodes.size()); ++n) {
    Node node = std::move(old_nodes[static_cast<size_t>(n)]);
    for (int slot = 0; slot < static_cast<int>(node.inputs.size()); ++slot) {
      auto it = wanted.find({n, slot});
      if (it == wanted.end()) continue;
      const Quantizer& q = it->second.quantizer;
      const ValueId vid = node.inputs[static_cast<size_t>(slot)];
      Value& v = graph.value(vid);
      if (v.kind == ValueKind::weight) {
        TEC_USER_CHECK(!v.quantizer || *v.quantizer == q, (ErrorContext{"recipe", node.name, node.op, node.source}))
            << "weight '" << v.name << "' is read by GEMMs that want different quantizers: " << v.quantizer->str()
            << " and " << q.str();
        v.quantizer = q;
        continue;
      }
      const bool producer_writes_quantized =
          v.kind == ValueKind::activation && !graph.is_output(vid) &&
          only_gemm_readers(readers[static_cast<size_t>(vid)], wanted, q);
      if (producer_writes_quantized) {
        v.quantizer = q;
        continue;
      }
      // Someone else needs the high-precision value (or it is a graph input): cast explicitly.
      auto key = std::make_pair(vid, q.hash());
      auto found = inserted.find(key);
      if (found == inserted.end()) {
        Value out;
        out.name = v.name + ".quantized";
        for (int suffix = 2; graph.find_value(out.name); ++suffix)
          out.name = v.name + ".quantized" + std::to_string(suffix);
        out.source = node.source;
        const ValueId out_id = graph.add_value(std::move(out));
        Node cast;
        cast.name = graph.value(out_id).name;
        cast.op = "quantize";
        cast.inputs = {vid};
        cast.outputs = {out_id};
        cast.source = node.source;
        cast.attrs.values["role"] = std::string(to_string(it->second.role));
        cast.attrs.values["recipe"] = std::string();
        if (q.kind == QuantizerKind::fp8_static) cast.attrs.values["static_scale"] = static_cast<double>(q.static_scale_inv);
        graph.add_node(std::move(cast));
        found = inserted.emplace(key, out_id).first;
      }
      node.inputs[static_cast<size_t>(slot)] = found->second;
    }
    graph.add_node(std::move(node));
  }
  verify(graph);
  return graph;
}

}  // namespace tec
