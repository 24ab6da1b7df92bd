// OpDef: everything about one op, in one place (ARCHITECTURE.md §4). The registry is filled
// by src/ops/; passes and frontends only look ops up here.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/general_kernel.h"
#include "ir/graph.h"

namespace tec {

enum class AttrType : uint8_t { int_, float_, bool_, string_, ints };
std::string_view to_string(AttrType type);

struct AttrSpec {
  std::string name;
  AttrType type;
  std::optional<AttrValue> default_value;  // nullopt: required
  std::vector<std::string> choices;        // allowed strings, empty = any
  std::string doc;
};

// A parameter the op owns (e.g. linear's weight), created by the frontend as a weight value
// named "<node>.<suffix>" and appended to the node's inputs.
struct ParamSpec {
  std::string suffix;
  Shape shape;
  DType dtype;
  float init_mean = 0.0f;    // seeded random initialisation
  float init_stddev = 0.0f;
  // > 1: a grouped weight of this many members along dim 0 (TensorProto::group_members).
  int64_t group_members = 0;
  // A tensor-parallel shard (linear's column or row split): `shape` is this rank's slice of
  // `full` along `shard_dim`; a weights file holds `full`, and the plan every rank's slice.
  std::optional<Shape> full;
  int shard_dim = 0;
};

// An input slot that a GEMM reads, and the role the recipe quantizes it for.
struct GemmOperand {
  int slot;
  TensorRole role;
};

struct InferContext {
  const Graph& graph;
  const Node& node;
  ErrorContext error;                // names the node; use in TEC_USER_CHECK
  std::vector<TensorProto> inputs;   // activations first, then params
};

struct InferResult {
  std::vector<TensorProto> outputs;
  std::vector<SavedTensor> saved;    // empty in infer mode
  std::vector<Workspace> workspaces;
};

struct BackwardContext {
  const Graph& graph;
  const Node& node;
  ErrorContext error;
  std::vector<TensorProto> inputs;        // forward input protos
  std::vector<SavedTensor> saved;         // what infer saved
  std::vector<TensorProto> grad_outputs;  // one per forward output
};

struct BackwardResult {
  std::vector<std::optional<TensorProto>> grad_inputs;  // per input slot; nullopt: no gradient
  std::vector<BackwardInfo::SavedRead> reads;
  std::vector<BackwardInfo::GradRead> grad_reads;  // empty: each output gradient once, rowwise
};

// What an op's `gradient` builds its backward with, in autodiff: the forward node's values, and
// nodes of other ops, each with its own reference and GPU kernel, so that such a backward needs
// none of its own (the general path's ops: a gradient is a small graph of them).
class GradientBuilder {
 public:
  virtual ~GradientBuilder() = default;
  virtual const Attributes& attrs() const = 0;   // the forward node's attributes
  virtual size_t input_count() const = 0;
  virtual ValueId input(size_t slot) const = 0;  // the forward node's input
  virtual ValueId output() const = 0;            // its output
  virtual ValueId grad_output() const = 0;       // the gradient of its output
  // (a copy: emit adds values, which moves the graph's)
  virtual TensorProto proto(ValueId v) const = 0;
  // Adds a backward node of `op` reading `inputs`, named after the forward node and `label`;
  // returns its (first) output.
  virtual ValueId emit(const std::string& op, std::vector<ValueId> inputs, Attributes attrs, const std::string& label) = 0;
};

// A tensor's values on the host, as float, in row-major order: what the CPU reference of
// an op reads and writes. Quantized inputs arrive dequantized; outputs are rounded or
// quantized by the executor when they are stored.
struct HostTensor {
  Shape shape;
  std::vector<float> values;
};

// An op that reads its first input as indices given from outside (token ids, a padding mask):
// which values are valid, so that te-run checks a given input before any step runs, naming the
// bad value and where it is, and tests draw valid random ones.
struct IndexInput {
  // Throws Error(invalid_input) naming `input`, read by node `node`, where `values` are not valid.
  std::function<void(const Attributes&, const std::string& input, const std::string& node, const HostTensor& values)> check;
  // A valid value from `uniform` in [0, 1).
  std::function<float(const Attributes&, double uniform)> draw;
};

struct OpDef {
  std::string name;
  std::string summary;
  int min_inputs = 1;  // activation inputs, params not counted
  int max_inputs = 1;
  // Outputs after the first (moe_permute's m_splits and row map): a JSON graph names them
  // "<node>.<suffix>", the first output "<node>".
  std::vector<std::string> extra_outputs;
  std::vector<AttrSpec> attrs;
  // Checks across attributes beyond the schema (ranges, combinations). Optional.
  std::function<void(const Attributes&, const ErrorContext&)> check_attributes;
  // The parameters the op owns, from its attributes and the model dtype. Optional.
  std::function<std::vector<ParamSpec>(const Attributes&, DType)> params;
  // Input slots read by a GEMM. Optional (non-GEMM ops).
  std::function<std::vector<GemmOperand>(const Node&)> gemm_operands;
  // The fake forward: output protos, saved tensors (train) and workspaces.
  std::function<InferResult(const InferContext&)> infer;
  // The fake backward: gradient protos, and which saved tensors it reads with which usage.
  // Empty for inference-only ops.
  std::function<BackwardResult(const BackwardContext&)> infer_backward;
  // The backward as a graph of other ops (GradientBuilder): the gradient of each input slot,
  // -1 where it has none; each in its input's shape and dtype. Optional; an op has this or
  // infer_backward and backward_reference.
  std::function<std::vector<ValueId>(GradientBuilder&)> gradient;
  // The CPU reference of the forward, in float (accumulating in fp32), used by the
  // reference executor. Inputs: activations, then params, as in the node.
  // In train plans it also returns, after the outputs, the saved tensors that are no alias
  // (a norm's mean and rsigma), in infer's order; inference plans drop them.
  std::function<std::vector<HostTensor>(const Attributes&, const std::vector<HostTensor>&)> reference;
  // The CPU reference of the backward (train plans), in fp32. `in`: the saved tensors in the
  // order of infer_backward's reads, then the output gradients in the order of its grad_reads,
  // each as its read says (rowwise or columnwise copy, dequantized). Returns the gradient of
  // every forward input slot; an empty HostTensor where a slot has none.
  std::function<std::vector<HostTensor>(const Attributes&, const std::vector<HostTensor>&)> backward_reference;
  // Collectives (all_gather, reduce_scatter, all_reduce): the reference over every rank at
  // once. `per_rank`: the op's one input on each rank (its output gradient when `backward`);
  // returns its output (its input gradient) on each rank. Such an op has no `reference`.
  std::function<std::vector<HostTensor>(const Attributes&, bool backward, const std::vector<HostTensor>& per_rank)> collective;
  // The general path (ir/general_kernel.h): the strided loops that compute the op on the GPU
  // (kernels/general.cu) and on the CPU alike, from its attributes and input shapes. Throws a
  // user error (without context: the caller adds the node's) for inputs it cannot take.
  // Optional: ops with a row producer or a codegen module of their own have none.
  std::function<GeneralPlan(const Attributes&, const std::vector<Shape>& inputs)> general;
  // Reads input 0 as indices from outside (IndexInput). Optional.
  std::optional<IndexInput> index_input;
  // Moves no values: the output is the input, in another shape (reshape, identity), so what
  // reads the output reads the input.
  bool view = false;
  // The gradient reaches every input unchanged (add, identity, quantize, dequantize): autodiff
  // hands the gradient on and makes no backward node.
  bool gradient_passes_through = false;
  // Made by the compiler only (adamw); a model naming it is refused.
  bool compiler_only = false;
};

class OpRegistry {
 public:
  void add(OpDef def);
  const OpDef* find(const std::string& name) const;
  const OpDef& get(const std::string& name) const;  // internal error if missing
  std::vector<const OpDef*> all() const;
  std::string names() const;  // "add, bias, ..." for error messages

 private:
  std::map<std::string, std::unique_ptr<OpDef>> ops_;
};

// Checks node attributes against the op's schema and fills in defaults. Errors point at
// "<node source>/attrs/<name>".
void check_and_default_attributes(const OpDef& def, Attributes& attrs, const ErrorContext& ctx);

}  // namespace tec
