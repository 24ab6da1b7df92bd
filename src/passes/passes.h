// The compiler passes (ARCHITECTURE.md §5), each a function from Graph to Graph, one file
// each. They run in this order: apply_recipe, meta, usage.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "ir/graph.h"

namespace tec {

// Decides which values a GEMM reads quantized and with which quantizer. A producer whose
// every consumer is such a GEMM writes its output quantized ("norm + quantize"); otherwise
// an explicit quantize node is inserted before the GEMM. Weights are pre-quantized.
Graph apply_recipe(Graph graph);

// The fake forward (and, in train mode, fake backward): runs every op's infer, fixing each
// value's TensorProto, the saved tensors and their aliases, workspaces and gradients.
Graph meta(Graph graph);

// Decides rowwise/columnwise usage of every quantized tensor from who reads it, then checks
// that every buffer of every tensor is valid for its format (LAYOUTS.md).
Graph usage(Graph graph);

// Sizes after meta/usage, for the human summary and tests.
struct MetaSummary {
  int64_t buffers = 0;         // physical buffers: values, saved, workspaces, grads, state
  int64_t total_bytes = 0;
  int64_t saved_bytes = 0;     // new buffers for saved tensors
  int64_t aliased_bytes = 0;   // saved tensors that alias an input: bytes not spent
  int64_t state_bytes = 0;     // delayed-scaling state
  int64_t weight_bytes = 0;    // constants, quantized as stored
};
MetaSummary summarize(const Graph& graph);

// The JSON dump of a graph after a pass: every value's proto and physical buffers, every
// node's saved tensors with aliases, workspaces and backward reads.
nlohmann::json dump_graph(const Graph& graph, const std::string& after_pass);

struct Schedule;
struct MemoryPlan;
// The steps with their nodes, fusion decisions and dependencies.
nlohmann::json dump_schedule(const Graph& graph, const Schedule& schedule);
// Every planned buffer with region, offset and lifetime, and the arena sizes.
nlohmann::json dump_memory_plan(const MemoryPlan& plan);

}  // namespace tec
