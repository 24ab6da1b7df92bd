// Ops that move elements and compute none, on the general path (ir/general_kernel.h), exact on
// the GPU: slice (ONNX Slice: starts, ends, axes, steps, with its clamping), concat (along one
// axis), expand (ONNX Expand: broadcast to a shape), as strided copies; gather and gather_nd
// (ONNX Gather and GatherND with batch_dims 0) at int32 indices. What an export's rotary
// halves, head splits, repeated keys and mask arithmetic become when no pattern takes them.
#include <algorithm>

#include "ops/common.h"
#include "ops/general.h"
#include "ops/gradient.h"

namespace tec {

namespace {

// ONNX Slice on one axis of extent `dim`: the first index, the step and the count taken.
struct AxisSlice {
  int64_t start = 0, step = 1, count = 0;
};

AxisSlice slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step) {
  TEC_USER_CHECK(step != 0, {}) << "slice step 0";
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
  }
  const int64_t span = step > 0 ? end - start : start - end, magnitude = step > 0 ? step : -step;
  return AxisSlice{start, step, span > 0 ? (span + magnitude - 1) / magnitude : 0};
}

GeneralPlan single_copy_plan(std::vector<int64_t> out_dims, int64_t in_offset, std::vector<int64_t> in_strides, const char* what) {
  GeneralPlan p;
  p.kernel = GeneralKernel::copies;
  p.out_dims = out_dims;
  StridedCopy c;
  c.dims = std::move(out_dims);
  c.in_offset = in_offset;
  c.in_strides = std::move(in_strides);
  c.out_strides = Shape(c.dims).contiguous_strides();
  merge_dims(c.dims, {&c.in_strides, &c.out_strides}, what);
  p.copies.push_back(std::move(c));
  return p;
}

GeneralPlan slice_plan(const Attributes& attrs, const std::vector<Shape>& in) {
  const Shape& x = in.at(0);
  const std::vector<int64_t> starts = attrs.get_ints("starts"), ends = attrs.get_ints("ends");
  std::vector<int64_t> axes = attrs.get_ints("axes"), steps = attrs.get_ints("steps");
  if (axes.empty())
    for (size_t d = 0; d < starts.size(); ++d) axes.push_back(static_cast<int64_t>(d));
  if (steps.empty()) steps.assign(starts.size(), 1);
  TEC_USER_CHECK(ends.size() == starts.size() && axes.size() == starts.size() && steps.size() == starts.size(), {})
      << "slice needs as many ends, axes and steps as starts (" << starts.size() << "), got " << ends.size() << ", " << axes.size()
      << " and " << steps.size();
  const auto rank = static_cast<int64_t>(x.rank());
  const std::vector<int64_t> strides = x.contiguous_strides();
  std::vector<int64_t> dims = x.dims, in_strides = strides;
  std::vector<bool> seen(x.rank(), false);
  int64_t offset = 0;
  for (size_t i = 0; i < starts.size(); ++i) {
    TEC_USER_CHECK(axes[i] >= -rank && axes[i] < rank, {}) << "slice axis " << axes[i] << " is out of range for rank " << rank;
    const auto a = static_cast<size_t>(axes[i] < 0 ? axes[i] + rank : axes[i]);
    TEC_USER_CHECK(!seen[a], {}) << "slice axis " << axes[i] << " repeats";
    seen[a] = true;
    const AxisSlice s = slice_axis(x.dims[a], starts[i], ends[i], steps[i]);
    TEC_UNSUPPORTED_CHECK(s.count > 0, {}) << "slice of axis " << a << " (extent " << x.dims[a] << ") from " << starts[i] << " to "
                                           << ends[i] << " by " << steps[i] << " is empty; tensors without elements are not supported";
    dims[a] = s.count;
    offset += s.start * strides[a];
    // One element taken: the step is never walked (ONNX allows any, INT64_MAX included). More:
    // |step| < the axis, so step x stride stays within the input's elements.
    in_strides[a] = s.count == 1 ? 0 : s.step * strides[a];
  }
  return single_copy_plan(dims, offset, in_strides, "a slice");
}

// slice's transpose: x written into zeros of `shape` where slice (the same starts, ends, axes
// and steps) reads; slice's gradient.
GeneralPlan unslice_plan(const Attributes& attrs, const std::vector<Shape>& in) {
  const Shape full(attrs.get_ints("shape"));
  for (int64_t d : full.dims) TEC_USER_CHECK(d >= 1 && d <= kMaxDim, {}) << "unslice into a dim of " << d << " (not in [1, " << kMaxDim << "])";
  (void)full.numel();
  GeneralPlan read = slice_plan(attrs, {full});
  TEC_USER_CHECK(Shape(read.out_dims) == in.at(0), {}) << "unslice of " << in.at(0).str() << " where the slice of " << full.str() << " is "
                                                        << Shape(read.out_dims).str();
  const StridedCopy& taken = read.copies.at(0);
  GeneralPlan p;
  p.kernel = GeneralKernel::copies;
  p.out_dims = full.dims;
  p.copies.push_back(StridedCopy{.input = kZeroFill, .dims = {full.numel()}, .in_offset = 0, .out_offset = 0, .in_strides = {0}, .out_strides = {1}});
  p.copies.push_back(StridedCopy{.input = 0, .dims = taken.dims, .in_offset = 0, .out_offset = taken.in_offset, .in_strides = taken.out_strides,
                                 .out_strides = taken.in_strides});
  return p;
}

std::vector<ValueId> gradient_slice(GradientBuilder& b) {
  Attributes attrs = b.attrs();
  attrs.values["shape"] = b.proto(b.input(0)).shape.dims;
  return {b.emit("unslice", {b.grad_output()}, std::move(attrs), "dinput")};
}

GeneralPlan concat_plan(const Attributes& attrs, const std::vector<Shape>& in) {
  const Shape& first = in.at(0);
  const auto rank = static_cast<int64_t>(first.rank());
  const int64_t axis = attrs.get_int("axis", 0);
  TEC_USER_CHECK(rank >= 1 && axis >= -rank && axis < rank, {}) << "concat axis " << axis << " is out of range for rank " << rank;
  const auto a = static_cast<size_t>(axis < 0 ? axis + rank : axis);
  std::vector<int64_t> out = first.dims;
  out[a] = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    bool same = in[i].rank() == first.rank();
    for (size_t d = 0; same && d < first.rank(); ++d) same = d == a || in[i].dims[d] == first.dims[d];
    TEC_USER_CHECK(same, {}) << "concat input " << i << " is " << in[i].str() << "; along axis " << a << " it must match " << first.str()
                             << " in every other dim";
    out[a] += in[i].dims[a];
  }
  GeneralPlan p;
  p.kernel = GeneralKernel::copies;
  p.out_dims = out;
  const std::vector<int64_t> out_strides = Shape(out).contiguous_strides();
  int64_t along = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    StridedCopy c;
    c.input = static_cast<int>(i);
    c.dims = in[i].dims;
    c.in_strides = in[i].contiguous_strides();
    c.out_offset = along * out_strides[a];
    c.out_strides = out_strides;
    merge_dims(c.dims, {&c.in_strides, &c.out_strides}, "a concat");
    along += in[i].dims[a];
    p.copies.push_back(std::move(c));
  }
  return p;
}

// Each input's part of the gradient, sliced back out.
std::vector<ValueId> gradient_concat(GradientBuilder& b) {
  const int64_t axis = b.attrs().get_int("axis", 0);
  std::vector<ValueId> grads;
  int64_t along = 0;
  for (size_t slot = 0; slot < b.input_count(); ++slot) {
    const ValueId in = b.input(slot);
    const Shape shape = b.proto(in).shape;
    const int64_t extent = shape.dims.at(static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(shape.rank()) : axis));
    grads.push_back(-1);
    if (b.proto(in).requires_grad) {
      Attributes attrs;
      attrs.values["starts"] = std::vector<int64_t>{along};
      attrs.values["ends"] = std::vector<int64_t>{along + extent};
      attrs.values["axes"] = std::vector<int64_t>{axis};
      grads.back() = b.emit("slice", {b.grad_output()}, std::move(attrs), "dinput" + std::to_string(slot));
    }
    along += extent;
  }
  return grads;
}

GeneralPlan expand_plan(const Attributes& attrs, const std::vector<Shape>& in) {
  const Shape out = broadcast_shape_checked(in.at(0), Shape(attrs.get_ints("shape")), {});
  for (int64_t d : out.dims) TEC_USER_CHECK(d >= 1 && d <= kMaxDim, {}) << "expand to a dim of " << d << " (not in [1, " << kMaxDim << "])";
  (void)out.numel();  // (a hostile shape: within kMaxElements before anything is sized by it)
  return single_copy_plan(out.dims, 0, broadcast_strides(in.at(0), out), "an expand");
}

GeneralPlan gather_plan(const Attributes& attrs, const std::vector<Shape>& in) {
  const Shape &data = in.at(0), &indices = in.at(1);
  const auto rank = static_cast<int64_t>(data.rank());
  const int64_t axis = attrs.get_int("axis", 0);
  TEC_USER_CHECK(rank >= 1 && axis >= -rank && axis < rank, {}) << "gather axis " << axis << " is out of range for rank " << rank;
  const auto a = static_cast<size_t>(axis < 0 ? axis + rank : axis);
  GeneralPlan p;
  p.kernel = GeneralKernel::gather;
  p.out_dims.assign(data.dims.begin(), data.dims.begin() + static_cast<std::ptrdiff_t>(a));
  p.out_dims.insert(p.out_dims.end(), indices.dims.begin(), indices.dims.end());
  p.out_dims.insert(p.out_dims.end(), data.dims.begin() + static_cast<std::ptrdiff_t>(a) + 1, data.dims.end());
  TEC_UNSUPPORTED_CHECK(!p.out_dims.empty(), {}) << "a gather to a scalar (rank 0) is not supported";
  p.m = 1;
  for (size_t d = 0; d < a; ++d) p.m *= data.dims[d];
  for (size_t d = a + 1; d < data.rank(); ++d) p.inner *= data.dims[d];
  p.n = indices.rank() == 0 ? 1 : indices.numel();
  p.k = 1;
  p.dims = {data.dims[a]};
  return p;
}

// GatherND, batch_dims 0: the last dim of the indices (k) picks from data's first k dims.
GeneralPlan gather_nd_plan(const Attributes&, const std::vector<Shape>& in) {
  const Shape &data = in.at(0), &indices = in.at(1);
  TEC_USER_CHECK(indices.rank() >= 1, {}) << "gather_nd's indices are a scalar; they need a last dim of index tuples";
  const int64_t k = indices.back();
  TEC_USER_CHECK(k >= 1 && k <= static_cast<int64_t>(data.rank()) && k <= static_cast<int64_t>(kGeneralMaxRank), {})
      << "gather_nd's index tuples have " << k << " entries, for data of rank " << data.rank() << " (at most "
      << std::min<size_t>(data.rank(), kGeneralMaxRank) << ")";
  GeneralPlan p;
  p.kernel = GeneralKernel::gather;
  p.out_dims.assign(indices.dims.begin(), indices.dims.end() - 1);
  p.out_dims.insert(p.out_dims.end(), data.dims.begin() + k, data.dims.end());
  TEC_UNSUPPORTED_CHECK(!p.out_dims.empty(), {}) << "a gather_nd to a scalar (rank 0) is not supported";
  p.m = 1;
  p.n = indices.numel() / k;
  p.k = k;
  p.dims.assign(data.dims.begin(), data.dims.begin() + k);
  for (size_t d = static_cast<size_t>(k); d < data.rank(); ++d) p.inner *= data.dims[d];
  return p;
}

// gather's and gather_nd's gradient: their plan over the data's shape (attribute `shape`), the
// gradient of their output (input 0) added into the rows the indices (input 1) picked.
GeneralPlan scatter_add_plan(const Attributes& attrs, const std::vector<Shape>& in) {
  const Shape data(attrs.get_ints("shape"));
  const std::vector<Shape> gathered = {data, in.at(1)};
  GeneralPlan p = attrs.get_string("of", "gather") == "gather_nd" ? gather_nd_plan(attrs, gathered) : gather_plan(attrs, gathered);
  TEC_USER_CHECK(in.at(0).dims == p.out_dims, {}) << "scatter_add's gradient is " << in.at(0).str() << "; the gather it undoes wrote "
                                                  << Shape(p.out_dims).str();
  p.kernel = GeneralKernel::scatter_add;
  p.out_dims = data.dims;
  return p;
}

std::vector<ValueId> gradient_gather(GradientBuilder& b, const std::string& of) {
  if (!b.proto(b.input(0)).requires_grad) return {-1, -1};
  Attributes attrs = b.attrs();
  attrs.values["shape"] = b.proto(b.input(0)).shape.dims;
  attrs.values["of"] = of;
  return {b.emit("scatter_add", {b.grad_output(), b.input(1)}, std::move(attrs), "ddata"), -1};
}

// Data of any dtype the general kernels read; int32 indices.
DType gathered_dtype(const InferContext& ctx) {
  const TensorProto &data = ctx.inputs.at(0), &indices = ctx.inputs.at(1);
  TEC_USER_CHECK(!data.is_quantized(), ctx.error) << "gather reads high-precision data, got " << data.quantizer->str();
  TEC_USER_CHECK(indices.dtype == DType::int32 && !indices.is_quantized(), ctx.error)
      << "the indices '" << ctx.graph.value(ctx.node.inputs.at(1)).name << "' must be int32, got " << to_string(indices.dtype);
  return data.dtype;
}

DType same_dtype(const InferContext& ctx) {
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    require_high_precision(ctx, static_cast<int>(i));
    TEC_USER_CHECK(ctx.inputs[i].dtype == ctx.inputs[0].dtype, ctx.error)
        << "input " << i << " is " << to_string(ctx.inputs[i].dtype) << ", input 0 " << to_string(ctx.inputs[0].dtype);
  }
  return ctx.inputs[0].dtype;
}

}  // namespace

void register_view_ops(OpRegistry& registry) {
  registry.add(OpDef{
      .name = "gather",
      .summary = "data's entries along axis at int32 indices (ONNX Gather; negative from the end) (general path)",
      .min_inputs = 2,
      .max_inputs = 2,
      .attrs = {{"axis", AttrType::int_, AttrValue{int64_t{0}}, {}, "the axis picked from"}},
      .infer = general_infer(gather_plan, gathered_dtype),
      .gradient = [](GradientBuilder& b) { return gradient_gather(b, "gather"); },
      .reference = general_reference(gather_plan),
      .general = gather_plan,
  });
  registry.add(OpDef{
      .name = "gather_nd",
      .summary = "data's slices at int32 index tuples, the indices' last dim (ONNX GatherND, batch_dims 0) (general path)",
      .min_inputs = 2,
      .max_inputs = 2,
      .infer = general_infer(gather_nd_plan, gathered_dtype),
      .gradient = [](GradientBuilder& b) { return gradient_gather(b, "gather_nd"); },
      .reference = general_reference(gather_nd_plan),
      .general = gather_nd_plan,
  });
  registry.add(OpDef{
      .name = "scatter_add",
      .summary = "g added into zeros of shape at the rows int32 indices pick, in their order: gather's and embedding's gradient, made by "
                 "autodiff (general path)",
      .min_inputs = 2,
      .max_inputs = 2,
      .attrs = {{"shape", AttrType::ints, std::nullopt, {}, "the output's shape, the gathered data's"},
                {"of", AttrType::string_, AttrValue{std::string("gather")}, {"gather", "gather_nd"}, "the op undone"},
                {"axis", AttrType::int_, AttrValue{int64_t{0}}, {}, "gather's axis"}},
      .infer = general_infer(scatter_add_plan, gathered_dtype),
      .reference = general_reference(scatter_add_plan),
      .general = scatter_add_plan,
      .compiler_only = true,
  });
  registry.add(OpDef{
      .name = "slice",
      .summary = "x[start:end:step] along axes, clamped as ONNX Slice does (general path)",
      .attrs = {{"starts", AttrType::ints, std::nullopt, {}, "first index per axis (negative: from the end)"},
                {"ends", AttrType::ints, std::nullopt, {}, "end index per axis, exclusive (clamped)"},
                {"axes", AttrType::ints, AttrValue{std::vector<int64_t>{}}, {}, "the axes; empty: 0, 1, ..."},
                {"steps", AttrType::ints, AttrValue{std::vector<int64_t>{}}, {}, "the steps (nonzero); empty: 1"}},
      .infer = general_infer(slice_plan, same_dtype),
      .gradient = gradient_slice,
      .reference = general_reference(slice_plan),
      .general = slice_plan,
  });
  registry.add(OpDef{
      .name = "unslice",
      .summary = "x written into zeros of shape where slice (starts, ends, axes, steps) reads: slice's gradient, made by autodiff "
                 "(general path)",
      .attrs = {{"shape", AttrType::ints, std::nullopt, {}, "the output's shape, the sliced tensor's"},
                {"starts", AttrType::ints, std::nullopt, {}, "as slice's"},
                {"ends", AttrType::ints, std::nullopt, {}, "as slice's"},
                {"axes", AttrType::ints, AttrValue{std::vector<int64_t>{}}, {}, "as slice's"},
                {"steps", AttrType::ints, AttrValue{std::vector<int64_t>{}}, {}, "as slice's"}},
      .infer = general_infer(unslice_plan, same_dtype),
      .reference = general_reference(unslice_plan),
      .general = unslice_plan,
      .compiler_only = true,
  });
  registry.add(OpDef{
      .name = "concat",
      .summary = "the inputs one after another along axis (general path)",
      .min_inputs = 1,
      .max_inputs = 64,
      .attrs = {{"axis", AttrType::int_, std::nullopt, {}, "the axis joined along"}},
      .infer = general_infer(concat_plan, same_dtype),
      .gradient = gradient_concat,
      .reference = general_reference(concat_plan),
      .general = concat_plan,
  });
  registry.add(OpDef{
      .name = "expand",
      .summary = "x broadcast to shape (ONNX Expand: numpy broadcasting both ways) (general path)",
      .attrs = {{"shape", AttrType::ints, std::nullopt, {}, "the shape broadcast to"}},
      .infer = general_infer(expand_plan, same_dtype),
      .gradient = [](GradientBuilder& b) {
        return std::vector<ValueId>{sum_to_shape(b, b.grad_output(), b.proto(b.input(0)).shape, "dinput")};
      },
      .reference = general_reference(expand_plan),
      .general = expand_plan,
  });
}

}  // namespace tec
