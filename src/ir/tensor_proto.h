// TensorProto: a data-free description of a tensor (ARCHITECTURE.md §3). buffers() lists
// every physical buffer exactly as LAYOUTS.md gives it, padding included.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "ir/quantizer.h"

namespace tec {

enum class BufferRole : uint8_t {
  data,
  columnwise_data,
  scale_inv,
  columnwise_scale_inv,
  amax,
  columnwise_amax,  // NVFP4 keeps one amax per direction (LAYOUTS.md §0.1)
};
std::string_view to_string(BufferRole role);
// The roles of the columnwise copy.
bool is_columnwise_role(BufferRole role);
// Whether a read (or write) of one direction of a tensor with these buffers touches a buffer
// of `role`: its own direction's copy, and what both directions share (per-tensor FP8's one
// scale_inv; the data of an FP8 tensor on an arch whose GEMMs read it either way).
bool role_serves_direction(BufferRole role, bool columnwise, const std::vector<BufferRole>& roles);

// Which copies of a quantized tensor exist: rowwise (blocks along K) for GEMMs that
// contract over K, columnwise (blocks along M) for the backward GEMMs (LAYOUTS.md §0).
struct Usage {
  bool rowwise = true;
  bool columnwise = false;
  Usage operator|(Usage other) const { return {rowwise || other.rowwise, columnwise || other.columnwise}; }
  bool operator==(const Usage&) const = default;
};

// The GPU a plan targets; it decides whether per-tensor FP8 needs a transposed copy.
struct Target {
  int sm = 90;
  // LAYOUTS.md §1.2: non-TN FP8 GEMMs exist on SM 10.x, 11.x and >= 13.0.
  bool fp8_gemm_any_layout() const { return (sm >= 100 && sm < 120) || sm >= 130; }
  bool operator==(const Target&) const = default;
};

struct BufferSpec {
  BufferRole role;
  Shape shape;      // in stored elements (packed FP4: bytes)
  DType dtype;
  int64_t bytes;
  int64_t alignment;
};

struct TensorProto {
  Shape shape;
  std::vector<int64_t> strides;  // elements; always contiguous for now
  DType dtype = DType::bf16;     // the nominal (high-precision) dtype
  std::optional<Quantizer> quantizer;
  Usage usage;
  bool requires_grad = false;
  // > 1: a grouped tensor of this many equal members along dim 0 (an MoE layer's
  // [experts, N, K] weight, each expert with its own scales): buffers() packs the members'
  // buffers as GroupedTensor does (ir/grouped_tensor.h). 0: one tensor.
  int64_t group_members = 0;

  static TensorProto dense(Shape shape, DType dtype);
  TensorProto with_quantizer(std::optional<Quantizer> q) const;
  TensorProto with_shape(Shape new_shape) const;
  TensorProto update_usage(Usage new_usage) const;

  bool is_quantized() const { return quantizer.has_value(); }
  bool is_grouped() const { return group_members > 1; }
  // Throws Error(invalid_input) when the shape does not fit the quantizer's blocks for the
  // requested usage (e.g. MXFP8 columnwise needs M % 32 == 0).
  std::vector<BufferSpec> buffers(const Target& target = {}) const;
  int64_t bytes(const Target& target = {}) const;
  // The quantizer's state for this tensor (a grouped tensor's per member); empty unquantized.
  std::vector<StateBufferSpec> state_buffers() const {
    return quantizer ? quantizer->state_buffers(is_grouped() ? group_members : 1) : std::vector<StateBufferSpec>{};
  }
  bool operator==(const TensorProto&) const = default;
};

}  // namespace tec
