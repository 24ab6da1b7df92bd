// The compiler passes (ARCHITECTURE.md §5), each a function from Graph to Graph, one file
// each. They run in this order: tensor_parallel, apply_recipe, meta, usage, autodiff.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "ir/graph.h"

namespace tec {

// Makes a graph with column- and row-parallel linears the program one rank of the
// tensor-parallel group runs: collectives inserted where TE puts them, the row-parallel bias
// moved after its reduction, every input's and output's layout over the ranks recorded in
// Graph::tp, and ops that cannot run on a rank's slice refused. One rank: unchanged.
Graph tensor_parallel(Graph graph);

// Decides which values a GEMM reads quantized and with which quantizer. A producer whose
// every consumer is such a GEMM writes its output quantized ("norm + quantize"); otherwise
// an explicit quantize node is inserted before the GEMM. Weights are pre-quantized.
Graph apply_recipe(Graph graph);

// The fake forward (and, in train mode, fake backward): runs every op's infer, fixing each
// value's TensorProto, the saved tensors and their aliases, workspaces and gradients.
Graph meta(Graph graph);

// Inference: an attention over fp32 q, k, v reads bf16 casts of them and writes bf16, cast
// back to fp32 (cuDNN's SDPA takes 16-bit operands); the CPU reference runs the same casts.
Graph attention_in_16_bits(Graph graph);

// Decides rowwise/columnwise usage of every quantized tensor from who reads it, then checks
// that every buffer of every tensor is valid for its format (LAYOUTS.md).
Graph usage(Graph graph);

// What a training step does beside forward and backward (te-compile --optimizer, --wgrad).
struct TrainOptions {
  enum class Optimizer : uint8_t { none, adamw } optimizer = Optimizer::none;
  // accumulate: weight gradients add into fp32 main_grad state (TE's wgrad, beta = 1), for
  // the optimizer or the caller; write: each step writes them, in the model dtype, as outputs
  // "<weight>.grad" (PyTorch's .grad of bf16 parameters).
  enum class WeightGrad : uint8_t { accumulate, write } wgrad = WeightGrad::accumulate;
  // Recompute an activation function's output in the backward (from its input, which its own
  // backward saves anyway) instead of keeping it for the next linear's wgrad.
  bool recompute_activations = false;
  // AdamW's runtime scalars as the plan starts them; a session may change them between runs.
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.01f;
};
std::string_view to_string(TrainOptions::Optimizer optimizer);
std::string_view to_string(TrainOptions::WeightGrad wgrad);

// Train mode: builds the training step from the meta'd graph: weight workspaces from fp32
// masters, the forward writing its saved tensors, the backward nodes from each op's
// infer_backward, main_grad accumulation, and the optional optimizer. Infer mode: unchanged.
Graph autodiff(Graph graph, const TrainOptions& options);

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
// A train plan's step (optimizer, wgrad, runtime scalars) and its train_memory figures, for
// the plan's manifest and --report; null for inference graphs.
nlohmann::json dump_train_step(const Graph& graph, const MemoryPlan& plan);

}  // namespace tec
