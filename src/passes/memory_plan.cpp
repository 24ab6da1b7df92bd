#include "passes/memory_plan.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

namespace tec {

std::string_view to_string(Region region) {
  switch (region) {
    case Region::constants: return "constants";
    case Region::state: return "state";
    case Region::workspace: return "workspace";
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
  std::vector<int> first;  // per value: its producer's step
  // The last step reading each value's rowwise and its columnwise copy (train plans: the
  // forward GEMM reads x rowwise, the wgrad reads x columnwise in the backward).
  std::vector<int> last_rowwise, last_columnwise;
  int last(size_t v) const { return std::max({first[v], last_rowwise[v], last_columnwise[v]}); }
};

Lifetimes value_lifetimes(const Graph& g, const Schedule& s) {
  const size_t count = g.values.size();
  Lifetimes l{std::vector<int>(count, 0), std::vector<int>(count, -1), std::vector<int>(count, -1)};
  for (size_t st = 0; st < s.steps.size(); ++st)
    for (NodeId n : s.steps[st].nodes) {
      const Node& node = g.node(n);
      for (ValueId out : node.outputs) l.first[static_cast<size_t>(out)] = static_cast<int>(st);
      // Train plans: a saved tensor is an input (or output) of the backward node that reads
      // it, so it lives from its forward producer to its last backward reader.
      for (size_t slot = 0; slot < node.inputs.size(); ++slot) {
        const auto in = static_cast<size_t>(node.inputs[slot]);
        const bool columnwise = slot < node.columnwise_inputs.size() && node.columnwise_inputs[slot];
        int& last = columnwise ? l.last_columnwise[in] : l.last_rowwise[in];
        last = std::max(last, static_cast<int>(st));
      }
    }
  // Graph outputs are read (rowwise) after the last step that touches them.
  for (size_t v = 0; v < count; ++v)
    if (g.is_output(static_cast<ValueId>(v))) l.last_rowwise[v] = l.last(v);
  return l;
}

// A buffer of one direction lives until the last read of that direction (the rowwise copy of
// a saved FP8 input is free once the forward GEMM has read it); a buffer both directions
// share (per-tensor FP8's one scale_inv) until the last read of either.
int last_reader_of(BufferRole role, const std::vector<BufferSpec>& specs, const Lifetimes& life, size_t v) {
  std::vector<BufferRole> roles;
  for (const BufferSpec& s : specs) roles.push_back(s.role);
  const bool rowwise = role_serves_direction(role, false, roles), columnwise = role_serves_direction(role, true, roles);
  if (rowwise == columnwise) return life.last(v);
  return std::max(life.first[v], columnwise ? life.last_columnwise[v] : life.last_rowwise[v]);
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
    if (const auto used = s.gpu_buffer_steps.find(name); region == Region::scratch && used != s.gpu_buffer_steps.end()) {
      b.first_step = std::min(b.first_step, used->second.first);
      b.last_step = std::max(b.last_step, used->second.second);
    }
    plan.buffers.push_back(std::move(b));
  };

  for (ValueId id = 0; id < static_cast<ValueId>(g.values.size()); ++id) {
    const Value& v = g.value(id);
    if (s.internal[static_cast<size_t>(id)] || v.storage) continue;  // in registers, or in its state value's buffers
    Region region = Region::scratch;
    if (v.kind == ValueKind::weight) region = Region::constants;
    else if (v.kind == ValueKind::state) region = Region::state;
    else if (v.producer >= 0 && g.node(v.producer).phase == Phase::weight_workspace) region = Region::workspace;
    else if (v.kind == ValueKind::input) region = Region::input;
    else if (g.is_output(id)) region = Region::output;
    const auto specs = v.proto.buffers(g.target);
    for (const BufferSpec& spec : specs)
      add(v.name, value_buffer_name(v.name, spec.role), spec, region, life.first[static_cast<size_t>(id)],
          last_reader_of(spec.role, specs, life, static_cast<size_t>(id)));
    // A state value's starting values (a master's weights, an optimizer's hyperparameters):
    // a constant the session copies into the state when it is created.
    if (v.kind == ValueKind::state && v.weight)
      for (const BufferSpec& spec : specs) add(v.name, v.name + ".init", spec, Region::constants, 0, end, "init");
    // Delayed scaling state of activations; constant weights are quantized once, at compile
    // time, from their own amax, and keep no state.
    if (v.proto.quantizer && v.kind != ValueKind::weight)
      for (const StateBufferSpec& st : v.proto.state_buffers())
        add(v.name, state_buffer_name(v.name, st.name),
            BufferSpec{BufferRole::data, st.shape, st.dtype, checked_mul(st.shape.numel(), storage_bytes(st.dtype)), 4},
            Region::state, 0, end, st.name);
  }
  for (size_t st = 0; st < s.steps.size(); ++st)
    for (const Workspace& w : s.steps[st].workspaces)
      for (const BufferSpec& spec : w.proto.buffers(g.target))
        add(s.steps[st].name + ".ws." + w.name, workspace_buffer_name(s.steps[st].name, w.name, spec.role), spec,
            w.kept_across_runs ? Region::workspace : Region::scratch, static_cast<int>(st), static_cast<int>(st));
  for (size_t st = 0; st < s.steps.size(); ++st)
    for (NodeId n : s.steps[st].nodes) {
      const Node& node = g.node(n);
      for (const Workspace& w : node.workspaces)
        for (const BufferSpec& spec : w.proto.buffers(g.target))
          add(node.name, node.name + "." + w.name + "." + std::string(to_string(spec.role)), spec, Region::scratch,
              static_cast<int>(st), static_cast<int>(st));
      for (const SavedTensor& saved : node.saved)
        TEC_INTERNAL_CHECK(saved.aliases_input >= 0 || saved.value >= 0, g.context(n, "memory_plan"))
            << "saved tensor '" << saved.name << "' is not a value; autodiff must run before memory_plan";
    }

  // Fixed regions, one after another, then the packed scratch region.
  int64_t cursor = 0;
  for (Region region : {Region::state, Region::workspace, Region::input, Region::output})
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

TrainMemory train_memory(const Graph& g, const MemoryPlan& plan) {
  TrainMemory m;
  std::map<ValueId, Usage> saved;  // each saved value once, with the copies read
  std::set<std::string> backward_nodes;
  for (const Node& node : g.nodes)
    if (node.computes_backward) backward_nodes.insert(node.name);
  for (const Node& node : g.nodes) {
    if (!node.backward || !backward_nodes.count(node.name + ".backward")) continue;
    for (const auto& read : node.backward->reads) {
      const SavedTensor& s = node.saved.at(static_cast<size_t>(read.saved_index));
      const ValueId v = s.aliases_input >= 0 ? node.inputs.at(static_cast<size_t>(s.aliases_input)) : s.value;
      auto [it, fresh] = saved.emplace(v, read.usage);
      if (!fresh) it->second = it->second | read.usage;
    }
  }
  std::set<ValueId> made_to_be_saved;
  for (const Node& node : g.nodes)
    for (const SavedTensor& s : node.saved)
      if (s.aliases_input < 0) made_to_be_saved.insert(s.value);
  std::set<ValueId> recomputed;
  if (g.train)
    for (const auto& entry : g.train->recomputed) recomputed.insert(entry.first);
  for (const auto& [value, usage] : saved) {
    const TensorProto& p = g.value(value).proto;
    const int64_t bytes = p.is_quantized() ? p.update_usage(usage).bytes(g.target) : p.bytes(g.target);
    if (recomputed.count(value)) {
      m.recomputed_bytes = checked_add(m.recomputed_bytes, bytes);
      continue;
    }
    m.saved_bytes = checked_add(m.saved_bytes, bytes);
    if (made_to_be_saved.count(value)) m.saved_new_bytes = checked_add(m.saved_new_bytes, bytes);
  }
  m.bytes_saved_by_aliasing = m.saved_bytes - m.saved_new_bytes;
  for (const PlannedBuffer& b : plan.buffers) {
    if (b.region == Region::state) m.state_bytes = checked_add(m.state_bytes, b.bytes);
    if (b.region == Region::workspace) m.workspace_bytes = checked_add(m.workspace_bytes, b.bytes);
  }
  return m;
}

}  // namespace tec
