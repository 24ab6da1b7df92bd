// Emission primitives: tec nodes and values in a profile's graph, the constants they read,
// and the linear and attention forms that several patterns and ONNX ops share.
#include "frontend/onnx/onnx_builder.h"

#include <algorithm>
#include <cmath>

#include "ir/op_registry.h"
#include "ops/common.h"

namespace tec::onnx {

void Builder::emit_group(Env& e, const Group& grp) {
  const Node& root = node(grp.root);
  const std::string& out = root.outputs[0];
  const ValueId x = runtime(e, grp.x, root);
  e.runtime[out] = (this->*pattern_of(grp.kind).emit)(e, grp, x, out);
}

std::vector<float> Builder::constant_values(const Env& e, const std::string& name, int64_t count, float fill, const Node& at) const {
  if (name.empty()) return std::vector<float>(static_cast<size_t>(count), fill);
  const Tensor& t = *e.consts.at(name);
  TEC_UNSUPPORTED_CHECK(t.numel() == count, node_ctx(at)) << "constant '" << name << "' has " << t.numel() << " values, expected " << count;
  return t.floats;
}

std::string Builder::unique(Env& e, const std::string& base) const {
  std::string name = base;
  for (int i = 2; !e.names.insert(name).second; ++i) name = base + "_" + std::to_string(i);
  return name;
}

ValueId Builder::runtime(Env& e, const std::string& v, const Node& n) const {
  auto it = e.runtime.find(v);
  TEC_INTERNAL_CHECK(it != e.runtime.end(), node_ctx(n)) << "value '" << v << "' was not emitted";
  return it->second;
}

// A constant as a weight value, in the dtype of the run-time operand it meets.
ValueId Builder::weight_value(Env& e, const std::string& v, DType dtype, const std::string& source) const {
  const Tensor& t = *e.consts.at(v);
  const bool integer = dtype == DType::int32 || dtype == DType::uint8;  // (ids, bools: exact in float)
  TEC_UNSUPPORTED_CHECK(t.is_float() || integer, (ErrorContext{"onnx", v, "", source}))
      << "constant '" << v << "' is " << elem_type_name(t.elem_type) << "; tec's run-time ops take float tensors here";
  std::vector<float> values = t.floats;
  if (!t.is_float())
    for (int64_t i : t.ints) values.push_back(static_cast<float>(i));
  Value w;
  w.name = unique(e, v);
  w.kind = ValueKind::weight;
  w.source = source;
  w.proto = TensorProto::dense(Shape(t.dims), dtype);
  // ONNX does not say which constants are parameters. One element is a constant of the math
  // (eps, 0.5, sqrt(2), 1/sqrt(d)), and one holding an infinity or NaN a mask: neither is
  // trained. --freeze names others.
  w.frozen = w.proto.shape.numel() == 1 || !std::all_of(values.begin(), values.end(), [](float value) { return std::isfinite(value); });
  w.weight = WeightSource{.kind = WeightSource::Kind::values, .values = std::make_shared<const std::vector<float>>(std::move(values)),
                          .origin = "ONNX constant '" + v + "'"};
  return e.g.add_value(std::move(w));
}

ValueId Builder::operand(Env& e, const std::string& v, DType dtype, const Node& n) const {
  if (e.consts.count(v)) return weight_value(e, v, dtype, node_ctx(n).location);
  return runtime(e, v, n);
}

// Adds one tec node; its params take `param_values` in order. Returns the output value.
ValueId Builder::emit(Env& e, const Node& src, const std::string& op, std::vector<ValueId> inputs, Attributes attrs,
                      std::vector<std::vector<float>> param_values, const std::string& out_name) const {
  const OpDef& def = builtin_ops().get(op);
  tec::Node nd;
  nd.name = unique(e, src.name);
  nd.op = op;
  nd.source = node_ctx(src).location;
  nd.attrs = std::move(attrs);
  const ErrorContext ctx{"onnx", src.name, src.op_type, nd.source};
  check_and_default_attributes(def, nd.attrs, ctx);
  nd.inputs = std::move(inputs);
  const DType dtype = e.g.value(nd.inputs.at(0)).proto.dtype;
  if (def.params) {
    const auto specs = def.params(nd.attrs, dtype);
    TEC_INTERNAL_CHECK(specs.size() == param_values.size(), ctx) << op << " takes " << specs.size() << " params";
    for (size_t i = 0; i < specs.size(); ++i) {
      TEC_INTERNAL_CHECK(static_cast<int64_t>(param_values[i].size()) == specs[i].shape.numel(), ctx)
          << "param " << specs[i].suffix << " has " << param_values[i].size() << " values for " << specs[i].shape.str();
      Value w;
      w.name = unique(e, nd.name + "." + specs[i].suffix);
      w.kind = ValueKind::weight;
      w.source = nd.source;
      w.proto = TensorProto::dense(specs[i].shape, specs[i].dtype);
      w.weight = WeightSource{.kind = WeightSource::Kind::values,
                              .values = std::make_shared<const std::vector<float>>(std::move(param_values[i])),
                              .origin = "ONNX node '" + src.name + "'"};
      nd.inputs.push_back(e.g.add_value(std::move(w)));
    }
  }
  std::vector<TensorProto> protos;
  for (ValueId in : nd.inputs) protos.push_back(e.g.value(in).proto);
  InferResult r = with_context(ctx, [&] { return def.infer(InferContext{e.g, nd, ctx, protos}); });
  Value out;
  out.name = unique(e, out_name);
  out.source = nd.source;
  out.proto = r.outputs.at(0);
  nd.outputs.push_back(e.g.add_value(std::move(out)));
  const ValueId id = nd.outputs[0];
  e.g.add_node(std::move(nd));
  return id;
}


// A reshape to `dims`, or the value itself when nothing changes.
ValueId Builder::reshape_to(Env& e, const Node& src, ValueId v, const std::vector<int64_t>& dims, const std::string& out) const {
  if (e.g.value(v).proto.shape.dims == dims) return v;
  Attributes a;
  a.values["shape"] = dims;
  return emit(e, src, "reshape", {v}, a, {}, out);
}

std::vector<float> Builder::transposed(const Tensor& w) {  // [K, N] -> [N, K]
  const int64_t k = w.dims[0], n = w.dims[1];
  std::vector<float> out(static_cast<size_t>(k * n));
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < n; ++j) out[static_cast<size_t>(j * k + i)] = w.floats[static_cast<size_t>(i * n + j)];
  return out;
}

// A projection's weight as a linear's [N, K] (alpha folded in), and its bias [N] (beta folded
// in; zeros without one).
std::vector<float> Builder::projection_weight(const Env& e, const Projection& p) const {
  const Tensor& b = *e.consts.at(p.weight);
  std::vector<float> w = p.trans_b ? b.floats : transposed(b);
  if (p.alpha != 1.0)
    for (float& v : w) v *= static_cast<float>(p.alpha);
  return w;
}
std::vector<float> Builder::projection_bias(const Env& e, const Projection& p) const {
  const int64_t n = projection_shape(graph_, p).first;
  std::vector<float> out(static_cast<size_t>(n), 0.0f);
  if (p.bias.empty()) return out;
  const Tensor& c = *e.consts.at(p.bias);
  for (int64_t j = 0; j < n; ++j)
    out[static_cast<size_t>(j)] = static_cast<float>(p.beta) * c.floats[c.numel() == 1 ? 0 : static_cast<size_t>(j)];
  return out;
}


// fp8-static: the scales of a weight the model stores as FP8 codes (a folded
// DequantizeLinear of FLOAT8E4M3FN), in the layout of tec's [N, K] weight (the ONNX B
// transposed unless `nk`, Gemm's transB), alpha folded in. nullopt for any other weight.
std::optional<Builder::StaticScales> Builder::static_scales_of(const std::string& weight, bool nk, double alpha) const {
  const int p = graph_.producer_of(weight);
  if (!static_ || p < 0 || node(p).op_type != "DequantizeLinear" || !graph_.constant_node[static_cast<size_t>(p)]) return std::nullopt;
  const Node& dq = node(p);
  const auto codes = graph_.known.find(dq.inputs[0]);
  if (codes == graph_.known.end() || codes->second->elem_type != kFloat8E4M3FN || !graph_.known.count(dq.inputs[1])) return std::nullopt;
  const ErrorContext ctx = node_ctx(dq);
  const Tensor& w = *codes->second;
  const Tensor& scale = *graph_.known.at(dq.inputs[1]);
  const std::string what = "DequantizeLinear '" + dq.name + "' of weight '" + weight + "': ";
  TEC_USER_CHECK(w.dims.size() == 2, ctx) << what << "a GEMM weight must be 2-D, got " << Shape(w.dims).str();
  TEC_USER_CHECK(scale.is_float(), ctx) << what << "its scale is " << elem_type_name(scale.elem_type) << ", not a float tensor";
  const std::string bad = bad_scale(scale);
  TEC_USER_CHECK(bad.empty(), ctx) << what << bad;
  const int64_t n = nk ? w.dims[0] : w.dims[1], k = nk ? w.dims[1] : w.dims[0];
  const int64_t n_axis = nk ? 0 : 1, k_axis = 1 - n_axis;
  const int64_t axis = with_context(ctx, [&] { return axis_of(attr_int(dq, "axis", 1), 2, "axis"); });
  const int64_t block = attr_int(dq, "block_size", 0);
  auto scaled = [&](double v) { return static_cast<float>(v * alpha); };
  StaticScales out;
  auto values = std::make_shared<std::vector<float>>();
  if (block == 0 && scale.numel() == 1) {
    values->push_back(scaled(scale.floats[0]));
  } else if (block == 0) {
    TEC_UNSUPPORTED_CHECK(axis == n_axis && scale.numel() == n, ctx)
        << what << "per-axis scales along K (axis " << k_axis << ") are not a TE granularity; tec takes one scale per tensor, "
        << "per output channel (axis " << n_axis << ") or block_size along K";
    for (float v : scale.floats) values->push_back(scaled(v));
    out.block_rows = 1;
  } else {
    TEC_UNSUPPORTED_CHECK(axis == k_axis, ctx)
        << what << "block_size runs along axis " << axis << ", the weight's N; tec takes blocks along K (axis " << k_axis << ")";
    TEC_USER_CHECK(block >= 1 && k % block == 0, ctx) << what << "block_size " << block << " does not divide K=" << k;
    const int64_t blocks = k / block;
    TEC_USER_CHECK(scale.numel() == n * blocks, ctx) << what << "block scales hold " << scale.numel() << " values, the weight needs " << n * blocks;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t b = 0; b < blocks; ++b)
        values->push_back(scaled(scale.floats[static_cast<size_t>(nk ? r * blocks + b : b * n + r)]));
    out.block_rows = 1;
    out.block_cols = static_cast<int>(block);
  }
  out.scale_inv = std::move(values);
  return out;
}


// The static scales of [W_a; W_b] (rows n_a then n_b): one per tensor if both are that one,
// else both expanded to per row, or to blocks when either has blocks.
std::optional<Builder::StaticScales> Builder::concatenated(const std::optional<StaticScales>& a, int64_t n_a, const std::optional<StaticScales>& b,
                                                           int64_t n_b, int64_t k, const ErrorContext& ctx) {
  if (!a || !b) return std::nullopt;
  if (a->block_rows == 0 && b->block_rows == 0 && *a->scale_inv == *b->scale_inv) return a;
  const int cols = std::max(a->block_cols, b->block_cols);
  TEC_UNSUPPORTED_CHECK(a->block_cols == 0 || b->block_cols == 0 || a->block_cols == b->block_cols, ctx)
      << "the gate and up weights have block sizes " << a->block_cols << " and " << b->block_cols << "; tec concatenates them into one linear";
  const int64_t blocks = cols ? k / cols : 1;
  auto expand = [&](const StaticScales& s, int64_t rows, std::vector<float>& out) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < blocks; ++c)
        out.push_back((*s.scale_inv)[static_cast<size_t>(s.block_rows == 0 ? 0 : s.block_cols == 0 ? r : r * blocks + c)]);
  };
  auto values = std::make_shared<std::vector<float>>();
  expand(*a, n_a, *values);
  expand(*b, n_b, *values);
  return StaticScales{std::move(values), 1, cols};
}

// A linear reading run-time `x` (the ONNX value `x_name`): under fp8-static with its input's
// static scale (from its Q/DQ pair) and its weight's (from its DequantizeLinear).
ValueId Builder::emit_linear(Env& e, const Node& src, const std::string& x_name, ValueId x, std::vector<float> weight_nk, int64_t n,
                             int64_t k, const std::vector<float>* bias, const std::string& out, std::optional<StaticScales> scales) const {
  Attributes a;
  a.values["in_features"] = k;
  a.values["out_features"] = n;
  a.values["bias"] = bias != nullptr;
  if (const auto it = matches_.qdq_scale.find(x_name); static_ && it != matches_.qdq_scale.end()) a.values["input_scale"] = static_cast<double>(it->second);
  std::vector<std::vector<float>> params{std::move(weight_nk)};
  if (bias) params.push_back(*bias);
  const Shape xs = e.g.value(x).proto.shape;
  TEC_USER_CHECK(xs.rank() >= 1 && xs.cols() == k, node_ctx(src))
      << "input has shape " << xs.str() << ", the weight expects " << k << " features";
  const ValueId y = emit(e, src, "linear", {x}, a, std::move(params), out);
  if (scales) e.g.value(e.g.nodes.back().inputs.at(1)).weight->static_scales = std::move(scales);
  return y;
}

Attributes Builder::fn_attr(const std::string& fn) {
  Attributes a;
  a.values["fn"] = fn;
  return a;
}

// t [B, H, S, D] made by transpose [0, 2, 1, 3] of reshape [B, S, H, D] of w [B, S, H x D]:
// w, the form tec's rope and attention read, so that heads split only to be merged again
// cost nothing (the unread split goes with the unused nodes at the end of build).
std::optional<ValueId> Builder::flat_before_heads(const Env& e, ValueId t) const {
  const Value& heads = e.g.value(t);
  if (heads.producer < 0 || heads.proto.shape.rank() != 4) return std::nullopt;
  const tec::Node& turn = e.g.node(heads.producer);
  if (turn.op != "transpose" || turn.attrs.get_ints("perm") != std::vector<int64_t>{0, 2, 1, 3}) return std::nullopt;
  const Value& split = e.g.value(turn.inputs.at(0));
  if (split.producer < 0 || e.g.node(split.producer).op != "reshape") return std::nullopt;
  const ValueId flat = e.g.node(split.producer).inputs.at(0);
  const Shape& f = e.g.value(flat).proto.shape;
  const Shape& h = heads.proto.shape;
  if (f != Shape({h[0], h[2], h[1] * h[3]})) return std::nullopt;
  return flat;
}

// tec's attention of q, k, v in ONNX's forms: 3-D [batch, seq, heads x head_dim] with the
// head counts in `a` (or, absent, one head: [batch x heads, seq, head_dim]), or 4-D [batch,
// heads, seq, head_dim], which becomes tec's 3-D form through a transpose and a reshape each
// way (the output stays 3-D with `flat_output`). `a` holds causal and scale; an optional
// additive mask broadcasts to [B, heads, S, S_kv].
ValueId Builder::emit_attention_of(Env& e, const Node& n, ValueId q, ValueId k, ValueId v, std::optional<ValueId> mask, Attributes a,
                                   const std::string& out, bool flat_output) const {
  const ErrorContext ctx = node_ctx(n);
  const int64_t rank = static_cast<int64_t>(e.g.value(q).proto.shape.rank());
  TEC_UNSUPPORTED_CHECK(rank == 3 || rank == 4, ctx) << "Q is " << e.g.value(q).proto.shape.str() << "; attention takes 3-D or 4-D inputs";
  for (ValueId t : {k, v})
    TEC_USER_CHECK(static_cast<int64_t>(e.g.value(t).proto.shape.rank()) == rank, ctx)
        << "Q is " << rank << "-D and '" << e.g.value(t).name << "' is " << e.g.value(t).proto.shape.str() << "; all three have one rank";
  if (rank == 4) {
    const Shape qs = e.g.value(q).proto.shape, ks = e.g.value(k).proto.shape, vs = e.g.value(v).proto.shape;
    TEC_USER_CHECK(ks[1] == vs[1], ctx) << "K " << ks.str() << " and V " << vs.str() << " differ in their head count";
    a.values["heads"] = qs[1];
    a.values["kv_heads"] = ks[1];
    auto to_bshd = [&](ValueId t, const std::string& suffix) {
      if (auto flat = flat_before_heads(e, t)) return *flat;
      const Shape s = e.g.value(t).proto.shape;
      Attributes perm;
      perm.values["perm"] = std::vector<int64_t>{0, 2, 1, 3};
      const ValueId moved = emit(e, n, "transpose", {t}, perm, {}, out + "." + suffix + "_bshd");
      return reshape_to(e, n, moved, {s[0], s[2], checked_mul(s[1], s[3])}, out + "." + suffix + "_3d");
    };
    q = to_bshd(q, "q");
    k = to_bshd(k, "k");
    v = to_bshd(v, "v");
  } else if (!a.has("heads")) {
    a.values["heads"] = int64_t{1};
    a.values["kv_heads"] = int64_t{1};
  }
  const int64_t heads = a.get_int("heads", 1), kv_heads = a.get_int("kv_heads", 1);
  // Copies: emitting nodes below adds values, which may move every value.
  const Shape q_shape = e.g.value(q).proto.shape;
  const Shape v_shape = e.g.value(v).proto.shape;
  TEC_USER_CHECK(q_shape[2] % heads == 0, ctx) << "Q's last dim " << q_shape[2] << " is not a multiple of q_num_heads " << heads;
  TEC_USER_CHECK(v_shape.rank() == 3 && v_shape[2] % kv_heads == 0, ctx)
      << "V is " << v_shape.str() << "; its last dim must be a multiple of kv_num_heads " << kv_heads;
  a.values["head_dim"] = q_shape[2] / heads;
  a.values["v_head_dim"] = v_shape[2] / kv_heads;
  std::vector<ValueId> inputs{q, k, v};
  if (mask) {
    inputs.push_back(*mask);
    if (!a.has("mask")) a.values["mask"] = std::string("additive");
  }
  if (rank == 3 || flat_output) return emit(e, n, "attention", inputs, a, {}, out);
  const ValueId y = emit(e, n, "attention", inputs, a, {}, out + ".bshd");
  const ValueId split = reshape_to(e, n, y, {q_shape[0], q_shape[1], heads, v_shape[2] / kv_heads}, out + ".heads");
  Attributes perm;
  perm.values["perm"] = std::vector<int64_t>{0, 2, 1, 3};
  return emit(e, n, "transpose", {split}, perm, {}, out);
}


}  // namespace tec::onnx
