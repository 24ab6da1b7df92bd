#include "passes/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace tec {

std::string_view to_string(Region region) {
  switch (region) {
    case Region::constants: return "constants";
    case Region::state: return "state";
    case Region::input: return "input";
    case Region::output: return "output";
    case Region::scratch: return "scratch";
  }
  return "?";
}

int64_t pack_intervals(std::span<const Interval> intervals, std::vector<int64_t>& offsets) {
  std::vector<size_t> order(intervals.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return intervals[a].bytes > intervals[b].bytes; });
  offsets.assign(intervals.size(), -1);
  std::vector<size_t> placed;
  int64_t total = 0;
  for (size_t i : order) {
    const Interval& in = intervals[i];
    // Placed buffers live at the same time, by offset.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (size_t p : placed)
      if (intervals[p].first <= in.last && in.first <= intervals[p].last)
        busy.emplace_back(offsets[p], offsets[p] + intervals[p].bytes);
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (offset + in.bytes <= begin) break;
      offset = std::max(offset, round_up(end, in.alignment));
    }
    offsets[i] = offset;
    total = std::max(total, offset + in.bytes);
    placed.push_back(i);
  }
  return round_up(total, kArenaAlignment);
}

namespace {

struct Lifetimes {
  std::vector<int> first, last;  // per value
};

Lifetimes value_lifetimes(const Graph& g, const Schedule& s) {
  const int end = static_cast<int>(s.steps.size()) - 1;
  Lifetimes l{std::vector<int>(g.values.size(), 0), std::vector<int>(g.values.size(), -1)};
  for (size_t st = 0; st < s.steps.size(); ++st)
    for (NodeId n : s.steps[st].nodes) {
      const Node& node = g.node(n);
      for (ValueId out : node.outputs) l.first[static_cast<size_t>(out)] = static_cast<int>(st);
      for (ValueId in : node.inputs)
        l.last[static_cast<size_t>(in)] = std::max(l.last[static_cast<size_t>(in)], static_cast<int>(st));
      // A saved alias keeps its input alive for the backward, which runs after every
      // forward step.
      for (const auto& saved : node.saved)
        if (saved.aliases_input >= 0) l.last[static_cast<size_t>(node.inputs[static_cast<size_t>(saved.aliases_input)])] = end;
    }
  for (size_t v = 0; v < g.values.size(); ++v) l.last[v] = std::max(l.last[v], l.first[v]);
  return l;
}

}  // namespace

std::string value_buffer_name(const std::string& value, BufferRole role) { return value + "." + std::string(to_string(role)); }
std::string state_buffer_name(const std::string& value, const std::string& state) { return value + ".state." + state; }
std::string workspace_buffer_name(const std::string& step, const std::string& workspace, BufferRole role) {
  return step + ".ws." + workspace + "." + std::string(to_string(role));
}

MemoryPlan memory_plan(const Graph& g, const Schedule& s) {
  MemoryPlan plan;
  const int end = std::max(0, static_cast<int>(s.steps.size()) - 1);
  const Lifetimes life = value_lifetimes(g, s);

  auto add = [&](const std::string& tensor, const std::string& name, const BufferSpec& spec, Region region, int first,
                 int last, std::string state = "") {
    PlannedBuffer b;
    b.tensor = tensor;
    b.name = name;
    b.role = spec.role;
    b.state = std::move(state);
    b.region = region;
    b.shape = spec.shape;
    b.dtype = spec.dtype;
    b.bytes = spec.bytes;
    b.first_step = region == Region::scratch ? first : 0;
    b.last_step = region == Region::scratch ? last : end;
    plan.buffers.push_back(std::move(b));
  };

  for (ValueId id = 0; id < static_cast<ValueId>(g.values.size()); ++id) {
    const Value& v = g.value(id);
    if (s.internal[static_cast<size_t>(id)]) continue;
    Region region = Region::scratch;
    if (v.kind == ValueKind::weight) region = Region::constants;
    else if (v.kind == ValueKind::input) region = Region::input;
    else if (g.is_output(id)) region = Region::output;
    for (const BufferSpec& spec : v.proto.buffers(g.target))
      add(v.name, value_buffer_name(v.name, spec.role), spec, region, life.first[static_cast<size_t>(id)],
          life.last[static_cast<size_t>(id)]);
    // Delayed scaling state of activations; constant weights are quantized once, at compile
    // time, from their own amax, and keep no state.
    if (v.proto.quantizer && v.kind != ValueKind::weight)
      for (const StateBufferSpec& st : v.proto.quantizer->state_buffers())
        add(v.name, state_buffer_name(v.name, st.name),
            BufferSpec{BufferRole::data, st.shape, st.dtype, checked_mul(st.shape.numel(), storage_bytes(st.dtype)), 4},
            Region::state, 0, end, st.name);
  }
  for (size_t st = 0; st < s.steps.size(); ++st)
    for (const Workspace& w : s.steps[st].workspaces)
      for (const BufferSpec& spec : w.proto.buffers(g.target))
        add(s.steps[st].name + ".ws." + w.name, workspace_buffer_name(s.steps[st].name, w.name, spec.role), spec, Region::scratch,
            static_cast<int>(st), static_cast<int>(st));
  for (size_t st = 0; st < s.steps.size(); ++st)
    for (const Workspace& w : s.steps[st].workspaces)
      for (const BufferSpec& spec : w.proto.buffers(g.target))
        add(s.steps[st].name + ".ws." + w.name, workspace_buffer_name(s.steps[st].name, w.name, spec.role), spec, Region::scratch,
            static_cast<int>(st), static_cast<int>(st));
  for (size_t st = 0; st < s.steps.size(); ++st)
    for (NodeId n : s.steps[st].nodes) {
      const Node& node = g.node(n);
      for (const Workspace& w : node.workspaces)
        for (const BufferSpec& spec : w.proto.buffers(g.target))
          add(node.name, node.name + "." + w.name + "." + std::string(to_string(spec.role)), spec, Region::scratch,
              static_cast<int>(st), static_cast<int>(st));
      for (const SavedTensor& saved : node.saved)
        if (saved.aliases_input < 0)
          for (const BufferSpec& spec : saved.proto.buffers(g.target))
            add(node.name, node.name + ".saved." + saved.name + "." + std::string(to_string(spec.role)), spec,
                Region::scratch, static_cast<int>(st), end);
    }

  // Fixed regions, one after another, then the packed scratch region.
  int64_t cursor = 0;
  for (Region region : {Region::state, Region::input, Region::output})
    for (PlannedBuffer& b : plan.buffers)
      if (b.region == region) {
        b.offset = cursor;
        cursor = round_up(checked_add(cursor, b.bytes), kArenaAlignment);
      }
  int64_t constants = 0;
  for (PlannedBuffer& b : plan.buffers)
    if (b.region == Region::constants) {
      b.offset = constants;
      constants = round_up(checked_add(constants, b.bytes), kArenaAlignment);
    }
  std::vector<Interval> intervals;
  std::vector<size_t> scratch;
  for (size_t i = 0; i < plan.buffers.size(); ++i)
    if (plan.buffers[i].region == Region::scratch) {
      scratch.push_back(i);
      intervals.push_back({plan.buffers[i].bytes, kArenaAlignment, plan.buffers[i].first_step, plan.buffers[i].last_step});
      plan.scratch_naive_bytes = checked_add(plan.scratch_naive_bytes, round_up(plan.buffers[i].bytes, kArenaAlignment));
    }
  std::vector<int64_t> offsets;
  plan.scratch_peak_bytes = pack_intervals(intervals, offsets);
  for (size_t j = 0; j < scratch.size(); ++j) plan.buffers[scratch[j]].offset = cursor + offsets[j];
  plan.arena_bytes = checked_add(cursor, plan.scratch_peak_bytes);
  plan.naive_bytes = checked_add(cursor, plan.scratch_naive_bytes);
  plan.constant_bytes = constants;
  return plan;
}

}  // namespace tec
