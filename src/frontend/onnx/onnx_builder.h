// Emission, the importer's last stage: one tec Graph per shape profile, built in the ONNX
// graph's topological order. A pattern's group becomes its TE op (the table's emit, in
// patterns/<family>.cpp); any other node becomes tec ops one by one (onnx_nodes.cpp); the
// primitives both use are in onnx_builder.cpp.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "frontend/onnx/onnx_mask_probe.h"
#include "frontend/onnx/onnx_patterns.h"
#include "ir/graph.h"

namespace tec::onnx {

// One profile's graph as it is built.
struct Env {
  Graph g;
  std::map<std::string, ValueId> runtime;  // ONNX value -> tec value
  ConstMap consts;
  std::set<std::string> names;             // node and value names in use
  std::map<std::string, ValueId> lengths;  // per padding-mask input: its sequence_lengths
  ConstMap mask_values;                    // padding masks' inputs and nodes at a probe of all tokens
};

class Builder {
 public:
  Builder(const OnnxGraph& graph, const Matcher& matches) : graph_(graph), matches_(matches) {}
  // fp8-static: linears keep the model's Q/DQ scales (static_scales_of, emit_linear).
  void keep_static_scales(bool on) { static_ = on; }

  // One ONNX node that no pattern took (onnx_nodes.cpp).
  void emit_node(Env& e, const Node& n);
  // A pattern's group, by its table row's emit.
  void emit_group(Env& e, const Group& grp);

  // ---- primitives (onnx_builder.cpp) --------------------------------------------------------
  std::string unique(Env& e, const std::string& base) const;
  ValueId runtime(Env& e, const std::string& v, const Node& n) const;
  // A constant as a weight value, in the dtype of the run-time operand it meets.
  ValueId weight_value(Env& e, const std::string& v, DType dtype, const std::string& source) const;
  // A constant (as weight_value) or a run-time value.
  ValueId operand(Env& e, const std::string& v, DType dtype, const Node& n) const;
  // Adds one tec node; its params take `param_values` in order. Returns the output value.
  ValueId emit(Env& e, const Node& src, const std::string& op, std::vector<ValueId> inputs, Attributes attrs,
               std::vector<std::vector<float>> param_values, const std::string& out_name) const;
  // A reshape to `dims`, or the value itself when nothing changes.
  ValueId reshape_to(Env& e, const Node& src, ValueId v, const std::vector<int64_t>& dims, const std::string& out) const;
  static Attributes fn_attr(const std::string& fn);
  static std::vector<float> transposed(const Tensor& w);  // [K, N] -> [N, K]
  // A constant's values, which must number `count`; `fill` x count when `name` is "".
  std::vector<float> constant_values(const Env& e, const std::string& name, int64_t count, float fill, const Node& at) const;

  using StaticScales = WeightSource::StaticScales;
  std::vector<float> projection_weight(const Env& e, const Projection& p) const;
  std::vector<float> projection_bias(const Env& e, const Projection& p) const;
  std::optional<StaticScales> static_scales_of(const std::string& weight, bool nk, double alpha) const;
  static std::optional<StaticScales> concatenated(const std::optional<StaticScales>& a, int64_t n_a, const std::optional<StaticScales>& b,
                                                  int64_t n_b, int64_t k, const ErrorContext& ctx);
  ValueId emit_linear(Env& e, const Node& src, const std::string& x_name, ValueId x, std::vector<float> weight_nk, int64_t n, int64_t k,
                      const std::vector<float>* bias, const std::string& out, std::optional<StaticScales> scales = {}) const;
  std::optional<ValueId> flat_before_heads(const Env& e, ValueId t) const;
  ValueId emit_attention_of(Env& e, const Node& n, ValueId q, ValueId k, ValueId v, std::optional<ValueId> mask, Attributes a,
                            const std::string& out, bool flat_output = false) const;
  // The padding masks (patterns/padding_mask.cpp).
  PaddingMask probe_padding(Env& e, const std::string& mask, int64_t seq_q, const ErrorContext& ctx) const;
  ValueId sequence_lengths_of(Env& e, const std::string& input, const Node& at) const;

  // ---- the table's emits, one per pattern family (patterns/<family>.cpp) ------------------
  ValueId emit_gelu(Env& e, const Group& grp, ValueId x, const std::string& out);
  ValueId emit_silu(Env& e, const Group& grp, ValueId x, const std::string& out);
  ValueId emit_gated(Env& e, const Group& grp, ValueId x, const std::string& out);
  ValueId emit_norm_group(Env& e, const Group& grp, ValueId x, const std::string& out);
  ValueId emit_linear_bias(Env& e, const Group& grp, ValueId x, const std::string& out);
  ValueId emit_qdq(Env& e, const Group& grp, ValueId x, const std::string& out);
  ValueId emit_spelled_rope(Env& e, const Group& grp, ValueId x, const std::string& out);
  ValueId emit_spelled_attention(Env& e, const Group& grp, ValueId q, const std::string& out);

 private:
  const Node& node(int i) const { return graph_.node(i); }
  ErrorContext node_ctx(const Node& n) const { return graph_.node_ctx(n); }
  // onnx_nodes.cpp
  bool emit_general(Env& e, const Node& n);
  void emit_split(Env& e, const Node& n);
  void emit_gemm(Env& e, const Node& n);
  ValueId add_c(Env& e, const Node& n, ValueId y, DType dtype, float beta, const std::string& out);
  void emit_binary(Env& e, const Node& n, const std::string& fn);
  void emit_norm(Env& e, const Node& n, bool layernorm);
  void emit_norm_statistics(Env& e, const Node& n, ValueId rows, const Shape& xs, int64_t axis);
  void emit_attention(Env& e, const Node& n);
  void emit_embedding(Env& e, const Node& n);
  void emit_trilu(Env& e, const Node& n);

  const OnnxGraph& graph_;
  const Matcher& matches_;
  bool static_ = false;
};

}  // namespace tec::onnx
