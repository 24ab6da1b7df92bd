// Fuzzes the ONNX frontend (protobuf parsing, validation, constant folding, pattern matching)
// and the passes after it: any bytes must compile to a memory plan or throw tec::Error.
// External data resolves against a folder that does not exist, so no input reads files.
#include <cstddef>
#include <cstdint>

#include "frontend/onnx/onnx_import.h"
#include "frontend/onnx/onnx_model.h"
#include "passes/memory_plan.h"
#include "passes/passes.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const tec::onnx::Model model = tec::onnx::parse_model(data, size, "fuzz.onnx", "/nonexistent");
    tec::FrontendOptions options;
    for (tec::Graph& g : tec::import_onnx(model, options).graphs) {
      // Cap the work per input: shapes may be legal but huge.
      int64_t elements = 0;
      for (const auto& v : g.values) elements += v.proto.shape.numel();
      if (elements > (int64_t{1} << 22)) continue;
      g = tec::usage(tec::meta(tec::apply_recipe(std::move(g))));
      const tec::Schedule s = tec::schedule(g, tec::fusion(g));
      (void)tec::memory_plan(g, s);
    }
  } catch (const tec::Error&) {
  }
  return 0;
}
