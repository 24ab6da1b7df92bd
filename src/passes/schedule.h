// Steps: the units a GPU kernel or a cuBLASLt call implements (ARCHITECTURE.md §5). fusion
// groups nodes into steps and records why; schedule orders them and finds dependencies;
// memory_plan packs every buffer that crosses a step into the arena.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace tec {

// collective: one all_gather, reduce_scatter or all_reduce (NCCL), never fused with others.
enum class StepKind : uint8_t { gemm, kernel, collective };
std::string_view to_string(StepKind kind);

struct Step {
  std::string name;            // the node names joined by '+', e.g. "fc1+act"
  StepKind kind = StepKind::kernel;
  Phase phase = Phase::forward;  // of its nodes; weight_workspace steps may be skipped (microbatches)
  std::vector<NodeId> nodes;   // in execution order
  std::vector<std::string> fusions;  // each fusion decision and its reason
  std::vector<int> deps;       // steps that must finish first (set by schedule)
  // Buffers the GPU lowering needs inside this step only (a GEMM's bf16 staging output, an
  // amax, dequantized operands); memory_plan places them like the step's own scratch.
  std::vector<Workspace> workspaces;
};

struct Schedule {
  std::vector<Step> steps;
  // Values produced and read only inside one step: they never get a buffer.
  std::vector<bool> internal;  // indexed by ValueId
  // Buffer name -> the first and last step during which GPU launches use it, where that reaches
  // past its value's own steps: a collective overlapped with a later step's GEMM
  // (codegen::overlap_collectives). memory_plan keeps such a buffer for those steps too.
  std::map<std::string, std::pair<int, int>> gpu_buffer_steps;
};

struct FusionOptions {
  bool enabled = true;  // --disable-pass=fusion: one step per node
};

// Groups nodes into steps. Rules, in order of the issue that set them:
// - an activation with a cuBLASLt epilogue (gelu tanh, relu) joins the linear it follows;
// - a residual add joins the GEMM whose output it reads, as C with beta=1;
// - a gated activation (swiglu, geglu) joins the grouped_linear it follows (its epilogue);
// - an explicit quantize joins the non-GEMM step that produced its input;
// - norm + quantize and activation + quantize are one node with a quantized output already
//   (apply_recipe), recorded here as decisions.
Schedule fusion(const Graph& graph, const FusionOptions& options = {});

// Fills each step's dependencies from the values it reads.
Schedule schedule(const Graph& graph, Schedule steps);

}  // namespace tec
