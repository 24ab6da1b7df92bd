#include "ir/graph.h"

#include <nlohmann/json.hpp>
#include <set>

namespace tec {

std::string_view to_string(Mode mode) { return mode == Mode::infer ? "infer" : "train"; }

std::string_view to_string(ValueKind kind) {
  switch (kind) {
    case ValueKind::input: return "input";
    case ValueKind::activation: return "activation";
    case ValueKind::weight: return "weight";
    case ValueKind::state: return "state";
  }
  return "?";
}

std::string_view to_string(Phase phase) {
  switch (phase) {
    case Phase::weight_workspace: return "weight_workspace";
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::optimizer: return "optimizer";
  }
  return "?";
}

std::string_view to_string(TpLayout layout) {
  switch (layout) {
    case TpLayout::replicated: return "replicated";
    case TpLayout::sequence: return "sequence";
    case TpLayout::feature: return "feature";
    case TpLayout::partial: return "partial";
  }
  return "?";
}

std::optional<TpLayout> parse_tp_layout(std::string_view name) {
  for (TpLayout l : {TpLayout::replicated, TpLayout::sequence, TpLayout::feature, TpLayout::partial})
    if (to_string(l) == name) return l;
  return std::nullopt;
}

std::optional<Phase> parse_phase(std::string_view name) {
  for (Phase p : {Phase::weight_workspace, Phase::forward, Phase::backward, Phase::optimizer})
    if (to_string(p) == name) return p;
  return std::nullopt;
}

nlohmann::json attributes_to_json(const Attributes& attrs) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, value] : attrs.values) j[name] = std::visit([](const auto& v) { return nlohmann::json(v); }, value);
  return j;
}

int64_t Attributes::get_int(const std::string& name, int64_t fallback) const {
  auto it = values.find(name);
  if (it == values.end()) return fallback;
  if (auto* v = std::get_if<int64_t>(&it->second)) return *v;
  TEC_INTERNAL_ERROR({}) << "attribute '" << name << "' is not an int (the op's schema should have caught it)";
}

double Attributes::get_float(const std::string& name, double fallback) const {
  auto it = values.find(name);
  if (it == values.end()) return fallback;
  if (auto* v = std::get_if<double>(&it->second)) return *v;
  if (auto* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  TEC_INTERNAL_ERROR({}) << "attribute '" << name << "' is not a number";
}

bool Attributes::get_bool(const std::string& name, bool fallback) const {
  auto it = values.find(name);
  if (it == values.end()) return fallback;
  if (auto* v = std::get_if<bool>(&it->second)) return *v;
  TEC_INTERNAL_ERROR({}) << "attribute '" << name << "' is not a bool";
}

std::string Attributes::get_string(const std::string& name, const std::string& fallback) const {
  auto it = values.find(name);
  if (it == values.end()) return fallback;
  if (auto* v = std::get_if<std::string>(&it->second)) return *v;
  TEC_INTERNAL_ERROR({}) << "attribute '" << name << "' is not a string";
}

std::vector<int64_t> Attributes::get_ints(const std::string& name) const {
  auto it = values.find(name);
  if (it == values.end()) return {};
  if (auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  TEC_INTERNAL_ERROR({}) << "attribute '" << name << "' is not a list of ints";
}

ValueId Graph::add_value(Value value) {
  values.push_back(std::move(value));
  return static_cast<ValueId>(values.size() - 1);
}

NodeId Graph::add_node(Node node) {
  const auto id = static_cast<NodeId>(nodes.size());
  for (ValueId out : node.outputs) value(out).producer = id;
  nodes.push_back(std::move(node));
  return id;
}

std::optional<ValueId> Graph::find_value(const std::string& value_name) const {
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].name == value_name) return static_cast<ValueId>(i);
  return std::nullopt;
}

std::vector<std::vector<std::pair<NodeId, int>>> Graph::consumers() const {
  std::vector<std::vector<std::pair<NodeId, int>>> out(values.size());
  for (size_t n = 0; n < nodes.size(); ++n)
    for (size_t slot = 0; slot < nodes[n].inputs.size(); ++slot)
      out[static_cast<size_t>(nodes[n].inputs[slot])].emplace_back(static_cast<NodeId>(n), static_cast<int>(slot));
  return out;
}

bool Graph::is_output(ValueId id) const {
  for (ValueId out : outputs)
    if (out == id) return true;
  return false;
}

ErrorContext Graph::context(NodeId id, std::string stage) const {
  const Node& n = node(id);
  return ErrorContext{std::move(stage), n.name, n.op, n.source};
}

void verify(const Graph& graph) {
  std::set<std::string> names;
  for (const Value& v : graph.values)
    TEC_INTERNAL_CHECK(names.insert(v.name).second, {}) << "value name '" << v.name << "' is used twice";
  std::vector<bool> defined(graph.values.size(), false);
  for (ValueId id = 0; id < static_cast<ValueId>(graph.values.size()); ++id)
    if (graph.value(id).kind != ValueKind::activation) defined[static_cast<size_t>(id)] = true;
  for (const Value& v : graph.values)
    if (v.storage)
      TEC_INTERNAL_CHECK(graph.value(*v.storage).kind == ValueKind::state, {})
          << "value '" << v.name << "' is stored in '" << graph.value(*v.storage).name << "', which is not state";
  for (NodeId n = 0; n < static_cast<NodeId>(graph.nodes.size()); ++n) {
    const Node& node = graph.node(n);
    for (ValueId in : node.inputs)
      TEC_INTERNAL_CHECK(in >= 0 && static_cast<size_t>(in) < graph.values.size() && defined[static_cast<size_t>(in)],
                         graph.context(n, "verify"))
          << "reads a value before it is produced";
    for (ValueId out : node.outputs) {
      TEC_INTERNAL_CHECK(graph.value(out).producer == n, graph.context(n, "verify")) << "output producer mismatch";
      defined[static_cast<size_t>(out)] = true;
    }
  }
  for (ValueId out : graph.outputs)
    TEC_INTERNAL_CHECK(defined[static_cast<size_t>(out)], {}) << "graph output is never produced";
}

}  // namespace tec
