// What the frontend fuzz targets share: every graph a frontend accepts goes through the
// passes up to memory_plan, with the work per input capped.
#pragma once

#include <vector>

#include "passes/memory_plan.h"
#include "passes/passes.h"

namespace tec::fuzz {

// Graphs whose tensors hold more than `max_elements` in total are skipped: their shapes may
// be legal but huge.
inline void run_passes(std::vector<Graph> graphs, int64_t max_elements) {
  for (Graph& g : graphs) {
    int64_t elements = 0;
    for (const auto& v : g.values) elements += v.proto.shape.numel();
    if (elements > max_elements) continue;
    g = usage(meta(apply_recipe(tensor_parallel(std::move(g)))));
    const Schedule s = schedule(g, fusion(g));
    (void)memory_plan(g, s);
  }
}

}  // namespace tec::fuzz
