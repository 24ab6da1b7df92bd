#include "reference/quantize.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/parallel.h"
#include "ir/grouped_tensor.h"
#include "reference/convert.h"

namespace tec::reference {

namespace {

constexpr float kBf16Max = 3.38953139e38f;  // 0x7F7F

uint8_t encode_fp8(DType dtype, float x) { return dtype == DType::fp8_e4m3 ? float_to_e4m3(x) : float_to_e5m2(x); }
float decode_fp8(DType dtype, uint8_t code) { return dtype == DType::fp8_e4m3 ? e4m3_to_float(code) : e5m2_to_float(code); }

// max|x| with fmax, which skips NaN as the GPU's fmaxf does: a NaN input leaves the scale
// finite, and stays NaN only in its own output element (x * scale is NaN, and so is its code).
float abs_max(float acc, float v) { return std::fmax(acc, std::fabs(v)); }

// body(first, last) over [0, n) in chunks, on several threads when n is large: elementwise
// work, or reductions whose result does not depend on the order (max). A random-initialised
// mlp.json spends a second of te-compile's cold start in these loops over its weights.
constexpr size_t kChunk = size_t{1} << 18;
template <typename Body>
void for_chunks(size_t n, Body&& body) {
  parallel_for(static_cast<int64_t>((n + kChunk - 1) / kChunk), [&](int64_t i) {
    const size_t first = static_cast<size_t>(i) * kChunk;
    body(first, std::min(n, first + kChunk));
  });
}

struct Matrix {
  std::span<const float> x;
  int64_t m, k;
  float at(int64_t r, int64_t c) const { return x[static_cast<size_t>(r * k + c)]; }
};

std::span<uint8_t> buffer(const BufferMap& map, BufferRole role, int64_t bytes) {
  auto it = map.find(role);
  TEC_INTERNAL_CHECK(it != map.end(), {}) << "quantize: no span for buffer " << to_string(role);
  TEC_INTERNAL_CHECK(static_cast<int64_t>(it->second.size()) == bytes, {})
      << "quantize: buffer " << to_string(role) << " has " << it->second.size() << " bytes, expected " << bytes;
  return it->second;
}

void store_f32(std::span<uint8_t> out, int64_t index, float v) { std::memcpy(&out[static_cast<size_t>(index * 4)], &v, 4); }
float load_f32(std::span<const uint8_t> in, int64_t index) {
  float v;
  std::memcpy(&v, &in[static_cast<size_t>(index * 4)], 4);
  return v;
}

bool has(const TensorProto& p, const Target& t, BufferRole role) {
  for (const auto& b : p.buffers(t))
    if (b.role == role) return true;
  return false;
}

int64_t bytes_of(const TensorProto& p, const Target& t, BufferRole role) {
  for (const auto& b : p.buffers(t))
    if (b.role == role) return b.bytes;
  TEC_INTERNAL_ERROR({}) << "no buffer " << to_string(role);
}

// ---- per-tensor FP8 (LAYOUTS.md §1) ----
void quantize_per_tensor(const TensorProto& p, const Matrix& x, const BufferMap& out, const Target& t,
                         const QuantizeState& state) {
  const Quantizer& q = *p.quantizer;
  const float amax = abs_max_of(x.x);
  float scale;
  if (q.kind == QuantizerKind::fp8_current) {
    scale = scale_from_amax(amax, max_finite(q.dtype), q.force_pow2_scales, q.amax_epsilon, FLT_MAX);
  } else if (state.delayed_scale_from_own_amax) {
    scale = scale_from_amax(amax, max_finite(q.dtype), false, 0.0f, FLT_MAX);
  } else {
    scale = state.delayed_scale;
    if (state.delayed_amax) *state.delayed_amax = std::fmax(*state.delayed_amax, amax);
  }
  store_f32(buffer(out, BufferRole::scale_inv, 4), 0, 1.0f / scale);
  const bool rowwise = has(p, t, BufferRole::data), columnwise = has(p, t, BufferRole::columnwise_data);
  std::span<uint8_t> data = rowwise ? buffer(out, BufferRole::data, x.m * x.k) : std::span<uint8_t>{};
  std::span<uint8_t> transposed = columnwise ? buffer(out, BufferRole::columnwise_data, x.m * x.k) : std::span<uint8_t>{};
  for_chunks(x.x.size(), [&](size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) {
      const uint8_t code = encode_fp8(q.dtype, x.x[i] * scale);
      if (rowwise) data[i] = code;
      if (columnwise) transposed[(i % static_cast<size_t>(x.k)) * static_cast<size_t>(x.m) + i / static_cast<size_t>(x.k)] = code;
    }
  });
}

// ---- FP8 with the model's scales (fp8-static) ----
// code = x / scale_inv, rounded to nearest even and saturated: ONNX QuantizeLinear to
// FLOAT8E4M3FN with saturate=1, which divides.
void quantize_static(const TensorProto& p, const Matrix& x, const BufferMap& out, const Target& t, const QuantizeState& state) {
  const Quantizer& q = *p.quantizer;
  const int64_t count = bytes_of(p, t, BufferRole::scale_inv) / 4;
  std::vector<float> scales(static_cast<size_t>(count), q.static_scale_inv);
  if (q.static_scale_inv == 0.0f) {
    TEC_INTERNAL_CHECK(static_cast<int64_t>(state.static_scale_inv.size()) == count, {})
        << "fp8_static weight: " << state.static_scale_inv.size() << " scales given, its layout holds " << count;
    scales.assign(state.static_scale_inv.begin(), state.static_scale_inv.end());
  }
  auto scale_inv = buffer(out, BufferRole::scale_inv, count * 4);
  for (int64_t i = 0; i < count; ++i) store_f32(scale_inv, i, scales[static_cast<size_t>(i)]);
  auto data = buffer(out, BufferRole::data, x.m * x.k);
  parallel_for(x.m, [&](int64_t r) {
    for (int64_t c = 0; c < x.k; ++c)
      data[static_cast<size_t>(r * x.k + c)] = encode_fp8(q.dtype, x.at(r, c) / scales[static_cast<size_t>(static_scale_index(q, r, c, x.k))]);
  });
}

// ---- MXFP8 (LAYOUTS.md §2) ----
// One 32-element block along K (rowwise) or along M (columnwise): returns the E8M0 exponent
// and writes the encoded elements through `put`.
template <typename Get, typename Put>
uint8_t mxfp8_block(DType dtype, int n, Get get, Put put) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = abs_max(amax, get(i));
  const float v = amax * (1.0f / max_finite(dtype));
  const uint8_t e = float_to_e8m0_round_up(v);
  const float multiplier = e == 0xFF ? NAN : std::ldexp(1.0f, 127 - static_cast<int>(e));
  for (int i = 0; i < n; ++i) put(i, encode_fp8(dtype, get(i) * multiplier));
  return e;
}

void quantize_mxfp8(const TensorProto& p, const Matrix& x, const BufferMap& out, const Target& t) {
  const DType dtype = p.quantizer->dtype;
  if (has(p, t, BufferRole::data)) {
    auto data = buffer(out, BufferRole::data, x.m * x.k);
    auto scales = buffer(out, BufferRole::scale_inv, bytes_of(p, t, BufferRole::scale_inv));
    std::fill(scales.begin(), scales.end(), uint8_t{0});
    const int64_t cols = round_up(x.k / 32, 4);
    for (int64_t r = 0; r < x.m; ++r)
      for (int64_t j = 0; j < x.k / 32; ++j)
        scales[static_cast<size_t>(r * cols + j)] = mxfp8_block(
            dtype, 32, [&](int i) { return x.at(r, 32 * j + i); },
            [&](int i, uint8_t c) { data[static_cast<size_t>(r * x.k + 32 * j + i)] = c; });
  }
  if (has(p, t, BufferRole::columnwise_data)) {
    auto data = buffer(out, BufferRole::columnwise_data, x.m * x.k);
    auto scales = buffer(out, BufferRole::columnwise_scale_inv, bytes_of(p, t, BufferRole::columnwise_scale_inv));
    std::fill(scales.begin(), scales.end(), uint8_t{0});
    const int64_t cols = round_up(x.k, 128);
    for (int64_t i = 0; i < x.m / 32; ++i)
      for (int64_t c = 0; c < x.k; ++c)
        scales[static_cast<size_t>(i * cols + c)] = mxfp8_block(
            dtype, 32, [&](int r) { return x.at(32 * i + r, c); },
            [&](int r, uint8_t code) { data[static_cast<size_t>((32 * i + r) * x.k + c)] = code; });
  }
}

// ---- FP8 block scaling (LAYOUTS.md §3) ----
void quantize_fp8_block(const TensorProto& p, const Matrix& x, const BufferMap& out, const Target& t) {
  const Quantizer& q = *p.quantizer;
  const float fp8_max = max_finite(q.dtype);
  const float overflow = p.dtype == DType::bf16 ? kBf16Max : FLT_MAX;
  const int64_t mb = ceil_div(x.m, 128), kb = ceil_div(x.k, 128);
  auto block_scale = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    float amax = 0.0f;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) amax = abs_max(amax, x.at(r, c));
    return scale_from_amax(amax, fp8_max, q.force_pow2_scales, q.amax_epsilon, overflow);
  };
  const bool rowwise = has(p, t, BufferRole::data), columnwise = has(p, t, BufferRole::columnwise_data);
  std::span<uint8_t> data, tdata, scales, tscales;
  if (rowwise) {
    data = buffer(out, BufferRole::data, x.m * x.k);
    scales = buffer(out, BufferRole::scale_inv, bytes_of(p, t, BufferRole::scale_inv));
    std::fill(scales.begin(), scales.end(), uint8_t{0});
  }
  if (columnwise) {
    tdata = buffer(out, BufferRole::columnwise_data, x.m * x.k);
    tscales = buffer(out, BufferRole::columnwise_scale_inv, bytes_of(p, t, BufferRole::columnwise_scale_inv));
    std::fill(tscales.begin(), tscales.end(), uint8_t{0});
  }
  if (q.block_rows == 128) {
    // 2-D tiles: one scale per tile, shared by both copies; the columnwise copy is the
    // exact transpose.
    for (int64_t a = 0; a < mb; ++a)
      for (int64_t b = 0; b < kb; ++b) {
        const int64_t r0 = 128 * a, r1 = std::min(x.m, r0 + 128), c0 = 128 * b, c1 = std::min(x.k, c0 + 128);
        const float scale = block_scale(r0, r1, c0, c1);
        if (rowwise) store_f32(scales, a * round_up(kb, 4) + b, 1.0f / scale);
        if (columnwise) store_f32(tscales, b * round_up(mb, 4) + a, 1.0f / scale);
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c) {
            const uint8_t code = encode_fp8(q.dtype, x.at(r, c) * scale);
            if (rowwise) data[static_cast<size_t>(r * x.k + c)] = code;
            if (columnwise) tdata[static_cast<size_t>(c * x.m + r)] = code;
          }
      }
    return;
  }
  // 1x128: rowwise blocks along K, scales M-major [kb][roundup(M,4)]; columnwise blocks along
  // M of the transposed data, scales [mb][roundup(K,4)]. The two are quantized independently.
  if (rowwise)
    for (int64_t r = 0; r < x.m; ++r)
      for (int64_t b = 0; b < kb; ++b) {
        const int64_t c0 = 128 * b, c1 = std::min(x.k, c0 + 128);
        const float scale = block_scale(r, r + 1, c0, c1);
        store_f32(scales, b * round_up(x.m, 4) + r, 1.0f / scale);
        for (int64_t c = c0; c < c1; ++c) data[static_cast<size_t>(r * x.k + c)] = encode_fp8(q.dtype, x.at(r, c) * scale);
      }
  if (columnwise)
    for (int64_t c = 0; c < x.k; ++c)
      for (int64_t a = 0; a < mb; ++a) {
        const int64_t r0 = 128 * a, r1 = std::min(x.m, r0 + 128);
        const float scale = block_scale(r0, r1, c, c + 1);
        store_f32(tscales, a * round_up(x.k, 4) + c, 1.0f / scale);
        for (int64_t r = r0; r < r1; ++r) tdata[static_cast<size_t>(c * x.m + r)] = encode_fp8(q.dtype, x.at(r, c) * scale);
      }
}

// ---- NVFP4 (LAYOUTS.md §4) ----
float nvfp4_global_encode_scale(float amax) {
  float s = (448.0f * 6.0f) / amax;
  if (std::isinf(s)) s = FLT_MAX;
  if (amax == 0.0f || s == 0.0f) s = 1.0f;
  return s;
}

struct Nvfp4Block {
  uint8_t scale;      // E4M3 code
  float multiplier;   // applied to x before the E2M1 cast
};

Nvfp4Block nvfp4_block(float block_amax, float s_enc) {
  const float s_dec = 1.0f / s_enc;
  float product = block_amax * (s_enc * (1.0f / 6.0f));
  product = std::min(product, FLT_MAX);
  const uint8_t s_b = float_to_e4m3(product);
  const float multiplier = std::min(1.0f / (e4m3_to_float(s_b) * s_dec), FLT_MAX);
  return {s_b, multiplier};
}

void put_nibble(std::span<uint8_t> row, int64_t index, uint8_t code) {
  uint8_t& byte = row[static_cast<size_t>(index / 2)];
  byte = index % 2 == 0 ? static_cast<uint8_t>((byte & 0xF0) | code) : static_cast<uint8_t>((byte & 0x0F) | (code << 4));
}

// One NVFP4 copy: 1x16 blocks along the rows of the matrix `at` views (x for the rowwise
// copy, x^T for the columnwise one), or 16x16 tiles. Packed data [rows, cols/2] and E4M3
// scales [roundup(rows, 128), roundup(cols/16, 4)], padding zeroed.
template <typename At>
void nvfp4_copy(At at, int64_t rows, int64_t cols, bool two_d, float s_enc, std::span<uint8_t> data,
                std::span<uint8_t> scales) {
  std::fill(data.begin(), data.end(), uint8_t{0});
  std::fill(scales.begin(), scales.end(), uint8_t{0});
  const int64_t scale_cols = round_up(cols / 16, 4);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols / 16; ++j) {
      float block_amax = 0.0f;
      const int64_t r0 = two_d ? 16 * (r / 16) : r, r1 = two_d ? r0 + 16 : r + 1;
      for (int64_t rr = r0; rr < r1; ++rr)
        for (int i = 0; i < 16; ++i) block_amax = abs_max(block_amax, at(rr, 16 * j + i));
      const Nvfp4Block b = nvfp4_block(block_amax, s_enc);
      scales[static_cast<size_t>(r * scale_cols + j)] = b.scale;
      auto row = data.subspan(static_cast<size_t>(r * cols / 2), static_cast<size_t>(cols / 2));
      for (int i = 0; i < 16; ++i) put_nibble(row, 16 * j + i, float_to_e2m1(at(r, 16 * j + i) * b.multiplier));
    }
}

void quantize_nvfp4(const TensorProto& p, const Matrix& x, const BufferMap& out, const Target& t) {
  float amax = 0.0f;
  for (float v : x.x) amax = abs_max(amax, v);
  const float s_enc = nvfp4_global_encode_scale(amax);
  const bool two_d = p.quantizer->block_rows == 16;
  if (has(p, t, BufferRole::data)) {
    store_f32(buffer(out, BufferRole::amax, 4), 0, amax);
    nvfp4_copy([&](int64_t r, int64_t c) { return x.at(r, c); }, x.m, x.k, two_d, s_enc,
               buffer(out, BufferRole::data, x.m * x.k / 2),
               buffer(out, BufferRole::scale_inv, bytes_of(p, t, BufferRole::scale_inv)));
  }
  if (has(p, t, BufferRole::columnwise_data)) {
    store_f32(buffer(out, BufferRole::columnwise_amax, 4), 0, amax);
    nvfp4_copy([&](int64_t r, int64_t c) { return x.at(c, r); }, x.k, x.m, two_d, s_enc,
               buffer(out, BufferRole::columnwise_data, x.m * x.k / 2),
               buffer(out, BufferRole::columnwise_scale_inv, bytes_of(p, t, BufferRole::columnwise_scale_inv)));
  }
}

}  // namespace

float scale_from_amax(float amax, float fp8_max, bool force_pow2, float amax_epsilon, float overflow_value) {
  if (amax < amax_epsilon) amax = amax_epsilon;
  float scale;
  if (amax == 0.0f || std::isinf(amax) || std::isnan(amax)) {
    scale = 1.0f;
  } else {
    scale = fp8_max / amax;
    if (std::isinf(scale)) scale = overflow_value;
  }
  if (force_pow2) scale = std::bit_cast<float>(std::bit_cast<uint32_t>(scale) & 0xFF800000u);
  return scale;
}

void delayed_scaling_update(std::span<float> history, float& scale, float fp8_max, int margin, AmaxAlgo algo) {
  const float a_new = history[0];
  if (a_new == 0.0f) return;  // the fused kernel skips roll and update (LAYOUTS.md §1.5, step 3)
  float amax = a_new;
  if (algo == AmaxAlgo::max)
    for (float h : history) amax = std::fmax(amax, h);
  const size_t len = history.size();
  for (size_t j = 1; j + 1 < len; ++j) history[j] = history[j + 1];
  if (len > 1) history[len - 1] = a_new;
  history[0] = 0.0f;
  if (std::isfinite(amax) && amax > 0.0f) {
    const float scaled_max = fp8_max * std::ldexp(1.0f, -margin);
    scale = scaled_max / amax;
    if (std::isinf(scale)) scale = FLT_MAX;
  }
}

namespace {

// Member i's slice of every buffer of a grouped tensor.
BufferMap member_slices(const std::vector<GroupedBuffer>& buffers, const BufferMap& whole, int64_t i) {
  BufferMap out;
  for (const GroupedBuffer& b : buffers) {
    std::span<uint8_t> all = buffer(whole, b.spec.role, b.spec.bytes);
    out[b.spec.role] = all.subspan(static_cast<size_t>(b.offsets[static_cast<size_t>(i)]),
                                   static_cast<size_t>(b.member_bytes[static_cast<size_t>(i)]));
  }
  return out;
}

}  // namespace

void quantize(const TensorProto& proto, std::span<const float> x, const BufferMap& out, const Target& target,
              QuantizeState state) {
  TEC_INTERNAL_CHECK(proto.quantizer.has_value(), {}) << "quantize needs a quantized proto";
  if (proto.is_grouped()) {
    TEC_INTERNAL_CHECK(state.delayed_amax == nullptr && state.static_scale_inv.empty(), {})
        << "grouped tensors: delayed state per member, no static scales";
    const GroupedTensor group = GroupedTensor::uniform(proto);
    const auto buffers = group.buffers(target);
    const auto member_values = static_cast<size_t>(group.member(0).shape.numel());
    const bool per_member_state = proto.quantizer->kind == QuantizerKind::fp8_delayed && !state.delayed_scale_from_own_amax;
    TEC_INTERNAL_CHECK(!per_member_state || (static_cast<int64_t>(state.member_delayed_scales.size()) == group.size() &&
                                             static_cast<int64_t>(state.member_delayed_amax.size()) == group.size()),
                       {})
        << "a delayed grouped tensor needs a scale and an amax slot per member";
    for (int64_t i = 0; i < group.size(); ++i) {
      QuantizeState member_state = state;
      if (per_member_state) {
        member_state.delayed_scale = state.member_delayed_scales[static_cast<size_t>(i)];
        member_state.delayed_amax = &state.member_delayed_amax[static_cast<size_t>(i)];
      }
      quantize(group.member(i), x.subspan(static_cast<size_t>(i) * member_values, member_values), member_slices(buffers, out, i),
               target, member_state);
    }
    return;
  }
  TEC_INTERNAL_CHECK(static_cast<int64_t>(x.size()) == proto.shape.numel(), {}) << "quantize: wrong input size";
  const Matrix m{x, proto.shape.rows(), proto.shape.cols()};
  switch (proto.quantizer->kind) {
    case QuantizerKind::fp8_current:
    case QuantizerKind::fp8_delayed: quantize_per_tensor(proto, m, out, target, state); break;
    case QuantizerKind::mxfp8: quantize_mxfp8(proto, m, out, target); break;
    case QuantizerKind::fp8_block: quantize_fp8_block(proto, m, out, target); break;
    case QuantizerKind::nvfp4: quantize_nvfp4(proto, m, out, target); break;
    case QuantizerKind::fp8_static: quantize_static(proto, m, out, target, state); break;
  }
}

std::vector<float> dequantize(const TensorProto& p, const BufferMap& in, bool columnwise, const Target& t) {
  if (p.is_grouped()) {
    const GroupedTensor group = GroupedTensor::uniform(p);
    const auto buffers = group.buffers(t);
    std::vector<float> out;
    for (int64_t i = 0; i < group.size(); ++i) {
      const std::vector<float> member = dequantize(group.member(i), member_slices(buffers, in, i), columnwise, t);
      out.insert(out.end(), member.begin(), member.end());
    }
    return out;
  }
  const Quantizer& q = *p.quantizer;
  const int64_t m = p.shape.rows(), k = p.shape.cols();
  std::vector<float> out(static_cast<size_t>(m * k));
  auto get = [&](BufferRole role) { return std::span<const uint8_t>(buffer(in, role, bytes_of(p, t, role))); };
  auto set = [&](int64_t r, int64_t c, float v) { out[static_cast<size_t>(r * k + c)] = v; };
  switch (q.kind) {
    case QuantizerKind::fp8_current:
    case QuantizerKind::fp8_delayed: {
      const float scale_inv = load_f32(get(BufferRole::scale_inv), 0);
      const bool transposed = columnwise && !t.fp8_gemm_any_layout();
      auto data = get(transposed ? BufferRole::columnwise_data : BufferRole::data);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < k; ++c)
          set(r, c, decode_fp8(q.dtype, data[static_cast<size_t>(transposed ? c * m + r : r * k + c)]) * scale_inv);
      break;
    }
    case QuantizerKind::mxfp8: {
      auto data = get(columnwise ? BufferRole::columnwise_data : BufferRole::data);
      auto scales = get(columnwise ? BufferRole::columnwise_scale_inv : BufferRole::scale_inv);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < k; ++c) {
          const uint8_t e = columnwise ? scales[static_cast<size_t>((r / 32) * round_up(k, 128) + c)]
                                       : scales[static_cast<size_t>(r * round_up(k / 32, 4) + c / 32)];
          set(r, c, decode_fp8(q.dtype, data[static_cast<size_t>(r * k + c)]) * e8m0_to_float(e));
        }
      break;
    }
    case QuantizerKind::fp8_block: {
      const bool two_d = q.block_rows == 128;
      const int64_t mb = ceil_div(m, 128), kb = ceil_div(k, 128);
      auto data = get(columnwise ? BufferRole::columnwise_data : BufferRole::data);
      auto scales = get(columnwise ? BufferRole::columnwise_scale_inv : BufferRole::scale_inv);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < k; ++c) {
          int64_t s;
          if (two_d)
            s = columnwise ? (c / 128) * round_up(mb, 4) + r / 128 : (r / 128) * round_up(kb, 4) + c / 128;
          else
            s = columnwise ? (r / 128) * round_up(k, 4) + c : (c / 128) * round_up(m, 4) + r;
          const uint8_t code = data[static_cast<size_t>(columnwise ? c * m + r : r * k + c)];
          set(r, c, decode_fp8(q.dtype, code) * load_f32(scales, s));
        }
      break;
    }
    case QuantizerKind::fp8_static: {
      auto data = get(BufferRole::data);
      auto scales = get(BufferRole::scale_inv);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < k; ++c)
          set(r, c, decode_fp8(q.dtype, data[static_cast<size_t>(r * k + c)]) * load_f32(scales, static_scale_index(q, r, c, k)));
      break;
    }
    case QuantizerKind::nvfp4: {
      auto data = get(columnwise ? BufferRole::columnwise_data : BufferRole::data);
      auto scales = get(columnwise ? BufferRole::columnwise_scale_inv : BufferRole::scale_inv);
      const float amax = load_f32(get(columnwise ? BufferRole::columnwise_amax : BufferRole::amax), 0);
      const double global = static_cast<double>(amax) / (6.0 * 448.0);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < k; ++c) {
          // Columnwise stores x^T: row c, element r.
          const int64_t row = columnwise ? c : r, col = columnwise ? r : c, width = columnwise ? m : k;
          const uint8_t byte = data[static_cast<size_t>(row * (width / 2) + col / 2)];
          const uint8_t code = col % 2 == 0 ? byte & 0xF : byte >> 4;
          const uint8_t s_b = scales[static_cast<size_t>(row * round_up(width / 16, 4) + col / 16)];
          set(r, c, static_cast<float>(e2m1_to_float(code) * e4m3_to_float(s_b) * global));
        }
      break;
    }
  }
  return out;
}

void encode_values_into(DType dtype, std::span<const float> values, std::span<uint8_t> out) {
  if (dtype != DType::fp32 && dtype != DType::bf16 && dtype != DType::fp16 && dtype != DType::uint8 && dtype != DType::int32)
    TEC_INTERNAL_ERROR({}) << "encode_values: " << to_string(dtype) << " is not a high-precision dtype, a mask or an index";
  TEC_INTERNAL_CHECK(out.size() == values.size() * static_cast<size_t>(storage_bytes(dtype)), {})
      << "encode_values: " << values.size() << " " << to_string(dtype) << " values into " << out.size() << " bytes";
  for_chunks(values.size(), [&](size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) {
      if (dtype == DType::fp32) {
        std::memcpy(&out[4 * i], &values[i], 4);
      } else if (dtype == DType::uint8) {  // a dropout mask: 0 or 1
        out[i] = values[i] != 0.0f ? 1 : 0;
      } else if (dtype == DType::int32) {  // routing indices, exact in float below 2^24
        const float clamped = std::fmin(std::fmax(values[i], -2147483648.0f), 2147483520.0f);
        const int32_t index = clamped == clamped ? static_cast<int32_t>(clamped) : 0;
        std::memcpy(&out[4 * i], &index, 4);
      } else {
        const uint16_t half = dtype == DType::bf16 ? float_to_bf16(values[i]) : float_to_fp16(values[i]);
        std::memcpy(&out[2 * i], &half, 2);
      }
    }
  });
}

std::vector<uint8_t> encode_values(DType dtype, std::span<const float> values) {
  std::vector<uint8_t> out(values.size() * static_cast<size_t>(storage_bytes(dtype)));
  encode_values_into(dtype, values, out);
  return out;
}

std::vector<float> decode_values(DType dtype, std::span<const uint8_t> bytes) {
  const auto size = static_cast<size_t>(storage_bytes(dtype));
  std::vector<float> out(bytes.size() / size);
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t h = 0;
    switch (dtype) {
      case DType::fp32: std::memcpy(&out[i], &bytes[4 * i], 4); break;
      case DType::bf16:
        std::memcpy(&h, &bytes[2 * i], 2);
        out[i] = bf16_to_float(h);
        break;
      case DType::fp16:
        std::memcpy(&h, &bytes[2 * i], 2);
        out[i] = fp16_to_float(h);
        break;
      case DType::uint8: out[i] = bytes[i]; break;
      case DType::int32: {
        int32_t index;
        std::memcpy(&index, &bytes[4 * i], 4);
        out[i] = static_cast<float>(index);
        break;
      }
      default: TEC_INTERNAL_ERROR({}) << "decode_values: " << to_string(dtype) << " is not a high-precision dtype";
    }
  }
  return out;
}

void round_to(DType dtype, std::span<float> values) {
  if (dtype != DType::bf16 && dtype != DType::fp16) return;
  for_chunks(values.size(), [&](size_t first, size_t last) {
    for (size_t i = first; i < last; ++i)
      values[i] = dtype == DType::bf16 ? round_to_bf16(values[i]) : fp16_to_float(float_to_fp16(values[i]));
  });
}

float abs_max_of(std::span<const float> values) {
  std::vector<float> partial((values.size() + kChunk - 1) / kChunk, 0.0f);
  for_chunks(values.size(), [&](size_t first, size_t last) {
    float amax = 0.0f;
    for (size_t i = first; i < last; ++i) amax = abs_max(amax, values[i]);
    partial[first / kChunk] = amax;
  });
  float amax = 0.0f;
  for (float v : partial) amax = std::fmax(amax, v);
  return amax;
}

QuantizedTensor::QuantizedTensor(TensorProto p, const Target& target) : proto(std::move(p)) {
  for (const auto& b : proto.buffers(target)) storage[b.role].assign(static_cast<size_t>(b.bytes), 0);
}

BufferMap QuantizedTensor::spans() {
  BufferMap map;
  for (auto& [role, bytes] : storage) map[role] = bytes;
  return map;
}

}  // namespace tec::reference
