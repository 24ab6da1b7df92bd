// schedule: steps run in the order fusion made them (the nodes' topological order); each
// step depends on the steps that produce what it reads, and a step that updates state in
// place (a new version of a state value) on every step that read an earlier version.
#include <algorithm>

#include "passes/schedule.h"

namespace tec {

Schedule schedule(const Graph& g, Schedule s) {
  std::vector<int> step_of(g.nodes.size(), -1);
  for (size_t i = 0; i < s.steps.size(); ++i)
    for (NodeId n : s.steps[i].nodes) step_of[static_cast<size_t>(n)] = static_cast<int>(i);
  // The steps reading each state buffer, by the state value whose storage it is.
  auto storage_of = [&](ValueId v) { return g.value(v).storage.value_or(v); };
  std::vector<std::vector<int>> state_readers(g.values.size());
  for (size_t i = 0; i < s.steps.size(); ++i)
    for (NodeId n : s.steps[i].nodes)
      for (ValueId in : g.node(n).inputs)
        if (g.value(storage_of(in)).kind == ValueKind::state) state_readers[static_cast<size_t>(storage_of(in))].push_back(static_cast<int>(i));
  for (size_t i = 0; i < s.steps.size(); ++i) {
    std::vector<int>& deps = s.steps[i].deps;
    deps.clear();
    auto depend_on = [&](int dep) {
      TEC_INTERNAL_CHECK(dep >= 0 && dep <= static_cast<int>(i), {}) << "step order breaks a dependency";
      if (dep != static_cast<int>(i) && std::find(deps.begin(), deps.end(), dep) == deps.end()) deps.push_back(dep);
    };
    for (NodeId n : s.steps[i].nodes) {
      for (ValueId in : g.node(n).inputs) {
        const NodeId producer = g.value(in).producer;
        if (producer >= 0) depend_on(step_of[static_cast<size_t>(producer)]);
      }
      for (ValueId out : g.node(n).outputs)
        if (g.value(out).storage)
          for (int reader : state_readers[static_cast<size_t>(*g.value(out).storage)])
            if (reader < static_cast<int>(i)) depend_on(reader);
    }
    std::sort(deps.begin(), deps.end());
  }
  return s;
}

}  // namespace tec
