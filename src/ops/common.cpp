#include "ops/common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tec {

const OpRegistry& builtin_ops() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    register_linear_ops(r);
    register_activation_ops(r);
    register_norm_ops(r);
    register_elementwise_ops(r);
    register_quantize_ops(r);
    register_shape_ops(r);
    register_tensor_math_ops(r);
    register_optimizer_ops(r);
    register_moe_ops(r);
    register_embedding_ops(r);
    register_sequence_lengths_ops(r);
    register_attention_ops(r);
    register_collective_ops(r);
    register_softmax_ops(r);
    register_compare_ops(r);
    register_view_ops(r);
    register_gradient_ops(r);
    return r;
  }();
  return registry;
}

TensorProto dense_like(const TensorProto& proto) { return TensorProto::dense(proto.shape, proto.dtype); }

TensorProto row_stat(const TensorProto& x) { return TensorProto::dense(Shape{x.shape.rows()}, DType::fp32); }

SavedTensor save_input(const InferContext& ctx, int slot, std::string name) {
  return SavedTensor{std::move(name), ctx.inputs.at(static_cast<size_t>(slot)), slot};
}

std::vector<std::optional<TensorProto>> grads_like_inputs(const BackwardContext& ctx) {
  std::vector<std::optional<TensorProto>> grads;
  for (const auto& in : ctx.inputs) grads.emplace_back(dense_like(in));
  return grads;
}

std::vector<BackwardInfo::SavedRead> read_all_saved(const BackwardContext& ctx) {
  std::vector<BackwardInfo::SavedRead> reads;
  for (size_t i = 0; i < ctx.saved.size(); ++i) reads.push_back({static_cast<int>(i), Usage{true, false}});
  return reads;
}

std::vector<HostTensor> identity_reference(const Attributes&, const std::vector<HostTensor>& in) { return {in.at(0)}; }

BackwardResult elementwise_backward(const BackwardContext& ctx) {
  return BackwardResult{grads_like_inputs(ctx), read_all_saved(ctx), {}};
}

BackwardResult passthrough_backward(const BackwardContext& ctx) { return BackwardResult{grads_like_inputs(ctx), {}, {}}; }

void require_rank_at_least(const InferContext& ctx, int slot, size_t rank) {
  const auto& p = ctx.inputs.at(static_cast<size_t>(slot));
  TEC_USER_CHECK(p.shape.rank() >= rank, ctx.error)
      << "input " << slot << " must have rank >= " << rank << ", got shape " << p.shape.str();
}

void require_last_dim(const InferContext& ctx, int slot, int64_t expected, const char* what) {
  const auto& p = ctx.inputs.at(static_cast<size_t>(slot));
  TEC_USER_CHECK(p.shape.cols() == expected, ctx.error)
      << "shape mismatch: input '" << ctx.graph.value(ctx.node.inputs.at(static_cast<size_t>(slot))).name
      << "' has shape " << p.shape.str() << ", expected last dim " << expected << " (" << what << ")";
}

std::string value_text(float value) {
  if (std::isfinite(value) && value == std::trunc(value) && std::fabs(value) < 1e15f) return std::to_string(static_cast<long long>(value));
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(value));
  return text;
}

std::string index_text(const Shape& shape, size_t index) {
  std::string at;
  for (size_t d = shape.rank(), rest = index; d-- > 0; rest /= static_cast<size_t>(shape.dims[d]))
    at = std::to_string(rest % static_cast<size_t>(shape.dims[d])) + (at.empty() ? "" : ", ") + at;
  return at;
}

void require_high_precision(const InferContext& ctx, int slot) {
  const auto& p = ctx.inputs.at(static_cast<size_t>(slot));
  TEC_USER_CHECK(!p.is_quantized(), ctx.error)
      << "input '" << ctx.graph.value(ctx.node.inputs.at(static_cast<size_t>(slot))).name
      << "' is quantized (" << p.quantizer->str() << "); this op reads high-precision values, add a dequantize";
}


std::optional<Shape> broadcast_shape(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.rank() ? 1 : a.dims[i - (rank - a.rank())];
    const int64_t db = i < rank - b.rank() ? 1 : b.dims[i - (rank - b.rank())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = std::max(da, db);
  }
  return Shape(out);
}

Shape broadcast_shape_checked(const Shape& a, const Shape& b, const ErrorContext& ctx) {
  auto out = broadcast_shape(a, b);
  TEC_USER_CHECK(out.has_value(), ctx) << "shapes " << a.str() << " and " << b.str() << " do not broadcast";
  return *out;
}

// For each element of `out`, the index of the element of `in` it reads under broadcasting.
std::vector<size_t> broadcast_index(const Shape& in, const Shape& out) {
  const size_t rank = out.rank();
  std::vector<int64_t> in_strides(rank, 0);
  int64_t stride = 1;
  for (size_t i = in.rank(); i-- > 0;) {
    const size_t o = i + (rank - in.rank());
    in_strides[o] = in.dims[i] == 1 ? 0 : stride;
    stride *= in.dims[i];
  }
  const auto n = static_cast<size_t>(out.numel());
  std::vector<size_t> index(n);
  std::vector<int64_t> coord(rank, 0);
  for (size_t e = 0; e < n; ++e) {
    int64_t offset = 0;
    for (size_t d = 0; d < rank; ++d) offset += coord[d] * in_strides[d];
    index[e] = static_cast<size_t>(offset);
    for (size_t d = rank; d-- > 0;) {
      if (++coord[d] < out.dims[d]) break;
      coord[d] = 0;
    }
  }
  return index;
}

}  // namespace tec
