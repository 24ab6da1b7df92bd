// Reference quantization for every recipe, writing buffers laid out exactly as
// TensorProto::buffers() lists them (LAYOUTS.md §1-4). The GPU kernels must match these
// bytes; the compiler uses them to pre-quantize weights.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "ir/tensor_proto.h"

namespace tec::reference {

// LAYOUTS.md §1.6: scale = fp8_max / amax with TE's edge cases. `overflow_value` replaces a
// +inf quotient (FLT_MAX for per-tensor; the input dtype's max for block scaling, §3.2).
float scale_from_amax(float amax, float fp8_max, bool force_pow2, float amax_epsilon, float overflow_value);

// LAYOUTS.md §1.5: one delayed-scaling update of one tensor's history column and scale.
// history[0] holds the amax staged by the last cast.
void delayed_scaling_update(std::span<float> amax_history, float& scale, float fp8_max, int margin, AmaxAlgo algo);

// Per-call inputs of stateful quantizers.
struct QuantizeState {
  float delayed_scale = 1.0f;    // fp8_delayed: the scale to cast with
  float* delayed_amax = nullptr;  // fp8_delayed: amax_history[0], max-merged with max|x|
  // fp8_delayed of a grouped tensor (a train plan's copy of an MoE layer's weights): each
  // member's scale, and its history's row-0 slot, instead of the two above.
  std::span<const float> member_delayed_scales;
  std::span<float> member_delayed_amax;
  std::span<const float> static_scale_inv;  // fp8_static of a weight: the model's scales
  // fp8_delayed of a constant (a weight quantized by the compiler): the scale comes from the
  // tensor's own amax, each member's own for a grouped tensor, and delayed_scale is unused.
  bool delayed_scale_from_own_amax = false;
};

// fp8_static: the scale_inv of element (r, c) of a tensor with K columns, as its scale_inv
// buffer lays them out (tensor_proto.cpp): per tensor, per row, or per 1 x B block.
inline int64_t static_scale_index(const Quantizer& q, int64_t r, int64_t c, int64_t k) {
  if (q.block_rows == 0) return 0;
  if (q.block_cols == 0) return r;
  return r * (k / q.block_cols) + c / q.block_cols;
}

using BufferMap = std::map<BufferRole, std::span<uint8_t>>;

// Quantizes x ([M, K] row-major, values of the tensor's nominal dtype) into `out`, one span
// per buffer of proto.buffers(target), each of exactly that buffer's size. Padding is zeroed.
// A grouped proto quantizes each member into its slices of the buffers (GroupedTensor).
void quantize(const TensorProto& proto, std::span<const float> x, const BufferMap& out, const Target& target = {},
              QuantizeState state = {});

// The [M, K] values a quantized tensor decodes to, from its rowwise copy, or from its
// columnwise copy (returned in [M, K] order too).
std::vector<float> dequantize(const TensorProto& proto, const BufferMap& in, bool columnwise = false,
                              const Target& target = {});

// High-precision values to and from their stored bytes (bf16, fp16, fp32), rounding to
// nearest even. encode_values_into writes into `out`, which must hold exactly their bytes: a
// plan's weights and masters go straight into the constants blob, a step's outputs into the
// arena, with no buffer of their own (5.6 GB of fresh pages for moe.json's fp32 masters).
void encode_values_into(DType dtype, std::span<const float> values, std::span<uint8_t> out);
std::vector<uint8_t> encode_values(DType dtype, std::span<const float> values);
std::vector<float> decode_values(DType dtype, std::span<const uint8_t> bytes);
// Rounds values in place to what `dtype` can hold.
void round_to(DType dtype, std::span<float> values);
// max |v| over the values, skipping NaN (fmax), as every per-tensor amax here is taken.
float abs_max_of(std::span<const float> values);

// Owns buffers for one quantized tensor, sized from proto.buffers(); for tests and tools.
struct QuantizedTensor {
  TensorProto proto;
  std::map<BufferRole, std::vector<uint8_t>> storage;
  explicit QuantizedTensor(TensorProto p, const Target& target = {});
  BufferMap spans();
};

}  // namespace tec::reference
