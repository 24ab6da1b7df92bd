// The ONNX ops one by one, for the nodes no pattern took: each becomes the tec op that
// computes it (a linear for a MatMul by a constant weight, the general path's ops for the rest
// of ONNX's tensor ops, ...). Constants met at run time become weight values.
#include <algorithm>

#include "frontend/onnx/onnx_builder.h"
#include "ops/common.h"

namespace tec::onnx {

namespace {

// ONNX reductions and comparisons on run-time values: tec's reduce and compare functions.
const std::map<std::string, std::string> kReductions = {{"ReduceMean", "mean"}, {"ReduceSum", "sum"}, {"ReduceMax", "max"}};
const std::map<std::string, std::string> kComparisons = {
    {"Equal", "equal"},     {"Less", "less"}, {"LessOrEqual", "less_equal"}, {"Greater", "greater"}, {"GreaterOrEqual", "greater_equal"},
    {"IsNaN", "isnan"},     {"Not", "not"},   {"And", "and"},                {"Or", "or"},           {"Xor", "xor"}};


}  // namespace

// One ONNX node that no pattern took.
void Builder::emit_node(Env& e, const Node& n) {
  const std::string& op = n.op_type;
  const std::string out = n.outputs.empty() ? "" : n.outputs[0];
  if (emit_general(e, n)) return;
  auto in0 = [&] { return runtime(e, n.inputs.at(0), n); };
  auto shape0 = [&] { return e.g.value(in0()).proto.shape; };
  if (auto it = kBinaryFunctions.find(op); it != kBinaryFunctions.end()) return emit_binary(e, n, it->second);
  if (auto it = kUnaryFunctions.find(op); it != kUnaryFunctions.end()) {
    e.runtime[out] = emit(e, n, "unary", {in0()}, fn_attr(it->second), {}, out);
    return;
  }
  if (op == "Relu") {
    e.runtime[out] = emit(e, n, "relu", {in0()}, {}, {}, out);
    return;
  }
  if (op == "Gelu") {
    const std::string approx = attr_string(n, "approximate", "none");
    TEC_UNSUPPORTED_CHECK(approx == "none" || approx == "tanh", node_ctx(n)) << "approximate '" << approx << "'";
    Attributes a;
    a.values["approximate"] = approx;
    e.runtime[out] = emit(e, n, "gelu", {in0()}, a, {}, out);
    return;
  }
  if (op == "MatMul") {
    const bool b_const = e.consts.count(n.inputs[1]) != 0;
    if (b_const && !e.consts.count(n.inputs[0])) {
      const Tensor& b = *e.consts.at(n.inputs[1]);
      if (b.dims.size() == 2 && b.is_float() && shape0().rank() >= 2) {
        e.runtime[out] = emit_linear(e, n, n.inputs[0], in0(), transposed(b), b.dims[1], b.dims[0], nullptr, out,
                                     static_scales_of(n.inputs[1], false, 1.0));
        return;
      }
    }
    const ValueId a = operand(e, n.inputs[0], DType::fp32, n);
    const ValueId bv = operand(e, n.inputs[1], e.g.value(a).proto.dtype, n);
    e.runtime[out] = emit(e, n, "matmul", {a, bv}, {}, {}, out);
    return;
  }
  if (op == "Gemm") return emit_gemm(e, n);
  if (op == "Gather" && graph_.is_embedding_lookup(n)) return emit_embedding(e, n);
  if (op == "Gather" || op == "GatherND") {
    TEC_UNSUPPORTED_CHECK(op == "Gather" || attr_int(n, "batch_dims", 0) == 0, node_ctx(n)) << "GatherND with batch_dims other than 0";
    Attributes a;
    if (op == "Gather") a.values["axis"] = attr_int(n, "axis", 0);
    e.runtime[out] = emit(e, n, op == "Gather" ? "gather" : "gather_nd", {in0(), operand(e, n.inputs.at(1), DType::int32, n)}, a, {}, out);
    return;
  }
  if (op == "Cos" || op == "Sin") {  // (a constant one folds in double: onnx_fold.cpp)
    e.runtime[out] = emit(e, n, "unary", {in0()}, fn_attr(op == "Cos" ? "cos" : "sin"), {}, out);
    return;
  }
  if (op == "Attention") return emit_attention(e, n);
  if (op == "Trilu") return emit_trilu(e, n);
  if (op == "LayerNormalization" || op == "RMSNormalization") return emit_norm(e, n, op == "LayerNormalization");
  if (auto it = kReductions.find(op); it != kReductions.end()) {
    std::vector<int64_t> axes;
    if (auto a = attr_ints(n, "axes")) axes = *a;
    else if (n.inputs.size() > 1 && !n.inputs[1].empty()) axes = as_ints(*e.consts.at(n.inputs[1]));
    if (axes.empty() && attr_int(n, "noop_with_empty_axes", 0) != 0) {
      e.runtime[out] = emit(e, n, "identity", {in0()}, {}, {}, out);
      return;
    }
    Attributes a;
    a.values["axes"] = axes;
    a.values["keepdims"] = attr_int(n, "keepdims", 1) != 0;
    a.values["fn"] = it->second;
    e.runtime[out] = emit(e, n, "reduce", {in0()}, a, {}, out);
    return;
  }
  auto reshape_node = [&](std::vector<int64_t> dims) {
    const ValueId x = in0();
    Attributes a;
    a.values["shape"] = dims.empty() ? std::vector<int64_t>{1} : dims;
    TEC_UNSUPPORTED_CHECK(!dims.empty() || e.g.value(x).proto.shape.numel() == 1, node_ctx(n)) << "empty shape";
    e.runtime[out] = emit(e, n, "reshape", {x}, a, {}, out);
  };
  if (op == "Reshape") {
    auto dims = with_context(node_ctx(n), [&] {
      return reshape_dims(shape0().dims, as_ints(*e.consts.at(n.inputs[1])), attr_int(n, "allowzero", 0) != 0);
    });
    TEC_UNSUPPORTED_CHECK(!dims.empty(), node_ctx(n)) << "reshaping to a scalar (rank 0) is not supported";
    return reshape_node(dims);
  }
  if (op == "Flatten")
    return reshape_node(with_context(node_ctx(n), [&] { return flatten_dims(shape0().dims, attr_int(n, "axis", 1)); }));
  if (op == "Squeeze") {
    std::optional<std::vector<int64_t>> axes;
    if (n.inputs.size() > 1 && !n.inputs[1].empty()) axes = as_ints(*e.consts.at(n.inputs[1]));
    auto dims = with_context(node_ctx(n), [&] { return squeeze_dims(shape0().dims, axes); });
    TEC_UNSUPPORTED_CHECK(!dims.empty(), node_ctx(n)) << "squeezing to a scalar (rank 0) is not supported";
    return reshape_node(dims);
  }
  if (op == "Unsqueeze")
    return reshape_node(with_context(node_ctx(n), [&] { return unsqueeze_dims(shape0().dims, as_ints(*e.consts.at(n.inputs[1]))); }));
  if (op == "Transpose") {
    Attributes a;
    if (auto perm = attr_ints(n, "perm")) a.values["perm"] = *perm;
    e.runtime[out] = emit(e, n, "transpose", {in0()}, a, {}, out);
    return;
  }
  if (op == "Identity") {
    e.runtime[out] = emit(e, n, "identity", {in0()}, {}, {}, out);
    return;
  }
  if (op == "Cast") {
    const auto to = static_cast<int32_t>(attr_int(n, "to", 0));
    const DType from = e.g.value(in0()).proto.dtype;
    const bool integers = to == kInt64 || to == kInt32 || to == kBool || to == kUint8;
    if (integers || from == DType::int32 || from == DType::uint8) {  // to or from ints and bools: the general path
      const bool to_int = to == kInt64 || to == kInt32;
      TEC_UNSUPPORTED_CHECK(integers || tec_dtype(to).has_value(), node_ctx(n))
          << "Cast to " << elem_type_name(to) << " at run time is not supported";
      Attributes a;
      a.values["dtype"] = std::string(to_string(to_int ? DType::int32 : integers ? DType::uint8 : *tec_dtype(to)));
      e.runtime[out] = emit(e, n, "convert", {in0()}, a, {}, out);
      return;
    }
    auto dtype = tec_dtype(to);
    TEC_UNSUPPORTED_CHECK(dtype.has_value(), node_ctx(n))
        << "Cast to " << elem_type_name(to) << " at run time is not supported (FLOAT, FLOAT16, BFLOAT16 are)";
    Attributes a;
    a.values["dtype"] = std::string(to_string(*dtype));
    e.runtime[out] = emit(e, n, "cast", {in0()}, a, {}, out);
    return;
  }
  TEC_UNSUPPORTED(node_ctx(n)) << op << " on run-time values is not supported";
}

// The ONNX ops whose run-time form is one of tec's general-path ops (ir/general_kernel.h):
// softmax, compare, where, concat, expand, slice (Split: one slice per output). Returns false
// for other ops.
bool Builder::emit_general(Env& e, const Node& n) {
  const std::string& op = n.op_type;
  const std::string& out = n.outputs.at(0);
  // Constants meet the dtype of the first run-time input from `first` on.
  auto runtime_dtype = [&](size_t first) {
    for (size_t i = first; i < n.inputs.size(); ++i)
      if (!n.inputs[i].empty() && !e.consts.count(n.inputs[i])) return e.g.value(runtime(e, n.inputs[i], n)).proto.dtype;
    return DType::fp32;
  };
  auto operands = [&](size_t first, size_t last, DType dtype) {
    std::vector<ValueId> values;
    for (size_t i = first; i < last; ++i) values.push_back(operand(e, n.inputs.at(i), dtype, n));
    return values;
  };
  auto constant_ints = [&](size_t slot) {
    return slot < n.inputs.size() && !n.inputs[slot].empty() ? as_ints(*e.consts.at(n.inputs[slot])) : std::vector<int64_t>{};
  };
  Attributes a;
  if (op == "Softmax") {
    a.values["axis"] = attr_int(n, "axis", -1);
    e.runtime[out] = emit(e, n, "softmax", {runtime(e, n.inputs[0], n)}, a, {}, out);
  } else if (auto it = kComparisons.find(op); it != kComparisons.end()) {
    const bool logic = it->second == "not" || it->second == "and" || it->second == "or" || it->second == "xor";
    e.runtime[out] = emit(e, n, "compare", operands(0, n.inputs.size(), logic ? DType::uint8 : runtime_dtype(0)), fn_attr(it->second), {}, out);
  } else if (op == "Where") {
    std::vector<ValueId> in = operands(0, 1, DType::uint8), branches = operands(1, 3, runtime_dtype(1));
    in.insert(in.end(), branches.begin(), branches.end());
    e.runtime[out] = emit(e, n, "where", in, {}, {}, out);
  } else if (op == "Concat") {
    a.values["axis"] = attr_int(n, "axis", 0);
    e.runtime[out] = emit(e, n, "concat", operands(0, n.inputs.size(), runtime_dtype(0)), a, {}, out);
  } else if (op == "Expand") {
    a.values["shape"] = constant_ints(1);
    e.runtime[out] = emit(e, n, "expand", {runtime(e, n.inputs[0], n)}, a, {}, out);
  } else if (op == "Slice") {
    a.values["starts"] = constant_ints(1);
    a.values["ends"] = constant_ints(2);
    a.values["axes"] = constant_ints(3);
    a.values["steps"] = constant_ints(4);
    e.runtime[out] = emit(e, n, "slice", {runtime(e, n.inputs[0], n)}, a, {}, out);
  } else if (op == "Split") {
    emit_split(e, n);
  } else {
    return false;
  }
  return true;
}

// Split along `axis`: the sizes from input 1, or parts as equal as num_outputs (opset 18) or
// the output count allow (the last smaller), each part one slice.
void Builder::emit_split(Env& e, const Node& n) {
  const ValueId x = runtime(e, n.inputs[0], n);
  const Shape& shape = e.g.value(x).proto.shape;
  const int64_t rank = static_cast<int64_t>(shape.rank()), axis = attr_int(n, "axis", 0);
  TEC_USER_CHECK(axis >= -rank && axis < rank, node_ctx(n)) << "axis " << axis << " is out of range for rank " << rank;
  const int64_t extent = shape.dims[static_cast<size_t>(axis < 0 ? axis + rank : axis)];
  std::vector<int64_t> sizes = n.inputs.size() > 1 && !n.inputs[1].empty() ? as_ints(*e.consts.at(n.inputs[1])) : std::vector<int64_t>{};
  if (sizes.empty()) {
    const int64_t parts = attr_int(n, "num_outputs", static_cast<int64_t>(n.outputs.size())), each = (extent + parts - 1) / parts;
    for (int64_t start = 0; start < extent; start += each) sizes.push_back(std::min(each, extent - start));
  }
  int64_t total = 0;
  for (int64_t size : sizes) total += size;
  TEC_USER_CHECK(sizes.size() == n.outputs.size() && total == extent, node_ctx(n))
      << "the parts (" << sizes.size() << ", " << total << " in all) do not split axis " << axis << " of extent " << extent << " into "
      << n.outputs.size() << " outputs";
  int64_t start = 0;
  for (size_t o = 0; o < sizes.size(); ++o) {
    Attributes a;
    a.values["starts"] = std::vector<int64_t>{start};
    a.values["ends"] = std::vector<int64_t>{start + sizes[o]};
    a.values["axes"] = std::vector<int64_t>{axis};
    if (!n.outputs[o].empty()) e.runtime[n.outputs[o]] = emit(e, n, "slice", {x}, a, {}, n.outputs[o]);
    start += sizes[o];
  }
}

void Builder::emit_gemm(Env& e, const Node& n) {
  const bool trans_a = attr_int(n, "transA", 0) != 0, trans_b = attr_int(n, "transB", 0) != 0;
  const float alpha = attr_float(n, "alpha", 1.0f), beta = attr_float(n, "beta", 1.0f);
  const std::string out = n.outputs[0];
  const bool b_const = e.consts.count(n.inputs[1]) != 0;
  const bool c_given = n.inputs.size() > 2 && !n.inputs[2].empty();
  ValueId a = operand(e, n.inputs[0], DType::fp32, n);
  const DType dtype = e.g.value(a).proto.dtype;
  if (trans_a) {
    Attributes t;
    t.values["perm"] = std::vector<int64_t>{1, 0};
    a = emit(e, n, "transpose", {a}, t, {}, out + ".a_t");
  }
  if (b_const) {
    const Tensor& b = *e.consts.at(n.inputs[1]);
    TEC_USER_CHECK(b.dims.size() == 2 && b.is_float(), node_ctx(n)) << "B must be a 2-D float matrix";
    // Linear weight [N, K]: B^T, or B itself when transB.
    std::vector<float> w = trans_b ? b.floats : transposed(b);
    const int64_t n_out = trans_b ? b.dims[0] : b.dims[1], k = trans_b ? b.dims[1] : b.dims[0];
    for (float& v : w) v *= alpha;
    std::optional<std::vector<float>> bias;
    bool c_done = !c_given || beta == 0.0f;
    if (c_given && !c_done && e.consts.count(n.inputs[2])) {
      const Tensor& c = *e.consts.at(n.inputs[2]);
      if (c.numel() == 1 || (c.numel() == n_out && c.dims.back() == n_out)) {
        bias = std::vector<float>(static_cast<size_t>(n_out));
        for (int64_t j = 0; j < n_out; ++j) (*bias)[static_cast<size_t>(j)] = beta * c.floats[c.numel() == 1 ? 0 : static_cast<size_t>(j)];
        c_done = true;
      }
    }
    ValueId y = emit_linear(e, n, n.inputs[0], a, std::move(w), n_out, k, bias ? &*bias : nullptr, c_done ? out : out + ".ab",
                            static_scales_of(n.inputs[1], trans_b, alpha));
    if (!c_done) y = add_c(e, n, y, dtype, beta, out);
    e.runtime[out] = y;
    return;
  }
  ValueId b = operand(e, n.inputs[1], dtype, n);
  if (trans_b) {
    Attributes t;
    t.values["perm"] = std::vector<int64_t>{1, 0};
    b = emit(e, n, "transpose", {b}, t, {}, out + ".b_t");
  }
  const bool last = !c_given || beta == 0.0f;
  ValueId y = emit(e, n, "matmul", {a, b}, {}, {}, alpha == 1.0f && last ? out : out + ".ab");
  if (alpha != 1.0f) {
    Attributes s;
    s.values["scale"] = static_cast<double>(alpha);
    y = emit(e, n, "scale", {y}, s, {}, last ? out : out + ".alpha_ab");
  }
  if (!last) y = add_c(e, n, y, dtype, beta, out);
  e.runtime[out] = y;
}

ValueId Builder::add_c(Env& e, const Node& n, ValueId y, DType dtype, float beta, const std::string& out) {
  ValueId c = operand(e, n.inputs[2], dtype, n);
  if (beta != 1.0f) {
    Attributes s;
    s.values["scale"] = static_cast<double>(beta);
    c = emit(e, n, "scale", {c}, s, {}, out + ".beta_c");
  }
  return emit(e, n, "binary", {y, c}, fn_attr("add"), {}, out);
}

void Builder::emit_binary(Env& e, const Node& n, const std::string& fn) {
  const std::string out = n.outputs[0];
  const std::string &a_name = n.inputs[0], &b_name = n.inputs[1];
  const bool a_const = e.consts.count(a_name) != 0, b_const = e.consts.count(b_name) != 0;
  const ValueId any = runtime(e, a_const ? b_name : a_name, n);
  const DType dtype = e.g.value(any).proto.dtype;
  const Shape rs = e.g.value(any).proto.shape;
  if ((fn == "add" || fn == "mul") && (a_const || b_const)) {
    const Tensor& c = *e.consts.at(a_const ? a_name : b_name);
    if (fn == "mul" && c.numel() == 1 && c.is_float()) {
      Attributes s;
      s.values["scale"] = static_cast<double>(c.floats[0]);
      e.runtime[out] = emit(e, n, "scale", {any}, s, {}, out);
      return;
    }
    const bool last_dim_vector = c.is_float() && rs.rank() >= 1 && c.numel() == rs.cols() && !c.dims.empty() &&
                                 c.dims.back() == rs.cols() && c.dims.size() <= rs.rank();
    if (fn == "add" && last_dim_vector) {
      Attributes b;
      b.values["features"] = rs.cols();
      e.runtime[out] = emit(e, n, "bias", {any}, b, {c.floats}, out);
      return;
    }
  }
  if (fn == "add" && !a_const && !b_const) {
    const TensorProto &pa = e.g.value(runtime(e, a_name, n)).proto, &pb = e.g.value(runtime(e, b_name, n)).proto;
    if (pa.shape == pb.shape && pa.dtype == pb.dtype) {
      e.runtime[out] = emit(e, n, "add", {runtime(e, a_name, n), runtime(e, b_name, n)}, {}, {}, out);
      return;
    }
  }
  e.runtime[out] = emit(e, n, "binary", {operand(e, a_name, dtype, n), operand(e, b_name, dtype, n)}, fn_attr(fn), {}, out);
}

// Norm over the dims from `axis` on: reshaped to one last dim when there are several.
void Builder::emit_norm(Env& e, const Node& n, bool layernorm) {
  TEC_UNSUPPORTED_CHECK(attr_int(n, "stash_type", 1) == 1, node_ctx(n)) << "stash_type must be 1 (float)";
  const ValueId x = runtime(e, n.inputs[0], n);
  const Shape xs = e.g.value(x).proto.shape;
  TEC_USER_CHECK(xs.rank() >= 1, node_ctx(n)) << "input is a scalar";
  const int64_t axis = with_context(node_ctx(n), [&] { return axis_of(attr_int(n, "axis", -1), xs.rank(), "axis"); });
  int64_t hidden = 1;
  for (size_t d = static_cast<size_t>(axis); d < xs.rank(); ++d) hidden *= xs.dims[d];
  std::vector<int64_t> rows_dims(xs.dims.begin(), xs.dims.begin() + axis);
  rows_dims.push_back(hidden);
  auto param = [&](size_t slot, float fill) {
    if (slot >= n.inputs.size() || n.inputs[slot].empty()) return std::vector<float>(static_cast<size_t>(hidden), fill);
    const Tensor& t = *e.consts.at(n.inputs[slot]);
    TEC_UNSUPPORTED_CHECK(t.is_float(), node_ctx(n)) << "input " << slot << " is not a float tensor";
    if (t.numel() == hidden) return t.floats;
    TEC_UNSUPPORTED_CHECK(t.numel() == 1, node_ctx(n))
        << "input " << slot << " has shape " << Shape(t.dims).str() << "; tec takes the normalized shape or a scalar";
    return std::vector<float>(static_cast<size_t>(hidden), t.floats[0]);
  };
  const std::string out = n.outputs[0];
  const ValueId flat = reshape_to(e, n, x, rows_dims, out + ".rows");
  Attributes a;
  a.values["hidden"] = hidden;
  a.values["eps"] = static_cast<double>(attr_float(n, "epsilon", 1e-5f));
  std::vector<std::vector<float>> params{param(1, 1.0f)};
  if (layernorm) params.push_back(param(2, 0.0f));
  const ValueId y = emit(e, n, layernorm ? "layernorm" : "rmsnorm", {flat}, a, params, flat == x ? out : out + ".norm");
  e.runtime[out] = reshape_to(e, n, y, xs.dims, out);
  if (layernorm) emit_norm_statistics(e, n, flat, xs, axis);
}

// LayerNormalization's optional Mean and InvStdDev outputs, when something reads them:
// computed beside the fused norm with the general ops (CPU reference).
void Builder::emit_norm_statistics(Env& e, const Node& n, ValueId rows, const Shape& xs, int64_t axis) {
  auto wanted = [&](size_t o) {
    return o < n.outputs.size() && !n.outputs[o].empty() && (!graph_.consumers_of(n.outputs[o]).empty() || graph_.outputs.count(n.outputs[o]));
  };
  if (!wanted(1) && !wanted(2)) return;
  std::vector<int64_t> stat_dims = xs.dims;
  for (size_t d = static_cast<size_t>(axis); d < stat_dims.size(); ++d) stat_dims[d] = 1;
  Attributes mean_attrs;
  mean_attrs.values["axes"] = std::vector<int64_t>{-1};
  mean_attrs.values["keepdims"] = true;
  mean_attrs.values["fn"] = std::string("mean");
  const std::string base = n.outputs[0];
  const ValueId mean = emit(e, n, "reduce", {rows}, mean_attrs, {}, base + ".mean");
  if (wanted(1)) e.runtime[n.outputs[1]] = reshape_to(e, n, mean, stat_dims, n.outputs[1]);
  if (!wanted(2)) return;
  const ValueId d = emit(e, n, "binary", {rows, mean}, fn_attr("sub"), {}, base + ".centered");
  const ValueId sq = emit(e, n, "binary", {d, d}, fn_attr("mul"), {}, base + ".squared");
  const ValueId var = emit(e, n, "reduce", {sq}, mean_attrs, {}, base + ".variance");
  const std::string eps_name = base + ".epsilon";
  e.consts[eps_name] = std::make_shared<const Tensor>(Tensor{kFloat, {1}, {attr_float(n, "epsilon", 1e-5f)}, {}});
  const ValueId eps = weight_value(e, eps_name, e.g.value(var).proto.dtype, node_ctx(n).location);
  const ValueId sum = emit(e, n, "binary", {var, eps}, fn_attr("add"), {}, base + ".variance_eps");
  const ValueId root = emit(e, n, "unary", {sum}, fn_attr("sqrt"), {}, base + ".stddev");
  const ValueId inv = emit(e, n, "unary", {root}, fn_attr("reciprocal"), {}, base + ".inv_stddev");
  e.runtime[n.outputs[2]] = reshape_to(e, n, inv, stat_dims, n.outputs[2]);
}

// ONNX Attention (opset 23): tec's attention, whose GQA maps query head h to kv head
// h / (q_num_heads / kv_num_heads) as ONNX's does. The 3-D form, [batch, seq, heads x
// head_dim] with the head counts as attributes, maps directly; the 4-D form, [batch, heads,
// seq, head_dim], through transposes.
void Builder::emit_attention(Env& e, const Node& n) {
  const ErrorContext ctx = node_ctx(n);
  static const char* const kOptionalInputs[] = {"attn_mask", "past_key", "past_value", "nonpad_kv_seqlen"};
  for (size_t i = 4; i < n.inputs.size(); ++i)
    TEC_UNSUPPORTED_CHECK(n.inputs[i].empty(), ctx)
        << "input " << i << " ('" << n.inputs[i] << "', " << (i < 7 ? kOptionalInputs[i - 3] : "past the spec's seven")
        << "): tec's attention takes Q, K, V and a float attn_mask, with is_causal for the causal mask";
  static const char* const kExtraOutputs[] = {"present_key", "present_value", "qk_matmul_output"};
  TEC_USER_CHECK(!n.outputs.empty() && !n.outputs[0].empty(), ctx) << "Attention has no output Y";
  for (size_t i = 1; i < n.outputs.size(); ++i)
    TEC_UNSUPPORTED_CHECK(n.outputs[i].empty(), ctx) << "output " << i << " ('" << n.outputs[i] << "', "
                                                     << (i <= 3 ? kExtraOutputs[i - 1] : "past the spec's four")
                                                     << "): tec's attention makes Y alone";
  // Attributes a later opset adds (opset 25's sliding windows) change the result: refused
  // unless tec knows them.
  static const std::set<std::string> kKnown = {"is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode",
                                               "scale",     "softcap",      "softmax_precision"};
  for (const auto& [name, value] : n.attrs) TEC_UNSUPPORTED_CHECK(kKnown.count(name) != 0, ctx) << "attribute " << name;
  TEC_UNSUPPORTED_CHECK(attr_float(n, "softcap", 0.0f) == 0.0f, ctx) << "softcap " << attr_float(n, "softcap", 0.0f);
  TEC_UNSUPPORTED_CHECK(attr_int(n, "qk_matmul_output_mode", 0) == 0, ctx)
      << "qk_matmul_output_mode " << attr_int(n, "qk_matmul_output_mode", 0);
  const ValueId q = runtime(e, n.inputs[0], n), k = runtime(e, n.inputs[1], n), v = runtime(e, n.inputs[2], n);
  // attn_mask: a float one is added to the scaled scores (tec's additive mask); a boolean one
  // (true: attend) is not taken yet.
  std::optional<ValueId> mask;
  if (n.inputs.size() > 3 && !n.inputs[3].empty()) {
    const auto type = graph_.types.find(n.inputs[3]);
    const bool boolean = e.consts.count(n.inputs[3]) ? e.consts.at(n.inputs[3])->elem_type == kBool
                                                     : type != graph_.types.end() && type->second == kBool;
    TEC_UNSUPPORTED_CHECK(!boolean, ctx) << "input 3 ('" << n.inputs[3]
                                         << "', attn_mask) is boolean; tec's attention takes a float (additive) attn_mask";
    mask = operand(e, n.inputs[3], e.g.value(q).proto.dtype, n);
  }
  const int64_t rank = static_cast<int64_t>(e.g.value(q).proto.shape.rank());
  Attributes a;
  a.values["causal"] = attr_int(n, "is_causal", 0) != 0;
  a.values["scale"] = static_cast<double>(attr_float(n, "scale", 0.0f));  // 0: 1 / sqrt(head_dim), ONNX's default too
  const int64_t heads = attr_int(n, "q_num_heads", 0), kv_heads = attr_int(n, "kv_num_heads", 0);
  if (rank == 4) {
    // The heads come from the shapes; the attributes, if given, must agree.
    const Shape &qs = e.g.value(q).proto.shape, &ks = e.g.value(k).proto.shape;
    TEC_USER_CHECK((heads == 0 || heads == qs[1]) && (kv_heads == 0 || kv_heads == ks.dims.at(1)), ctx)
        << "q_num_heads " << heads << " and kv_num_heads " << kv_heads << " disagree with Q " << qs.str() << " and K " << ks.str();
  } else {
    TEC_USER_CHECK(heads >= 1 && kv_heads >= 1, ctx)
        << "3-D Q, K and V need the attributes q_num_heads and kv_num_heads (>= 1), got " << heads << " and " << kv_heads;
    a.values["heads"] = heads;
    a.values["kv_heads"] = kv_heads;
  }
  e.runtime[n.outputs[0]] = emit_attention_of(e, n, q, k, v, mask, a, n.outputs[0]);
}

// Trilu of a run-time value: where(keep, x, 0), `keep` a constant [rows, cols] mask (shapes are
// fixed per profile), the triangle the fold keeps (onnx_fold.cpp): upper j - i >= k, lower
// j - i <= k.
void Builder::emit_trilu(Env& e, const Node& n) {
  const ValueId x = runtime(e, n.inputs[0], n);
  const Shape xs = e.g.value(x).proto.shape;
  const DType dtype = e.g.value(x).proto.dtype;
  TEC_USER_CHECK(xs.rank() >= 2, node_ctx(n)) << "Trilu needs a tensor of rank 2 or more, got " << xs.str();
  std::vector<int64_t> k_values = n.inputs.size() > 1 && !n.inputs[1].empty() ? as_ints(*e.consts.at(n.inputs[1])) : std::vector<int64_t>{0};
  TEC_USER_CHECK(k_values.size() == 1, node_ctx(n)) << "k must be one integer, got " << k_values.size() << " values";
  const int64_t k = k_values[0], rows = xs[xs.rank() - 2], cols = xs[xs.rank() - 1];
  const bool upper = attr_int(n, "upper", 1) != 0;
  Tensor keep{.elem_type = kBool, .dims = {rows, cols}, .floats = {}, .ints = {}};
  keep.ints.reserve(static_cast<size_t>(checked_mul(rows, cols)));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) keep.ints.push_back(upper ? j - i >= k : j - i <= k);
  const std::string keep_name = unique(e, n.outputs[0] + ".keep"), zero_name = unique(e, n.outputs[0] + ".zero");
  e.consts[keep_name] = std::make_shared<const Tensor>(std::move(keep));
  e.consts[zero_name] = std::make_shared<const Tensor>(Tensor{.elem_type = kFloat, .dims = {1}, .floats = {0.0f}, .ints = {}});
  const std::string source = node_ctx(n).location;
  e.runtime[n.outputs[0]] = emit(e, n, "where", {weight_value(e, keep_name, DType::uint8, source), x, weight_value(e, zero_name, dtype, source)},
                                 {}, {}, n.outputs[0]);
}

void Builder::emit_embedding(Env& e, const Node& n) {
  const ErrorContext ctx = node_ctx(n);
  TEC_UNSUPPORTED_CHECK(graph_.is_embedding_lookup(n), ctx) << "Gather on run-time data is not supported (tec takes a constant table's rows)";
  const Tensor& table = *e.consts.at(n.inputs[0]);
  TEC_UNSUPPORTED_CHECK(table.dims.size() == 2 && table.is_float(), ctx)
      << "an embedding lookup reads a 2-D float table; '" << n.inputs[0] << "' is " << elem_type_name(table.elem_type)
      << " of rank " << table.dims.size();
  const ValueId ids = runtime(e, n.inputs[1], n);
  TEC_UNSUPPORTED_CHECK(e.g.value(ids).proto.dtype == DType::int32, ctx)
      << "the indices '" << n.inputs[1] << "' are computed at run time from floats; tec takes token ids from an INT64 or INT32 "
      << "graph input";
  Attributes a;
  a.values["num_embeddings"] = table.dims[0];
  a.values["embedding_dim"] = table.dims[1];
  a.values["dtype"] = std::string(to_string(tec_dtype(table.elem_type).value_or(DType::fp32)));
  e.runtime[n.outputs[0]] = emit(e, n, "embedding", {ids}, a, {table.floats}, n.outputs[0]);
}

}  // namespace tec::onnx
