// GroupedTensor: N member tensors of one quantizer in one allocation per buffer role
// (ARCHITECTURE.md §13, LAYOUTS.md §5), as TE's GroupedTensor keeps an MoE layer's experts.
// Data-free like TensorProto: it says where each member's bytes lie in each buffer; members
// are TensorProto views. Members may differ in their first dim (tokens per expert).
#pragma once

#include <vector>

#include "ir/tensor_proto.h"

namespace tec {

// One buffer role of the whole group: the members' buffers of that role packed back to back
// in member order, as TE packs them (element offsets for the data, the members' padded scale
// arrays concatenated for the scales, [n] floats for per-tensor scale_inv and amax).
struct GroupedBuffer {
  BufferSpec spec;                    // the whole buffer: its shape is [bytes / element size]
  std::vector<int64_t> member_bytes;  // per member
  std::vector<int64_t> offsets;       // per member, in bytes from the buffer's start; n + 1 entries
};

class GroupedTensor {
 public:
  // Members' shapes must agree in every dim but the first; at least one member.
  GroupedTensor(std::vector<Shape> member_shapes, DType dtype, std::optional<Quantizer> quantizer, Usage usage);
  // The grouped tensor a TensorProto with group_members > 1 describes: its first dim split
  // into that many equal members (an MoE layer's [experts, N, K] weight).
  static GroupedTensor uniform(const TensorProto& grouped);

  int64_t size() const { return static_cast<int64_t>(member_shapes_.size()); }
  const std::vector<Shape>& member_shapes() const { return member_shapes_; }
  // [sum of the members' M, K]: the rows of every member stacked (LAYOUTS.md §5).
  Shape logical_shape() const;
  // Member i as a plain tensor: its own shape, the group's quantizer and usage.
  TensorProto member(int64_t i) const;
  // Every buffer role a member has, each with the members' offsets. Throws Error(invalid_input)
  // where a member's shape does not fit the quantizer, or where a member's data would start
  // off the 16-byte alignment GEMM operands need.
  std::vector<GroupedBuffer> buffers(const Target& target = {}) const;

 private:
  std::vector<Shape> member_shapes_;
  DType dtype_;
  std::optional<Quantizer> quantizer_;
  Usage usage_;
};

}  // namespace tec
