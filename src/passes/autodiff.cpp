// autodiff: turns a meta'd train-mode graph into one training step (ARCHITECTURE.md §5, §12):
//   weight workspace: each fp32 master cast (or quantized) into the copy the forward reads;
//   forward: the model, each node also writing the saved tensors that are no alias;
//   backward: per forward node in reverse, one node computing its input gradients from the
//     saved tensors (infer_backward's reads) and the output gradients; partial gradients of a
//     value with several readers summed; a linear's dy quantized once for dgrad and wgrad;
//   the weight gradients added into fp32 main_grad state (TE's wgrad with beta = 1), or
//     written in the model dtype (--wgrad write);
//   optimizer: optionally one adamw node over every parameter.
// State updates are new SSA values stored in their state value's buffers (Value::storage).
#include <algorithm>
#include <map>
#include <set>

#include "ops/common.h"
#include "ops/gradient.h"
#include "passes/passes.h"

namespace tec {

namespace {

struct Parameter {
  ValueId master = -1;
  ValueId workspace = -1;
  std::vector<ValueId> partial_grads;
};

class Autodiff {
 public:
  Autodiff(Graph& g, const TrainOptions& options) : g_(g), options_(options), ops_(builtin_ops()) {}

  void run() {
    TEC_USER_CHECK(options_.optimizer == TrainOptions::Optimizer::none || options_.wgrad == TrainOptions::WeightGrad::accumulate,
                   (ErrorContext{"autodiff", "", "", g_.source_file}))
        << "--optimizer adamw reads the gradients from main_grad; it cannot be combined with --wgrad write";
    g_.train = TrainStep{std::string(to_string(options_.optimizer)), std::string(to_string(options_.wgrad)), {}};
    std::vector<Node> forward = std::move(g_.nodes);
    g_.nodes.clear();
    make_masters();
    for (Node& node : forward) add_forward(std::move(node));
    const auto forward_count = static_cast<NodeId>(g_.nodes.size());
    seed_output_gradients();
    for (NodeId n = forward_count; n-- > 0;)
      if (g_.node(n).phase == Phase::forward) add_backward(n);
    name_input_gradients();
    finish_parameters();
    add_runtime_scalar("first_microbatch", 1.0f);
    add_runtime_scalar("forward_only", 0.0f);
    verify(g_);
  }

 private:
  ValueId add_value(std::string name, ValueKind kind, TensorProto proto, const std::string& source) {
    TEC_USER_CHECK(!g_.find_value(name), (ErrorContext{"autodiff", name, "", source}))
        << "the training step names a value '" << name << "', which the model already uses; rename it in the model";
    Value v;
    v.name = std::move(name);
    v.kind = kind;
    v.proto = std::move(proto);
    v.source = source;
    return g_.add_value(std::move(v));
  }

  // A state value the session keeps across runs, starting at `initial` (or at zero).
  ValueId add_state(std::string name, TensorProto proto, std::optional<float> initial = std::nullopt) {
    const ValueId id = add_value(std::move(name), ValueKind::state, std::move(proto), "train state");
    if (initial) {
      WeightSource src;
      src.kind = WeightSource::Kind::values;
      src.values = std::make_shared<const std::vector<float>>(static_cast<size_t>(g_.value(id).proto.shape.numel()), *initial);
      src.origin = "te-compile's train options";
      g_.value(id).weight = std::move(src);
    }
    return id;
  }

  ValueId add_runtime_scalar(const std::string& name, float initial) {
    const ValueId id = add_state(name, TensorProto::dense(Shape{1}, DType::fp32), initial);
    g_.train->runtime_scalars.push_back(id);
    return id;
  }

  // A new version of state value `base`, stored in its buffers.
  ValueId new_version(ValueId base) {
    const std::string name = g_.value(base).name + "@" + std::to_string(++versions_[base]);
    const ValueId id = add_value(name, ValueKind::activation, g_.value(base).proto, "train state");
    g_.value(id).storage = base;
    return id;
  }

  NodeId add_node(std::string name, std::string op, std::vector<ValueId> inputs, std::vector<ValueId> outputs, Phase phase,
                  const std::string& source, Attributes attrs = {}) {
    Node node;
    node.name = std::move(name);
    node.op = std::move(op);
    node.inputs = std::move(inputs);
    node.outputs = std::move(outputs);
    node.attrs = std::move(attrs);
    node.phase = phase;
    node.source = source;
    node.columnwise_inputs.assign(node.inputs.size(), false);
    return g_.add_node(std::move(node));
  }

  // Every weight becomes an fp32 master (state, initialised from the plan's constants) and a
  // workspace: the copy the forward reads, made at the start of the step.
  void make_masters() {
    for (ValueId id = 0; id < static_cast<ValueId>(g_.values.size()); ++id) {
      if (g_.value(id).kind != ValueKind::weight || !g_.value(id).proto.requires_grad) continue;  // (integer constants)
      Value& w = g_.value(id);
      TensorProto master_proto = TensorProto::dense(w.proto.shape, DType::fp32);
      master_proto.requires_grad = true;
      const std::string name = w.name, source = w.source;
      std::optional<WeightSource> init = std::move(w.weight);
      w.weight.reset();
      if (init) {
        if (init->random_name.empty()) init->random_name = name;
        init->rounded_to = w.proto.dtype;
      }
      w.kind = ValueKind::activation;
      const ValueId master = add_value(name + ".master", ValueKind::state, master_proto, source);
      g_.value(master).weight = std::move(init);
      const Value& workspace = g_.value(id);
      Attributes attrs;
      if (workspace.proto.is_quantized()) attrs.values["role"] = std::string("weight");
      else attrs.values["dtype"] = std::string(to_string(workspace.proto.dtype));
      add_node(name + ".workspace", workspace.proto.is_quantized() ? "quantize" : "cast", {master}, {id}, Phase::weight_workspace,
               source, std::move(attrs));
      params_.push_back({master, id, {}});
    }
  }

  void add_forward(Node node) {
    for (SavedTensor& saved : node.saved) {
      if (saved.aliases_input >= 0) continue;
      saved.value = add_value(node.name + "." + saved.name, ValueKind::activation, saved.proto, node.source);
      node.outputs.push_back(saved.value);
    }
    if (node.op == "dropout") {
      node.attrs.values["training"] = true;
      node.inputs.push_back(dropout_step());
    }
    node.phase = Phase::forward;
    node.columnwise_inputs.assign(node.inputs.size(), false);
    g_.add_node(std::move(node));
  }

  // The counter dropout's masks are drawn under, one per plan, advanced at the end of each step.
  ValueId dropout_step() {
    if (dropout_step_ < 0) dropout_step_ = add_state("dropout.step", TensorProto::dense(Shape{1}, DType::fp32), 0.0f);
    return dropout_step_;
  }

  // A gradient is spread over the ranks as its value is.
  void inherit_tp_layout(const std::string& value, const std::string& gradient) {
    if (const auto it = g_.tp.layouts.find(value); it != g_.tp.layouts.end()) g_.tp.layouts[gradient] = it->second;
  }

  // The caller feeds d<output> for every graph output.
  void seed_output_gradients() {
    for (ValueId out : std::vector<ValueId>(g_.outputs)) {
      const Value& v = g_.value(out);
      if (!v.proto.requires_grad) continue;
      const std::string name = v.name;  // add_value may move every value, v too
      const ValueId dy = add_value("d" + name, ValueKind::input, dense_like(v.proto), v.source);
      g_.inputs.push_back(dy);
      inherit_tp_layout(name, "d" + name);
      grad_of(out) = dy;
    }
  }

  ValueId& grad_of(ValueId v) {
    if (grads_.size() < g_.values.size()) grads_.resize(g_.values.size(), -1);
    return grads_[static_cast<size_t>(v)];
  }

  // Adds `partial` into the gradient of `v`: the first is taken as is, later ones summed.
  void accumulate(ValueId v, ValueId partial, const std::string& source) {
    for (Parameter& p : params_)
      if (p.workspace == v) {
        p.partial_grads.push_back(partial);
        return;
      }
    grad_of(v) = grad_of(v) < 0 ? partial : sum(v, grad_of(v), partial, source);
  }

  // a + b, a new gradient of `v` in a's proto.
  ValueId sum(ValueId v, ValueId a, ValueId b, const std::string& source) {
    const ValueId out = add_value(g_.value(v).name + ".grad_sum" + std::to_string(++sums_[v]), ValueKind::activation,
                                  g_.value(a).proto, source);
    add_node(g_.value(out).name, "add", {a, b}, {out}, Phase::backward, source);
    return out;
  }

  // dy in the recipe's gradient format (E5M2 under HYBRID), rowwise for dgrad and columnwise
  // for wgrad: one quantize node per gradient, however many GEMMs read it.
  ValueId quantized_gradient(ValueId grad) {
    const std::optional<Quantizer> q = g_.recipe.quantizer_for(TensorRole::grad_output);
    if (!q) return grad;
    if (auto it = quantized_.find(grad); it != quantized_.end()) return it->second;
    const Value& dy = g_.value(grad);
    TensorProto proto = dy.proto.with_quantizer(q).update_usage(Usage{true, true});
    const std::string source = dy.source;
    const ValueId out = add_value(dy.name + ".quantized", ValueKind::activation, proto, source);
    g_.value(out).quantizer = q;
    Attributes attrs;
    attrs.values["role"] = std::string("grad_output");
    add_node(g_.value(out).name, "quantize", {grad}, {out}, Phase::backward, source, std::move(attrs));
    with_context(ErrorContext{"autodiff", g_.value(out).name, "quantize", source}, [&] { (void)proto.buffers(g_.target); });
    return quantized_[grad] = out;
  }

  // --recompute: a linear's input made by an activation function is made again in the
  // backward, from the activation's input (which the activation's own backward saves anyway),
  // so that the forward keeps only its rowwise copy. Other inputs are kept.
  ValueId recomputed(ValueId v) {
    static const std::set<std::string> kActivations = {"gelu", "relu", "silu", "swiglu", "geglu"};
    const NodeId producer = g_.value(v).producer;
    if (producer < 0 || !kActivations.count(g_.node(producer).op) || g_.node(producer).phase != Phase::forward) return v;
    for (const auto& [original, copy] : g_.train->recomputed)
      if (original == v) return copy;
    const Node act = g_.node(producer);
    Value& original = g_.value(v);
    TensorProto proto = original.proto;
    if (proto.is_quantized()) {
      proto = proto.update_usage(Usage{false, true});                    // wgrad reads the columnwise copy
      original.proto = original.proto.update_usage(Usage{true, false});  // the forward GEMM the rowwise one
    }
    const std::optional<Quantizer> quantizer = original.quantizer;
    const ValueId copy = add_value(original.name + ".recomputed", ValueKind::activation, proto, act.source);
    g_.value(copy).quantizer = quantizer;
    add_node(act.name + ".recompute", act.op, act.inputs, {copy}, Phase::backward, act.source, act.attrs);
    g_.train->recomputed.emplace_back(v, copy);
    return copy;
  }

  // The label of input slot `slot` in gradient names: "input", "input1", or the param suffix.
  std::string slot_label(const Node& node, const OpDef& def, size_t slot) const {
    const auto params = def.params ? def.params(node.attrs, DType::fp32) : std::vector<ParamSpec>{};
    const size_t activations = node.inputs.size() - params.size();
    if (slot >= activations) return params[slot - activations].suffix;
    return slot == 0 ? "input" : "input" + std::to_string(slot);
  }

  void add_backward(NodeId n) {
    const Node node = g_.node(n);  // a copy: adding nodes may move the vector
    bool any = false, all = true;
    for (ValueId out : node.outputs) {
      const bool is_saved_output = std::any_of(node.saved.begin(), node.saved.end(), [&](const SavedTensor& s) { return s.value == out; });
      if (is_saved_output || !g_.value(out).proto.requires_grad) continue;  // integer outputs carry no gradient
      if (grad_of(out) >= 0) any = true;
      else all = false;
    }
    if (!any) return;
    const ErrorContext ctx = g_.context(n, "autodiff");
    TEC_UNSUPPORTED_CHECK(all, ctx) << "an output of this node gets no gradient; train plans need every output to reach the loss";
    const OpDef& def = ops_.get(node.op);
    if (def.gradient_passes_through) {
      for (ValueId in : node.inputs)
        if (g_.value(in).proto.requires_grad) accumulate(in, grad_of(node.outputs[0]), node.source);
      return;
    }
    if (def.gradient) {
      add_gradient_graph(node, def, ctx);
      return;
    }
    TEC_UNSUPPORTED_CHECK((def.backward_reference != nullptr || def.collective != nullptr) && node.backward.has_value(), ctx)
        << "op '" << node.op << "' has no backward yet; train plans support " << trainable_ops();
    Node bwd;
    bwd.name = node.name + ".backward";
    bwd.op = node.op;
    bwd.attrs = node.attrs;
    bwd.source = node.source;
    bwd.phase = Phase::backward;
    bwd.computes_backward = true;
    for (const auto& read : node.backward->reads) {
      const SavedTensor& saved = node.saved.at(static_cast<size_t>(read.saved_index));
      ValueId value = saved.aliases_input >= 0 ? node.inputs.at(static_cast<size_t>(saved.aliases_input)) : saved.value;
      if (options_.recompute_activations && node.op == "linear" && saved.aliases_input == 0) value = recomputed(value);
      bwd.inputs.push_back(value);
      bwd.columnwise_inputs.push_back(read.usage.columnwise && !read.usage.rowwise && g_.value(value).proto.is_quantized());
    }
    for (const auto& read : node.backward->grad_reads) {
      const ValueId grad = grad_of(node.outputs.at(static_cast<size_t>(read.output)));
      const ValueId input = read.quantized ? quantized_gradient(grad) : grad;
      bwd.inputs.push_back(input);
      bwd.columnwise_inputs.push_back(read.columnwise && g_.value(input).proto.is_quantized());
    }
    std::vector<std::pair<ValueId, ValueId>> partials;  // (input value, its partial gradient)
    for (size_t slot = 0; slot < node.inputs.size(); ++slot) {
      const ValueId in = node.inputs[slot];
      if (!g_.value(in).proto.requires_grad) continue;
      TensorProto proto = dense_like(g_.value(in).proto);
      const bool parameter = is_workspace(in);
      // A weight's gradient goes into fp32 main_grad (the wgrad GEMM's output, beta = 1), or
      // is written in the model dtype (--wgrad write).
      if (parameter && options_.wgrad == TrainOptions::WeightGrad::accumulate) proto = TensorProto::dense(proto.shape, DType::fp32);
      const ValueId partial = add_value(node.name + ".d" + slot_label(node, def, slot), ValueKind::activation, proto, node.source);
      bwd.outputs.push_back(partial);
      bwd.gradient_slots.push_back(static_cast<int>(slot));
      partials.emplace_back(in, partial);
    }
    if (bwd.outputs.empty()) return;
    g_.add_node(std::move(bwd));
    for (const auto& [in, partial] : partials) accumulate(in, partial, node.source);
  }

  // An op whose backward is a graph of other ops (OpDef::gradient): its nodes, named
  // "<node>.<label>", then each input's gradient in the input's dtype (fp32 for a weight's
  // main_grad).
  class Builder final : public GradientBuilder {
   public:
    Builder(Autodiff& autodiff, const Node& node, ValueId dy) : a_(autodiff), node_(node), dy_(dy) {}
    const Attributes& attrs() const override { return node_.attrs; }
    size_t input_count() const override { return node_.inputs.size(); }
    ValueId input(size_t slot) const override { return node_.inputs.at(slot); }
    ValueId output() const override { return node_.outputs.at(0); }
    ValueId grad_output() const override { return dy_; }
    TensorProto proto(ValueId v) const override { return a_.g_.value(v).proto; }
    ValueId emit(const std::string& op, std::vector<ValueId> inputs, Attributes attrs, const std::string& label) override {
      Graph& g = a_.g_;
      std::string name = node_.name + "." + label;
      for (int k = 2; g.find_value(name); ++k) name = node_.name + "." + label + "_" + std::to_string(k);
      const OpDef& def = a_.ops_.get(op);
      const ErrorContext ctx{"autodiff", name, op, node_.source};
      check_and_default_attributes(def, attrs, ctx);
      Node n;
      n.name = name;
      n.op = op;
      n.attrs = attrs;
      n.inputs = inputs;
      std::vector<TensorProto> protos;
      for (ValueId in : inputs) protos.push_back(g.value(in).proto);
      InferResult r = with_context(ctx, [&] { return def.infer(InferContext{g, n, ctx, protos}); });
      TEC_INTERNAL_CHECK(r.outputs.size() == 1 && r.saved.empty() && r.workspaces.empty(), ctx)
          << "a gradient's op '" << op << "' must have one output and no workspace";
      TensorProto out = std::move(r.outputs[0]);
      out.requires_grad = false;
      const ValueId id = a_.add_value(name, ValueKind::activation, std::move(out), node_.source);
      a_.add_node(name, op, std::move(inputs), {id}, Phase::backward, node_.source, std::move(attrs));
      return id;
    }

   private:
    Autodiff& a_;
    const Node& node_;
    ValueId dy_;
  };

  void add_gradient_graph(const Node& node, const OpDef& def, const ErrorContext& ctx) {
    TEC_INTERNAL_CHECK(node.outputs.size() == 1, ctx) << "op '" << node.op << "' builds its gradient for one output";
    Builder builder(*this, node, grad_of(node.outputs[0]));
    const std::vector<ValueId> grads = with_context(ctx, [&] { return def.gradient(builder); });
    TEC_INTERNAL_CHECK(grads.size() == node.inputs.size(), ctx) << "op '" << node.op << "' gave " << grads.size() << " gradients";
    for (size_t slot = 0; slot < node.inputs.size(); ++slot) {
      const ValueId in = node.inputs[slot];
      if (!g_.value(in).proto.requires_grad) continue;
      TEC_UNSUPPORTED_CHECK(grads[slot] >= 0, ctx) << "op '" << node.op << "' gives no gradient for its input " << slot << " ('"
                                                   << g_.value(in).name << "'), which needs one";
      const TensorProto want = g_.value(in).proto;  // (a copy: the gradient adds values)
      TEC_INTERNAL_CHECK(g_.value(grads[slot]).proto.shape == want.shape, ctx)
          << "the gradient of input " << slot << " is " << g_.value(grads[slot]).proto.shape.str() << ", the input " << want.shape.str();
      const bool main_grad = is_workspace(in) && options_.wgrad == TrainOptions::WeightGrad::accumulate;
      ValueId grad = cast_to(builder, grads[slot], main_grad ? DType::fp32 : want.dtype, "d" + slot_label(node, def, slot) + "_cast");
      // A gradient that is another value itself (add's dy, a view of it) is summed, never renamed.
      if (grad == grad_of(node.outputs[0]) || g_.value(grad).kind != ValueKind::activation) grad = identity_of(builder, grad);
      accumulate(in, grad, node.source);
    }
  }

  ValueId identity_of(GradientBuilder& builder, ValueId v) { return builder.emit("identity", {v}, {}, "dcopy"); }

  bool is_workspace(ValueId v) const {
    return std::any_of(params_.begin(), params_.end(), [v](const Parameter& p) { return p.workspace == v; });
  }

  std::string trainable_ops() const {
    std::string names;
    for (const OpDef* def : ops_.all())
      if (def->backward_reference || def->gradient || def->gradient_passes_through) names += (names.empty() ? "" : ", ") + def->name;
    return names;
  }

  // dx for every graph input that needs one, as an output named d<input>.
  void name_input_gradients() {
    for (ValueId in : std::vector<ValueId>(g_.inputs)) {
      const Value& x = g_.value(in);
      if (x.kind != ValueKind::input || !x.proto.requires_grad || grad_of(in) < 0) continue;
      const std::string input_name = x.name, name = "d" + x.name, source = x.source;  // x moves with add_value
      ValueId grad = grad_of(in);
      if (g_.value(grad).kind == ValueKind::input || g_.is_output(grad)) {  // the gradient passed straight through
        const ValueId copy = add_value(name, ValueKind::activation, g_.value(grad).proto, source);
        add_node(name, "identity", {grad}, {copy}, Phase::backward, source);
        grad = copy;
      } else {
        TEC_USER_CHECK(!g_.find_value(name), (ErrorContext{"autodiff", name, "", source}))
            << "the training step names the gradient of input '" << input_name << "' '" << name
            << "', which the model already uses; rename it in the model";
        g_.value(grad).name = name;
      }
      g_.outputs.push_back(grad);
      inherit_tp_layout(input_name, name);
    }
  }

  void finish_parameters() {
    std::vector<ValueId> adamw_inputs, adamw_outputs;
    const bool adamw = options_.optimizer == TrainOptions::Optimizer::adamw;
    if (adamw) {
      const ValueId step = add_runtime_scalar("optimizer.step", 0.0f);
      adamw_inputs = {step,
                      add_runtime_scalar("optimizer.lr", options_.lr),
                      add_runtime_scalar("optimizer.beta1", options_.beta1),
                      add_runtime_scalar("optimizer.beta2", options_.beta2),
                      add_runtime_scalar("optimizer.eps", options_.eps),
                      add_runtime_scalar("optimizer.weight_decay", options_.weight_decay)};
      adamw_outputs.push_back(new_version(step));
    }
    for (Parameter& p : params_) {
      if (p.partial_grads.empty()) continue;
      const std::string name = g_.value(p.workspace).name, source = g_.value(p.workspace).source;
      if (options_.wgrad == TrainOptions::WeightGrad::write) {
        ValueId grad = p.partial_grads[0];
        for (size_t i = 1; i < p.partial_grads.size(); ++i) grad = sum(p.workspace, grad, p.partial_grads[i], source);
        g_.value(grad).name = name + ".grad";
        g_.outputs.push_back(grad);
        continue;
      }
      const ValueId main_grad = add_state(name + ".main_grad", TensorProto::dense(g_.value(p.workspace).proto.shape, DType::fp32));
      ValueId current = main_grad;
      for (ValueId partial : p.partial_grads) {
        const ValueId next = new_version(main_grad);
        add_node(g_.value(next).name, "add", {current, partial}, {next}, Phase::backward, source);
        current = next;
      }
      if (!adamw) continue;
      const TensorProto fp32 = TensorProto::dense(g_.value(p.master).proto.shape, DType::fp32);
      const ValueId m = add_state(name + ".exp_avg", fp32), v = add_state(name + ".exp_avg_sq", fp32);
      adamw_inputs.insert(adamw_inputs.end(), {p.master, current, m, v});
      adamw_outputs.insert(adamw_outputs.end(), {new_version(p.master), new_version(m), new_version(v), new_version(main_grad)});
    }
    if (adamw && adamw_inputs.size() > 6) add_node("adamw", "adamw", adamw_inputs, adamw_outputs, Phase::optimizer, "--optimizer adamw");
    if (dropout_step_ >= 0)
      add_node("dropout.step.increment", "increment", {dropout_step_}, {new_version(dropout_step_)}, Phase::optimizer, "dropout");
  }

  Graph& g_;
  const TrainOptions& options_;
  const OpRegistry& ops_;
  std::vector<Parameter> params_;
  std::vector<ValueId> grads_;
  std::map<ValueId, ValueId> quantized_;
  std::map<ValueId, int> versions_, sums_;
  ValueId dropout_step_ = -1;
};

}  // namespace

std::string_view to_string(TrainOptions::Optimizer o) { return o == TrainOptions::Optimizer::adamw ? "adamw" : "none"; }
std::string_view to_string(TrainOptions::WeightGrad w) { return w == TrainOptions::WeightGrad::write ? "write" : "accumulate"; }

Graph autodiff(Graph graph, const TrainOptions& options) {
  if (graph.mode != Mode::train) return graph;
  Autodiff(graph, options).run();
  return graph;
}

}  // namespace tec
