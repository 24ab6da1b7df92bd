#include "reference/executor.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <set>
#include <utility>
#include <variant>

#include "core/host_memory.h"
#include "core/random.h"
#include "ir/runtime_scalars.h"
#include "ops/common.h"
#include "reference/quantize.h"

namespace tec::reference {

namespace {

ErrorContext step_context(const plan::Step& step, const plan::Op& op) {
  return ErrorContext{"reference", op.node, op.op, "step '" + step.name + "'"};
}

const plan::Tensor& tensor_named(const plan::Profile& p, const std::string& name) {
  auto it = p.tensors.find(name);
  TEC_USER_CHECK(it != p.tensors.end(), (ErrorContext{"reference", name, "", ""})) << "the plan has no tensor '" << name << "'";
  return it->second;
}

// The op's fake forward over the plan's tensors (mode as the plan's), after checking its
// attributes and its parameters' shapes. `node` gets the attributes with defaults filled in.
InferResult infer_op(const plan::Plan& plan, const plan::Profile& profile, const plan::Op& op, const ErrorContext& ctx,
                     const OpDef& def, Node& node) {
  node.name = op.node;
  node.op = op.op;
  node.attrs = op.attrs;
  node.source = ctx.location;
  check_and_default_attributes(def, node.attrs, ctx);
  Graph g;
  if (auto kind = parse_recipe_kind(plan.recipe)) g.recipe = Recipe::defaults(*kind);
  g.target = plan.target;
  g.mode = plan.mode == "train" ? Mode::train : Mode::infer;
  for (const auto& name : op.inputs) {
    Value v;
    v.name = name;
    v.kind = profile.tensors.at(name).kind == "weight" ? ValueKind::weight : ValueKind::input;
    v.proto = profile.tensors.at(name).proto;
    node.inputs.push_back(g.add_value(std::move(v)));
  }
  TEC_USER_CHECK(static_cast<int>(op.inputs.size()) >= def.min_inputs, ctx) << "the op needs at least " << def.min_inputs << " inputs";
  const size_t param_count = def.params ? def.params(node.attrs, g.value(node.inputs.at(0)).proto.dtype).size() : 0;
  const auto activations = static_cast<int64_t>(op.inputs.size()) - static_cast<int64_t>(param_count);
  TEC_USER_CHECK(activations >= def.min_inputs && activations <= def.max_inputs, ctx)
      << "the op takes " << def.min_inputs << " to " << def.max_inputs << " inputs and " << param_count << " parameters, the plan gives "
      << op.inputs.size() << " tensors";
  if (def.params) {
    const auto params = def.params(node.attrs, g.value(node.inputs.at(0)).proto.dtype);
    for (size_t i = 0; i < params.size(); ++i) {
      const auto& given = g.value(node.inputs[op.inputs.size() - params.size() + i]).proto.shape;
      TEC_USER_CHECK(given == params[i].shape, ctx)
          << "parameter " << params[i].suffix << " has shape " << given.str() << ", the attributes need " << params[i].shape.str();
    }
  }
  std::vector<TensorProto> protos;
  for (ValueId id : node.inputs) protos.push_back(g.value(id).proto);
  const InferContext infer_ctx{g, node, ctx, protos};
  InferResult result = with_context(ctx, [&] { return def.infer(infer_ctx); });
  if (g.mode == Mode::train) {
    BackwardContext bctx{g, node, ctx, protos, result.saved, {}};
    for (const auto& out : result.outputs) bctx.grad_outputs.push_back(TensorProto::dense(out.shape, out.dtype));
    if (def.infer_backward) {
      BackwardResult b = with_context(ctx, [&] { return def.infer_backward(bctx); });
      if (b.grad_reads.empty())
        for (size_t o = 0; o < result.outputs.size(); ++o) b.grad_reads.push_back({static_cast<int>(o), false, false});
      node.backward = BackwardInfo{std::move(b.reads), std::move(b.grad_reads)};
    }
  }
  return result;
}

void require_shape(const plan::Profile& profile, const std::string& tensor, const Shape& expected, const ErrorContext& ctx,
                   const char* what) {
  const Shape& planned = profile.tensors.at(tensor).proto.shape;
  TEC_USER_CHECK(planned == expected, ctx) << what << " '" << tensor << "' is planned as " << planned.str() << ", the op needs "
                                           << expected.str();
}

// Re-checks one op of an untrusted plan with the op's own definition: its attributes, its
// parameters' shapes, and the shapes its fake forward (or, for a backward op, its forward's
// fake backward) gives. Then the CPU reference can index its inputs without reading out of
// bounds. Returns the op's attributes with defaults filled in, for every run to use.
Attributes check_op(const plan::Plan& plan, const plan::Profile& profile, const plan::Step& step, const plan::Op& op) {
  const ErrorContext ctx = step_context(step, op);
  const OpDef* def = builtin_ops().find(op.op);
  TEC_USER_CHECK(def != nullptr, ctx) << "the plan uses op '" << op.op << "', unknown to this tec";
  if (!op.backward) {
    Node node;
    const InferResult result = infer_op(plan, profile, op, ctx, *def, node);
    std::vector<Shape> shapes;
    for (const auto& out : result.outputs) shapes.push_back(out.shape);
    if (plan.mode == "train")
      for (const auto& saved : result.saved)
        if (saved.aliases_input < 0) shapes.push_back(saved.proto.shape);
    TEC_USER_CHECK(shapes.size() == op.outputs.size(), ctx) << "the op makes " << shapes.size() << " outputs, the plan lists "
                                                            << op.outputs.size();
    for (size_t i = 0; i < op.outputs.size(); ++i) require_shape(profile, op.outputs[i], shapes[i], ctx, "output");
    return node.attrs;
  }
  // A backward op: check it against its forward op, "<node>.backward" of "<node>".
  TEC_USER_CHECK(def->backward_reference != nullptr || def->collective != nullptr, ctx) << "op '" << op.op << "' has no backward";
  const std::string suffix = ".backward";
  const plan::Op* forward = nullptr;
  if (op.node.size() > suffix.size() && op.node.ends_with(suffix))
    for (const plan::Step& s : profile.steps)
      for (const plan::Op& o : s.ops)
        if (!o.backward && o.op == op.op && o.node == op.node.substr(0, op.node.size() - suffix.size())) forward = &o;
  TEC_USER_CHECK(forward != nullptr, ctx) << "backward op '" << op.node << "' has no forward op '"
                                          << op.node.substr(0, op.node.size() - std::min(op.node.size(), suffix.size())) << "' of op "
                                          << op.op;
  TEC_USER_CHECK(forward->attrs.values == op.attrs.values, ctx) << "the backward's attributes differ from its forward's";
  Node node;
  const InferResult result = infer_op(plan, profile, *forward, ctx, *def, node);
  TEC_USER_CHECK(node.backward.has_value(), ctx) << "op '" << op.op << "' has no backward";
  const auto& reads = node.backward->reads;
  const auto& grad_reads = node.backward->grad_reads;
  TEC_USER_CHECK(op.inputs.size() == reads.size() + grad_reads.size(), ctx)
      << "the backward reads " << reads.size() << " saved tensors and " << grad_reads.size() << " gradients, the plan lists "
      << op.inputs.size() << " inputs";
  for (size_t i = 0; i < reads.size(); ++i)
    require_shape(profile, op.inputs[i], result.saved.at(static_cast<size_t>(reads[i].saved_index)).proto.shape, ctx, "saved tensor");
  for (size_t i = 0; i < grad_reads.size(); ++i)
    require_shape(profile, op.inputs[reads.size() + i], result.outputs.at(static_cast<size_t>(grad_reads[i].output)).shape, ctx,
                  "gradient");
  for (size_t i = 0; i < op.outputs.size(); ++i) {
    const int slot = op.gradient_slots[i];
    TEC_USER_CHECK(slot < static_cast<int>(forward->inputs.size()), ctx) << "gradient slot " << slot << " is no input of the forward op";
    require_shape(profile, op.outputs[i], profile.tensors.at(forward->inputs[static_cast<size_t>(slot)]).proto.shape, ctx, "gradient");
  }
  return node.attrs;
}

// A collective op sits alone in a collective step, over the plan's ranks; no other step
// holds one.
void check_collective(const plan::Plan& plan, const plan::Step& step, const plan::Op& op) {
  const ErrorContext ctx = step_context(step, op);
  const OpDef* def = builtin_ops().find(op.op);
  const bool collective = def != nullptr && def->collective != nullptr;
  TEC_USER_CHECK(collective == (step.kind == "collective"), ctx)
      << (collective ? "collective op '" + op.op + "' in a " + step.kind + " step" : "op '" + op.op + "' in a collective step");
  if (!collective) return;
  const auto tp_size = op.attrs.values.find("tp_size");
  TEC_USER_CHECK(tp_size != op.attrs.values.end() && std::holds_alternative<int64_t>(tp_size->second) &&
                     std::get<int64_t>(tp_size->second) == plan.tp_size,
                 ctx)
      << "the op's tp_size is not the plan's " << plan.tp_size;
  TEC_USER_CHECK(op.inputs.size() == 1 && op.outputs.size() == 1, ctx) << "a collective reads one tensor and writes one";
}

// The arena, after checking that the machine holds it (and the other ranks' of a
// tensor-parallel plan, which RankGroup keeps alongside).
std::vector<uint8_t> host_arena(const plan::Plan& plan) {
  require_host_memory(static_cast<uint64_t>(checked_mul(plan.arena_bytes, plan.tp_size)),
                      "the CPU reference's arena" + std::string(plan.tp_size > 1 ? " (every rank's)" : ""),
                      ErrorContext{"reference", "", "", plan.name});
  return std::vector<uint8_t>(static_cast<size_t>(plan.arena_bytes), 0);
}

}  // namespace

Session::Session(const plan::Plan& plan, const plan::Profile& profile, int64_t rank)
    : plan_(plan),
      profile_(profile),
      constants_(rank >= 0 && rank < plan.tp_size ? plan.constants_of(rank) : plan.constants),
      arena_(host_arena(plan)) {
  TEC_USER_CHECK(rank >= 0 && rank < plan.tp_size, (ErrorContext{"reference", "", "", plan.name}))
      << "rank " << rank << " of a plan of " << plan.tp_size << " ranks";
  for (const plan::Step& step : profile_.steps) {
    attrs_.emplace_back();
    for (const plan::Op& op : step.ops) {
      check_collective(plan_, step, op);  // first: a wrong group size would show as a wrong shape
      attrs_.back().push_back(check_op(plan_, profile_, step, op));
    }
  }
  for (const auto& [name, t] : profile_.tensors) {
    if (auto scale = t.state.find("scale"); scale != t.state.end()) {
      // Every scale starts at 1: one, or a grouped tensor's one per member.
      const auto bytes = bytes_of(profile_.buffers[static_cast<size_t>(scale->second)]);
      const std::vector<float> ones(bytes.size() / 4, 1.0f);
      std::memcpy(bytes.data(), ones.data(), bytes.size());
    }
    // Train plans: masters and hyperparameters start from the plan's constants.
    if (auto init = t.state.find("init"); init != t.state.end()) {
      const auto from = std::as_const(*this).bytes_of(profile_.buffers[static_cast<size_t>(init->second)]);
      const auto to = bytes_of(profile_.buffers[static_cast<size_t>(t.buffers.at(BufferRole::data))]);
      std::copy(from.begin(), from.end(), to.begin());
    }
  }
}

std::span<uint8_t> Session::bytes_of(const plan::Buffer& b) {
  TEC_INTERNAL_CHECK(b.region != "constants", {}) << "constants are read-only";
  return std::span<uint8_t>(arena_).subspan(static_cast<size_t>(b.offset), static_cast<size_t>(b.bytes));
}

std::span<const uint8_t> Session::bytes_of(const plan::Buffer& b) const {
  const std::vector<uint8_t>& region = b.region == "constants" ? constants_ : arena_;
  return std::span<const uint8_t>(region).subspan(static_cast<size_t>(b.offset), static_cast<size_t>(b.bytes));
}

namespace {
void require_input(const plan::Profile& profile, const std::string& name) {
  if (std::find(profile.inputs.begin(), profile.inputs.end(), name) != profile.inputs.end()) return;
  std::string inputs;
  for (const auto& input : profile.inputs) inputs += (inputs.empty() ? "" : ", ") + input;
  TEC_USER_ERROR((ErrorContext{"reference", name, "", ""})) << "'" << name << "' is not an input of the plan; its inputs are: " << inputs;
}

void require_input_shape(const std::string& name, const Shape& expected, const HostTensor& values) {
  TEC_USER_CHECK(values.shape == expected && static_cast<int64_t>(values.values.size()) == expected.numel(),
                 (ErrorContext{"reference", name, "", ""}))
      << "input '" << name << "' has shape " << expected.str() << ", got " << values.shape.str();
}
}  // namespace

void Session::set_input(const std::string& name, const HostTensor& values) {
  require_input(profile_, name);
  const plan::Tensor& t = tensor_named(profile_, name);
  require_input_shape(name, t.proto.shape, values);
  std::vector<float> rounded = values.values;
  round_to(t.proto.dtype, rounded);
  store(t, std::move(rounded));
}

std::vector<const plan::Op*> integer_input_readers(const plan::Profile& profile, const std::string& input) {
  std::vector<const plan::Op*> readers;
  std::set<std::string> reads{input};  // the input and its reshapes (views of the same values)
  for (const plan::Step& step : profile.steps)
    for (const plan::Op& op : step.ops) {
      if (op.backward || op.inputs.empty() || !reads.count(op.inputs[0])) continue;
      const OpDef* def = builtin_ops().find(op.op);
      if (!def) continue;
      if (def->view) reads.insert(op.outputs.begin(), op.outputs.end());
      if (def->index_input) readers.push_back(&op);
    }
  return readers;
}

HostTensor random_input(uint64_t seed, const std::string& name, const Shape& shape, DType dtype, const plan::Profile* profile) {
  std::vector<float> values = random_weight(seed, name, shape.numel(), 0.0f, 1.0f);
  if (dtype != DType::int32) return HostTensor{shape, std::move(values)};
  // An int32 input gets values valid for what reads it (OpDef::index_input: token ids over the
  // whole table, a padding mask of whole sequences; the least of them when several read it);
  // else 0 or 1 (routing given from outside: expert indices valid for any layer of two or more
  // experts; m_splits need real values: te-run --input).
  const auto readers = profile ? integer_input_readers(*profile, name) : std::vector<const plan::Op*>{};
  for (float& v : values) {
    const double uniform = 0.5 * (1.0 + std::erf(static_cast<double>(v) / std::sqrt(2.0)));  // N(0, 1) -> U(0, 1)
    float drawn = v > 0.0f ? 1.0f : 0.0f;
    for (size_t r = 0; r < readers.size(); ++r) {
      const float value = builtin_ops().get(readers[r]->op).index_input->draw(readers[r]->attrs, uniform);
      drawn = r == 0 ? value : std::min(drawn, value);
    }
    v = drawn;
  }
  return HostTensor{shape, std::move(values)};
}

void Session::randomize_inputs(uint64_t seed) {
  for (const std::string& name : profile_.inputs) {
    const plan::Tensor& t = tensor_named(profile_, name);
    set_input(name, random_input(seed, name, t.proto.shape, t.proto.dtype, &profile_));
  }
}

HostTensor Session::read(const std::string& name) const { return read(name, false); }

HostTensor Session::read(const std::string& name, bool columnwise) const {
  const plan::Tensor& t = tensor_named(profile_, name);
  TEC_USER_CHECK(!t.buffers.empty(), (ErrorContext{"reference", name, "", ""}))
      << "tensor '" << name << "' lives inside one step and has no storage to read";
  if (!t.proto.quantizer)
    return HostTensor{t.proto.shape, decode_values(t.proto.dtype, bytes_of(profile_.buffers[static_cast<size_t>(t.buffers.at(BufferRole::data))]))};
  BufferMap map;
  for (const auto& [role, index] : t.buffers) {
    auto bytes = bytes_of(profile_.buffers[static_cast<size_t>(index)]);
    map[role] = std::span<uint8_t>(const_cast<uint8_t*>(bytes.data()), bytes.size());  // dequantize only reads
  }
  return HostTensor{t.proto.shape, dequantize(t.proto, map, columnwise || !t.proto.usage.rowwise, plan_.target)};
}

void Session::store(const plan::Tensor& t, std::vector<float> values) {
  if (!t.proto.quantizer) {
    encode_values_into(t.proto.dtype, values, bytes_of(profile_.buffers[static_cast<size_t>(t.buffers.at(BufferRole::data))]));
    return;
  }
  BufferMap map;
  for (const auto& [role, index] : t.buffers) map[role] = bytes_of(profile_.buffers[static_cast<size_t>(index)]);
  QuantizeState state;
  // The scales and the history's row 0 (the staging slots), one per member of a grouped
  // tensor, copied: arena bytes are never aliased as float.
  const int64_t members = t.proto.is_grouped() ? t.proto.group_members : 1;
  std::vector<float> scales(static_cast<size_t>(members)), staged(static_cast<size_t>(members));
  std::span<uint8_t> history;
  if (t.proto.quantizer->kind == QuantizerKind::fp8_delayed) {
    std::memcpy(scales.data(), bytes_of(profile_.buffers[static_cast<size_t>(t.state.at("scale"))]).data(), scales.size() * 4);
    history = bytes_of(profile_.buffers[static_cast<size_t>(t.state.at("amax_history"))]);
    std::memcpy(staged.data(), history.data(), staged.size() * 4);
    if (t.proto.is_grouped()) {
      state.member_delayed_scales = scales;
      state.member_delayed_amax = staged;
    } else {
      state.delayed_scale = scales[0];
      state.delayed_amax = &staged[0];
    }
  }
  quantize(t.proto, values, map, plan_.target, state);
  if (!history.empty()) std::memcpy(history.data(), staged.data(), staged.size() * 4);
}

float Session::scalar(const std::string& name) const {
  const plan::Tensor& t = tensor_named(profile_, name);
  float value;
  std::memcpy(&value, bytes_of(profile_.buffers[static_cast<size_t>(t.buffers.at(BufferRole::data))]).data(), 4);
  return value;
}

void Session::set_scalar(const std::string& name, float value) {
  const plan::Tensor& t = tensor_named(profile_, name);
  const ErrorContext ctx{"reference", name, "", "runtime scalar"};
  TEC_USAGE_CHECK(std::find(profile_.runtime_scalars.begin(), profile_.runtime_scalars.end(), name) != profile_.runtime_scalars.end(), ctx)
      << "'" << name << "' is no runtime scalar of the plan";
  if (const auto error = runtime_scalar_error(name, value)) throw Error(ErrorKind::usage, ctx, *error);
  std::memcpy(bytes_of(profile_.buffers[static_cast<size_t>(t.buffers.at(BufferRole::data))]).data(), &value, 4);
}

std::vector<size_t> Session::begin_run() {
  for (const std::string& name : profile_.runtime_scalars)
    if (const auto error = runtime_scalar_error(name, scalar(name)))
      throw Error(ErrorKind::usage, ErrorContext{"reference", name, "", "runtime scalar"}, *error + "; set a valid value before running");
  // A microbatch after the first reuses the weights' copies made from the masters (TE's
  // is_first_microbatch = False): they live in the workspace region, which runs keep.
  const bool remake_weights = workspace_stale_ || !profile_.tensors.count("first_microbatch") || scalar("first_microbatch") != 0.0f;
  // forward_only: the weights' copies and the forward, e.g. to compute a loss whose gradient
  // the next (full) run takes as dy; no gradient, state update or scaling update.
  forward_only_ = profile_.tensors.count("forward_only") && scalar("forward_only") != 0.0f;
  workspace_stale_ = false;
  for (const plan::Buffer& b : profile_.buffers)
    if (b.region == "scratch" || b.region == "output") {
      auto bytes = bytes_of(b);
      std::fill(bytes.begin(), bytes.end(), uint8_t{0xFF});
    }
  std::vector<size_t> steps;
  for (size_t s = 0; s < profile_.steps.size(); ++s) {
    const Phase phase = profile_.steps[s].phase;
    if (phase == Phase::weight_workspace && !remake_weights) continue;
    if (forward_only_ && phase != Phase::weight_workspace && phase != Phase::forward) continue;
    steps.push_back(s);
  }
  return steps;
}

void Session::end_run() {
  if (!forward_only_) update_delayed_scaling();
}

void Session::run() {
  for (size_t s : begin_run()) run_step(s);
  end_run();
}

void Session::set_arena(std::span<const uint8_t> bytes) {
  TEC_USER_CHECK(bytes.size() == arena_.size(), (ErrorContext{"reference", "", "", ""}))
      << "arena of " << bytes.size() << " bytes, the plan's has " << arena_.size();
  std::copy(bytes.begin(), bytes.end(), arena_.begin());
}

HostTensor Session::collective_input(size_t s) const {
  const plan::Op& op = profile_.steps.at(s).ops.at(0);
  return read(op.inputs.at(0), !op.columnwise_inputs.empty() && op.columnwise_inputs[0]);
}

void Session::store_collective_output(size_t s, HostTensor value) {
  const plan::Step& step = profile_.steps.at(s);
  const plan::Tensor& t = tensor_named(profile_, step.ops.at(0).outputs.at(0));
  TEC_USER_CHECK(value.shape == t.proto.shape, step_context(step, step.ops[0]))
      << "output '" << t.name << "' has shape " << value.shape.str() << ", the plan says " << t.proto.shape.str();
  TEC_USER_CHECK(!t.buffers.empty(), step_context(step, step.ops[0])) << "a collective's output '" << t.name << "' needs storage";
  store(t, std::move(value.values));
}

void Session::run_step(size_t s) {
  const plan::Step& step = profile_.steps.at(s);
  TEC_USER_CHECK(step.kind != "collective", (ErrorContext{"reference", step.name, "", "step '" + step.name + "'"}))
      << "step '" << step.name << "' is a collective over " << plan_.tp_size
      << " ranks: run the plan's ranks together (reference::RankGroup; te-run --backend cpu does)";
  std::map<std::string, HostTensor> in_registers;  // values that live inside this step
  for (size_t o = 0; o < step.ops.size(); ++o) {
    const plan::Op& op = step.ops[o];
    const ErrorContext ctx = step_context(step, op);
    const OpDef& def = builtin_ops().get(op.op);
    const Attributes& attrs = attrs_[s][o];  // checked and defaulted once, in the constructor
    std::vector<HostTensor> inputs;
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      const std::string& name = op.inputs[i];
      auto reg = in_registers.find(name);
      if (reg != in_registers.end()) {
        inputs.push_back(reg->second);
        continue;
      }
      TEC_USER_CHECK(!tensor_named(profile_, name).buffers.empty(), ctx)
          << "reads '" << name << "', which has no storage and is not made earlier in this step";
      inputs.push_back(read(name, op.columnwise_inputs.size() > i && op.columnwise_inputs[i]));
    }
    std::vector<HostTensor> outputs;
    if (op.backward) {
      // The gradient of every forward input slot; the plan keeps those it names.
      std::vector<HostTensor> grads = with_context(ctx, [&] { return def.backward_reference(attrs, inputs); });
      for (int slot : op.gradient_slots) {
        TEC_USER_CHECK(slot < static_cast<int>(grads.size()) && !grads[static_cast<size_t>(slot)].values.empty(), ctx)
            << "the op has no gradient for input slot " << slot;
        outputs.push_back(std::move(grads[static_cast<size_t>(slot)]));
      }
    } else {
      outputs = with_context(ctx, [&] { return def.reference(attrs, inputs); });
      // Inference plans drop the saved tensors a forward reference makes after its outputs.
      TEC_USER_CHECK(outputs.size() >= op.outputs.size(), ctx)
          << "the op makes " << outputs.size() << " outputs, the plan lists " << op.outputs.size();
      outputs.resize(op.outputs.size());
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      const plan::Tensor& t = tensor_named(profile_, op.outputs[i]);
      TEC_USER_CHECK(static_cast<int64_t>(outputs[i].values.size()) == t.proto.shape.numel(), ctx)
          << "output '" << t.name << "' has " << outputs[i].values.size() << " values, the plan says shape "
          << t.proto.shape.str();
      outputs[i].shape = t.proto.shape;
      if (t.buffers.empty())
        in_registers[t.name] = std::move(outputs[i]);
      else
        store(t, std::move(outputs[i].values));
    }
  }
}

// LAYOUTS.md §1.5: after the run, every delayed-scaling tensor rolls its history and takes
// a new scale (one fused kernel on the GPU).
void Session::update_delayed_scaling() {
  for (const std::string& name : profile_.delayed) {
    const plan::Tensor& t = tensor_named(profile_, name);
    const Quantizer& q = *t.proto.quantizer;
    auto history_bytes = bytes_of(profile_.buffers[static_cast<size_t>(t.state.at("amax_history"))]);
    auto scale_bytes = bytes_of(profile_.buffers[static_cast<size_t>(t.state.at("scale"))]);
    // [len] for one tensor, [len, members] for a grouped one: each member's column on its own.
    const size_t members = scale_bytes.size() / 4, len = history_bytes.size() / 4 / members;
    std::vector<float> history(history_bytes.size() / 4), scales(members), column(len);
    std::memcpy(history.data(), history_bytes.data(), history_bytes.size());
    std::memcpy(scales.data(), scale_bytes.data(), scale_bytes.size());
    for (size_t m = 0; m < members; ++m) {
      for (size_t j = 0; j < len; ++j) column[j] = history[j * members + m];
      delayed_scaling_update(column, scales[m], max_finite(q.dtype), q.margin, q.amax_algo);
      for (size_t j = 0; j < len; ++j) history[j * members + m] = column[j];
    }
    std::memcpy(history_bytes.data(), history.data(), history_bytes.size());
    std::memcpy(scale_bytes.data(), scales.data(), scale_bytes.size());
  }
}

namespace {

// The split dim of a layout over a tensor of `rank` dims.
size_t split_dim(TpLayout layout, size_t rank) { return layout == TpLayout::sequence ? 0 : rank - 1; }

// Part r of `whole` along `dim`, one of `parts` equal parts.
HostTensor part_of(const HostTensor& whole, size_t dim, int64_t parts, int64_t r) {
  HostTensor part{whole.shape, part_along(whole.values, whole.shape, dim, parts, r)};
  part.shape.dims[dim] /= parts;
  return part;
}

// The parts joined back along `dim`, in rank order.
HostTensor join(const std::vector<HostTensor>& parts, size_t dim) {
  HostTensor whole{parts.at(0).shape, {}};
  whole.shape.dims[dim] *= static_cast<int64_t>(parts.size());
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < dim; ++i) outer *= whole.shape.dims[i];
  for (size_t i = dim + 1; i < whole.shape.rank(); ++i) inner *= whole.shape.dims[i];
  const int64_t chunk = parts[0].shape.dims[dim] * inner;
  for (int64_t o = 0; o < outer; ++o)
    for (const HostTensor& p : parts) {
      const auto first = p.values.begin() + static_cast<std::ptrdiff_t>(o * chunk);
      whole.values.insert(whole.values.end(), first, first + static_cast<std::ptrdiff_t>(chunk));
    }
  return whole;
}

}  // namespace

RankGroup::RankGroup(const plan::Plan& plan, const plan::Profile& profile) : plan_(plan), profile_(profile) {
  for (int64_t r = 0; r < plan.tp_size; ++r) ranks_.push_back(std::make_unique<Session>(plan, profile, r));
}

namespace {
TpLayout layout_in(const plan::Plan& plan, const plan::Profile& profile, const std::string& name) {
  if (plan.tp_size == 1) return TpLayout::replicated;
  const auto it = profile.tp_layouts.find(name);
  TEC_USER_CHECK(it != profile.tp_layouts.end(), (ErrorContext{"reference", name, "", "tensor parallel"}))
      << "'" << name << "' has no layout over the ranks (a weight gradient is each rank's own shard): read it rank by rank";
  return it->second;
}
}  // namespace

Shape whole_shape(const plan::Plan& plan, const plan::Profile& profile, const std::string& name) {
  Shape shape = tensor_named(profile, name).proto.shape;
  const TpLayout layout = layout_in(plan, profile, name);
  if (layout != TpLayout::replicated) {
    const size_t dim = split_dim(layout, shape.rank());
    shape.dims[dim] = checked_mul(shape.dims[dim], plan.tp_size);
  }
  return shape;
}

TpLayout RankGroup::layout_of(const std::string& name) const { return layout_in(plan_, profile_, name); }

Shape RankGroup::whole_shape(const std::string& name) const { return reference::whole_shape(plan_, profile_, name); }

void RankGroup::set_input(const std::string& name, const HostTensor& whole) {
  require_input(profile_, name);
  const Shape shape = whole_shape(name);
  require_input_shape(name, shape, whole);
  const TpLayout layout = layout_of(name);
  for (int64_t r = 0; r < size(); ++r)
    rank(r).set_input(name, layout == TpLayout::replicated ? whole : part_of(whole, split_dim(layout, shape.rank()), size(), r));
}

void RankGroup::randomize_inputs(uint64_t seed) {
  for (const std::string& name : profile_.inputs)
    set_input(name, random_input(seed, name, whole_shape(name), tensor_named(profile_, name).proto.dtype, &profile_));
}

void RankGroup::run(const std::function<void(size_t step)>& after_step) {
  std::vector<std::vector<size_t>> steps;
  for (auto& session : ranks_) steps.push_back(session->begin_run());
  // Every rank runs the same steps: they differ only in constants and inputs, never in state
  // that decides which steps run (runtime scalars are set on every rank alike).
  for (const auto& s : steps)
    TEC_USER_CHECK(s == steps[0], (ErrorContext{"reference", "", "", "tensor parallel"}))
        << "the ranks' runtime scalars (first_microbatch, forward_only) differ; set them alike on every rank";
  for (size_t s : steps[0]) {
    const plan::Step& step = profile_.steps[s];
    if (step.kind != "collective") {
      for (auto& session : ranks_) session->run_step(s);
    } else {
      const plan::Op& op = step.ops.at(0);
      std::vector<HostTensor> per_rank;
      for (const auto& session : ranks_) per_rank.push_back(session->collective_input(s));
      const OpDef& def = builtin_ops().get(op.op);
      std::vector<HostTensor> out =
          with_context(step_context(step, op), [&] { return def.collective(rank(0).attributes(s, 0), op.backward, per_rank); });
      for (size_t r = 0; r < ranks_.size(); ++r) ranks_[r]->store_collective_output(s, std::move(out.at(r)));
    }
    if (after_step) after_step(s);
  }
  for (auto& session : ranks_) session->end_run();
}

HostTensor RankGroup::read(const std::string& name) const {
  const TpLayout layout = layout_of(name);
  std::vector<HostTensor> parts;
  for (const auto& session : ranks_) parts.push_back(session->read(name));
  if (layout != TpLayout::replicated) return join(parts, split_dim(layout, parts[0].shape.rank()));
  for (size_t r = 1; r < parts.size(); ++r)
    TEC_INTERNAL_CHECK(parts[r].values.size() == parts[0].values.size() &&
                           std::memcmp(parts[r].values.data(), parts[0].values.data(), parts[0].values.size() * sizeof(float)) == 0,
                       (ErrorContext{"reference", name, "", "tensor parallel"}))
        << "replicated '" << name << "' differs between rank 0 and rank " << r;
  return parts[0];
}

}  // namespace tec::reference
