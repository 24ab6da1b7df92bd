#include "ir/quantizer.h"

#include <bit>
#include <cmath>
#include <sstream>

#include "core/error.h"

namespace tec {

std::string_view to_string(QuantizerKind kind) {
  switch (kind) {
    case QuantizerKind::fp8_current: return "fp8_current";
    case QuantizerKind::fp8_delayed: return "fp8_delayed";
    case QuantizerKind::mxfp8: return "mxfp8";
    case QuantizerKind::fp8_block: return "fp8_block";
    case QuantizerKind::nvfp4: return "nvfp4";
    case QuantizerKind::fp8_static: return "fp8_static";
  }
  return "?";
}

std::string_view to_string(AmaxAlgo algo) { return algo == AmaxAlgo::max ? "max" : "most_recent"; }

static void require_fp8(DType dtype) {
  TEC_USER_CHECK(is_float8(dtype), {}) << "FP8 quantizers take fp8_e4m3 or fp8_e5m2, got "
                                       << to_string(dtype);
}

Quantizer Quantizer::fp8_current(DType dtype, bool force_pow2_scales, float amax_epsilon) {
  require_fp8(dtype);
  Quantizer q;
  q.kind = QuantizerKind::fp8_current;
  q.dtype = dtype;
  q.force_pow2_scales = force_pow2_scales;
  q.amax_epsilon = amax_epsilon;
  return q;
}

Quantizer Quantizer::fp8_delayed(DType dtype, int amax_history_len, int margin, AmaxAlgo algo) {
  require_fp8(dtype);
  TEC_USER_CHECK(amax_history_len >= 1 && amax_history_len <= 65536, {})
      << "amax_history_len must be in [1, 65536], got " << amax_history_len;
  TEC_USER_CHECK(margin >= 0 && margin <= 64, {}) << "margin must be in [0, 64], got " << margin;
  Quantizer q;
  q.kind = QuantizerKind::fp8_delayed;
  q.dtype = dtype;
  q.amax_history_len = amax_history_len;
  q.margin = margin;
  q.amax_algo = algo;
  return q;
}

Quantizer Quantizer::mxfp8(DType dtype) {
  require_fp8(dtype);
  Quantizer q;
  q.kind = QuantizerKind::mxfp8;
  q.dtype = dtype;
  q.block_rows = 1;
  q.block_cols = 32;
  return q;
}

Quantizer Quantizer::fp8_block(DType dtype, int block_dim, bool force_pow2_scales, float amax_epsilon) {
  require_fp8(dtype);
  TEC_USER_CHECK(block_dim == 1 || block_dim == 2, {})
      << "FP8 block scaling dim must be 1 (1x128) or 2 (128x128), got " << block_dim;
  Quantizer q;
  q.kind = QuantizerKind::fp8_block;
  q.dtype = dtype;
  q.block_rows = block_dim == 1 ? 1 : 128;
  q.block_cols = 128;
  q.force_pow2_scales = force_pow2_scales;
  q.amax_epsilon = amax_epsilon;
  return q;
}

Quantizer Quantizer::nvfp4(bool two_d) {
  Quantizer q;
  q.kind = QuantizerKind::nvfp4;
  q.dtype = DType::fp4_e2m1x2;
  q.block_rows = two_d ? 16 : 1;
  q.block_cols = 16;
  return q;
}

Quantizer Quantizer::fp8_static(DType dtype, float scale_inv) {
  require_fp8(dtype);
  TEC_USER_CHECK(std::isfinite(scale_inv) && scale_inv > 0.0f, {})
      << "a static FP8 scale must be a positive finite number, got " << scale_inv;
  Quantizer q;
  q.kind = QuantizerKind::fp8_static;
  q.dtype = dtype;
  q.static_scale_inv = scale_inv;
  return q;
}

Quantizer Quantizer::fp8_static_weight(DType dtype, int block_rows, int block_cols) {
  require_fp8(dtype);
  const bool per_tensor = block_rows == 0 && block_cols == 0, per_row = block_rows == 1 && block_cols == 0;
  TEC_USER_CHECK(per_tensor || per_row || (block_rows == 1 && block_cols >= 1 && block_cols <= (1 << 20)), {})
      << "static FP8 weight scales are per tensor {0, 0}, per row {1, 0} or per 1 x B block {1, B}, got {" << block_rows << ", "
      << block_cols << "}";
  Quantizer q;
  q.kind = QuantizerKind::fp8_static;
  q.dtype = dtype;
  q.block_rows = block_rows;
  q.block_cols = block_cols;
  return q;
}

std::vector<StateBufferSpec> Quantizer::state_buffers(int64_t members) const {
  if (kind != QuantizerKind::fp8_delayed) return {};
  // LAYOUTS.md §1.5: scale starts at 1, the history at 0. Row 0 of the history is the
  // staging slot the cast max-merges into; one column per tensor: [len] for one, [len,
  // members] for a grouped tensor (TE's [history, tensors] layout).
  if (members > 1)
    return {
        {"scale", Shape{members}, DType::fp32, 1.0f},
        {"amax_history", Shape{amax_history_len, members}, DType::fp32, 0.0f},
    };
  return {
      {"scale", Shape{1}, DType::fp32, 1.0f},
      {"amax_history", Shape{amax_history_len}, DType::fp32, 0.0f},
  };
}

std::string Quantizer::str() const {
  std::ostringstream out;
  out.exceptions(std::ios::badbit);  // out of memory throws rather than truncating the string
  out << to_string(kind) << "(" << to_string(dtype);
  if (kind == QuantizerKind::fp8_static && static_scale_inv > 0.0f) out << ", scale_inv=" << static_scale_inv;
  if (kind == QuantizerKind::fp8_static && block_rows == 1 && block_cols == 0) out << ", per row";
  else if (!is_per_tensor()) out << ", block=" << block_rows << "x" << block_cols;
  if (kind == QuantizerKind::fp8_delayed)
    out << ", history=" << amax_history_len << ", margin=" << margin << ", algo=" << to_string(amax_algo);
  if (force_pow2_scales) out << ", pow2_scales";
  if (amax_epsilon != 0.0f) out << ", amax_epsilon=" << amax_epsilon;
  out << ")";
  return out.str();
}

size_t Quantizer::hash() const {
  // FNV-1a over the fields; floats by their bits so that hash agrees with operator==
  // (the factories never produce -0 or NaN epsilons).
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(static_cast<uint64_t>(kind));
  mix(static_cast<uint64_t>(dtype));
  mix(static_cast<uint64_t>(block_rows));
  mix(static_cast<uint64_t>(block_cols));
  mix(std::bit_cast<uint32_t>(amax_epsilon));
  mix(force_pow2_scales);
  mix(static_cast<uint64_t>(amax_history_len));
  mix(static_cast<uint64_t>(margin));
  mix(static_cast<uint64_t>(amax_algo));
  mix(std::bit_cast<uint32_t>(static_scale_inv));
  return static_cast<size_t>(h);
}

}  // namespace tec
