// tensor_parallel: the pass after the frontend. A graph describes the whole model, with its
// linears marked column- or row-parallel (TE's parallel_mode) over tp_size ranks; this pass
// makes it the program each rank runs (ARCHITECTURE.md §14), with the collectives where TE
// puts them:
// - column-parallel with sequence parallel: all_gather of the input (tokens x tp) first;
// - row-parallel: its GEMM makes a partial sum, reduce_scatter (sequence parallel) or
//   all_reduce reduces it, and the bias is added once, after the reduction;
// - train plans, column-parallel without sequence parallel: the input's gradient is a partial
//   sum on every rank, summed by an all_reduce in the backward (reduce_in "backward").
// Graph inputs and outputs keep the model's (global) shapes in the graph's JSON; under
// sequence parallelism each rank's inputs are its slice of the tokens. Every value gets a
// layout (TpLayout), and an op that would compute the wrong thing on its rank's slice (a norm
// over a split feature dim, attention over split tokens) is refused, naming it.
#include <set>

#include "ops/common.h"
#include "passes/passes.h"

namespace tec {

namespace {

// Ops that treat every token on its own: right on any slice of the tokens.
const std::set<std::string> kTokenwise = {"linear", "layernorm", "rmsnorm", "l2norm", "gelu",  "relu",     "silu",
                                          "swiglu", "geglu",     "add",     "bias",   "scale", "dropout",  "identity",
                                          "quantize", "dequantize", "cast", "unary", "binary"};
// Ops that treat every element on its own: right on any slice of the features too. The
// gated ones split their input's features into halves, which the producing column-parallel
// linear's shard keeps together (WeightSource::Shard::groups).
const std::set<std::string> kElementwise = {"gelu", "relu", "silu", "swiglu", "geglu", "scale", "dropout",
                                            "identity", "quantize", "dequantize", "cast", "unary"};

bool is_gated(const std::string& op) { return op == "swiglu" || op == "geglu"; }

class TensorParallelRewrite {
 public:
  TensorParallelRewrite(Graph& g, int64_t ranks, bool sequence_parallel)
      : g_(g), ranks_(ranks), sequence_parallel_(sequence_parallel), readers_(g.consumers()) {
    for (const Node& node : g.nodes) old_ops_.push_back(node.op);
  }

  void run() {
    layout_.assign(g_.values.size(), TpLayout::replicated);
    for (ValueId in : g_.inputs) shard_input(in);
    std::vector<Node> old_nodes = std::move(g_.nodes);
    g_.nodes.clear();
    for (NodeId n = 0; n < static_cast<NodeId>(old_nodes.size()); ++n) {
      Node node = std::move(old_nodes[static_cast<size_t>(n)]);
      const ErrorContext ctx{"tensor_parallel", node.name, node.op, node.source};
      if (node.op == "linear" && node.attrs.get_string("tp_mode", "none") == "column")
        column_parallel(std::move(node), ctx);
      else if (node.op == "linear" && node.attrs.get_string("tp_mode", "none") == "row")
        row_parallel(std::move(node), ctx);
      else
        local_op(std::move(node), ctx);
    }
    for (ValueId in : g_.inputs) g_.tp.layouts[g_.value(in).name] = layout_of(in);
    for (ValueId out : g_.outputs) g_.tp.layouts[g_.value(out).name] = layout_of(out);
  }

 private:
  TpLayout layout_of(ValueId v) const { return layout_.at(static_cast<size_t>(v)); }
  void set_layout(ValueId v, TpLayout l) {
    if (layout_.size() <= static_cast<size_t>(v)) layout_.resize(static_cast<size_t>(v) + 1, TpLayout::replicated);
    layout_[static_cast<size_t>(v)] = l;
  }

  // Under sequence parallelism a rank holds its slice of the tokens of every activation input.
  void shard_input(ValueId id) {
    Value& v = g_.value(id);
    if (!sequence_parallel_ || v.proto.shape.rank() < 2 || v.proto.dtype == DType::int32) return;
    TEC_USER_CHECK(v.proto.shape[0] % ranks_ == 0, (ErrorContext{"tensor_parallel", v.name, "", v.source}))
        << "sequence parallelism splits input '" << v.name << "' over " << ranks_ << " ranks along dim 0, and its "
        << v.proto.shape[0] << " tokens do not divide";
    v.proto.shape.dims[0] /= ranks_;
    set_layout(id, TpLayout::sequence);
  }

  ValueId new_value(const std::string& name, const std::string& source) {
    Value v;
    v.name = name;
    for (int suffix = 2; g_.find_value(v.name); ++suffix) v.name = name + std::to_string(suffix);
    v.source = source;
    return g_.add_value(std::move(v));
  }

  // A collective node over the group: `input` -> a new value named `output_name`, or `output`.
  ValueId add_collective(const std::string& op, const Node& linear, ValueId input, const std::string& output_name,
                         std::optional<ValueId> output = std::nullopt, const std::string& reduce_in = "") {
    Node c;
    c.name = linear.name + "." + op;
    c.op = op;
    c.source = linear.source;
    c.phase = linear.phase;
    c.attrs.values["tp_size"] = ranks_;
    if (!reduce_in.empty()) c.attrs.values["reduce_in"] = reduce_in;
    c.inputs = {input};
    c.outputs = {output ? *output : new_value(output_name, linear.source)};
    const ValueId out = c.outputs[0];
    g_.add_node(std::move(c));
    return out;
  }

  std::string layout_error(ValueId v) const {
    switch (layout_of(v)) {
      case TpLayout::sequence: return "split over the tokens (sequence parallel)";
      case TpLayout::feature: return "split over its features (a column-parallel linear's output)";
      case TpLayout::partial: return "a partial sum";
      case TpLayout::replicated: break;
    }
    return "whole on every rank";
  }

  void column_parallel(Node node, const ErrorContext& ctx) {
    const ValueId x = node.inputs[0];
    if (sequence_parallel_) {
      TEC_USER_CHECK(layout_of(x) == TpLayout::sequence, ctx)
          << "a column-parallel linear with sequence parallelism gathers its input's tokens, and '" << g_.value(x).name << "' is "
          << layout_error(x);
      node.inputs[0] = add_collective("all_gather", node, x, node.name + ".gathered");
    } else {
      TEC_USER_CHECK(layout_of(x) == TpLayout::replicated, ctx)
          << "a column-parallel linear reads its whole input on every rank, and '" << g_.value(x).name << "' is " << layout_error(x)
          << "; a row-parallel linear between them reduces it";
      if (g_.mode == Mode::train) node.inputs[0] = add_collective("all_reduce", node, x, node.name + ".input", std::nullopt, "backward");
    }
    if (std::any_of(readers_[static_cast<size_t>(node.outputs[0])].begin(), readers_[static_cast<size_t>(node.outputs[0])].end(),
                    [&](const auto& r) { return is_gated(old_op(r.first)); }))
      keep_gated_halves_together(node, ctx);
    node.attrs.values["sequence_parallel"] = false;
    for (ValueId out : node.outputs) set_layout(out, TpLayout::feature);
    g_.add_node(std::move(node));
  }

  // A gated activation reads [gate | up] along the features: each rank's shard of the weight
  // (and bias) takes its slice of each half, so that its outputs pair gate with up.
  void keep_gated_halves_together(const Node& node, const ErrorContext& ctx) {
    const int64_t out_features = node.attrs.get_int("out_features", 0);
    TEC_USER_CHECK(out_features % (2 * ranks_) == 0, ctx)
        << "a gated activation reads this column-parallel linear's output as two halves, each split over " << ranks_
        << " ranks: out_features " << out_features << " must divide by " << 2 * ranks_;
    for (size_t slot = 1; slot < node.inputs.size(); ++slot) {
      Value& param = g_.value(node.inputs[slot]);
      if (param.weight && param.weight->shard) param.weight->shard->groups = 2;
    }
  }

  void row_parallel(Node node, const ErrorContext& ctx) {
    const ValueId x = node.inputs[0];
    TEC_USER_CHECK(layout_of(x) == TpLayout::feature, ctx)
        << "a row-parallel linear reads its input split over the features (a column-parallel linear's output), and '"
        << g_.value(x).name << "' is " << layout_error(x);
    const ValueId y = node.outputs[0];
    const bool bias = node.attrs.get_bool("bias", true);
    std::optional<ValueId> bias_value;
    if (bias) {
      bias_value = node.inputs.at(2);
      node.inputs.resize(2);
      node.attrs.values["bias"] = false;
    }
    node.attrs.values["sequence_parallel"] = false;
    node.outputs = {new_value(node.name + ".partial", node.source)};
    const ValueId partial = node.outputs[0];
    const Node linear = node;
    g_.add_node(std::move(node));
    const std::string reduce = sequence_parallel_ ? "reduce_scatter" : "all_reduce";
    const ValueId reduced = add_collective(reduce, linear, partial, linear.name + ".reduced", bias ? std::nullopt : std::optional(y));
    if (bias) {
      Node add_bias;
      add_bias.name = linear.name + ".add_bias";
      add_bias.op = "bias";
      add_bias.source = linear.source;
      add_bias.phase = linear.phase;
      add_bias.attrs.values["features"] = linear.attrs.get_int("out_features", 0);
      add_bias.inputs = {reduced, *bias_value};
      add_bias.outputs = {y};
      g_.add_node(std::move(add_bias));
    }
    set_layout(y, sequence_parallel_ ? TpLayout::sequence : TpLayout::replicated);
  }

  // Any other op runs on its rank's slices as they are, where that is the right math.
  void local_op(Node node, const ErrorContext& ctx) {
    std::optional<ValueId> split;
    for (ValueId in : node.inputs) {
      if (g_.value(in).kind == ValueKind::weight || layout_of(in) == TpLayout::replicated) continue;
      TEC_USER_CHECK(!split || layout_of(*split) == layout_of(in), ctx)
          << "reads '" << g_.value(*split).name << "', " << layout_error(*split) << ", with '" << g_.value(in).name << "', "
          << layout_error(in);
      split = in;
    }
    if (node.op == "linear") {
      node.attrs.values["sequence_parallel"] = false;
      TEC_USER_CHECK(!split || layout_of(*split) == TpLayout::sequence, ctx)
          << "a linear without tp_mode reads its whole features, and '" << g_.value(*split).name << "' is " << layout_error(*split)
          << "; mark it tp_mode \"row\"";
    } else if (split && layout_of(*split) == TpLayout::sequence) {
      TEC_USER_CHECK(kTokenwise.count(node.op), ctx)
          << "op '" << node.op << "' mixes tokens (or is not known not to), and '" << g_.value(*split).name
          << "' is split over the tokens by sequence parallelism; tensor-parallel plans take it on whole tensors only";
    } else if (split) {
      TEC_USER_CHECK(kElementwise.count(node.op), ctx)
          << "op '" << node.op << "' reads '" << g_.value(*split).name << "', " << layout_error(*split)
          << "; between a column- and a row-parallel linear only elementwise ops and gated activations run on the split";
      if (is_gated(node.op)) {
        const NodeId producer = g_.value(*split).producer;
        TEC_USER_CHECK(producer >= 0 && g_.node(producer).op == "linear" && g_.node(producer).outputs[0] == *split, ctx)
            << node.op << " splits '" << g_.value(*split).name
            << "' into gate and up halves, which only a column-parallel linear feeding it directly keeps together";
      }
    }
    const TpLayout out = split ? layout_of(*split) : TpLayout::replicated;
    for (ValueId v : node.outputs) set_layout(v, out);
    g_.add_node(std::move(node));
  }

  // The op of node `n` of the graph as the frontend made it (readers_ indexes those nodes).
  const std::string& old_op(NodeId n) const { return old_ops_.at(static_cast<size_t>(n)); }

  Graph& g_;
  int64_t ranks_;
  bool sequence_parallel_;
  std::vector<std::vector<std::pair<NodeId, int>>> readers_;
  std::vector<std::string> old_ops_;
  std::vector<TpLayout> layout_;
};

}  // namespace

Graph tensor_parallel(Graph graph) {
  // The group: every tensor-parallel linear must agree on its size and on sequence parallelism.
  const Node* first = nullptr;
  for (NodeId n = 0; n < static_cast<NodeId>(graph.nodes.size()); ++n) {
    const Node& node = graph.node(n);
    if (node.op != "linear" || node.attrs.get_string("tp_mode", "none") == "none") continue;
    if (!first) {
      first = &node;
      continue;
    }
    TEC_USER_CHECK(node.attrs.get_int("tp_size", 1) == first->attrs.get_int("tp_size", 1), graph.context(n, "tensor_parallel"))
        << "tp_size " << node.attrs.get_int("tp_size", 1) << " differs from linear '" << first->name << "''s "
        << first->attrs.get_int("tp_size", 1) << "; a plan has one tensor-parallel group";
    TEC_USER_CHECK(node.attrs.get_bool("sequence_parallel", false) == first->attrs.get_bool("sequence_parallel", false),
                   graph.context(n, "tensor_parallel"))
        << "sequence_parallel differs from linear '" << first->name << "''s; a plan is sequence parallel throughout or not at all";
  }
  const int64_t ranks = first ? first->attrs.get_int("tp_size", 1) : 1;
  const bool sequence_parallel = first && first->attrs.get_bool("sequence_parallel", false);
  if (ranks == 1) {
    // One rank: column and row are the whole weight, and there is nothing to gather or scatter.
    for (Node& node : graph.nodes)
      if (node.op == "linear") node.attrs.values["sequence_parallel"] = false;
    return graph;
  }
  graph.tp.size = ranks;
  TensorParallelRewrite(graph, ranks, sequence_parallel).run();
  verify(graph);
  return graph;
}

}  // namespace tec
