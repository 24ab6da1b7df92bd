// The compile pipeline, top to bottom (STYLE.md: "the pipeline reads top to bottom in one
// function"). Frontend, then each pass, with a dump and a timing after each step.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "frontend/json/graph_json.h"

namespace tec {

// The passes in pipeline order; --dump-after takes one of these names.
inline const std::vector<std::string> kPassNames = {"frontend", "apply_recipe", "meta", "usage"};

struct CompileOptions {
  std::string model_path;
  FrontendOptions frontend;
  std::string dump_after;  // empty: no dump; else a name from kPassNames
};

struct PassTiming {
  std::string pass;
  double milliseconds;
};

struct CompileResult {
  std::vector<Graph> graphs;       // one per profile, after the last pass that ran
  std::vector<PassTiming> timings;
};

// Called as each pipeline step starts: (step number, step count, pass name).
using ProgressCallback = std::function<void(int, int, const std::string&)>;

CompileResult compile_graphs(const CompileOptions& options, const ProgressCallback& progress = {});

}  // namespace tec
