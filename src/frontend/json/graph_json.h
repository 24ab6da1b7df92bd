// The JSON graph frontend (schemas/graph.schema.json): named dims with profiles, inputs,
// ops, outputs, a recipe and the weights' source. Every error names the JSON pointer of
// the field at fault, e.g. "graph.json /ops/1/attrs/out_features".
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace tec {

struct FrontendOptions {
  std::optional<RecipeKind> recipe;              // replaces the model's recipe
  // --shape T=2048 fixes a dim ({2048}); --profiles T=16,128 replaces its profile list.
  std::map<std::string, std::vector<int64_t>> dim_overrides;
  Mode mode = Mode::infer;
  Target target;
  // te-compile --tp N: the tp_size of every linear the graph marks column- or row-parallel
  // (TE's parallel_mode); 0 keeps the graph's.
  int64_t tp_size = 0;
  // ONNX models: recognise exporters' patterns (attention, norms, GELU, ...) as TE ops; false
  // maps every node onto the general path (te-compile --no-onnx-patterns).
  bool onnx_patterns = true;
  // Train mode: weights kept as they are (te-compile --freeze), as ECMAScript regular
  // expressions over whole weight names; each must match at least one weight.
  std::vector<std::string> frozen;
};

// A graph file's size limit (weights live in their own files).
inline constexpr uint64_t kMaxGraphJsonBytes = uint64_t{64} << 20;

// One Graph per shape profile. `display_name` appears in error locations; weight files
// are resolved against `base_dir`.
std::vector<Graph> parse_json_graphs(std::string_view text, const std::string& display_name,
                                     const std::string& base_dir, const FrontendOptions& options);
std::vector<Graph> load_json_graphs(const std::string& path, const FrontendOptions& options);

}  // namespace tec
