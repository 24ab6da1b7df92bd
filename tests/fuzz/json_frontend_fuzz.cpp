// Fuzzes the JSON graph frontend and every pass after it: any graph must compile to a
// memory plan or throw tec::Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "frontend/json/graph_json.h"
#include "passes/memory_plan.h"
#include "passes/passes.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    for (tec::Graph& g : tec::parse_json_graphs(text, "fuzz.json", "/nonexistent", {})) {
      // Cap the work per input: shapes may be legal but huge.
      int64_t elements = 0;
      for (const auto& v : g.values) elements += v.proto.shape.numel();
      if (elements > (int64_t{1} << 24)) continue;
      g = tec::usage(tec::meta(tec::apply_recipe(std::move(g))));
      const tec::Schedule s = tec::schedule(g, tec::fusion(g));
      (void)tec::memory_plan(g, s);
    }
  } catch (const tec::Error&) {
  }
  return 0;
}
