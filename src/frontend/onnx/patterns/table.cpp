// The pattern table: one row per pattern, {kind, family, root op, name, match, emit}. The
// matches run row by row over the graph in topological order; a node in a group is taken.
#include <algorithm>

#include "frontend/onnx/onnx_builder.h"

namespace tec::onnx {

const std::vector<OnnxPattern>& onnx_patterns() {
  using K = Group::Kind;
  static const std::vector<OnnxPattern> table = {
      {K::layernorm, "norm", "ReduceMean", "decomposed LayerNorm", &Matcher::match_layernorm, &Builder::emit_norm_group},
      {K::rmsnorm, "norm", "ReduceMean", "decomposed RMSNorm", &Matcher::match_rmsnorm, &Builder::emit_norm_group},
      {K::gelu, "activation", "Erf", "GELU (erf form)", &Matcher::match_gelu_erf, &Builder::emit_gelu},
      {K::gelu, "activation", "Tanh", "GELU (tanh form)", &Matcher::match_gelu_tanh, &Builder::emit_gelu},
      {K::silu, "activation", "Sigmoid", "x * sigmoid(x)", &Matcher::match_silu, &Builder::emit_silu},
      {K::gated, "mlp", "Mul", "gated MLP", &Matcher::match_gated, &Builder::emit_gated},
      {K::linear_bias, "linear", "MatMul", "MatMul + bias", &Matcher::match_linear_bias, &Builder::emit_linear_bias},
      {K::qdq, "linear", "QuantizeLinear", "Q/DQ pair", &Matcher::match_qdq, &Builder::emit_qdq},
      {K::rope, "rope", "Concat", "rotate_half rotary embedding", &Matcher::match_rope, &Builder::emit_spelled_rope},
      {K::attention, "attention", "Softmax", "MatMul/Softmax/MatMul attention", &Matcher::match_attention,
       &Builder::emit_spelled_attention},
  };
  return table;
}

const OnnxPattern& pattern_of(Group::Kind kind) {
  for (const OnnxPattern& p : onnx_patterns())
    if (p.kind == kind) return p;
  TEC_INTERNAL_ERROR((ErrorContext{"onnx", "", "", "pattern table"})) << "no row for group kind " << static_cast<int>(kind);
}

void Matcher::find_patterns() {
  searched_ = true;
  for (const OnnxPattern& pattern : onnx_patterns())
    for (int i : graph_.order)
      if (is_op(i, pattern.root_op)) (this->*pattern.match)(i);
}

std::string Matcher::why_no_pattern(int i) const {
  if (!searched_) return "patterns are off (--no-onnx-patterns)";
  std::vector<std::string> tried;
  for (const OnnxPattern& pattern : onnx_patterns())
    if (node(i).op_type == pattern.root_op && std::find(tried.begin(), tried.end(), pattern.name) == tried.end())
      tried.emplace_back(pattern.name);
  if (tried.empty()) return "no pattern took it";
  std::string names;
  for (size_t k = 0; k < tried.size(); ++k) names += (k == 0 ? "" : k + 1 == tried.size() ? " and " : ", ") + tried[k];
  return "no pattern took it: the " + names + (tried.size() == 1 ? " pattern starts" : " patterns start") + " at this " +
         node(i).op_type + " and found no match";
}

int Matcher::sole_consumer(const std::string& v, const char* op) const {
  if (!graph_.internal(v)) return -1;
  const int c = graph_.consumers_of(v)[0];
  return is_op(c, op) ? c : -1;
}

void Matcher::add_group(Group g) {
  const int id = static_cast<int>(groups.size());
  for (int member : g.members) group_of[static_cast<size_t>(member)] = id;
  groups.push_back(std::move(g));
}

}  // namespace tec::onnx
