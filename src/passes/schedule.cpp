// schedule: steps run in the order fusion made them (the nodes' topological order); each
// step depends on the steps that produce what it reads.
#include <algorithm>

#include "passes/schedule.h"

namespace tec {

Schedule schedule(const Graph& g, Schedule s) {
  std::vector<int> step_of(g.nodes.size(), -1);
  for (size_t i = 0; i < s.steps.size(); ++i)
    for (NodeId n : s.steps[i].nodes) step_of[static_cast<size_t>(n)] = static_cast<int>(i);
  for (size_t i = 0; i < s.steps.size(); ++i) {
    std::vector<int>& deps = s.steps[i].deps;
    deps.clear();
    for (NodeId n : s.steps[i].nodes)
      for (ValueId in : g.node(n).inputs) {
        const NodeId producer = g.value(in).producer;
        if (producer < 0) continue;
        const int dep = step_of[static_cast<size_t>(producer)];
        TEC_INTERNAL_CHECK(dep >= 0 && dep <= static_cast<int>(i), {}) << "step order breaks a dependency";
        if (dep != static_cast<int>(i) && std::find(deps.begin(), deps.end(), dep) == deps.end()) deps.push_back(dep);
      }
    std::sort(deps.begin(), deps.end());
  }
  return s;
}

}  // namespace tec
