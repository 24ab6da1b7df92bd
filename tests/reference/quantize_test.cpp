// Reference quantization: TE's scale edge cases, the decode error of every format, the
// relations between rowwise and columnwise copies, zeroed padding, and delayed scaling's
// history update (LAYOUTS.md §1-4).
#include <doctest/doctest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>

#include "reference/convert.h"
#include "reference/quantize.h"
#include "test_util.h"

namespace tec::reference {

namespace {

std::vector<float> random_bf16(int64_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = round_to_bf16(dist(rng));
  return x;
}

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

TensorProto proto(Shape shape, Quantizer q, Usage usage = {true, true}) {
  return TensorProto::dense(std::move(shape), DType::bf16).with_quantizer(q).update_usage(usage);
}

}  // namespace

TEST_CASE("scale from amax: 0, tiny, inf and NaN all give a finite scale (LAYOUTS.md §1.6)") {
  CHECK(scale_from_amax(0.0f, 448, false, 0, FLT_MAX) == 1.0f);
  CHECK(scale_from_amax(INFINITY, 448, false, 0, FLT_MAX) == 1.0f);
  CHECK(scale_from_amax(NAN, 448, false, 0, FLT_MAX) == 1.0f);
  CHECK(scale_from_amax(1e-40f, 448, false, 0, FLT_MAX) == FLT_MAX);  // 448 / 1e-40 overflows
  CHECK(scale_from_amax(1e-40f, 448, false, 0, 3.38953139e38f) == 3.38953139e38f);  // block: bf16 max
  CHECK(scale_from_amax(896.0f, 448, false, 0, FLT_MAX) == 0.5f);
  CHECK(scale_from_amax(3.0f, 448, true, 0, FLT_MAX) == 128.0f);  // 149.33 rounded down to 2^7
  CHECK(scale_from_amax(1e-9f, 448, false, 1e-3f, FLT_MAX) == doctest::Approx(448000.0f));
}

TEST_CASE("NaN inputs stay NaN only where they were; the scale stays finite") {
  for (auto q : {Quantizer::fp8_current(DType::fp8_e4m3), Quantizer::fp8_block(DType::fp8_e4m3, 1),
                 Quantizer::mxfp8(DType::fp8_e4m3)}) {
    CAPTURE(q.str());
    auto x = random_bf16(64 * 128, 3);
    x[77] = NAN;
    QuantizedTensor t(proto({64, 128}, q, {true, false}));
    quantize(t.proto, x, t.spans());
    const auto back = dequantize(t.proto, t.spans());
    for (size_t i = 0; i < x.size(); ++i) {
      CAPTURE(i);
      CHECK(std::isnan(back[i]) == (i == 77));
    }
  }
}

TEST_CASE("every format decodes within its error bound, rowwise and columnwise, at padded shapes") {
  struct Case {
    Quantizer q;
    double bound;  // ||deq - x|| / ||x|| for N(0,1) data
  };
  const std::vector<Case> cases = {
      {Quantizer::fp8_current(DType::fp8_e4m3), 0.035}, {Quantizer::fp8_current(DType::fp8_e5m2), 0.07},
      {Quantizer::fp8_delayed(DType::fp8_e4m3), 0.035}, {Quantizer::mxfp8(DType::fp8_e4m3), 0.035},
      {Quantizer::fp8_block(DType::fp8_e4m3, 1), 0.035}, {Quantizer::fp8_block(DType::fp8_e4m3, 2), 0.035},
      {Quantizer::nvfp4(false), 0.12},                   {Quantizer::nvfp4(true), 0.15},
  };
  for (const Shape& shape : {Shape{96, 160}, Shape{256, 384}, Shape{2, 64, 96}}) {
    for (const Case& c : cases) {
      CAPTURE(shape.str());
      CAPTURE(c.q.str());
      const auto x = random_bf16(shape.numel(), 11);
      QuantizedTensor t(proto(shape, c.q));
      QuantizeState state;
      state.delayed_scale = 448.0f / 5.0f;
      quantize(t.proto, x, t.spans(), {}, state);
      CHECK(relative_error(dequantize(t.proto, t.spans(), false), x) < c.bound);
      CHECK(relative_error(dequantize(t.proto, t.spans(), true), x) < c.bound);
    }
  }
}

TEST_CASE("per-tensor FP8: the columnwise copy is the byte transpose; scale_inv = amax / 448") {
  auto x = random_bf16(48 * 80, 5);
  for (auto& v : x) v = std::clamp(v, -6.5f, 6.5f);
  x[10] = -7.0f;  // the amax, exactly
  QuantizedTensor t(proto({48, 80}, Quantizer::fp8_current(DType::fp8_e4m3)));
  quantize(t.proto, x, t.spans());
  const auto& data = t.storage.at(BufferRole::data);
  const auto& transposed = t.storage.at(BufferRole::columnwise_data);
  for (int r = 0; r < 48; ++r)
    for (int c = 0; c < 80; ++c) CHECK(data[static_cast<size_t>(r * 80 + c)] == transposed[static_cast<size_t>(c * 48 + r)]);
  float scale_inv;
  std::memcpy(&scale_inv, t.storage.at(BufferRole::scale_inv).data(), 4);
  CHECK(scale_inv == 1.0f / (448.0f / 7.0f));
  CHECK(data[10] == float_to_e4m3(-448.0f));
}

TEST_CASE("2-D block copies are exact transposes; padding of scale arrays is zero") {
  const auto x = random_bf16(96 * 160, 9);
  QuantizedTensor b2(proto({96, 160}, Quantizer::fp8_block(DType::fp8_e4m3, 2)));
  quantize(b2.proto, x, b2.spans());
  for (int r = 0; r < 96; ++r)
    for (int c = 0; c < 160; ++c)
      CHECK(b2.storage.at(BufferRole::data)[static_cast<size_t>(r * 160 + c)] ==
            b2.storage.at(BufferRole::columnwise_data)[static_cast<size_t>(c * 96 + r)]);
  // scale_inv [1, 4] holds tiles (0,0) and (0,1); [0][2..3] are padding.
  const auto& s = b2.storage.at(BufferRole::scale_inv);
  for (int i = 8; i < 16; ++i) CHECK(s[static_cast<size_t>(i)] == 0);

  QuantizedTensor mx(proto({96, 160}, Quantizer::mxfp8(DType::fp8_e4m3)));
  quantize(mx.proto, x, mx.spans());
  const auto& rows = mx.storage.at(BufferRole::scale_inv);  // [128, 8], real 96 x 5
  for (int r = 0; r < 128; ++r)
    for (int j = 0; j < 8; ++j)
      if (r >= 96 || j >= 5) CHECK(rows[static_cast<size_t>(r * 8 + j)] == 0);
      else CHECK(rows[static_cast<size_t>(r * 8 + j)] != 0);
}

TEST_CASE("NVFP4 16x16 weights: the columnwise copy holds the transposed codes and scales") {
  const auto x = random_bf16(64 * 32, 13);
  QuantizedTensor t(proto({64, 32}, Quantizer::nvfp4(true)));
  quantize(t.proto, x, t.spans());
  const auto& rows = t.storage.at(BufferRole::data);          // [64, 16] bytes
  const auto& cols = t.storage.at(BufferRole::columnwise_data);  // [32, 32] bytes
  auto code = [](const std::vector<uint8_t>& d, int64_t row, int64_t col, int64_t width) {
    const uint8_t byte = d[static_cast<size_t>(row * width / 2 + col / 2)];
    return col % 2 == 0 ? byte & 0xF : byte >> 4;
  };
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 32; ++c) CHECK(code(rows, r, c, 32) == code(cols, c, r, 64));
  CHECK(dequantize(t.proto, t.spans(), false) == dequantize(t.proto, t.spans(), true));
}

TEST_CASE("delayed scaling update: roll, amax algorithm, margin, and the amax-0 skip (LAYOUTS.md §1.5)") {
  std::vector<float> h = {3.0f, 1.0f, 7.0f, 2.0f};  // h[0] is the staged amax
  float scale = 1.0f;
  delayed_scaling_update(h, scale, 448.0f, 0, AmaxAlgo::max);
  CHECK(h == std::vector<float>{0.0f, 7.0f, 2.0f, 3.0f});
  CHECK(scale == 448.0f / 7.0f);
  delayed_scaling_update(h, scale, 448.0f, 0, AmaxAlgo::max);  // staged amax 0: nothing moves
  CHECK(h == std::vector<float>{0.0f, 7.0f, 2.0f, 3.0f});
  CHECK(scale == 448.0f / 7.0f);
  h[0] = 4.0f;
  delayed_scaling_update(h, scale, 448.0f, 1, AmaxAlgo::most_recent);
  CHECK(h == std::vector<float>{0.0f, 2.0f, 3.0f, 4.0f});
  CHECK(scale == 224.0f / 4.0f);
  h[0] = INFINITY;  // not finite: the history rolls, the scale is kept
  delayed_scaling_update(h, scale, 448.0f, 0, AmaxAlgo::most_recent);
  CHECK(scale == 56.0f);
}

TEST_CASE("delayed cast max-merges its amax into the staging slot and writes 1/scale") {
  const auto x = random_bf16(32 * 64, 17);
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  float staged = 0.5f;
  QuantizedTensor t(proto({32, 64}, Quantizer::fp8_delayed(DType::fp8_e4m3, 16), {true, false}));
  quantize(t.proto, x, t.spans(), {}, QuantizeState{64.0f, &staged});
  CHECK(staged == std::max(0.5f, amax));
  float scale_inv;
  std::memcpy(&scale_inv, t.storage.at(BufferRole::scale_inv).data(), 4);
  CHECK(scale_inv == 1.0f / 64.0f);
}

}  // namespace tec::reference

namespace tec::reference {

TEST_CASE("fp8-static divides by the model's scale, saturates, and keeps the scales it was given") {
  // ONNX QuantizeLinear to FLOAT8E4M3FN (saturate=1): code = E4M3(x / scale), past 448 -> 448.
  const std::vector<float> x = {1.0f, -3.0f, 0.3f, 1e6f, -1e6f, NAN, 0.0f, 2.5f};
  const float s = 0.1f;
  QuantizedTensor t(proto({2, 4}, Quantizer::fp8_static(DType::fp8_e4m3, s), {true, false}));
  quantize(t.proto, x, t.spans());
  for (size_t i = 0; i < x.size(); ++i) CHECK(t.storage[BufferRole::data][i] == float_to_e4m3(x[i] / s));
  CHECK(t.storage[BufferRole::data][3] == 0x7E);  // +448
  CHECK(t.storage[BufferRole::data][4] == 0xFE);  // -448
  float stored;
  std::memcpy(&stored, t.storage[BufferRole::scale_inv].data(), 4);
  CHECK(stored == s);
  const auto back = dequantize(t.proto, t.spans());
  CHECK(back[1] == e4m3_to_float(float_to_e4m3(-3.0f / s)) * s);

  // A weight's scales per row and per 1 x 64 block along K, given by the model.
  const auto w = random_bf16(4 * 128, 11, 0.05f);
  for (const auto& [q, scales] : {std::pair{Quantizer::fp8_static_weight(DType::fp8_e4m3, 1, 0), std::vector<float>{1e-4f, 2e-4f, 3e-4f, 4e-4f}},
                                  std::pair{Quantizer::fp8_static_weight(DType::fp8_e4m3, 1, 64),
                                            std::vector<float>{1e-4f, 2e-4f, 3e-4f, 4e-4f, 5e-4f, 6e-4f, 7e-4f, 8e-4f}}}) {
    CAPTURE(q.str());
    QuantizedTensor wt(proto({4, 128}, q, {true, false}));
    REQUIRE(wt.storage[BufferRole::scale_inv].size() == scales.size() * 4);
    quantize(wt.proto, w, wt.spans(), {}, QuantizeState{.static_scale_inv = scales});
    int differing = 0;
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t c = 0; c < 128; ++c) {
        const float scale = scales[static_cast<size_t>(static_scale_index(q, r, c, 128))];
        differing += wt.storage[BufferRole::data][static_cast<size_t>(r * 128 + c)] != float_to_e4m3(w[static_cast<size_t>(r * 128 + c)] / scale);
      }
    CHECK(differing == 0);
    CHECK(std::memcmp(wt.storage[BufferRole::scale_inv].data(), scales.data(), scales.size() * 4) == 0);
  }
}

TEST_CASE("FP8 codes dequantized with their scale re-encode to themselves, for every finite E4M3 code") {
  // fp8-static builds a weight's constants from its dequantized values (code * scale, as ONNX
  // DequantizeLinear folds them); dividing by the same scale must give the model's code back.
  int differing = 0;
  for (float scale : {1e-6f, 3.7e-4f, 0.0123f, 1.0f, 7.5f, 300.0f})
    for (int code = 0; code < 256; ++code) {
      if ((code & 0x7F) == 0x7F) continue;  // NaN
      const float value = e4m3_to_float(static_cast<uint8_t>(code)) * scale;
      const uint8_t back = float_to_e4m3(value / scale);
      differing += back != code;
    }
  CHECK(differing == 0);
}

}  // namespace tec::reference
