// Quantizer: a value object describing how a tensor is quantized (ARCHITECTURE.md §3).
// Equality and hash go over every field, so one configuration is one kernel cache key.
// Per-tensor state (delayed scaling's scale and amax history) is declared here and owned
// by the tensor that uses the quantizer, never by the quantizer itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/dtype.h"
#include "core/shape.h"

namespace tec {

enum class QuantizerKind : uint8_t {
  fp8_current,  // FP8 per-tensor, scale from this tensor's amax (LAYOUTS.md §1.6)
  fp8_delayed,  // FP8 per-tensor, scale from an amax history (LAYOUTS.md §1.5)
  mxfp8,        // 1x32 blocks, E8M0 scales (LAYOUTS.md §2)
  fp8_block,    // 1x128 or 128x128 blocks, FP32 scales (LAYOUTS.md §3)
  nvfp4,        // FP4 E2M1, 1x16 (or 16x16) E4M3 scales plus a global amax (LAYOUTS.md §4)
  // FP8 with the scales an explicitly quantized model (ONNX Q/DQ) fixes: code = x / scale_inv,
  // saturated, as ONNX QuantizeLinear. One scale per tensor (an activation's, in
  // static_scale_inv), per row of the [M, K] view (a weight's output channels), or per 1 x
  // block_cols block along K (a weight's block_size); weights' scales are constants.
  fp8_static,
};

enum class AmaxAlgo : uint8_t { max, most_recent };

std::string_view to_string(QuantizerKind kind);
std::string_view to_string(AmaxAlgo algo);

// A state buffer a quantizer needs per tensor, updated in place by the graph.
struct StateBufferSpec {
  std::string name;  // "scale", "amax_history"
  Shape shape;
  DType dtype;
  float initial_value;
};

struct Quantizer {
  QuantizerKind kind = QuantizerKind::fp8_current;
  DType dtype = DType::fp8_e4m3;  // element format: fp8_e4m3, fp8_e5m2 or fp4_e2m1x2
  // Scaling block in [rows, cols] of the [M, K] view; {0, 0} for one scale per tensor;
  // fp8_static's {1, 0} is one scale per row.
  int block_rows = 0;
  int block_cols = 0;
  // fp8_static of an activation: the model's scale (the divisor); 0 where the scales are a
  // weight's constants.
  float static_scale_inv = 0.0f;
  float amax_epsilon = 0.0f;
  bool force_pow2_scales = false;
  // Delayed scaling only.
  int amax_history_len = 0;
  int margin = 0;
  AmaxAlgo amax_algo = AmaxAlgo::max;

  static Quantizer fp8_current(DType dtype, bool force_pow2_scales = false, float amax_epsilon = 0);
  static Quantizer fp8_delayed(DType dtype, int amax_history_len = 1024, int margin = 0,
                               AmaxAlgo algo = AmaxAlgo::max);
  static Quantizer mxfp8(DType dtype);
  // block_dim 1: 1x128 (activations, gradients); 2: 128x128 (weights).
  static Quantizer fp8_block(DType dtype, int block_dim, bool force_pow2_scales = true,
                             float amax_epsilon = 0);
  // two_d: 16x16 tiles, TE's default for weights (LAYOUTS.md §4.4).
  static Quantizer nvfp4(bool two_d = false);
  // An activation's per-tensor static scale (> 0, finite).
  static Quantizer fp8_static(DType dtype, float scale_inv);
  // A weight's static scales, held by its constant: per tensor ({0, 0}), per row ({1, 0}) or
  // per 1 x block_cols block along K ({1, block_cols}).
  static Quantizer fp8_static_weight(DType dtype, int block_rows, int block_cols);

  bool is_per_tensor() const { return block_rows == 0; }
  // The state each tensor quantized this way owns (empty unless delayed scaling); a grouped
  // tensor of `members` members keeps one scale and one history column per member, as TE's
  // GroupedLinear keeps one quantizer per GEMM.
  std::vector<StateBufferSpec> state_buffers(int64_t members = 1) const;
  // "fp8_delayed(fp8_e4m3, history=1024, margin=0, algo=max)"
  std::string str() const;
  size_t hash() const;
  bool operator==(const Quantizer&) const = default;
};

// JSON form used by dumps and plan manifests; from_json checks every field and throws
// Error(invalid_input) on anything a factory would not produce.
nlohmann::json quantizer_to_json(const Quantizer& q);
Quantizer quantizer_from_json(const nlohmann::json& j);

}  // namespace tec

template <>
struct std::hash<tec::Quantizer> {
  size_t operator()(const tec::Quantizer& q) const { return q.hash(); }
};
