// Turns the compiled graphs (one per profile) into a plan: the manifest of
// schemas/plan.schema.json and the constants blob with every weight pre-quantized.
#pragma once

#include <nlohmann/json.hpp>

#include "codegen/lower.h"
#include "passes/memory_plan.h"
#include "plan/file.h"

namespace tec {

struct CompiledProfile {
  Graph graph;
  Schedule schedule;
  MemoryPlan memory;
  codegen::GpuLowering gpu;
};

// The GPU code of a plan: the modules every profile's launches share, each compiled for
// every target arch (cubins[module][arch]).
struct GpuCode {
  std::vector<codegen::KernelRequest> modules;  // arch left empty
  std::vector<std::string> archs;               // "sm_90", ...
  std::vector<std::vector<std::vector<uint8_t>>> cubins;
  std::string nvrtc_version;
};

struct BuildRecord {
  std::string tool;
  nlohmann::json options;      // normalised: no paths, no timestamps
  std::string model_checksum;  // of the model file's bytes
};

struct PlanParts {
  nlohmann::json manifest;
  std::vector<plan::Blob> blobs;
  bool constants_from_cache = false;
};

// The pre-quantized constants are cached in cache_dir ("" disables it): generating and
// quantizing 134 MB of weights is most of a cold compile.
PlanParts build_plan(const std::vector<CompiledProfile>& profiles, const GpuCode& code, const BuildRecord& record,
                     const std::string& cache_dir);

}  // namespace tec
