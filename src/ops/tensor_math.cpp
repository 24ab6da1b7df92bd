// General tensor math: numpy-broadcast binary ops, unary math, matmul, reduce, transpose and
// cast. The ONNX frontend maps a standalone ONNX op here when it is not part of a pattern that
// becomes one of the TE ops (linear, gelu, layernorm, ...), so that a model with an unusual
// spelling still runs. binary, unary, cast and transpose are row kernels on the GPU
// (src/codegen/lower.cpp); matmul and reduce are on the general path (ir/general_kernel.h).
// Both compute the bits of the references here, through kernels/tec_math.h.
#include <algorithm>
#include <cmath>
#include <set>

#include "core/parallel.h"
#include "ops/common.h"
#include "ops/general.h"
#include "ops/gradient.h"
#include "tec_math.h"

namespace tec {

namespace {

const std::vector<std::string> kBinaryFunctions = {"add", "sub", "mul", "div", "pow"};
const std::vector<std::string> kUnaryFunctions = {"sigmoid", "tanh", "erf", "sqrt", "reciprocal", "neg", "exp", "log", "abs", "cos", "sin"};

DType common_dtype(const InferContext& ctx) {
  const DType a = ctx.inputs[0].dtype, b = ctx.inputs[1].dtype;
  TEC_USER_CHECK(a == b, ctx.error) << "dtype mismatch: " << ctx.node.attrs.get_string("fn", "") << " needs equal dtypes, got "
                                    << to_string(a) << " and " << to_string(b);
  return a;
}

InferResult infer_binary(const InferContext& ctx) {
  require_high_precision(ctx, 0);
  require_high_precision(ctx, 1);
  const DType dtype = common_dtype(ctx);
  const Shape out = broadcast_shape_checked(ctx.inputs[0].shape, ctx.inputs[1].shape, ctx.error);
  return InferResult{{TensorProto::dense(out, dtype)}, {}, {}};
}

}  // namespace

int binary_function_code(const std::string& fn) {
  const auto it = std::find(kBinaryFunctions.begin(), kBinaryFunctions.end(), fn);
  TEC_INTERNAL_CHECK(it != kBinaryFunctions.end(), {}) << "unknown binary function '" << fn << "'";
  return static_cast<int>(it - kBinaryFunctions.begin());  // the order of TEC_BINARY_* in tec_math.h
}

int unary_function_code(const std::string& fn) {
  const auto it = std::find(kUnaryFunctions.begin(), kUnaryFunctions.end(), fn);
  TEC_INTERNAL_CHECK(it != kUnaryFunctions.end(), {}) << "unknown unary function '" << fn << "'";
  return static_cast<int>(it - kUnaryFunctions.begin());  // the order of TEC_UNARY_* in tec_math.h
}

namespace {

static_assert(TEC_BINARY_POW == 4 && TEC_UNARY_SIN == 10, "kBinaryFunctions / kUnaryFunctions follow tec_math.h's codes");

std::vector<HostTensor> reference_binary(const Attributes& attrs, const std::vector<HostTensor>& in) {
  const int fn = binary_function_code(attrs.get_string("fn", "add"));
  const Shape out_shape = broadcast_shape_checked(in[0].shape, in[1].shape, {});
  const auto ia = broadcast_index(in[0].shape, out_shape), ib = broadcast_index(in[1].shape, out_shape);
  HostTensor out{out_shape, std::vector<float>(ia.size())};
  for (size_t e = 0; e < ia.size(); ++e) out.values[e] = tec_apply_binary(fn, in[0].values[ia[e]], in[1].values[ib[e]]);
  return {std::move(out)};
}

std::vector<HostTensor> reference_unary(const Attributes& attrs, const std::vector<HostTensor>& in) {
  const int fn = unary_function_code(attrs.get_string("fn", "sigmoid"));
  HostTensor out = in[0];
  for (float& v : out.values) v = tec_apply_unary(fn, v);
  return {std::move(out)};
}

InferResult infer_dense_same(const InferContext& ctx) {
  require_high_precision(ctx, 0);
  return InferResult{{dense_like(ctx.inputs[0])}, {}, {}};
}

// matmul with numpy semantics: 1-D operands are promoted and the promoted dim dropped,
// batch dims broadcast.
struct MatmulShapes {
  Shape a, b;  // promoted to rank >= 2
  Shape batch;
  int64_t m, k, n;
  Shape out;
};

std::optional<MatmulShapes> matmul_shapes(const Shape& a0, const Shape& b0, std::string& why) {
  if (a0.rank() == 0 || b0.rank() == 0) {
    why = "matmul operands must have rank >= 1";
    return std::nullopt;
  }
  MatmulShapes s;
  s.a = a0.rank() == 1 ? Shape{1, a0[0]} : a0;
  s.b = b0.rank() == 1 ? Shape{b0[0], 1} : b0;
  s.m = s.a.dims[s.a.rank() - 2];
  s.k = s.a.back();
  s.n = s.b.back();
  if (s.b.dims[s.b.rank() - 2] != s.k) {
    why = "inner dims differ: " + a0.str() + " x " + b0.str();
    return std::nullopt;
  }
  auto batch = broadcast_shape(Shape(std::vector<int64_t>(s.a.dims.begin(), s.a.dims.end() - 2)),
                               Shape(std::vector<int64_t>(s.b.dims.begin(), s.b.dims.end() - 2)));
  if (!batch) {
    why = "batch dims do not broadcast: " + a0.str() + " x " + b0.str();
    return std::nullopt;
  }
  s.batch = *batch;
  std::vector<int64_t> out = s.batch.dims;
  if (a0.rank() != 1) out.push_back(s.m);
  if (b0.rank() != 1) out.push_back(s.n);
  s.out = Shape(out);
  return s;
}

MatmulShapes matmul_shapes_checked(const Shape& a, const Shape& b, const ErrorContext& ctx) {
  std::string why;
  auto s = matmul_shapes(a, b, why);
  TEC_USER_CHECK(s.has_value(), ctx) << why;
  return *s;
}

// The batch dims broadcast through each operand's batch strides; rows of a, columns of b.
GeneralPlan matmul_plan(const Attributes&, const std::vector<Shape>& in) {
  const MatmulShapes s = matmul_shapes_checked(in.at(0), in.at(1), {});
  GeneralPlan p;
  p.kernel = GeneralKernel::matmul;
  p.out_dims = s.out.dims;
  p.m = s.m, p.n = s.n, p.k = s.k;
  p.dims = s.batch.dims;
  for (const auto& [operand, matrix] : {std::pair{&s.a, s.m * s.k}, std::pair{&s.b, s.k * s.n}}) {
    std::vector<int64_t> strides = broadcast_strides(Shape(std::vector<int64_t>(operand->dims.begin(), operand->dims.end() - 2)), s.batch);
    for (int64_t& st : strides) st *= matrix;
    p.strides.push_back(std::move(strides));
  }
  merge_dims(p.dims, {&p.strides[0], &p.strides[1]}, "a matmul's batch");
  return p;
}

DType matmul_dtype(const InferContext& ctx) {
  require_high_precision(ctx, 0);
  require_high_precision(ctx, 1);
  return common_dtype(ctx);
}

// Axes normalized to [0, rank), sorted; empty means all.
std::vector<size_t> normalized_axes(const std::vector<int64_t>& axes, size_t rank, const ErrorContext& ctx, const char* what) {
  std::vector<size_t> out;
  for (int64_t a : axes) {
    const int64_t r = static_cast<int64_t>(rank);
    TEC_USER_CHECK(a >= -r && a < r, ctx) << what << " axis " << a << " is out of range for rank " << rank;
    out.push_back(static_cast<size_t>(a < 0 ? a + r : a));
  }
  std::sort(out.begin(), out.end());
  TEC_USER_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), ctx) << what << " axes repeat";
  return out;
}

Shape reduced_shape(const Shape& in, const std::vector<size_t>& axes, bool keepdims) {
  std::vector<int64_t> out;
  for (size_t d = 0; d < in.rank(); ++d) {
    const bool reduced = axes.empty() || std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!reduced)
      out.push_back(in.dims[d]);
    else if (keepdims)
      out.push_back(1);
  }
  return Shape(out);
}

const std::vector<std::string> kReduceFunctions = {"sum", "mean", "max"};  // the order of TEC_REDUCE_*
static_assert(TEC_REDUCE_MAX == 2, "kReduceFunctions follows tec_math.h's codes");

// One output per kept index (row-major, the output's order), its reduced elements in
// row-major order of the reduced dims.
GeneralPlan reduce_plan(const Attributes& attrs, const std::vector<Shape>& in) {
  const Shape& x = in.at(0);
  const auto axes = normalized_axes(attrs.get_ints("axes"), x.rank(), {}, "reduce");
  const std::string fn = attrs.get_string("fn", "");
  const auto code = std::find(kReduceFunctions.begin(), kReduceFunctions.end(), fn);
  TEC_USER_CHECK(code != kReduceFunctions.end(), {}) << "unknown reduce function '" << fn << "'";
  GeneralPlan p;
  p.kernel = GeneralKernel::reduce;
  p.code = static_cast<int>(code - kReduceFunctions.begin());
  p.out_dims = reduced_shape(x, axes, attrs.get_bool("keepdims", true)).dims;
  p.strides.emplace_back();
  const std::vector<int64_t> strides = x.contiguous_strides();
  for (size_t d = 0; d < x.rank(); ++d) {
    const bool reduced = axes.empty() || std::find(axes.begin(), axes.end(), d) != axes.end();
    (reduced ? p.reduced_dims : p.dims).push_back(x.dims[d]);
    (reduced ? p.reduced_strides : p.strides[0]).push_back(strides[d]);
  }
  merge_dims(p.dims, {&p.strides[0]}, "a reduction's kept dims");
  merge_dims(p.reduced_dims, {&p.reduced_strides}, "a reduction's reduced dims");
  return p;
}

std::vector<size_t> permutation(const Attributes& attrs, size_t rank, const ErrorContext& ctx) {
  std::vector<int64_t> perm = attrs.get_ints("perm");
  if (perm.empty())
    for (size_t d = rank; d-- > 0;) perm.push_back(static_cast<int64_t>(d));
  TEC_USER_CHECK(perm.size() == rank, ctx) << "perm has " << perm.size() << " entries for a rank-" << rank << " tensor";
  (void)normalized_axes(perm, rank, ctx, "transpose");  // range and repeats
  std::vector<size_t> out;
  for (int64_t p : perm) out.push_back(static_cast<size_t>(p < 0 ? p + static_cast<int64_t>(rank) : p));
  return out;
}

Shape permuted(const Shape& s, const std::vector<size_t>& perm) {
  std::vector<int64_t> out;
  for (size_t p : perm) out.push_back(s.dims[p]);
  return Shape(out);
}

InferResult infer_transpose(const InferContext& ctx) {
  require_high_precision(ctx, 0);
  const TensorProto& x = ctx.inputs[0];
  return InferResult{{TensorProto::dense(permuted(x.shape, permutation(ctx.node.attrs, x.shape.rank(), ctx.error)), x.dtype)},
                     {},
                     {}};
}

std::vector<HostTensor> reference_transpose(const Attributes& attrs, const std::vector<HostTensor>& in) {
  const HostTensor& x = in[0];
  const auto perm = permutation(attrs, x.shape.rank(), {});
  const Shape out_shape = permuted(x.shape, perm);
  const auto in_strides = x.shape.contiguous_strides();
  HostTensor out{out_shape, std::vector<float>(x.values.size())};
  std::vector<int64_t> coord(out_shape.rank(), 0);
  for (size_t e = 0; e < out.values.size(); ++e) {
    int64_t offset = 0;
    for (size_t d = 0; d < coord.size(); ++d) offset += coord[d] * in_strides[perm[d]];
    out.values[e] = x.values[static_cast<size_t>(offset)];
    for (size_t d = coord.size(); d-- > 0;) {
      if (++coord[d] < out_shape.dims[d]) break;
      coord[d] = 0;
    }
  }
  return {std::move(out)};
}

InferResult infer_cast(const InferContext& ctx) {
  require_high_precision(ctx, 0);
  return InferResult{{TensorProto::dense(ctx.inputs[0].shape, *parse_dtype(ctx.node.attrs.get_string("dtype", "fp32")))}, {}, {}};
}

// The gradients (OpDef::gradient): graphs of the forward ops and gradient_map's steps.

bool needs_gradient(GradientBuilder& b, size_t slot) { return b.proto(b.input(slot)).requires_grad; }

ValueId binary_node(GradientBuilder& b, const std::string& fn, ValueId x, ValueId y, const std::string& label) {
  Attributes attrs;
  attrs.values["fn"] = fn;
  return b.emit("binary", {x, y}, std::move(attrs), label);
}

ValueId unary_node(GradientBuilder& b, const std::string& fn, ValueId x, const std::string& label) {
  Attributes attrs;
  attrs.values["fn"] = fn;
  return b.emit("unary", {x}, std::move(attrs), label);
}

std::vector<ValueId> gradient_binary(GradientBuilder& b) {
  const std::string fn = b.attrs().get_string("fn", "");
  const ValueId dy = b.grad_output(), x = b.input(0), w = b.input(1), y = b.output();
  ValueId da = -1, db = -1;
  if (fn == "add" || fn == "sub") {
    da = dy;
    if (needs_gradient(b, 1)) db = fn == "add" ? dy : unary_node(b, "neg", dy, "dinput1");
  } else if (fn == "mul") {
    if (needs_gradient(b, 0)) da = binary_node(b, "mul", dy, w, "dinput");
    if (needs_gradient(b, 1)) db = binary_node(b, "mul", dy, x, "dinput1");
  } else if (fn == "div") {
    if (needs_gradient(b, 0)) da = binary_node(b, "div", dy, w, "dinput");
    if (needs_gradient(b, 1)) db = gradient_map(b, "div_divisor", {dy, y, w}, "dinput1");
  } else {
    if (needs_gradient(b, 0)) da = gradient_map(b, "pow_base", {dy, x, w}, "dinput");
    if (needs_gradient(b, 1)) db = gradient_map(b, "pow_exponent", {dy, y, x}, "dinput1");
  }
  if (!needs_gradient(b, 0)) da = -1;
  if (da >= 0) da = sum_to_shape(b, da, b.proto(x).shape, "dinput_sum");
  if (db >= 0) db = sum_to_shape(b, db, b.proto(w).shape, "dinput1_sum");
  return {da, db};
}

std::vector<ValueId> gradient_unary(GradientBuilder& b) {
  const std::string fn = b.attrs().get_string("fn", "");
  if (fn == "neg") return {unary_node(b, "neg", b.grad_output(), "dinput")};
  // What each derivative is written in: the output where it is cheaper (exp, tanh), else the input.
  static const std::set<std::string> kFromOutput = {"sigmoid", "tanh", "sqrt", "reciprocal", "exp"};
  return {gradient_map(b, fn, {b.grad_output(), kFromOutput.count(fn) ? b.output() : b.input(0)}, "dinput")};
}

ValueId transposed(GradientBuilder& b, ValueId v, std::vector<int64_t> perm, const std::string& label) {
  Attributes attrs;
  attrs.values["perm"] = std::move(perm);
  return b.emit("transpose", {v}, std::move(attrs), label);
}

// The last two dims swapped.
ValueId matrix_transposed(GradientBuilder& b, ValueId v, const std::string& label) {
  std::vector<int64_t> perm;
  for (size_t d = 0; d < b.proto(v).shape.rank(); ++d) perm.push_back(static_cast<int64_t>(d));
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return transposed(b, v, std::move(perm), label);
}

// y = a @ b over promoted operands a' [.., m, k], b' [.., k, n] and dy' [batch.., m, n]:
// da' = dy' @ b'^T and db' = a'^T @ dy', each summed over the batch dims its operand broadcast.
std::vector<ValueId> gradient_matmul(GradientBuilder& b) {
  const Shape a_shape = b.proto(b.input(0)).shape, b_shape = b.proto(b.input(1)).shape;
  const MatmulShapes s = matmul_shapes_checked(a_shape, b_shape, {});
  std::vector<int64_t> dy_dims = s.batch.dims;
  dy_dims.push_back(s.m);
  dy_dims.push_back(s.n);
  const ValueId dy = reshaped(b, b.grad_output(), Shape(dy_dims), "doutput_matrix");
  ValueId da = -1, db = -1;
  if (needs_gradient(b, 0)) {
    const ValueId bt = matrix_transposed(b, reshaped(b, b.input(1), s.b, "input1_matrix"), "input1_transposed");
    da = b.emit("matmul", {dy, bt}, {}, "dinput_full");
    da = reshaped(b, sum_to_shape(b, da, s.a, "dinput_sum"), a_shape, "dinput");
  }
  if (needs_gradient(b, 1)) {
    const ValueId at = matrix_transposed(b, reshaped(b, b.input(0), s.a, "input_matrix"), "input_transposed");
    db = b.emit("matmul", {at, dy}, {}, "dinput1_full");
    db = reshaped(b, sum_to_shape(b, db, s.b, "dinput1_sum"), b_shape, "dinput1");
  }
  return {da, db};
}

// sum: dy spread over the reduced dims; mean: divided by their count; max: dy split evenly
// among the elements equal to the maximum (as torch.amax's gradient).
std::vector<ValueId> gradient_reduce(GradientBuilder& b) {
  const Shape x = b.proto(b.input(0)).shape;
  const auto axes = normalized_axes(b.attrs().get_ints("axes"), x.rank(), {}, "reduce");
  const Shape kept = reduced_shape(x, axes, true);
  Attributes expand;
  expand.values["shape"] = x.dims;
  const std::string fn = b.attrs().get_string("fn", "");
  const ValueId dy = reshaped(b, b.grad_output(), kept, "doutput_kept");
  if (fn == "max") {
    const ValueId y = reshaped(b, b.output(), kept, "output_kept");
    const ValueId picked = gradient_map(b, "max", {dy, b.input(0), y}, "dinput_picked");
    Attributes equal, as_float, count;
    equal.values["fn"] = std::string("equal");
    as_float.values["dtype"] = std::string(to_string(b.proto(b.input(0)).dtype));
    count.values["fn"] = std::string("sum");
    count.values["axes"] = b.attrs().get_ints("axes");
    count.values["keepdims"] = true;
    const ValueId is_max = b.emit("compare", {b.input(0), y}, std::move(equal), "input_is_max");
    const ValueId ties = b.emit("reduce", {b.emit("convert", {is_max}, std::move(as_float), "input_is_max_float")}, std::move(count), "max_count");
    return {binary_node(b, "div", picked, ties, "dinput")};
  }
  ValueId dx = b.emit("expand", {dy}, std::move(expand), "dinput");
  if (fn == "mean") {
    Attributes scale;
    scale.values["scale"] = 1.0 / static_cast<double>(x.numel() / kept.numel());
    dx = b.emit("scale", {dx}, std::move(scale), "dinput_mean");
  }
  return {dx};
}

std::vector<ValueId> gradient_transpose(GradientBuilder& b) {
  const auto perm = permutation(b.attrs(), b.proto(b.input(0)).shape.rank(), {});
  std::vector<int64_t> inverse(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) inverse[perm[d]] = static_cast<int64_t>(d);
  return {transposed(b, b.grad_output(), std::move(inverse), "dinput")};
}

}  // namespace

void register_tensor_math_ops(OpRegistry& registry) {
  registry.add(OpDef{
      .name = "binary",
      .summary = "a (fn) b elementwise with numpy broadcasting: add, sub, mul, div, pow",
      .min_inputs = 2,
      .max_inputs = 2,
      .attrs = {{"fn", AttrType::string_, std::nullopt, kBinaryFunctions, "the function"}},
      .infer = infer_binary,
      .gradient = gradient_binary,
      .reference = reference_binary,
  });
  registry.add(OpDef{
      .name = "unary",
      .summary = "fn(x) elementwise: sigmoid, tanh, erf, sqrt, reciprocal, neg, exp, log, abs, cos, sin",
      .attrs = {{"fn", AttrType::string_, std::nullopt, kUnaryFunctions, "the function"}},
      .infer = infer_dense_same,
      .gradient = gradient_unary,
      .reference = reference_unary,
  });
  registry.add(OpDef{
      .name = "matmul",
      .summary = "a @ b with numpy semantics (batch broadcasting, 1-D promotion), both operands at run time, fp32 "
                 "accumulation (general path; a constant 2-D b becomes linear)",
      .min_inputs = 2,
      .max_inputs = 2,
      .infer = general_infer(matmul_plan, matmul_dtype),
      .gradient = gradient_matmul,
      .reference = general_reference(matmul_plan),
      .general = matmul_plan,
  });
  registry.add(OpDef{
      .name = "reduce",
      .summary = "sum, mean or max over axes (all when empty) (general path: any axes)",
      .attrs = {{"fn", AttrType::string_, std::nullopt, kReduceFunctions, "the reduction"},
                {"axes", AttrType::ints, AttrValue{std::vector<int64_t>{}}, {}, "axes to reduce; empty: all"},
                {"keepdims", AttrType::bool_, AttrValue{true}, {}, "keep reduced dims as 1"}},
      .infer = general_infer(reduce_plan,
                             [](const InferContext& ctx) {
                               require_high_precision(ctx, 0);
                               return ctx.inputs[0].dtype;
                             }),
      .gradient = gradient_reduce,
      .reference = general_reference(reduce_plan),
      .general = reduce_plan,
  });
  registry.add(OpDef{
      .name = "transpose",
      .summary = "permute the dims (default: reverse)",
      .attrs = {{"perm", AttrType::ints, AttrValue{std::vector<int64_t>{}}, {}, "the permutation; empty: reverse"}},
      .infer = infer_transpose,
      .gradient = gradient_transpose,
      .reference = reference_transpose,
  });
  registry.add(OpDef{
      .name = "cast",
      .summary = "convert between fp32, fp16 and bf16 (round to nearest even)",
      .attrs = {{"dtype", AttrType::string_, std::nullopt, {"fp32", "fp16", "bf16"}, "output dtype"}},
      .infer = infer_cast,
      .gradient = [](GradientBuilder& b) {
        return std::vector<ValueId>{cast_to(b, b.grad_output(), b.proto(b.input(0)).dtype, "dinput")};
      },
      .reference = identity_reference,
  });
}

}  // namespace tec
