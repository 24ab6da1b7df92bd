// Turns the compiled graphs (one per profile) into a plan: the manifest of
// schemas/plan.schema.json and the constants blob with every weight pre-quantized.
#pragma once

#include <nlohmann/json.hpp>

#include "passes/memory_plan.h"
#include "plan/file.h"

namespace tec {

struct CompiledProfile {
  Graph graph;
  Schedule schedule;
  MemoryPlan memory;
};

struct BuildRecord {
  std::string tool;
  nlohmann::json options;      // normalised: no paths, no timestamps
  std::string model_checksum;  // of the model file's bytes
};

struct PlanParts {
  nlohmann::json manifest;
  std::vector<plan::Blob> blobs;
};

PlanParts build_plan(const std::vector<CompiledProfile>& profiles, const BuildRecord& record);

}  // namespace tec
