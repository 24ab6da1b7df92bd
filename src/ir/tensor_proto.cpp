#include "ir/tensor_proto.h"

#include <algorithm>

#include "core/error.h"
#include "ir/grouped_tensor.h"

namespace tec {

std::string_view to_string(BufferRole role) {
  switch (role) {
    case BufferRole::data: return "data";
    case BufferRole::columnwise_data: return "columnwise_data";
    case BufferRole::scale_inv: return "scale_inv";
    case BufferRole::columnwise_scale_inv: return "columnwise_scale_inv";
    case BufferRole::amax: return "amax";
    case BufferRole::columnwise_amax: return "columnwise_amax";
  }
  return "?";
}

bool is_columnwise_role(BufferRole role) {
  return role == BufferRole::columnwise_data || role == BufferRole::columnwise_scale_inv || role == BufferRole::columnwise_amax;
}

bool role_serves_direction(BufferRole role, bool columnwise, const std::vector<BufferRole>& roles) {
  if (is_columnwise_role(role)) return columnwise;
  if (!columnwise) return true;
  const BufferRole own = role == BufferRole::data        ? BufferRole::columnwise_data
                         : role == BufferRole::scale_inv ? BufferRole::columnwise_scale_inv
                                                         : BufferRole::columnwise_amax;
  return std::find(roles.begin(), roles.end(), own) == roles.end();
}

TensorProto TensorProto::dense(Shape shape, DType dtype) {
  TensorProto p;
  p.strides = shape.contiguous_strides();
  p.shape = std::move(shape);
  p.dtype = dtype;
  return p;
}

TensorProto TensorProto::with_quantizer(std::optional<Quantizer> q) const {
  TensorProto p = *this;
  p.quantizer = std::move(q);
  return p;
}

TensorProto TensorProto::with_shape(Shape new_shape) const {
  TensorProto p = *this;
  p.strides = new_shape.contiguous_strides();
  p.shape = std::move(new_shape);
  return p;
}

TensorProto TensorProto::update_usage(Usage new_usage) const {
  TensorProto p = *this;
  p.usage = new_usage;
  return p;
}

namespace {

constexpr int64_t kDataAlignment = 256;  // arena granularity; also what TMA and cuBLASLt like
constexpr int64_t kScaleAlignment = 16;  // cuBLASLt block-scale pointers
constexpr int64_t kAmaxAlignment = 4;

BufferSpec make_buffer(BufferRole role, Shape shape, DType dtype, int64_t alignment) {
  int64_t bytes = checked_mul(shape.numel(), storage_bytes(dtype));
  return BufferSpec{role, std::move(shape), dtype, bytes, alignment};
}

void require_divisible(int64_t value, int64_t by, const char* dim, const Quantizer& q, const char* usage) {
  TEC_USER_CHECK(value % by == 0, {})
      << q.str() << " " << usage << " quantization needs " << dim << " divisible by " << by << ", got "
      << dim << "=" << value;
}

// LAYOUTS.md §1.1: one FP32 scale_inv serves both directions; the transposed copy exists
// only on GPUs whose FP8 GEMMs are TN-only.
void per_tensor_buffers(const TensorProto& t, const Target& target, std::vector<BufferSpec>& out) {
  const DType q = t.quantizer->dtype;
  if (t.usage.rowwise || (t.usage.columnwise && target.fp8_gemm_any_layout()))
    out.push_back(make_buffer(BufferRole::data, t.shape, q, kDataAlignment));
  if (t.usage.columnwise && !target.fp8_gemm_any_layout())
    out.push_back(make_buffer(BufferRole::columnwise_data, t.shape.last_dim_first(), q, kDataAlignment));
  out.push_back(make_buffer(BufferRole::scale_inv, Shape{1}, DType::fp32, kScaleAlignment));
}

// LAYOUTS.md §2.1: E8M0 scales padded to 128x4 tiles; the columnwise copy is not transposed.
void mxfp8_buffers(const TensorProto& t, std::vector<BufferSpec>& out) {
  const Quantizer& q = *t.quantizer;
  const int64_t m = t.shape.rows(), k = t.shape.cols();
  if (t.usage.rowwise) {
    require_divisible(k, 32, "K", q, "rowwise");
    out.push_back(make_buffer(BufferRole::data, t.shape, q.dtype, kDataAlignment));
    out.push_back(make_buffer(BufferRole::scale_inv, Shape{round_up(m, 128), round_up(k / 32, 4)}, DType::e8m0,
                              kScaleAlignment));
  }
  if (t.usage.columnwise) {
    require_divisible(m, 32, "M", q, "columnwise");
    out.push_back(make_buffer(BufferRole::columnwise_data, t.shape, q.dtype, kDataAlignment));
    out.push_back(make_buffer(BufferRole::columnwise_scale_inv, Shape{round_up(m / 32, 4), round_up(k, 128)},
                              DType::e8m0, kScaleAlignment));
  }
}

// LAYOUTS.md §3.1: "GEMM-ready" FP32 scales. 1x128 rowwise scales are stored M-major.
void fp8_block_buffers(const TensorProto& t, std::vector<BufferSpec>& out) {
  const Quantizer& q = *t.quantizer;
  const int64_t m = t.shape.rows(), k = t.shape.cols();
  const bool two_d = q.block_rows == 128;
  if (t.usage.rowwise) {
    out.push_back(make_buffer(BufferRole::data, t.shape, q.dtype, kDataAlignment));
    Shape scales = two_d ? Shape{ceil_div(m, 128), round_up(ceil_div(k, 128), 4)}
                         : Shape{ceil_div(k, 128), round_up(m, 4)};
    out.push_back(make_buffer(BufferRole::scale_inv, scales, DType::fp32, kScaleAlignment));
  }
  if (t.usage.columnwise) {
    out.push_back(make_buffer(BufferRole::columnwise_data, t.shape.last_dim_first(), q.dtype, kDataAlignment));
    Shape scales = two_d ? Shape{ceil_div(k, 128), round_up(ceil_div(m, 128), 4)}
                         : Shape{ceil_div(m, 128), round_up(k, 4)};
    out.push_back(make_buffer(BufferRole::columnwise_scale_inv, scales, DType::fp32, kScaleAlignment));
  }
}

// LAYOUTS.md §4.1: packed E2M1 pairs, E4M3 block scales padded to 128x4, one FP32 amax per
// direction. The columnwise copy is always 2-D and transposed.
void nvfp4_buffers(const TensorProto& t, std::vector<BufferSpec>& out) {
  const Quantizer& q = *t.quantizer;
  const int64_t m = t.shape.rows(), k = t.shape.cols();
  if (t.usage.rowwise) {
    require_divisible(k, 16, "K", q, "rowwise");
    out.push_back(make_buffer(BufferRole::data, t.shape.with_last(k / 2), DType::fp4_e2m1x2, kDataAlignment));
    out.push_back(make_buffer(BufferRole::scale_inv, Shape{round_up(m, 128), round_up(k / 16, 4)}, DType::fp8_e4m3,
                              kScaleAlignment));
    out.push_back(make_buffer(BufferRole::amax, Shape{1}, DType::fp32, kAmaxAlignment));
  }
  if (t.usage.columnwise) {
    require_divisible(m, 16, "M", q, "columnwise");
    out.push_back(make_buffer(BufferRole::columnwise_data, Shape{k, m / 2}, DType::fp4_e2m1x2, kDataAlignment));
    out.push_back(make_buffer(BufferRole::columnwise_scale_inv, Shape{round_up(k, 128), round_up(m / 16, 4)},
                              DType::fp8_e4m3, kScaleAlignment));
    out.push_back(make_buffer(BufferRole::columnwise_amax, Shape{1}, DType::fp32, kAmaxAlignment));
  }
  if (q.block_rows == 16) {
    require_divisible(m, 16, "M", q, "16x16 tile");
    require_divisible(k, 16, "K", q, "16x16 tile");
  }
}

// fp8_static: rowwise FP8 data and the model's FP32 scales, row-major: [1] per tensor, [M] per
// row, [M, K / B] per 1 x B block (B must divide K). Inference only: no columnwise copy.
void fp8_static_buffers(const TensorProto& t, std::vector<BufferSpec>& out) {
  const Quantizer& q = *t.quantizer;
  TEC_USER_CHECK(!t.usage.columnwise, {}) << q.str() << " is for inference plans: it has no columnwise (transposed) copy";
  const int64_t m = t.shape.rows(), k = t.shape.cols();
  out.push_back(make_buffer(BufferRole::data, t.shape, q.dtype, kDataAlignment));
  Shape scales{1};
  if (q.block_rows == 1 && q.block_cols == 0) scales = Shape{m};
  if (q.block_cols > 0) {
    require_divisible(k, q.block_cols, "K", q, "block");
    scales = Shape{m, k / q.block_cols};
  }
  out.push_back(make_buffer(BufferRole::scale_inv, scales, DType::fp32, kScaleAlignment));
}

}  // namespace

std::vector<BufferSpec> TensorProto::buffers(const Target& target) const {
  std::vector<BufferSpec> out;
  if (is_grouped()) {
    for (GroupedBuffer& b : GroupedTensor::uniform(*this).buffers(target)) out.push_back(std::move(b.spec));
    return out;
  }
  if (!quantizer) {
    out.push_back(make_buffer(BufferRole::data, shape, dtype, kDataAlignment));
    return out;
  }
  TEC_USER_CHECK(usage.rowwise || usage.columnwise, {})
      << "a quantized tensor needs rowwise or columnwise usage, it has neither";
  switch (quantizer->kind) {
    case QuantizerKind::fp8_current:
    case QuantizerKind::fp8_delayed: per_tensor_buffers(*this, target, out); break;
    case QuantizerKind::mxfp8: mxfp8_buffers(*this, out); break;
    case QuantizerKind::fp8_block: fp8_block_buffers(*this, out); break;
    case QuantizerKind::nvfp4: nvfp4_buffers(*this, out); break;
    case QuantizerKind::fp8_static: fp8_static_buffers(*this, out); break;
  }
  return out;
}

int64_t TensorProto::bytes(const Target& target) const {
  int64_t total = 0;
  for (const auto& b : buffers(target)) total = checked_add(total, b.bytes);
  return total;
}

}  // namespace tec
