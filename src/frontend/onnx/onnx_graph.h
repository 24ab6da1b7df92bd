// The ONNX graph as the importer reads it, first of its stages (onnx_import.cpp runs them):
// values indexed to producers and readers, nodes in topological order, exporters' spellings
// canonicalised (onnx_canonical.h), no-op Casts seen through, constants found and folded where
// no shape is needed, ranks where the structure tells them. The patterns (onnx_patterns.h)
// and the emission (onnx_builder.h) read it through the queries below and never change it.
// Also here: Problems, the one error that lists every node tec cannot compile.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "frontend/onnx/onnx_fold.h"
#include "frontend/onnx/onnx_model.h"

namespace tec::onnx {

// INT64 and INT32 graph inputs: token ids, padding masks, indices; int32 in the plan.
inline bool is_integer_input(int32_t elem_type) { return elem_type == kInt64 || elem_type == kInt32; }

// Every node tec cannot compile, collected so that one error names them all.
class Problems {
 public:
  void add(const Node& n, std::string why) { list_.push_back({n.index, n.name, n.op_type, n.domain, std::move(why)}); }
  // A problem of the graph rather than of a node (a graph output's declared type).
  void add_graph(const std::string& what, std::string why) { list_.push_back({-1, what, "output", "", std::move(why)}); }
  bool has(const Node& n) const;
  // Throws ErrorKind::unsupported naming every node, in file order; nothing when empty.
  void throw_if_any(const ErrorContext& file, int64_t opset);

 private:
  struct Problem {
    int index;  // node position in the file, -1 for the graph
    std::string node, op_type, domain, why;
  };
  std::vector<Problem> list_;
};

struct OnnxGraph {
  explicit OnnxGraph(const Model& m) : model(m), nodes(m.nodes) {}

  // ---- stages, in the order the importer runs them ----------------------------------------
  void index_values();   // producers and readers; every value defined once
  void order_nodes();    // topological, in file order where free; a cycle is an error
  void canonicalize();   // onnx_canonical.h, then indexed and ordered again
  void skip_noop_casts();
  void find_constants();
  void fold_known_constants();
  void find_ranks();

  // ---- queries ------------------------------------------------------------------------------
  ErrorContext file_ctx() const { return ErrorContext{"onnx", "", "", model.file}; }
  ErrorContext node_ctx(const Node& n) const {
    return ErrorContext{"onnx", n.name, n.op_type, model.file + " node " + std::to_string(n.index)};
  }
  const Node& node(int i) const { return nodes[static_cast<size_t>(i)]; }
  int producer_of(const std::string& v) const;  // -1 for inputs and constants
  const std::vector<int>& consumers_of(const std::string& v) const;
  // A value read by exactly one node, and not a graph output: a pattern may swallow it.
  bool internal(const std::string& v) const { return consumers_of(v).size() == 1 && !outputs.count(v); }
  bool is_constant(const std::string& v) const { return v.empty() || constant_values.count(v) != 0; }
  bool is_constant_node(int i) const { return constant_node[static_cast<size_t>(i)]; }
  // A known constant of one element, or nullopt.
  std::optional<double> scalar(const std::string& v) const;
  // A pattern's constant (GELU's sqrt(2/pi), 0.044715, ...) as the model stores it: bf16 and
  // fp16 models round them to their dtype (0.044715 is 0.044677734375 in bf16).
  bool near(double a, double b) const;
  // For a commutative binary node reading `v`, the other operand ("" if it reads no `v`).
  std::string other_input(int i, const std::string& v) const;
  // The two inputs of a binary node as (run-time value, scalar constant), in either order.
  std::optional<std::pair<std::string, double>> with_scalar(int i) const;
  std::optional<std::vector<int64_t>> reduce_axes(int i) const;
  bool reduces_last_dim_keeping(int i) const;
  // The rank of a value when the structure alone tells it; -1 when unknown.
  int64_t rank_of(const std::string& v) const;
  // Gather of a constant table at run-time indices along axis 0: an embedding lookup.
  bool is_embedding_lookup(const Node& n) const;

  const Model& model;
  std::vector<Node> nodes;  // model's nodes, canonicalised, with readers of a no-op Cast reading its input
  std::map<std::string, int> producer;
  std::map<std::string, std::vector<int>> consumers;
  std::set<std::string> outputs;  // the graph's outputs
  std::vector<int> order;         // node indices, producers first
  std::map<int, std::string> canonical_notes;  // per node index: what canonicalize() rewrote, for the report
  std::map<std::string, int32_t> types;        // element types the structure tells
  std::vector<bool> noop_cast;                 // per node: an Identity, or a Cast that changes nothing
  std::set<std::string> constant_values;
  std::vector<bool> constant_node;             // per node: computes constants (folded per profile)
  ConstMap known;                              // constants foldable without shapes
  std::map<std::string, int64_t> ranks;
  double constant_tolerance = 1e-4;  // relative; looser for scalars stored in bf16 / fp16 (near)

 private:
  std::map<std::string, int32_t> elem_types() const;
};

// The claims (onnx_claims.cpp): every node's op, domain, arity and opset checked against the
// op's claim. Returns true when some node has the wrong arity, after which no stage may index
// its inputs.
bool check_claims(const OnnxGraph& graph, Problems& problems);
// After find_constants: the inputs a claim needs constant (Reshape's shape, ...) are.
void check_constant_inputs(const OnnxGraph& graph, Problems& problems);

}  // namespace tec::onnx
