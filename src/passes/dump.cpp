// The JSON dump after a pass (te-compile --dump-after) and the sizes summary.
#include <nlohmann/json.hpp>

#include "passes/memory_plan.h"
#include "passes/passes.h"

namespace tec {

namespace {

using json = nlohmann::json;

json to_json(const BufferSpec& b) {
  return json{{"role", to_string(b.role)}, {"shape", b.shape.dims}, {"dtype", to_string(b.dtype)},
              {"bytes", b.bytes}, {"alignment", b.alignment}};
}

json to_json(const TensorProto& p, const Target& target) {
  json j{{"shape", p.shape.dims}, {"strides", p.strides}, {"dtype", to_string(p.dtype)},
         {"requires_grad", p.requires_grad}};
  if (p.quantizer) {
    j["quantizer"] = quantizer_to_json(*p.quantizer);
    j["usage"] = {{"rowwise", p.usage.rowwise}, {"columnwise", p.usage.columnwise}};
  }
  json buffers = json::array();
  for (const auto& b : p.buffers(target)) buffers.push_back(to_json(b));
  j["buffers"] = std::move(buffers);
  j["bytes"] = p.bytes(target);
  return j;
}

int64_t state_bytes_of(const Value& v) {
  int64_t bytes = 0;
  if (v.proto.quantizer)
    for (const auto& s : v.proto.state_buffers())
      bytes = checked_add(bytes, checked_mul(s.shape.numel(), storage_bytes(s.dtype)));
  return bytes;
}

}  // namespace

MetaSummary summarize(const Graph& g) {
  MetaSummary s;
  auto add = [&s, &g](const TensorProto& p) {
    s.buffers += static_cast<int64_t>(p.buffers(g.target).size());
    s.total_bytes = checked_add(s.total_bytes, p.bytes(g.target));
  };
  for (const Value& v : g.values) {
    add(v.proto);
    if (v.kind == ValueKind::weight) s.weight_bytes = checked_add(s.weight_bytes, v.proto.bytes(g.target));
    if (v.grad) add(*v.grad);
    if (v.proto.quantizer) {
      s.buffers += static_cast<int64_t>(v.proto.state_buffers().size());
      s.state_bytes = checked_add(s.state_bytes, state_bytes_of(v));
    }
  }
  s.total_bytes = checked_add(s.total_bytes, s.state_bytes);
  for (const Node& n : g.nodes) {
    for (const auto& saved : n.saved) {
      if (saved.aliases_input >= 0) {
        s.aliased_bytes = checked_add(s.aliased_bytes, saved.proto.bytes(g.target));
      } else {
        s.saved_bytes = checked_add(s.saved_bytes, saved.proto.bytes(g.target));
        add(saved.proto);
      }
    }
    for (const auto& w : n.workspaces) add(w.proto);
  }
  return s;
}

json dump_graph(const Graph& g, const std::string& after_pass) {
  json values = json::array();
  for (const Value& v : g.values) {
    json j{{"name", v.name}, {"kind", to_string(v.kind)}, {"proto", to_json(v.proto, g.target)}};
    if (v.producer >= 0) j["producer"] = g.node(v.producer).name;
    if (!v.source.empty()) j["source"] = v.source;
    if (v.proto.quantizer) {
      json state = json::array();
      for (const auto& s : v.proto.state_buffers())
        state.push_back({{"name", s.name}, {"shape", s.shape.dims}, {"dtype", to_string(s.dtype)},
                         {"initial_value", s.initial_value}});
      if (!state.empty()) j["state"] = std::move(state);
    }
    if (v.weight) {
      switch (v.weight->kind) {
        case WeightSource::Kind::file:
          j["weight_source"] = json{{"file", v.weight->path}, {"tensor", v.weight->tensor}};
          break;
        case WeightSource::Kind::values:
          j["weight_source"] = json{{"values", v.weight->origin}};
          break;
        case WeightSource::Kind::random:
          j["weight_source"] = json{{"init", "random"}, {"seed", v.weight->seed}, {"mean", v.weight->mean},
                                    {"stddev", v.weight->stddev}};
          break;
      }
      if (const auto& shard = v.weight->shard)
        j["weight_source"]["shard"] = {{"full", shard->full.dims}, {"dim", shard->dim}, {"parts", shard->parts}, {"groups", shard->groups}};
    }
    if (v.grad) j["grad"] = to_json(*v.grad, g.target);
    values.push_back(std::move(j));
  }
  json nodes = json::array();
  for (const Node& n : g.nodes) {
    json j{{"name", n.name}, {"op", n.op}, {"source", n.source}};
    for (ValueId in : n.inputs) j["inputs"].push_back(g.value(in).name);
    for (ValueId out : n.outputs) j["outputs"].push_back(g.value(out).name);
    j["attrs"] = attributes_to_json(n.attrs);
    for (const auto& s : n.saved) {
      json saved{{"name", s.name}, {"proto", to_json(s.proto, g.target)}};
      if (s.aliases_input >= 0) {
        saved["aliases"] = {{"slot", s.aliases_input},
                            {"value", g.value(n.inputs[static_cast<size_t>(s.aliases_input)]).name}};
        saved["new_bytes"] = 0;
      } else {
        saved["aliases"] = nullptr;
        saved["new_bytes"] = s.proto.bytes(g.target);
      }
      j["saved"].push_back(std::move(saved));
    }
    for (const auto& w : n.workspaces) j["workspaces"].push_back({{"name", w.name}, {"proto", to_json(w.proto, g.target)}});
    if (n.backward) {
      json bw{{"reads", json::array()}, {"grad_reads", json::array()}};
      for (const auto& r : n.backward->reads)
        bw["reads"].push_back({{"saved", n.saved[static_cast<size_t>(r.saved_index)].name},
                               {"usage", {{"rowwise", r.usage.rowwise}, {"columnwise", r.usage.columnwise}}}});
      for (const auto& r : n.backward->grad_reads)
        bw["grad_reads"].push_back({{"output", g.value(n.outputs[static_cast<size_t>(r.output)]).name},
                                    {"quantized", r.quantized}, {"columnwise", r.columnwise}});
      j["backward"] = std::move(bw);
    }
    nodes.push_back(std::move(j));
  }
  const MetaSummary s = summarize(g);
  json inputs = json::array(), outputs = json::array();
  for (ValueId id : g.inputs) inputs.push_back(g.value(id).name);
  for (ValueId id : g.outputs) outputs.push_back(g.value(id).name);
  json tp{{"size", g.tp.size}, {"layouts", json::object()}};
  for (const auto& [name, layout] : g.tp.layouts) tp["layouts"][name] = to_string(layout);
  return json{{"after", after_pass},
              {"graph", g.name},
              {"recipe", to_string(g.recipe.kind)},
              {"mode", to_string(g.mode)},
              {"target", "sm_" + std::to_string(g.target.sm)},
              {"profile", g.dims},
              {"inputs", inputs},
              {"outputs", outputs},
              {"tp", tp},
              {"values", std::move(values)},
              {"nodes", std::move(nodes)},
              {"summary",
               {{"buffers", s.buffers},
                {"total_bytes", s.total_bytes},
                {"weight_bytes", s.weight_bytes},
                {"saved_bytes", s.saved_bytes},
                {"bytes_saved_by_aliasing", s.aliased_bytes},
                {"state_bytes", s.state_bytes}}}};
}

json dump_schedule(const Graph& g, const Schedule& s) {
  json steps = json::array();
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const Step& step = s.steps[i];
    json nodes = json::array();
    for (NodeId n : step.nodes) nodes.push_back(g.node(n).name);
    steps.push_back({{"index", i}, {"name", step.name}, {"kind", to_string(step.kind)}, {"nodes", nodes},
                     {"fusions", step.fusions}, {"deps", step.deps}});
  }
  json internal = json::array();
  for (size_t v = 0; v < s.internal.size(); ++v)
    if (s.internal[v]) internal.push_back(g.values[v].name);
  return json{{"profile", g.dims}, {"steps", steps}, {"values_in_registers", internal}};
}

json dump_memory_plan(const MemoryPlan& plan) {
  json buffers = json::array();
  for (const auto& b : plan.buffers)
    buffers.push_back({{"name", b.name}, {"region", to_string(b.region)}, {"offset", b.offset}, {"bytes", b.bytes},
                       {"lifetime", {b.first_step, b.last_step}}});
  return json{{"arena_bytes", plan.arena_bytes}, {"constant_bytes", plan.constant_bytes},
              {"scratch_peak_bytes", plan.scratch_peak_bytes}, {"scratch_naive_bytes", plan.scratch_naive_bytes},
              {"naive_bytes", plan.naive_bytes}, {"buffers", buffers}};
}

json dump_train_step(const Graph& g, const MemoryPlan& plan) {
  if (!g.train) return nullptr;
  const TrainMemory m = train_memory(g, plan);
  json scalars = json::array();
  for (ValueId id : g.train->runtime_scalars) scalars.push_back(g.value(id).name);
  return json{{"optimizer", g.train->optimizer},
              {"wgrad", g.train->wgrad},
              {"runtime_scalars", std::move(scalars)},
              {"saved_bytes", m.saved_bytes},
              {"saved_new_bytes", m.saved_new_bytes},
              {"bytes_saved_by_aliasing", m.bytes_saved_by_aliasing},
              {"state_bytes", m.state_bytes},
              {"workspace_bytes", m.workspace_bytes},
              {"recomputed_bytes", m.recomputed_bytes}};
}

}  // namespace tec
