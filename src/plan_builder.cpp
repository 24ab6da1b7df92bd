#include "plan_builder.h"

#include <cfloat>
#include <cmath>
#include <sstream>

#include "core/random.h"
#include "frontend/weights/safetensors.h"
#include "passes/passes.h"
#include "reference/quantize.h"

namespace tec {

namespace {

using json = nlohmann::json;

std::vector<float> weight_values(const Value& v) {
  const WeightSource& src = *v.weight;
  const int64_t count = v.proto.shape.numel();
  if (src.kind == WeightSource::Kind::random) return random_weight(src.seed, v.name, count, src.mean, src.stddev);
  const SafetensorsIndex index = read_safetensors_index(src.path);
  auto it = index.tensors.find(src.tensor);
  TEC_USER_CHECK(it != index.tensors.end() && it->second.shape == v.proto.shape, (ErrorContext{"plan", v.name, "", src.path}))
      << "weights file changed since it was checked: tensor '" << src.tensor << "'";
  return read_tensor_as_float(index, it->second);
}

// The constants blob: each weight rounded to its dtype, then quantized as the recipe says.
// Constant weights are cast once with the scale of their own amax (current scaling
// semantics, also for the delayed recipe: a constant's amax never changes).
std::vector<uint8_t> build_constants(const CompiledProfile& p) {
  std::vector<uint8_t> blob(static_cast<size_t>(p.memory.constant_bytes), 0);
  std::map<std::string, std::map<BufferRole, const PlannedBuffer*>> by_tensor;
  for (const PlannedBuffer& b : p.memory.buffers)
    if (b.region == Region::constants) by_tensor[b.tensor][b.role] = &b;
  for (const Value& v : p.graph.values) {
    if (v.kind != ValueKind::weight) continue;
    std::vector<float> values = weight_values(v);
    reference::round_to(v.proto.dtype, values);
    const auto& buffers = by_tensor.at(v.name);
    auto span_of = [&](BufferRole role) {
      const PlannedBuffer* b = buffers.at(role);
      return std::span<uint8_t>(blob.data() + b->offset, static_cast<size_t>(b->bytes));
    };
    if (!v.proto.quantizer) {
      const auto bytes = reference::encode_values(v.proto.dtype, values);
      std::copy(bytes.begin(), bytes.end(), span_of(BufferRole::data).begin());
      continue;
    }
    reference::BufferMap out;
    for (const auto& [role, b] : buffers) out[role] = span_of(role);
    reference::QuantizeState state;
    if (v.proto.quantizer->kind == QuantizerKind::fp8_delayed) {
      float amax = 0.0f;
      for (float x : values) amax = std::fmax(amax, std::fabs(x));
      state.delayed_scale = reference::scale_from_amax(amax, max_finite(v.proto.quantizer->dtype), false, 0.0f, FLT_MAX);
    }
    reference::quantize(v.proto, values, out, p.graph.target, state);
  }
  return blob;
}

json attrs_to_json(const Attributes& attrs) {
  json j = json::object();
  for (const auto& [name, value] : attrs.values) j[name] = std::visit([](const auto& x) { return json(x); }, value);
  return j;
}

json profile_manifest(const CompiledProfile& p) {
  const Graph& g = p.graph;
  json buffers = json::array();
  std::map<std::string, json> tensor_buffers, tensor_state;
  for (size_t i = 0; i < p.memory.buffers.size(); ++i) {
    const PlannedBuffer& b = p.memory.buffers[i];
    buffers.push_back({{"name", b.name},
                       {"tensor", b.tensor},
                       {"role", to_string(b.role)},
                       {"state", b.state},
                       {"region", to_string(b.region)},
                       {"dtype", to_string(b.dtype)},
                       {"shape", b.shape.dims},
                       {"offset", b.offset},
                       {"bytes", b.bytes},
                       {"lifetime", {b.first_step, b.last_step}}});
    // Workspaces and new saved tensors belong to a node, not a tensor of the graph.
    if (!g.find_value(b.tensor)) continue;
    if (b.state.empty()) tensor_buffers[b.tensor][std::string(to_string(b.role))] = i;
    else tensor_state[b.tensor][b.state] = i;
  }
  json tensors = json::array();
  json delayed = json::array();
  for (const Value& v : g.values) {
    json t{{"name", v.name},
           {"kind", to_string(v.kind)},
           {"shape", v.proto.shape.dims},
           {"dtype", to_string(v.proto.dtype)},
           {"quantizer", v.proto.quantizer ? quantizer_to_json(*v.proto.quantizer) : json()},
           {"usage", {{"rowwise", v.proto.usage.rowwise}, {"columnwise", v.proto.usage.columnwise}}},
           {"buffers", tensor_buffers.count(v.name) ? tensor_buffers[v.name] : json::object()},
           {"state", tensor_state.count(v.name) ? tensor_state[v.name] : json::object()}};
    if (tensor_state.count(v.name)) delayed.push_back(v.name);
    tensors.push_back(std::move(t));
  }
  json steps = json::array();
  for (const Step& s : p.schedule.steps) {
    json ops = json::array();
    for (NodeId n : s.nodes) {
      const Node& node = g.node(n);
      json op{{"node", node.name}, {"op", node.op}, {"attrs", attrs_to_json(node.attrs)}, {"inputs", json::array()},
              {"outputs", json::array()}};
      for (ValueId in : node.inputs) op["inputs"].push_back(g.value(in).name);
      for (ValueId out : node.outputs) op["outputs"].push_back(g.value(out).name);
      ops.push_back(std::move(op));
    }
    steps.push_back({{"name", s.name}, {"kind", to_string(s.kind)}, {"deps", s.deps}, {"fusions", s.fusions}, {"ops", ops}});
  }
  json inputs = json::array(), outputs = json::array();
  for (ValueId id : g.inputs) inputs.push_back(g.value(id).name);
  for (ValueId id : g.outputs) outputs.push_back(g.value(id).name);
  const MetaSummary meta = summarize(g);
  return json{{"dims", g.dims},
              {"arena_bytes", p.memory.arena_bytes},
              {"scratch_peak_bytes", p.memory.scratch_peak_bytes},
              {"scratch_naive_bytes", p.memory.scratch_naive_bytes},
              {"naive_bytes", p.memory.naive_bytes},
              {"buffers", std::move(buffers)},
              {"tensors", std::move(tensors)},
              {"steps", std::move(steps)},
              {"inputs", std::move(inputs)},
              {"outputs", std::move(outputs)},
              {"delayed", std::move(delayed)},
              {"meta", {{"buffers", meta.buffers},
                        {"total_bytes", meta.total_bytes},
                        {"saved_bytes", meta.saved_bytes},
                        {"bytes_saved_by_aliasing", meta.aliased_bytes}}}};
}

}  // namespace

PlanParts build_plan(const std::vector<CompiledProfile>& profiles, const BuildRecord& record) {
  TEC_INTERNAL_CHECK(!profiles.empty(), {}) << "no profiles to build";
  const Graph& first = profiles[0].graph;
  // Weights do not depend on the profile dims, so every profile shares one constants blob.
  std::vector<std::string> constant_layout;
  for (const auto& b : profiles[0].memory.buffers)
    if (b.region == Region::constants) constant_layout.push_back(b.name + "@" + std::to_string(b.offset));
  int64_t arena = 0;
  json profile_list = json::array();
  for (const auto& p : profiles) {
    std::vector<std::string> layout;
    for (const auto& b : p.memory.buffers)
      if (b.region == Region::constants) layout.push_back(b.name + "@" + std::to_string(b.offset));
    TEC_INTERNAL_CHECK(layout == constant_layout, {}) << "profiles disagree on the constants layout";
    arena = std::max(arena, p.memory.arena_bytes);
    profile_list.push_back(profile_manifest(p));
  }
  PlanParts parts;
  parts.blobs.push_back({"constants", build_constants(profiles[0])});
  parts.manifest = json{{"format", "tec-plan"},
                        {"name", first.name},
                        {"recipe", to_string(first.recipe.kind)},
                        {"mode", to_string(first.mode)},
                        {"target", {{"archs", json::array({"sm_" + std::to_string(first.target.sm)})}}},
                        {"build", {{"tool", record.tool}, {"options", record.options}, {"model_checksum", record.model_checksum}}},
                        {"arena_bytes", arena},
                        {"constant_bytes", profiles[0].memory.constant_bytes},
                        {"profiles", std::move(profile_list)}};
  return parts;
}

std::string plan_to_dot(const json& manifest, size_t profile_index) {
  const json& p = manifest.at("profiles").at(profile_index);
  std::map<std::string, std::string> producer;  // tensor -> step node id
  std::ostringstream out;
  out << "digraph \"" << manifest.value("name", "plan") << "\" {\n  rankdir=TB;\n  node [shape=box, fontname=Helvetica];\n";
  const json& steps = p.at("steps");
  for (size_t i = 0; i < steps.size(); ++i) {
    const json& s = steps[i];
    out << "  subgraph cluster_" << i << " {\n    label=\"step " << i << ": " << s.at("name").get<std::string>() << " ("
        << s.at("kind").get<std::string>() << ")\";\n    style=rounded; color=" << (s.at("kind") == "gemm" ? "blue" : "gray")
        << ";\n";
    for (const json& op : s.at("ops")) {
      const std::string id = "op_" + op.at("node").get<std::string>();
      out << "    \"" << id << "\" [label=\"" << op.at("node").get<std::string>() << "\\n" << op.at("op").get<std::string>()
          << "\"];\n";
      for (const json& o : op.at("outputs")) producer[o.get<std::string>()] = id;
    }
    out << "  }\n";
  }
  std::map<std::string, const json*> tensors;
  for (const json& t : p.at("tensors")) tensors[t.at("name").get<std::string>()] = &t;
  for (const json& name : p.at("inputs")) producer[name.get<std::string>()] = "in_" + name.get<std::string>();
  for (const json& name : p.at("inputs")) out << "  \"in_" << name.get<std::string>() << "\" [shape=ellipse, label=\"" << name.get<std::string>() << "\"];\n";
  auto edge_label = [&](const std::string& tensor) {
    const json& t = *tensors.at(tensor);
    std::string label = tensor + "\\n" + t.at("shape").dump() + " " + t.at("dtype").get<std::string>();
    if (!t.at("quantizer").is_null()) label += " " + t.at("quantizer").at("str").get<std::string>();
    int64_t bytes = 0;
    for (const auto& [role, index] : t.at("buffers").items()) bytes += p.at("buffers").at(index.get<size_t>()).at("bytes").get<int64_t>();
    return label + (t.at("buffers").empty() ? "\\n(in registers)" : "\\n" + std::to_string(bytes) + " B");
  };
  for (const json& s : steps)
    for (const json& op : s.at("ops"))
      for (const json& in : op.at("inputs")) {
        const std::string name = in.get<std::string>();
        if (!producer.count(name)) continue;  // weights: constants, not drawn
        out << "  \"" << producer[name] << "\" -> \"op_" << op.at("node").get<std::string>() << "\" [label=\""
            << edge_label(name) << "\", fontsize=9];\n";
      }
  for (const json& name : p.at("outputs")) {
    out << "  \"out_" << name.get<std::string>() << "\" [shape=ellipse, label=\"" << name.get<std::string>() << "\"];\n";
    out << "  \"" << producer[name.get<std::string>()] << "\" -> \"out_" << name.get<std::string>() << "\" [label=\""
        << edge_label(name.get<std::string>()) << "\", fontsize=9];\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace tec
