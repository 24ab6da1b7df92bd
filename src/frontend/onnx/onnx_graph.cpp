#include "frontend/onnx/onnx_graph.h"

#include <algorithm>
#include <cmath>

#include "frontend/onnx/onnx_canonical.h"

namespace tec::onnx {

bool Problems::has(const Node& n) const {
  return std::any_of(list_.begin(), list_.end(), [&](const Problem& p) { return p.index == n.index; });
}

void Problems::throw_if_any(const ErrorContext& file, int64_t opset) {
  if (list_.empty()) return;
  std::stable_sort(list_.begin(), list_.end(), [](const Problem& a, const Problem& b) { return a.index < b.index; });
  std::set<std::pair<int, std::string>> seen;
  std::string lines;
  for (const Problem& p : list_) {
    if (!seen.insert({p.index, p.why}).second) continue;
    lines += "\n  node '" + p.node + "' (" + p.op_type + (p.domain.empty() ? "" : " in domain " + p.domain) + ", opset " +
             std::to_string(opset) + "): " + p.why;
  }
  std::set<int> nodes;
  for (const auto& [index, why] : seen) nodes.insert(index);
  const std::string text = std::to_string(nodes.size()) + " node(s) tec cannot compile (no plan written):" + lines;
  throw Error(ErrorKind::unsupported, file, text);
}

void OnnxGraph::index_values() {
  std::set<std::string> defined;
  for (const auto& in : model.inputs) {
    TEC_USER_CHECK(defined.insert(in.name).second, file_ctx()) << "graph input '" << in.name << "' is listed twice";
  }
  for (const auto& [name, t] : model.initializers) defined.insert(name);
  for (const Node& n : nodes)
    for (const auto& out : n.outputs) {
      if (out.empty()) continue;
      TEC_USER_CHECK(defined.insert(out).second, node_ctx(n))
          << "value '" << out << "' is produced twice (ONNX graphs are single-assignment)";
      producer[out] = n.index;
    }
  for (const Node& n : nodes)
    for (const auto& in : n.inputs) {
      if (in.empty()) continue;
      TEC_USER_CHECK(defined.count(in), node_ctx(n))
          << "input '" << in << "' is not a graph input, an initializer or any node's output";
      consumers[in].push_back(n.index);
    }
  for (const auto& out : model.outputs) {
    TEC_USER_CHECK(defined.count(out.name), file_ctx()) << "graph output '" << out.name << "' is never produced";
    outputs.insert(out.name);
  }
}

// Kahn's algorithm in file order; what is left over lies on a cycle, reported as a path.
void OnnxGraph::order_nodes() {
  const size_t n = nodes.size();
  std::vector<int> pending(n, 0);
  for (const Node& nd : nodes)
    for (const auto& in : nd.inputs)
      if (!in.empty() && producer.count(in)) ++pending[static_cast<size_t>(nd.index)];
  std::vector<int> ready;
  for (size_t i = n; i-- > 0;)
    if (pending[i] == 0) ready.push_back(static_cast<int>(i));
  while (!ready.empty()) {
    const int i = ready.back();
    ready.pop_back();
    order.push_back(i);
    std::vector<int> next;
    for (const auto& out : node(i).outputs)
      if (!out.empty() && consumers.count(out))
        for (int c : consumers[out])
          if (--pending[static_cast<size_t>(c)] == 0) next.push_back(c);
    std::sort(next.rbegin(), next.rend());
    ready.insert(ready.end(), next.begin(), next.end());
    std::sort(ready.rbegin(), ready.rend());
  }
  if (order.size() == n) return;
  // Walk producers from a leftover node until one repeats: that is the cycle.
  int at = -1;
  for (size_t i = 0; i < n; ++i)
    if (pending[i] > 0) at = static_cast<int>(i);
  std::vector<int> path;
  std::set<int> seen;
  while (seen.insert(at).second) {
    path.push_back(at);
    for (const auto& in : node(at).inputs)
      if (!in.empty() && producer.count(in) && pending[static_cast<size_t>(producer[in])] > 0) {
        at = producer[in];
        break;
      }
  }
  std::string cycle;
  auto from = std::find(path.begin(), path.end(), at);
  for (auto it = path.rbegin(); it != std::make_reverse_iterator(from) + 1 && it != path.rend(); ++it)
    cycle += (cycle.empty() ? "" : " -> ") + node(*it).name;
  cycle += " -> " + node(at).name;
  TEC_USER_ERROR(node_ctx(node(at))) << "the graph has a cycle: " << cycle;
}

// Exporters' other spellings of what the patterns look for, rewritten first
// (onnx_canonical.h); the graph is indexed and ordered again around the rewritten nodes.
void OnnxGraph::canonicalize() {
  canonical_notes = onnx::canonicalize(nodes, model.initializers, model.inputs, outputs);
  if (canonical_notes.empty()) return;
  producer.clear();
  consumers.clear();
  order.clear();
  index_values();
  order_nodes();
}

// The element type of every value the structure tells it for (-1 elsewhere), in topological
// order, for the Casts below.
std::map<std::string, int32_t> OnnxGraph::elem_types() const {
  static const std::set<std::string> same = {"Relu", "Gelu", "Sigmoid", "Tanh", "Erf", "Sqrt", "Reciprocal", "Neg", "Pow",
                                             "ReduceMean", "LayerNormalization", "RMSNormalization", "Transpose",
                                             "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "MatMul", "Gemm",
                                             "Add", "Sub", "Mul", "Div", "Gather", "Concat", "Attention", "Softmax", "Slice",
                                             "Cos", "Sin", "Trilu", "Expand"};
  std::map<std::string, int32_t> type;
  for (const auto& in : model.inputs) type[in.name] = in.elem_type;
  for (const auto& [name, t] : model.initializers) type[name] = t.elem_type;
  auto of = [&](const std::string& v) { return type.count(v) ? type.at(v) : -1; };
  for (int i : order) {
    const Node& n = node(i);
    if (!n.domain.empty() || n.outputs.empty()) continue;
    int32_t t = -1;
    if (n.op_type == "Cast") t = static_cast<int32_t>(attr_int(n, "to", -1));
    else if (n.op_type == "Shape") t = kInt64;
    else if (n.op_type == "Constant" && n.attrs.count("value") && n.attrs.at("value").t) t = n.attrs.at("value").t->elem_type;
    else if (n.op_type == "DequantizeLinear" && n.inputs.size() > 1) t = of(n.inputs[1]);
    else if (same.count(n.op_type) && !n.inputs.empty())
      t = of(n.inputs[0]) >= 0 || n.inputs.size() < 2 ? of(n.inputs[0]) : of(n.inputs[1]);
    if (t >= 0) type[n.outputs[0]] = t;
  }
  return type;
}

// A Cast to the type its input already has changes nothing: exporters write them around
// Hugging Face's RMSNorm (`.to(float32)`, `.to(input_dtype)`) in fp32 models. Its readers
// read the input instead, so that the patterns see through it; one that is a graph output
// stays.
void OnnxGraph::skip_noop_casts() {
  noop_cast.assign(nodes.size(), false);
  types = elem_types();
  const auto& type = types;
  std::map<std::string, std::string> alias;
  for (int i : order) {
    Node& n = nodes[static_cast<size_t>(i)];
    for (auto& in : n.inputs)
      if (alias.count(in)) in = alias.at(in);
    if (!n.domain.empty() || outputs.count(n.outputs[0])) continue;
    if (n.op_type == "Identity") {  // (the canonical rewrites leave these where data stays put)
      noop_cast[static_cast<size_t>(i)] = true;
      alias[n.outputs[0]] = n.inputs[0];
      continue;
    }
    if (n.op_type != "Cast") continue;
    const auto it = type.find(n.inputs[0]);
    if (it == type.end()) continue;
    const int32_t to = static_cast<int32_t>(attr_int(n, "to", -1));
    if (it->second == to) {
      noop_cast[static_cast<size_t>(i)] = true;
      alias[n.outputs[0]] = n.inputs[0];
      continue;
    }
    // A round trip through fp32 (x -> Cast(FLOAT) -> Cast back), which the exporters write
    // after Hugging Face's softmax in fp32 of a bf16 or fp16 model, gives x exactly.
    const int up = producer_of(n.inputs[0]);
    if (up < 0 || node(up).op_type != "Cast" || !node(up).domain.empty() || attr_int(node(up), "to", -1) != kFloat) continue;
    const auto source = type.find(node(up).inputs[0]);
    if (source == type.end() || source->second != to || (to != kFloat16 && to != kBfloat16)) continue;
    noop_cast[static_cast<size_t>(i)] = true;
    alias[n.outputs[0]] = node(up).inputs[0];
    const auto readers = consumers.find(n.inputs[0]);
    if (readers != consumers.end() && readers->second.size() == 1 && !outputs.count(n.inputs[0]))
      noop_cast[static_cast<size_t>(up)] = true;  // read by the second Cast alone: gone with it
  }
  if (alias.empty()) return;
  consumers.clear();  // the skipped Casts read nothing now: their readers read past them
  for (const Node& n : nodes)
    for (const auto& in : n.inputs)
      if (!in.empty() && !noop_cast[static_cast<size_t>(n.index)]) consumers[in].push_back(n.index);
}

// Which values are constant: initializers, and the outputs of foldable nodes whose inputs
// are all constant (Shape needs only its input's shape, fixed per profile).
void OnnxGraph::find_constants() {
  for (const auto& [name, t] : model.initializers) constant_values.insert(name);
  constant_node.assign(nodes.size(), false);
  for (int i : order) {
    const Node& n = node(i);
    if (!n.domain.empty() || !foldable(n.op_type)) continue;
    bool all = n.op_type == "Shape";
    if (!all) {
      all = true;
      for (const auto& in : n.inputs) all = all && is_constant(in);
    }
    if (!all) continue;
    constant_node[static_cast<size_t>(i)] = true;
    for (const auto& out : n.outputs)
      if (!out.empty()) constant_values.insert(out);
  }
}

// Folds the constants that need no shapes, so that patterns can read their values.
void OnnxGraph::fold_known_constants() {
  for (const auto& [name, t] : model.initializers) known[name] = std::make_shared<const Tensor>(t);
  for (int i : order) {
    if (!constant_node[static_cast<size_t>(i)]) continue;
    const Node& n = node(i);
    if (n.op_type == "Shape") continue;
    bool inputs_known = true;
    for (const auto& in : n.inputs) inputs_known = inputs_known && (in.empty() || known.count(in));
    if (!inputs_known) continue;
    auto outs = with_context(node_ctx(n), [&] { return fold(n, known, nullptr); });
    for (size_t o = 0; o < outs.size() && o < n.outputs.size(); ++o) known[n.outputs[o]] = std::move(outs[o]);
  }
  for (const auto& [name, t] : known) {
    if (t->numel() != 1) continue;
    if (t->elem_type == kBfloat16) constant_tolerance = std::max(constant_tolerance, 0x1p-8);
    if (t->elem_type == kFloat16) constant_tolerance = std::max(constant_tolerance, 0x1p-10);
  }
}

std::optional<double> OnnxGraph::scalar(const std::string& v) const {
  auto it = known.find(v);
  if (it == known.end() || it->second->numel() != 1) return std::nullopt;
  return it->second->at(0);
}

int OnnxGraph::producer_of(const std::string& v) const {
  auto it = producer.find(v);
  return it == producer.end() ? -1 : it->second;
}
const std::vector<int>& OnnxGraph::consumers_of(const std::string& v) const {
  static const std::vector<int> none;
  auto it = consumers.find(v);
  return it == consumers.end() ? none : it->second;
}

std::string OnnxGraph::other_input(int i, const std::string& v) const {
  const auto& in = node(i).inputs;
  if (in.size() != 2) return "";
  return in[0] == v ? in[1] : in[1] == v ? in[0] : "";
}
// The two inputs of a binary node as (runtime, scalar constant), in either order.
std::optional<std::pair<std::string, double>> OnnxGraph::with_scalar(int i) const {
  const auto& in = node(i).inputs;
  if (in.size() != 2) return std::nullopt;
  if (auto s = scalar(in[1]); s && !is_constant(in[0])) return std::make_pair(in[0], *s);
  if (auto s = scalar(in[0]); s && !is_constant(in[1])) return std::make_pair(in[1], *s);
  return std::nullopt;
}
std::optional<std::vector<int64_t>> OnnxGraph::reduce_axes(int i) const {
  const Node& n = node(i);
  if (auto a = attr_ints(n, "axes")) return a;
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    auto it = known.find(n.inputs[1]);
    if (it == known.end()) return std::nullopt;
    return as_ints(*it->second);
  }
  return std::vector<int64_t>{};
}
bool OnnxGraph::reduces_last_dim_keeping(int i) const {
  auto axes = reduce_axes(i);
  if (!axes || axes->size() != 1 || attr_int(node(i), "keepdims", 1) != 1) return false;
  return (*axes)[0] == -1 || (*axes)[0] == rank_of(node(i).inputs[0]) - 1;
}

// The rank of a value when the structure alone tells it (exporters write the reduced axis
// of a norm as rank-1 as often as -1); -1 when unknown.
int64_t OnnxGraph::rank_of(const std::string& v) const {
  auto it = ranks.find(v);
  return it == ranks.end() ? -1 : it->second;
}

// Ranks in topological order (no recursion: a hostile graph may be a million nodes deep).
void OnnxGraph::find_ranks() {
  for (const auto& [name, t] : known) ranks[name] = static_cast<int64_t>(t->dims.size());
  for (const auto& in : model.inputs)
    if (in.has_shape) ranks[in.name] = static_cast<int64_t>(in.dims.size());
  static const std::set<std::string> same = {"Relu", "Gelu", "Sigmoid", "Tanh", "Erf", "Sqrt", "Reciprocal", "Neg",
                                             "LayerNormalization", "RMSNormalization", "Transpose", "Cast", "Identity",
                                             "QuantizeLinear", "DequantizeLinear", "Attention"};
  static const std::set<std::string> broadcast = {"Add", "Sub", "Mul", "Div", "Pow", "MatMul"};
  for (int i : order) {
    const Node& n = node(i);
    if (n.outputs.empty() || n.inputs.empty() || ranks.count(n.outputs[0])) continue;
    int64_t r = -1;
    if (same.count(n.op_type) || (n.op_type == "ReduceMean" && attr_int(n, "keepdims", 1) == 1)) r = rank_of(n.inputs[0]);
    else if (n.op_type == "Gemm") r = 2;
    else if (n.op_type == "Reshape" && n.inputs.size() > 1 && known.count(n.inputs[1])) r = known.at(n.inputs[1])->numel();
    else if (broadcast.count(n.op_type) && n.inputs.size() == 2 && rank_of(n.inputs[0]) >= 0 && rank_of(n.inputs[1]) >= 0)
      r = std::max(rank_of(n.inputs[0]), rank_of(n.inputs[1]));
    if (r >= 0) ranks[n.outputs[0]] = r;
  }
}

bool OnnxGraph::near(double a, double b) const { return std::fabs(a - b) <= constant_tolerance * std::max(1.0, std::fabs(b)); }

bool OnnxGraph::is_embedding_lookup(const Node& n) const {
  if (n.op_type != "Gather" || !n.domain.empty() || n.inputs.size() != 2) return false;
  const int64_t axis = attr_int(n, "axis", 0);
  return (axis == 0 || axis == -2) && is_constant(n.inputs[0]) && !is_constant(n.inputs[1]);
}

}  // namespace tec::onnx
