// The compile pipeline, top to bottom (STYLE.md: "the pipeline reads top to bottom in one
// function"). Frontend, then each pass, with a dump and a timing after each step.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "frontend/json/graph_json.h"
#include "frontend/onnx/onnx_import.h"
#include "passes/passes.h"
#include "plan_builder.h"

namespace tec {

// The steps in pipeline order; --dump-after takes one of these names.
inline const std::vector<std::string> kPassNames = {"frontend", "tensor_parallel", "apply_recipe", "meta",     "attention_in_16_bits",
                                                    "usage",    "autodiff",        "fusion",       "schedule", "lower",
                                                    "memory_plan", "codegen",      "plan"};
// Passes --disable-pass may turn off.
inline const std::vector<std::string> kOptionalPasses = {"fusion"};

struct CompileOptions {
  std::string model_path;
  FrontendOptions frontend;
  TrainOptions train;               // --mode train: optimizer, weight gradients, runtime scalars
  std::string dump_after;           // empty: run to the end
  std::set<std::string> disabled;   // from kOptionalPasses
  BuildRecord record;               // tool and options, for the plan's build record
  std::vector<std::string> archs{"sm_90"};  // cubins for each
  bool mid_m_gemm = false;  // experimental: codegen::LoweringTarget::mid_m_gemm
  bool grouped_block_scales = true;  // codegen::LoweringTarget::grouped_block_scales
  int64_t overlap_min_rows = codegen::kOverlapMinRows;  // codegen::LoweringTarget::overlap_min_rows
  std::string cache_dir = codegen::default_cache_dir();  // kernels and constants; "" disables it
};

// A kernel module whose ptxas spilled registers to local memory (codegen::CompiledKernel::spills).
struct SpillingKernel {
  std::string source, arch;
  std::vector<std::string> steps;  // the steps that launch it, in the first profile that does
  std::string ptxas;               // ptxas's own lines
};

struct CodegenStats {
  int modules = 0, cache_hits = 0;
  double compile_milliseconds = 0;  // summed over the NVRTC compiles that missed the cache
  std::vector<SpillingKernel> spilling;
};

struct PassTiming {
  std::string pass;
  double milliseconds;
};

struct CompileResult {
  std::vector<CompiledProfile> profiles;  // filled as far as the pipeline ran
  std::optional<PlanParts> plan;          // after the "plan" step
  std::vector<PassTiming> timings;
  GpuCode code;
  CodegenStats codegen;
  std::vector<OnnxNodeReport> onnx_nodes;  // ONNX models: what each node became
};

// ONNX models are recognized by the .onnx suffix; everything else is read as a JSON graph.
bool is_onnx_path(const std::string& path);

// Called as each pipeline step starts: (step number, step count, pass name).
using ProgressCallback = std::function<void(int, int, const std::string&)>;

CompileResult compile(const CompileOptions& options, const ProgressCallback& progress = {});

}  // namespace tec
