// Constant folding of ONNX nodes, and the shape rules the importer shares with it (Reshape's
// 0 and -1, Squeeze, Unsqueeze, Flatten). Float math folds through the tec ops' own CPU
// references, so a folded constant and a run-time op compute the same values.
#include "frontend/onnx/onnx_fold.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "ops/common.h"
#include "reference/convert.h"
#include "reference/quantize.h"

namespace tec::onnx {

const std::map<std::string, std::string> kBinaryFunctions = {
    {"Add", "add"}, {"Sub", "sub"}, {"Mul", "mul"}, {"Div", "div"}, {"Pow", "pow"}};
const std::map<std::string, std::string> kUnaryFunctions = {
    {"Sigmoid", "sigmoid"}, {"Tanh", "tanh"}, {"Erf", "erf"}, {"Sqrt", "sqrt"}, {"Reciprocal", "reciprocal"}, {"Neg", "neg"},
    {"Exp", "exp"}, {"Log", "log"}, {"Abs", "abs"}};

std::optional<DType> tec_dtype(int32_t elem_type) {
  switch (elem_type) {
    case kFloat: return DType::fp32;
    case kFloat16: return DType::fp16;
    case kBfloat16: return DType::bf16;
    default: return std::nullopt;
  }
}


bool foldable(const std::string& op) {
  static const std::set<std::string> ops = {"Constant", "Identity", "Shape",     "Gather",  "Concat", "Unsqueeze",
                                            "Squeeze",  "Reshape",  "Flatten",   "Cast",    "Add",    "Sub",
                                            "Mul",      "Div",      "Pow",       "Sqrt",    "Neg",    "Reciprocal",
                                            "Transpose", "Relu",    "Sigmoid",   "Tanh",    "Erf", "Exp", "Log", "Abs",
                                            "DequantizeLinear",     "QuantizeLinear",
                                            // Hugging Face's rotary tables and causal mask, made in forward
                                            // from constants: inv_freq x positions, cos, sin; triu of -inf.
                                            "MatMul", "Cos", "Sin", "Trilu",
                                            // torch.onnx's expand(): Where(Equal(shape, -1), ones, shape),
                                            // the ones a ConstantOfShape (Hugging Face's repeat_kv).
                                            "ConstantOfShape", "Equal", "Where",
                                            // an exporter's mask.expand(batch, 1, S, S) of a constant mask
                                            "Expand",
                                            // shape arithmetic: shape[:-2] and the like
                                            "Slice",
                                            // a padding mask's arithmetic, evaluated at probe masks
                                            // (onnx_mask_probe.h): comparisons, logic, GatherND
                                            "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Not",
                                            "GatherND",
                                            // positions: arange(seq) with seq from a Shape
                                            "Range"};
  return ops.count(op) != 0;
}


namespace {
// Folding may make a constant larger than its inputs (broadcasting, a Gather that repeats
// indices), but not without bound: two tiny constants could otherwise ask for terabytes.
// A folded constant may have this many elements (a 4096 x 4096 table), or as many as its
// largest input has.
constexpr int64_t kMaxFoldedElements = int64_t{1} << 24;

void check_folded_size(const Shape& out, std::initializer_list<const Tensor*> inputs) {
  int64_t largest = 0;
  for (const Tensor* t : inputs) largest = std::max(largest, t->numel());
  TEC_UNSUPPORTED_CHECK(out.numel() <= std::max(largest, kMaxFoldedElements), ErrorContext{})
      << "folding would make a constant of " << out.numel() << " elements " << out.str() << " from inputs of at most "
      << largest << "; tec folds a constant up to the size of its largest input, or " << kMaxFoldedElements << " elements";
}

// A float that must become an int64 (a shape, an index, a Cast to an integer type): a value
// outside int64's range or NaN has no integer (and converting it is undefined behaviour).
int64_t to_int64(double v) {
  TEC_USER_CHECK(std::isfinite(v) && std::fabs(v) < 0x1p62, {}) << "value " << v << " does not fit an integer";
  return static_cast<int64_t>(v);
}
}  // namespace

std::vector<int64_t> as_ints(const Tensor& t) {
  if (!t.is_float()) return t.ints;
  std::vector<int64_t> out;
  for (float f : t.floats) out.push_back(to_int64(f));
  return out;
}

int64_t axis_of(int64_t axis, size_t rank, const char* what) {
  const auto r = static_cast<int64_t>(rank);
  TEC_USER_CHECK(axis >= -r && axis < r, {}) << what << " " << axis << " is out of range for rank " << rank;
  return axis < 0 ? axis + r : axis;
}

int64_t attr_int(const Node& n, const std::string& name, int64_t fallback) {
  auto it = n.attrs.find(name);
  return it == n.attrs.end() ? fallback : it->second.i;
}
std::optional<std::vector<int64_t>> attr_ints(const Node& n, const std::string& name) {
  auto it = n.attrs.find(name);
  if (it == n.attrs.end()) return std::nullopt;
  return it->second.ints;
}
std::string attr_string(const Node& n, const std::string& name, const std::string& fallback) {
  auto it = n.attrs.find(name);
  return it == n.attrs.end() ? fallback : it->second.s;
}
float attr_float(const Node& n, const std::string& name, float fallback) {
  auto it = n.attrs.find(name);
  return it == n.attrs.end() ? fallback : it->second.f;
}

// The dims a Reshape produces (0 copies the input dim unless allowzero, one -1 inferred).
std::vector<int64_t> reshape_dims(const std::vector<int64_t>& in, std::vector<int64_t> shape, bool allowzero) {
  int64_t known = 1, infer = -1, numel = 1;
  for (int64_t d : in) {
    TEC_USER_CHECK(d >= 0 && (d == 0 || numel <= kMaxElements / d), {}) << "Reshape of an input of too many elements";
    numel *= d;
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allowzero) {
      TEC_USER_CHECK(i < in.size(), {}) << "Reshape copies dim " << i << " (0) of a rank-" << in.size() << " input";
      shape[i] = in[i];
    }
    if (shape[i] == -1) {
      TEC_USER_CHECK(infer < 0, {}) << "Reshape shape holds two -1";
      infer = static_cast<int64_t>(i);
      continue;
    }
    TEC_USER_CHECK(shape[i] >= 0 && shape[i] <= kMaxDim, {}) << "Reshape dim " << shape[i] << " is invalid";
    TEC_USER_CHECK(shape[i] == 0 || known <= kMaxElements / shape[i], {}) << "Reshape shape is too large";
    known *= shape[i];
  }
  if (infer >= 0) {
    TEC_USER_CHECK(known > 0 && numel % known == 0, {}) << "cannot infer the -1 of Reshape " << Shape(shape).str()
                                                        << " for " << numel << " elements";
    shape[static_cast<size_t>(infer)] = numel / known;
  }
  int64_t out = 1;
  for (int64_t d : shape) out *= d;
  TEC_USER_CHECK(out == numel, {}) << "cannot reshape " << Shape(in).str() << " into " << Shape(shape).str();
  return shape;
}

std::vector<int64_t> squeeze_dims(const std::vector<int64_t>& in, const std::optional<std::vector<int64_t>>& axes) {
  std::vector<int64_t> out;
  std::set<int64_t> drop;
  if (axes)
    for (int64_t a : *axes) {
      const int64_t ax = axis_of(a, in.size(), "Squeeze axis");
      TEC_USER_CHECK(in[static_cast<size_t>(ax)] == 1, {}) << "Squeeze axis " << a << " has size " << in[static_cast<size_t>(ax)];
      drop.insert(ax);
    }
  for (size_t i = 0; i < in.size(); ++i)
    if (axes ? !drop.count(static_cast<int64_t>(i)) : in[i] != 1) out.push_back(in[i]);
  return out;
}

std::vector<int64_t> unsqueeze_dims(const std::vector<int64_t>& in, const std::vector<int64_t>& axes) {
  const size_t rank = in.size() + axes.size();
  TEC_USER_CHECK(rank <= kMaxRank, {}) << "Unsqueeze makes rank " << rank;
  std::set<int64_t> add;
  for (int64_t a : axes) TEC_USER_CHECK(add.insert(axis_of(a, rank, "Unsqueeze axis")).second, {}) << "Unsqueeze axes repeat";
  std::vector<int64_t> out;
  size_t next = 0;
  for (size_t i = 0; i < rank; ++i) out.push_back(add.count(static_cast<int64_t>(i)) ? 1 : in.at(next++));
  return out;
}

std::vector<int64_t> flatten_dims(const std::vector<int64_t>& in, int64_t axis) {
  const int64_t a = axis < 0 ? axis + static_cast<int64_t>(in.size()) : axis;
  TEC_USER_CHECK(a >= 0 && a <= static_cast<int64_t>(in.size()), {}) << "Flatten axis " << axis << " is out of range";
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < in.size(); ++i) (static_cast<int64_t>(i) < a ? outer : inner) *= in[i];
  return {outer, inner};
}

// The dims of a runtime or constant value's tensor.
namespace {

Tensor ints_tensor(std::vector<int64_t> values, std::vector<int64_t> dims) {
  Tensor t;
  t.elem_type = kInt64;
  t.ints = std::move(values);
  t.dims = std::move(dims);
  return t;
}

std::vector<int64_t> dims_of(const std::string& v, const ConstMap& consts, const ShapeOf& shape_of) {
  if (auto it = consts.find(v); it != consts.end()) return it->second->dims;
  auto s = shape_of ? shape_of(v) : std::nullopt;
  TEC_INTERNAL_CHECK(s.has_value(), {}) << "no shape for '" << v << "'";
  return s->dims;
}

// Runs a float elementwise op through its OpDef's reference (one definition of the math).
Tensor via_reference(const std::string& op, Attributes attrs, const std::vector<const Tensor*>& in) {
  std::vector<HostTensor> host;
  for (const Tensor* t : in) {
    HostTensor h{Shape(t->dims), t->is_float() ? t->floats : std::vector<float>()};
    if (!t->is_float())
      for (int64_t v : t->ints) h.values.push_back(static_cast<float>(v));
    host.push_back(std::move(h));
  }
  auto out = builtin_ops().get(op).reference(attrs, host);
  Tensor t;
  t.elem_type = kFloat;
  t.dims = out[0].shape.dims;
  t.floats = std::move(out[0].values);
  return t;
}

// ONNX GatherND: index tuples of length r in the last dim of `indices` pick slices of `data`
// (batch_dims leading dims shared).
Tensor gather_nd(const Tensor& data, const Tensor& indices, int64_t batch_dims) {
  const auto rank = static_cast<int64_t>(data.dims.size()), index_rank = static_cast<int64_t>(indices.dims.size());
  TEC_USER_CHECK(index_rank >= 1 && batch_dims >= 0 && batch_dims < std::min(rank, index_rank), {})
      << "GatherND with batch_dims " << batch_dims << " of data rank " << rank << " and indices rank " << index_rank;
  const int64_t tuple = indices.dims.back();
  TEC_USER_CHECK(tuple >= 1 && tuple <= rank - batch_dims, {}) << "GatherND's index tuples have " << tuple << " entries for data of rank " << rank;
  for (int64_t d = 0; d < batch_dims; ++d)
    TEC_USER_CHECK(data.dims[static_cast<size_t>(d)] == indices.dims[static_cast<size_t>(d)], {}) << "GatherND's batch dims differ";
  int64_t batches = 1, slice = 1;
  for (int64_t d = 0; d < batch_dims; ++d) batches *= data.dims[static_cast<size_t>(d)];
  for (int64_t d = batch_dims + tuple; d < rank; ++d) slice *= data.dims[static_cast<size_t>(d)];
  Tensor t;
  t.elem_type = data.elem_type;
  t.dims.assign(indices.dims.begin(), indices.dims.end() - 1);
  t.dims.insert(t.dims.end(), data.dims.begin() + batch_dims + tuple, data.dims.end());
  check_folded_size(Shape(t.dims), {&data, &indices});
  const std::vector<int64_t> idx = as_ints(indices);
  const int64_t tuples = static_cast<int64_t>(idx.size()) / tuple, per_batch = tuples / batches;
  int64_t batch_stride = 1;
  for (int64_t d = batch_dims; d < rank; ++d) batch_stride *= data.dims[static_cast<size_t>(d)];
  for (int64_t q = 0; q < tuples; ++q) {
    int64_t offset = (q / per_batch) * batch_stride, stride = batch_stride;
    for (int64_t k = 0; k < tuple; ++k) {
      const int64_t extent = data.dims[static_cast<size_t>(batch_dims + k)];
      int64_t i = idx[static_cast<size_t>(q * tuple + k)];
      i = i < 0 ? i + extent : i;
      TEC_USER_CHECK(i >= 0 && i < extent, {}) << "GatherND index " << idx[static_cast<size_t>(q * tuple + k)] << " is out of range for dim " << extent;
      stride /= extent;
      offset += i * stride;
    }
    for (int64_t e = 0; e < slice; ++e) {
      const auto src = static_cast<size_t>(offset + e);
      if (data.is_float()) t.floats.push_back(data.floats.at(src));
      else t.ints.push_back(data.ints.at(src));
    }
  }
  return t;
}

Tensor integer_binary(const std::string& fn, const Tensor& a, const Tensor& b) {
  const Shape shape = broadcast_shape_checked(Shape(a.dims), Shape(b.dims), {});
  const auto ia = broadcast_index(Shape(a.dims), shape), ib = broadcast_index(Shape(b.dims), shape);
  Tensor t = ints_tensor({}, shape.dims);
  t.elem_type = a.elem_type;
  for (size_t e = 0; e < ia.size(); ++e) {
    const int64_t x = a.ints[ia[e]], y = b.ints[ib[e]];
    if (fn == "add") t.ints.push_back(x + y);
    else if (fn == "sub") t.ints.push_back(x - y);
    else if (fn == "mul") t.ints.push_back(x * y);
    else {
      TEC_USER_CHECK(y != 0, {}) << "integer division by zero in a constant";
      t.ints.push_back(x / y);
    }
  }
  return t;
}

// (De)quantization of a constant: the scale index of every element (scalar, per axis, or
// blocked along the axis).
std::vector<size_t> scale_index(const Node& n, const Tensor& x, const Tensor& scale, const Tensor* zp) {
  TEC_USER_CHECK(scale.is_float(), {}) << n.op_type << " scale must be a float tensor";
  TEC_USER_CHECK(!zp || zp->numel() == 1 || zp->dims == scale.dims, {})
      << n.op_type << " zero point has dims " << Shape(zp->dims).str() << "; it takes the scale's, " << Shape(scale.dims).str();
  std::vector<size_t> idx(static_cast<size_t>(x.numel()), 0);
  if (scale.numel() == 1) return idx;
  const int64_t axis = axis_of(attr_int(n, "axis", 1), x.dims.size(), "axis");
  const int64_t block = attr_int(n, "block_size", 0);
  std::vector<int64_t> sdims = x.dims;
  if (block > 0) {
    sdims[static_cast<size_t>(axis)] = ceil_div(x.dims[static_cast<size_t>(axis)], block);
    TEC_USER_CHECK(scale.dims == sdims, {}) << "blocked scale has dims " << Shape(scale.dims).str() << ", expected "
                                            << Shape(sdims).str();
  } else {
    TEC_USER_CHECK(scale.dims.size() == 1 && scale.dims[0] == x.dims[static_cast<size_t>(axis)], {})
        << "per-axis scale has dims " << Shape(scale.dims).str() << " for axis " << axis << " of " << Shape(x.dims).str();
  }
  const auto strides = Shape(x.dims).contiguous_strides();
  const auto scale_strides = Shape(sdims).contiguous_strides();
  for (size_t e = 0; e < idx.size(); ++e) {
    const int64_t coord = (static_cast<int64_t>(e) / strides[static_cast<size_t>(axis)]) % x.dims[static_cast<size_t>(axis)];
    if (block <= 0) {
      idx[e] = static_cast<size_t>(coord);
      continue;
    }
    // Same coordinates with the axis divided by the block, in the scale's strides.
    int64_t off = 0, rest = static_cast<int64_t>(e);
    for (size_t d = 0; d < x.dims.size(); ++d) {
      int64_t c = rest / strides[d];
      rest %= strides[d];
      if (static_cast<int64_t>(d) == axis) c /= block;
      off += c * scale_strides[d];
    }
    idx[e] = static_cast<size_t>(off);
  }
  return idx;
}

Tensor dequantize_constant(const Node& n, const Tensor& x, const Tensor& scale, const Tensor* zp) {
  const auto idx = scale_index(n, x, scale, zp);
  Tensor t;
  t.elem_type = scale.elem_type == kFloat8E8M0 ? kFloat : scale.elem_type;
  t.dims = x.dims;
  for (size_t e = 0; e < idx.size(); ++e) {
    const double q = x.at(e) - (zp ? zp->at(zp->numel() == 1 ? 0 : idx[e]) : 0.0);
    t.floats.push_back(static_cast<float>(q * scale.floats[idx[e]]));
  }
  if (t.elem_type != kFloat && tec_dtype(t.elem_type)) reference::round_to(*tec_dtype(t.elem_type), t.floats);
  return t;
}

Tensor quantize_constant(const Node& n, const Tensor& x, const Tensor& scale, const Tensor* zp) {
  int32_t out_type = zp ? zp->elem_type : static_cast<int32_t>(attr_int(n, "output_dtype", kUint8));
  if (out_type == 0) out_type = kUint8;
  TEC_USER_CHECK(x.is_float(), {}) << "QuantizeLinear input must be a float tensor";
  const auto idx = scale_index(n, x, scale, zp);
  Tensor t;
  t.elem_type = out_type;
  t.dims = x.dims;
  for (size_t e = 0; e < idx.size(); ++e) {
    const float v = x.floats[e] / scale.floats[idx[e]];
    switch (out_type) {
      case kFloat8E4M3FN: t.floats.push_back(reference::e4m3_to_float(reference::float_to_e4m3(v))); break;
      case kFloat8E5M2: t.floats.push_back(reference::e5m2_to_float(reference::float_to_e5m2(v))); break;
      case kInt8:
      case kUint8: {
        const double lo = out_type == kInt8 ? -128 : 0, hi = out_type == kInt8 ? 127 : 255;
        const double q = std::nearbyint(v) + (zp ? zp->at(zp->numel() == 1 ? 0 : idx[e]) : 0.0);
        t.ints.push_back(to_int64(std::clamp(q, lo, hi)));  // NaN stays NaN through clamp
        break;
      }
      default: TEC_UNSUPPORTED(ErrorContext{}) << "QuantizeLinear to " << elem_type_name(out_type) << " is not supported";
    }
  }
  return t;
}

}  // namespace

// Folds one constant node. `shape_of` gives run-time values' shapes (Shape nodes).
std::vector<TensorPtr> fold(const Node& n, const ConstMap& consts, const ShapeOf& shape_of) {
  auto in = [&](size_t i) -> const Tensor* {
    if (i >= n.inputs.size() || n.inputs[i].empty()) return nullptr;
    auto it = consts.find(n.inputs[i]);
    return it == consts.end() ? nullptr : it->second.get();
  };
  auto one = [](Tensor t) { return std::vector<TensorPtr>{std::make_shared<const Tensor>(std::move(t))}; };
  auto require = [&](size_t i) -> const Tensor& {
    const Tensor* t = in(i);
    TEC_USER_CHECK(t != nullptr, {}) << "input " << i << " is missing";
    return *t;
  };
  const std::string& op = n.op_type;
  if (op == "Constant") {
    TEC_USER_CHECK(n.attrs.size() == 1, {}) << "Constant needs exactly one value attribute";
    const auto& [name, a] = *n.attrs.begin();
    if (name == "value" && a.t) return one(*a.t);
    if (name == "value_float") return one(Tensor{kFloat, {}, {a.f}, {}});
    if (name == "value_floats") return one(Tensor{kFloat, {static_cast<int64_t>(a.floats.size())}, a.floats, {}});
    if (name == "value_int") return one(ints_tensor({a.i}, {}));
    if (name == "value_ints") return one(ints_tensor(a.ints, {static_cast<int64_t>(a.ints.size())}));
    TEC_UNSUPPORTED(ErrorContext{}) << "Constant with attribute '" << name << "' is not supported";
  }
  if (op == "Identity") return one(require(0));
  if (op == "Shape") {
    const std::vector<int64_t> dims = dims_of(n.inputs.at(0), consts, shape_of);
    const auto r = static_cast<int64_t>(dims.size());
    auto clamp_axis = [r](int64_t a) { return std::clamp(a < 0 ? a + r : a, int64_t{0}, r); };
    const int64_t start = clamp_axis(attr_int(n, "start", 0)), end = clamp_axis(attr_int(n, "end", r));
    std::vector<int64_t> out;
    for (int64_t i = start; i < end; ++i) out.push_back(dims[static_cast<size_t>(i)]);
    const auto count = static_cast<int64_t>(out.size());
    return one(ints_tensor(std::move(out), {count}));
  }
  if (op == "Gather") {
    const Tensor& data = require(0);
    const std::vector<int64_t> indices = as_ints(require(1));
    TEC_USER_CHECK(!data.dims.empty(), {}) << "Gather of a scalar";
    const int64_t axis = axis_of(attr_int(n, "axis", 0), data.dims.size(), "Gather axis");
    const int64_t extent = data.dims[static_cast<size_t>(axis)];
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < data.dims.size(); ++d)
      if (static_cast<int64_t>(d) < axis) outer *= data.dims[d];
      else if (static_cast<int64_t>(d) > axis) inner *= data.dims[d];
    Tensor t;
    t.elem_type = data.elem_type;
    t.dims.assign(data.dims.begin(), data.dims.begin() + axis);
    const Tensor& idx_t = require(1);
    t.dims.insert(t.dims.end(), idx_t.dims.begin(), idx_t.dims.end());
    t.dims.insert(t.dims.end(), data.dims.begin() + axis + 1, data.dims.end());
    check_folded_size(Shape(t.dims), {&data, &idx_t});
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t raw : indices) {
        const int64_t i = raw < 0 ? raw + extent : raw;
        TEC_USER_CHECK(i >= 0 && i < extent, {}) << "Gather index " << raw << " is out of range for dim " << extent;
        for (int64_t k = 0; k < inner; ++k) {
          const auto src = static_cast<size_t>((o * extent + i) * inner + k);
          if (data.is_float()) t.floats.push_back(data.floats[src]);
          else t.ints.push_back(data.ints[src]);
        }
      }
    return one(std::move(t));
  }
  if (op == "Concat") {
    const Tensor& first = require(0);
    const int64_t axis = axis_of(attr_int(n, "axis", 0), first.dims.size(), "Concat axis");
    Tensor t;
    t.elem_type = first.elem_type;
    t.dims = first.dims;
    t.dims[static_cast<size_t>(axis)] = 0;
    int64_t outer = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= first.dims[static_cast<size_t>(d)];
    std::vector<const Tensor*> parts;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const Tensor& p = require(i);
      TEC_USER_CHECK(p.dims.size() == first.dims.size() && p.is_float() == first.is_float(), {})
          << "Concat inputs differ in rank or type";
      for (size_t d = 0; d < p.dims.size(); ++d)
        TEC_USER_CHECK(static_cast<int64_t>(d) == axis || p.dims[d] == first.dims[d], {}) << "Concat inputs differ in dim " << d;
      t.dims[static_cast<size_t>(axis)] += p.dims[static_cast<size_t>(axis)];
      parts.push_back(&p);
    }
    for (int64_t o = 0; o < outer; ++o)
      for (const Tensor* p : parts) {
        const int64_t chunk = p->numel() / std::max<int64_t>(outer, 1);
        for (int64_t k = 0; k < chunk; ++k) {
          const auto src = static_cast<size_t>(o * chunk + k);
          if (p->is_float()) t.floats.push_back(p->floats[src]);
          else t.ints.push_back(p->ints[src]);
        }
      }
    return one(std::move(t));
  }
  auto reshaped = [&](std::vector<int64_t> dims) {
    Tensor t = require(0);
    t.dims = std::move(dims);
    return one(std::move(t));
  };
  if (op == "Reshape")
    return reshaped(reshape_dims(require(0).dims, as_ints(require(1)), attr_int(n, "allowzero", 0) != 0));
  if (op == "Flatten") return reshaped(flatten_dims(require(0).dims, attr_int(n, "axis", 1)));
  if (op == "Squeeze")
    return reshaped(squeeze_dims(require(0).dims, in(1) ? std::optional(as_ints(*in(1))) : std::nullopt));
  if (op == "Unsqueeze") return reshaped(unsqueeze_dims(require(0).dims, as_ints(require(1))));
  if (op == "Cast") {
    const Tensor& x = require(0);
    const auto to = static_cast<int32_t>(attr_int(n, "to", 0));
    Tensor t;
    t.elem_type = to;
    t.dims = x.dims;
    if (is_float_type(to)) {
      for (size_t i = 0; i < static_cast<size_t>(x.numel()); ++i) t.floats.push_back(static_cast<float>(x.at(i)));
      if (to == kFloat16 || to == kBfloat16) reference::round_to(*tec_dtype(to), t.floats);
      if (to == kFloat8E4M3FN)
        for (float& f : t.floats) f = reference::e4m3_to_float(reference::float_to_e4m3(f));
      if (to == kFloat8E5M2)
        for (float& f : t.floats) f = reference::e5m2_to_float(reference::float_to_e5m2(f));
    } else {
      TEC_UNSUPPORTED_CHECK(to != kString, ErrorContext{}) << "Cast to STRING is not supported";
      for (size_t i = 0; i < static_cast<size_t>(x.numel()); ++i) {
        const double v = x.at(i);
        TEC_USER_CHECK(!std::isnan(v), {}) << "Cast of NaN to an integer type";
        t.ints.push_back(to == kBool ? v != 0 : to_int64(v));
      }
    }
    return one(std::move(t));
  }
  if (op == "ConstantOfShape") {
    const std::vector<int64_t> dims = as_ints(require(0));
    for (int64_t d : dims) TEC_USER_CHECK(d >= 0, {}) << "ConstantOfShape of a negative dim " << d;
    Tensor value{kFloat, {}, {0.0f}, {}};
    if (auto a = n.attrs.find("value"); a != n.attrs.end() && a->second.t) value = *a->second.t;
    TEC_USER_CHECK(value.numel() == 1, {}) << "ConstantOfShape's value must have one element";
    check_folded_size(Shape(dims), {});
    Tensor t;
    t.elem_type = value.elem_type;
    t.dims = dims;
    const auto count = static_cast<size_t>(Shape(dims).numel());
    if (value.is_float()) t.floats.assign(count, value.floats.at(0));
    else t.ints.assign(count, value.ints.at(0));
    return one(std::move(t));
  }
  if (op == "Slice") {  // ONNX's Slice (opset 13): starts, ends, optional axes and steps, clamped per axis
    const Tensor& x = require(0);
    const std::vector<int64_t> starts = as_ints(require(1)), ends = as_ints(require(2));
    const auto rank = static_cast<int64_t>(x.dims.size());
    std::vector<int64_t> axes = in(3) ? as_ints(*in(3)) : std::vector<int64_t>{};
    if (!in(3))
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    const std::vector<int64_t> steps = in(4) ? as_ints(*in(4)) : std::vector<int64_t>(starts.size(), 1);
    TEC_USER_CHECK(ends.size() == starts.size() && axes.size() == starts.size() && steps.size() == starts.size(), {})
        << "Slice's starts, ends, axes and steps must have one entry per sliced axis";
    std::vector<int64_t> first(static_cast<size_t>(rank), 0), step(static_cast<size_t>(rank), 1), dims = x.dims;
    std::vector<bool> seen(static_cast<size_t>(rank), false);
    for (size_t i = 0; i < axes.size(); ++i) {
      const int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
      TEC_USER_CHECK(a >= 0 && a < rank && !seen[static_cast<size_t>(a)], {}) << "Slice axis " << axes[i] << " is out of range or repeated";
      seen[static_cast<size_t>(a)] = true;
      const int64_t dim = x.dims[static_cast<size_t>(a)], st = steps[i];
      TEC_USER_CHECK(st != 0, {}) << "Slice step 0";
      auto wrap = [dim](int64_t v) { return v < 0 ? v + dim : v; };
      int64_t b = wrap(starts[i]), e = wrap(std::clamp<int64_t>(ends[i], -dim - 1, dim + 1));
      if (st > 0) {
        b = std::clamp<int64_t>(b, 0, dim);
        e = std::clamp<int64_t>(e, 0, dim);
      } else {
        b = std::clamp<int64_t>(b, 0, dim - 1);
        e = std::clamp<int64_t>(e, -1, dim - 1);
      }
      const int64_t count = st > 0 ? std::max<int64_t>(0, (e - b + st - 1) / st) : std::max<int64_t>(0, (b - e - st - 1) / -st);
      first[static_cast<size_t>(a)] = b;
      step[static_cast<size_t>(a)] = st;
      dims[static_cast<size_t>(a)] = count;
    }
    Tensor t;
    t.elem_type = x.elem_type;
    t.dims = dims;
    const Shape out(dims);
    const auto strides = Shape(x.dims).contiguous_strides();
    std::vector<int64_t> coord(static_cast<size_t>(rank), 0);
    for (int64_t e = 0; e < out.numel(); ++e) {
      int64_t at = 0;
      for (size_t d = 0; d < coord.size(); ++d) at += (first[d] + coord[d] * step[d]) * strides[d];
      if (x.is_float()) t.floats.push_back(x.floats.at(static_cast<size_t>(at)));
      else t.ints.push_back(x.ints.at(static_cast<size_t>(at)));
      for (size_t d = coord.size(); d-- > 0;) {
        if (++coord[d] < dims[d]) break;
        coord[d] = 0;
      }
    }
    return one(std::move(t));
  }
  if (op == "Expand") {  // ONNX's Expand broadcasts both ways: numpy's broadcast of the input and the shape
    const Tensor& x = require(0);
    std::vector<int64_t> dims = as_ints(require(1));
    for (int64_t d : dims) TEC_USER_CHECK(d >= 0, {}) << "Expand to a negative dim " << d;
    const Shape shape = broadcast_shape_checked(Shape(x.dims), Shape(dims), {});
    check_folded_size(shape, {&x});
    Tensor t;
    t.elem_type = x.elem_type;
    t.dims = shape.dims;
    for (size_t from : broadcast_index(Shape(x.dims), shape)) {
      if (x.is_float()) t.floats.push_back(x.floats.at(from));
      else t.ints.push_back(x.ints.at(from));
    }
    return one(std::move(t));
  }
  static const std::map<std::string, bool (*)(double, double)> kCompare = {
      {"Equal", [](double a, double b) { return a == b; }},          {"Less", [](double a, double b) { return a < b; }},
      {"LessOrEqual", [](double a, double b) { return a <= b; }},    {"Greater", [](double a, double b) { return a > b; }},
      {"GreaterOrEqual", [](double a, double b) { return a >= b; }}, {"And", [](double a, double b) { return a != 0 && b != 0; }},
      {"Or", [](double a, double b) { return a != 0 || b != 0; }},   {"Xor", [](double a, double b) { return (a != 0) != (b != 0); }}};
  if (op == "Not") {
    Tensor t = ints_tensor({}, require(0).dims);
    t.elem_type = kBool;
    for (size_t i = 0; i < static_cast<size_t>(require(0).numel()); ++i) t.ints.push_back(require(0).at(i) == 0);
    return one(std::move(t));
  }
  if (op == "GatherND") return one(gather_nd(require(0), require(1), attr_int(n, "batch_dims", 0)));
  if (kCompare.count(op) || op == "Where") {  // broadcast elementwise over every input
    const bool where = op == "Where";
    const auto compare = where ? nullptr : kCompare.at(op);
    std::vector<const Tensor*> ins{&require(0), &require(1)};
    if (where) ins.push_back(&require(2));
    Shape shape(ins[0]->dims);
    for (size_t i = 1; i < ins.size(); ++i) shape = broadcast_shape_checked(shape, Shape(ins[i]->dims), {});
    check_folded_size(shape, {ins[0], ins[1]});
    std::vector<std::vector<size_t>> index;
    for (const Tensor* t : ins) index.push_back(broadcast_index(Shape(t->dims), shape));
    Tensor t;
    t.dims = shape.dims;
    t.elem_type = where ? ins[1]->elem_type : kBool;
    TEC_USER_CHECK(!where || ins[1]->is_float() == ins[2]->is_float(), {}) << "Where of a float and an integer tensor";
    for (size_t e = 0; e < index[0].size(); ++e) {
      if (!where) {
        t.ints.push_back(compare(ins[0]->at(index[0][e]), ins[1]->at(index[1][e])));
        continue;
      }
      const Tensor& pick = ins[0]->at(index[0][e]) != 0 ? *ins[1] : *ins[2];
      const size_t at = ins[0]->at(index[0][e]) != 0 ? index[1][e] : index[2][e];
      if (pick.is_float()) t.floats.push_back(pick.floats.at(at));
      else t.ints.push_back(pick.ints.at(at));
    }
    return one(std::move(t));
  }
  if (auto it = kBinaryFunctions.find(op); it != kBinaryFunctions.end()) {
    const Tensor &a = require(0), &b = require(1);
    check_folded_size(broadcast_shape_checked(Shape(a.dims), Shape(b.dims), {}), {&a, &b});
    if (!a.is_float() && !b.is_float() && op != "Pow") return one(integer_binary(it->second, a, b));
    Attributes attrs;
    attrs.values["fn"] = it->second;
    Tensor t = via_reference("binary", attrs, {&a, &b});
    t.elem_type = a.is_float() ? a.elem_type : kFloat;
    return one(std::move(t));
  }
  if (auto it = kUnaryFunctions.find(op); it != kUnaryFunctions.end()) {
    Attributes attrs;
    attrs.values["fn"] = it->second;
    return one(via_reference("unary", attrs, {&require(0)}));
  }
  if (op == "Relu") return one(via_reference("relu", {}, {&require(0)}));
  if (op == "Transpose") {
    Attributes attrs;
    if (auto perm = attr_ints(n, "perm")) attrs.values["perm"] = *perm;
    const Tensor& x = require(0);
    TEC_UNSUPPORTED_CHECK(x.is_float(), ErrorContext{}) << "Transpose of a constant integer tensor is not supported";
    Tensor t = via_reference("transpose", attrs, {&x});
    t.elem_type = x.elem_type;
    return one(std::move(t));
  }
  if (op == "MatMul") {
    const Tensor &a = require(0), &b = require(1);
    TEC_UNSUPPORTED_CHECK(a.is_float() && b.is_float() && a.dims.size() >= 2 && b.dims.size() >= 2, ErrorContext{})
        << "MatMul of constants folds float tensors of rank 2 or more";
    // The product's size is checked before the reference allocates it.
    Shape out = broadcast_shape_checked(Shape(std::vector<int64_t>(a.dims.begin(), a.dims.end() - 2)),
                                        Shape(std::vector<int64_t>(b.dims.begin(), b.dims.end() - 2)), {});
    out.dims.push_back(a.dims[a.dims.size() - 2]);
    out.dims.push_back(b.dims.back());
    check_folded_size(out, {&a, &b});
    Tensor t = via_reference("matmul", {}, {&a, &b});
    t.elem_type = a.elem_type;
    return one(std::move(t));
  }
  if (op == "Cos" || op == "Sin") {  // in double, rounded once: what a correctly rounded float cos gives
    Tensor t = require(0);
    TEC_UNSUPPORTED_CHECK(t.is_float(), ErrorContext{}) << op << " of an integer constant";
    for (float& f : t.floats) f = static_cast<float>(op == "Cos" ? std::cos(static_cast<double>(f)) : std::sin(static_cast<double>(f)));
    if (auto d = tec_dtype(t.elem_type); d && *d != DType::fp32) reference::round_to(*d, t.floats);
    return one(std::move(t));
  }
  if (op == "Trilu") {  // upper (default): keeps j - i >= k; lower: j - i <= k; zeros elsewhere
    Tensor t = require(0);
    TEC_USER_CHECK(t.dims.size() >= 2, {}) << "Trilu needs a tensor of rank 2 or more";
    const int64_t k = in(1) ? as_ints(*in(1)).at(0) : 0;
    const bool upper = attr_int(n, "upper", 1) != 0;
    const int64_t rows = t.dims[t.dims.size() - 2], cols = t.dims.back();
    for (int64_t e = 0; e < t.numel(); ++e) {
      const int64_t i = e / cols % rows, j = e % cols;
      if (upper ? j - i >= k : j - i <= k) continue;
      if (t.is_float()) t.floats[static_cast<size_t>(e)] = 0.0f;
      else t.ints[static_cast<size_t>(e)] = 0;
    }
    return one(std::move(t));
  }
  if (op == "Range") {  // ceil((limit - start) / delta) elements, each the last plus delta, in the inputs' type (as ONNX's loop)
    const Tensor &start = require(0), &limit = require(1), &delta = require(2);
    TEC_USER_CHECK(start.numel() == 1 && limit.numel() == 1 && delta.numel() == 1, {}) << "Range's start, limit and delta must be scalars";
    TEC_USER_CHECK(start.elem_type == limit.elem_type && start.elem_type == delta.elem_type, {})
        << "Range's start, limit and delta have different types (" << elem_type_name(start.elem_type) << ", "
        << elem_type_name(limit.elem_type) << ", " << elem_type_name(delta.elem_type) << ")";
    const double step = delta.at(0);
    TEC_USER_CHECK(step != 0.0 && std::isfinite(step) && std::isfinite(start.at(0)) && std::isfinite(limit.at(0)), {})
        << "Range needs a nonzero finite delta and finite bounds, got start " << start.at(0) << ", limit " << limit.at(0) << ", delta " << step;
    const double length = std::ceil((limit.at(0) - start.at(0)) / step);
    TEC_USER_CHECK(length <= static_cast<double>(kMaxDim), {}) << "Range of " << length << " elements is too long";
    const int64_t count = std::max<int64_t>(0, static_cast<int64_t>(length));
    check_folded_size(Shape({count}), {});
    Tensor t{.elem_type = start.elem_type, .dims = {count}, .floats = {}, .ints = {}};
    if (start.is_float()) {
      float v = start.floats[0];
      for (int64_t i = 0; i < count; ++i, v += delta.floats[0]) t.floats.push_back(v);
      if (auto d = tec_dtype(t.elem_type); d && *d != DType::fp32) reference::round_to(*d, t.floats);
    } else {
      int64_t v = start.ints[0];
      for (int64_t i = 0; i < count; ++i) {
        t.ints.push_back(v);
        TEC_USER_CHECK(i + 1 == count || !__builtin_add_overflow(v, delta.ints[0], &v), {}) << "Range overflows int64";
      }
    }
    return one(std::move(t));
  }
  if (op == "DequantizeLinear") return one(dequantize_constant(n, require(0), require(1), in(2)));
  if (op == "QuantizeLinear") return one(quantize_constant(n, require(0), require(1), in(2)));
  TEC_INTERNAL_ERROR(ErrorContext{}) << "no folding for " << op;
}

}  // namespace tec::onnx
