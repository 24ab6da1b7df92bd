// Graph IR: nodes in topological order over SSA values (ARCHITECTURE.md §3). Every node
// and value keeps the name and source location it came from, so every error can name it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/error.h"
#include "ir/recipe.h"
#include "ir/tensor_proto.h"

namespace tec {

using ValueId = int32_t;
using NodeId = int32_t;

enum class Mode : uint8_t { infer, train };
std::string_view to_string(Mode mode);

enum class ValueKind : uint8_t {
  input,       // fed by the caller at run time
  activation,  // produced by a node
  weight,      // a parameter: a constant in inference, pre-quantized at compile time
  // Train plans: kept by the session across runs (fp32 masters, main_grad, optimizer moments
  // and step, runtime scalars). `weight` says how it starts; without one it starts at zero.
  state,
};
std::string_view to_string(ValueKind kind);

// Where a weight's values come from.
struct WeightSource {
  enum class Kind : uint8_t { random, file, values } kind = Kind::random;
  // random: seeded normal values with this mean and stddev (benchmarks and tests), drawn
  // under the value's name, or `random_name` when set (a train plan's master draws its weight's).
  uint64_t seed = 0;
  std::string random_name;
  float mean = 0.0f;
  float stddev = 0.0f;
  // file: a tensor in a safetensors file.
  std::string path;
  std::string tensor;
  DType file_dtype = DType::fp32;
  int64_t file_offset = 0;  // absolute byte offset of the tensor data in the file
  // values: the numbers themselves, row-major, read by a frontend (ONNX initializers, after
  // constant folding); `origin` says where they came from.
  std::shared_ptr<const std::vector<float>> values;
  std::string origin;
  // An explicitly quantized weight (ONNX DequantizeLinear of FP8 codes): the model's scales,
  // row-major in the layout of its fp8_static quantizer (tensor_proto.cpp), for the recipe
  // fp8-static. `values` are then the dequantized codes.
  struct StaticScales {
    std::shared_ptr<const std::vector<float>> scale_inv;
    int block_rows = 0, block_cols = 0;  // Quantizer::fp8_static_weight's granularity
  };
  std::optional<StaticScales> static_scales;
  // The values are rounded to this dtype first (a train plan's fp32 master starts from the
  // model's bf16 weight, so that step 0 computes what the inference plan does).
  DType rounded_to = DType::fp32;
  // A tensor-parallel shard: the source above describes the full tensor, and each rank's
  // constants hold its slice of `full` along `dim`. With `groups` > 1 the dim is first cut
  // into that many equal groups and each rank takes its slice of every group (a gated
  // activation's gate and up halves: each rank keeps matching columns of both).
  struct Shard {
    Shape full;
    int dim = 0;
    int64_t parts = 1;
    int64_t groups = 1;
  };
  std::optional<Shard> shard;
};

struct Value {
  std::string name;
  ValueKind kind = ValueKind::activation;
  TensorProto proto;
  NodeId producer = -1;
  std::string source;  // e.g. "graph.json /inputs/0"
  std::optional<WeightSource> weight;
  // A weight that train mode keeps as it is: no gradient, no master, no optimizer state (an
  // ONNX model's one-element constants: eps, 0.5, a scale; te-compile --freeze).
  bool frozen = false;
  // Set by apply_recipe: the quantizer a GEMM wants this value in. The producer writes the
  // value quantized (fusing the quantize), or the compiler pre-quantizes the weight.
  std::optional<Quantizer> quantizer;
  // Train mode: the gradient of this value (set by meta), when one flows.
  std::optional<TensorProto> grad;
  // An in-place update (autodiff): this value is a later version of `storage`, a state value,
  // and lives in its buffers. SSA keeps the order of reads and writes explicit.
  std::optional<ValueId> storage;
};

using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>>;

struct Attributes;
// The attributes as a JSON object (dumps and plan manifests).
nlohmann::json attributes_to_json(const Attributes& attrs);

struct Attributes {
  std::map<std::string, AttrValue> values;

  bool has(const std::string& name) const { return values.count(name) != 0; }
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_float(const std::string& name, double fallback) const;
  bool get_bool(const std::string& name, bool fallback) const;
  std::string get_string(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> get_ints(const std::string& name) const;
};

// A tensor an op keeps for its backward. aliases_input >= 0 means it *is* that input slot
// (an activation or a weight) and costs no new buffer.
struct SavedTensor {
  std::string name;
  TensorProto proto;
  int aliases_input = -1;
  // After autodiff, a saved tensor that is no alias is an extra output of its node: this value.
  ValueId value = -1;
};

// Scratch a node needs beside its outputs, e.g. the all-gathered input of a
// sequence-parallel linear.
struct Workspace {
  std::string name;
  TensorProto proto;
  // A copy made from constants that the session keeps from run to run (the GPU's dequantized
  // grouped weights): planned in the workspace region, made by launches marked constant_copy.
  bool kept_across_runs = false;
};

// What the backward of one node reads and makes (meta, train mode).
struct BackwardInfo {
  struct SavedRead {
    int saved_index;
    Usage usage;
  };
  // One read of the gradient of forward output `output`: the gradient itself, or (quantized)
  // its copy in the recipe's grad_output format, rowwise (a linear's dgrad) or columnwise (its
  // wgrad). A linear's dbias reads the gradient itself, as TE's fused bgrad + quantize does.
  struct GradRead {
    int output;
    bool quantized = false;
    bool columnwise = false;
  };
  std::vector<SavedRead> reads;
  std::vector<GradRead> grad_reads;  // empty: each output's gradient once, rowwise
};

// Where a node runs in a training step (ARCHITECTURE.md §12). Inference plans are all forward.
enum class Phase : uint8_t {
  weight_workspace,  // the weights' copies (FP8 or bf16) made from the fp32 masters
  forward,
  backward,
  optimizer,
};
std::string_view to_string(Phase phase);
std::optional<Phase> parse_phase(std::string_view name);

struct Node {
  std::string name;
  std::string op;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  Attributes attrs;
  std::string source;  // e.g. "graph.json /ops/1"
  Phase phase = Phase::forward;
  // A backward node (autodiff): it computes the input gradients of op `op` with the op's
  // backward reference. Inputs: the saved tensors its backward reads, then the output
  // gradients (BackwardInfo's order); outputs: the gradients of the forward input slots in
  // `gradient_slots`, one each.
  bool computes_backward = false;
  std::vector<int> gradient_slots;
  // Per input: read the tensor's columnwise copy (a backward GEMM's transposed operand).
  std::vector<bool> columnwise_inputs;
  // Filled by the meta pass.
  std::vector<SavedTensor> saved;
  std::vector<Workspace> workspaces;
  std::optional<BackwardInfo> backward;
};

// What autodiff made of a train-mode graph, for the plan's manifest.
struct TrainStep {
  std::string optimizer = "none";  // none, adamw
  std::string wgrad = "accumulate";  // accumulate (into main_grad), write (outputs <weight>.grad)
  // State values the caller may set between runs (lr, the first-microbatch flag, ...).
  std::vector<ValueId> runtime_scalars;
  // --recompute: forward values the backward recomputes instead of keeping (original, copy).
  std::vector<std::pair<ValueId, ValueId>> recomputed;
};

// How a value is spread over the ranks of a tensor-parallel plan (passes/tensor_parallel.cpp).
enum class TpLayout : uint8_t {
  replicated,  // every rank holds all of it
  sequence,    // split along dim 0, the tokens (sequence parallel)
  feature,     // split along the last dim (a column-parallel linear's output)
  partial,     // every rank holds a partial sum (a row-parallel GEMM's output, before its reduction)
};
std::string_view to_string(TpLayout layout);
std::optional<TpLayout> parse_tp_layout(std::string_view name);

struct TensorParallel {
  int64_t size = 1;  // ranks
  // The layout of every graph input and output (a caller shards and gathers by it).
  std::map<std::string, TpLayout> layouts;
};

struct Graph {
  std::string name;
  std::string source_file;
  std::vector<Value> values;
  std::vector<Node> nodes;  // topological order
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  Recipe recipe;
  Mode mode = Mode::infer;
  Target target;
  std::map<std::string, int64_t> dims;  // the profile this graph is built for
  std::optional<TrainStep> train;       // set by autodiff
  TensorParallel tp;                    // set by tensor_parallel

  ValueId add_value(Value value);
  NodeId add_node(Node node);  // sets the producer of its outputs
  Value& value(ValueId id) { return values.at(static_cast<size_t>(id)); }
  const Value& value(ValueId id) const { return values.at(static_cast<size_t>(id)); }
  Node& node(NodeId id) { return nodes.at(static_cast<size_t>(id)); }
  const Node& node(NodeId id) const { return nodes.at(static_cast<size_t>(id)); }
  std::optional<ValueId> find_value(const std::string& name) const;
  // For each value, the (node, input slot) pairs that read it.
  std::vector<std::vector<std::pair<NodeId, int>>> consumers() const;
  bool is_output(ValueId id) const;
  ErrorContext context(NodeId id, std::string stage) const;
};

// Checks the structural invariants: unique names, inputs defined before use, producers
// consistent. Throws Error(internal) because frontends must never build a bad graph.
void verify(const Graph& graph);

}  // namespace tec
