#include "plan/layout_check.h"

#include <algorithm>
#include <climits>
#include <map>
#include <queue>
#include <set>

namespace tec::plan {

namespace {

ErrorContext at(const std::string& file, const std::string& where) { return ErrorContext{"plan", "", "", file + " manifest " + where}; }

std::string describe(const Buffer& b) {
  return "'" + b.name + "' (" + b.region + " [" + std::to_string(b.offset) + ", +" + std::to_string(b.bytes) + "), steps [" +
         std::to_string(b.first_step) + ", " + std::to_string(b.last_step) + "])";
}

// The regions each tensor's buffers may sit in, from what the memory planner does
// (passes/memory_plan.cpp) and what the executors assume of each region: the constants are
// read-only and shared, the input region is what callers fill, scratch is reused.
void check_regions(const Profile& p, const ErrorContext& ctx) {
  std::set<int> owned;
  for (const auto& [name, t] : p.tensors) {
    const bool output = std::find(p.outputs.begin(), p.outputs.end(), name) != p.outputs.end();
    for (const auto& [role, index] : t.buffers) {
      owned.insert(index);
      const std::string& region = p.buffers[static_cast<size_t>(index)].region;
      bool allowed = false;
      if (t.kind == "weight") allowed = region == "constants";
      else if (t.kind == "input") allowed = region == "input";
      else if (t.kind == "state" || !t.storage.empty()) allowed = region == "state";
      else if (output) allowed = region == "output" || region == "workspace";
      else allowed = region == "scratch" || region == "workspace";
      TEC_USER_CHECK(allowed, ctx) << (output ? "output" : t.kind) << " '" << name << "' has buffer "
                                   << describe(p.buffers[static_cast<size_t>(index)]) << " in a region a " << t.kind
                                   << (output ? " output" : "") << " cannot live in";
    }
    for (const auto& [state, index] : t.state) owned.insert(index);
  }
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const Buffer& b = p.buffers[i];
    if (b.region == "input" || b.region == "output")
      TEC_USER_CHECK(owned.count(static_cast<int>(i)), ctx) << "buffer " << describe(b) << " belongs to no input or output";
    // A launch's own workspace (no tensor's): written by the launch, so never a constant.
    if (!owned.count(static_cast<int>(i)))
      TEC_USER_CHECK(b.region == "scratch" || b.region == "workspace", ctx)
          << "buffer " << describe(b) << " belongs to no tensor, so it is a launch's workspace, and those are scratch or workspace";
  }
}

// Sweeps the buffers of one memory (the arena, or the constants) in order of their first
// step, keeping those alive by offset: as the live ones never overlap, a new one need only be
// checked against its neighbours. O(n log n) for any plan.
void check_no_overlap(const Profile& p, bool constants, int last_step, const ErrorContext& ctx) {
  std::vector<size_t> order;
  auto first = [&](size_t i) { return constants || p.buffers[i].region != "scratch" ? 0 : p.buffers[i].first_step; };
  auto last = [&](size_t i) { return constants || p.buffers[i].region != "scratch" ? last_step : p.buffers[i].last_step; };
  for (size_t i = 0; i < p.buffers.size(); ++i)
    if ((p.buffers[i].region == "constants") == constants && p.buffers[i].bytes > 0) order.push_back(i);
  // std::sort, not stable_sort: stable_sort's buffer comes from a nothrow new whose failure it
  // hides (tests/embed/fault_test counts on every failed allocation failing the load).
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return std::pair(first(a), a) < std::pair(first(b), b); });
  std::map<int64_t, size_t> live;  // offset -> buffer
  using Ending = std::pair<int, size_t>;
  std::priority_queue<Ending, std::vector<Ending>, std::greater<>> endings;
  for (size_t i : order) {
    while (!endings.empty() && endings.top().first < first(i)) {
      live.erase(p.buffers[endings.top().second].offset);
      endings.pop();
    }
    const Buffer& b = p.buffers[i];
    auto next = live.lower_bound(b.offset);
    const Buffer* clash = nullptr;
    if (next != live.end() && next->first < b.offset + b.bytes) clash = &p.buffers[next->second];
    if (!clash && next != live.begin()) {
      const Buffer& before = p.buffers[std::prev(next)->second];
      if (before.offset + before.bytes > b.offset) clash = &before;
    }
    TEC_USER_CHECK(clash == nullptr, ctx) << "buffers " << describe(*clash) << " and " << describe(b)
                                          << " share bytes while both are live";
    live.emplace(b.offset, i);
    endings.emplace(last(i), i);
  }
}

}  // namespace

void check_buffer_layout(const Profile& p, const std::string& file, const std::string& where) {
  const ErrorContext ctx = at(file, where);
  const int last_step = std::max(0, static_cast<int>(p.steps.size()) - 1);
  for (const Buffer& b : p.buffers)
    TEC_USER_CHECK(0 <= b.first_step && b.first_step <= b.last_step && b.last_step <= last_step, ctx)
        << "buffer " << describe(b) << " lives outside the profile's steps [0, " << last_step << "]";
  check_regions(p, ctx);
  check_no_overlap(p, false, last_step, ctx);
  check_no_overlap(p, true, last_step, ctx);
}

void check_launch_lifetimes(const Profile& p, const std::string& file, const std::string& where) {
  for (size_t i = 0; i < p.launches.size(); ++i) {
    const Launch& l = p.launches[i];
    const ErrorContext ctx = at(file, where + "/gpu/launches/" + std::to_string(i));
    std::vector<int> used;
    for (const KernelArg& a : l.args)
      if (a.kind == KernelArg::Kind::buffer) used.push_back(a.buffer);
    for (const TensorMap& m : l.tensor_maps) used.push_back(m.buffer);
    const Gemm& g = l.gemm;
    const Collective& c = l.collective;
    const Attention& a = l.attention;
    for (int b : {l.buffer, g.a.buffer, g.a.scale_inv, g.b.buffer, g.b.scale_inv, g.bias, g.c, g.d, g.d_scale, g.amax_d, c.send, c.recv,
                  a.q, a.k, a.v, a.o, a.stats, a.seq_lens, a.bias, a.d_o, a.dq, a.dk, a.dv})
      used.push_back(b);
    for (int index : used) {
      if (index < 0) continue;
      const Buffer& b = p.buffers[static_cast<size_t>(index)];
      if (b.region != "scratch") continue;
      TEC_USER_CHECK(l.step >= 0 && b.first_step <= l.step && l.step <= b.last_step, ctx)
          << "a " << l.kind << " launch of " << (l.step < 0 ? std::string("the run") : "step " + std::to_string(l.step))
          << " uses scratch buffer " << describe(b) << " outside its lifetime";
    }
  }
}

}  // namespace tec::plan
