#include "ir/grouped_tensor.h"

#include "core/error.h"

namespace tec {

namespace {

// What GEMM operands and TMA copies need of each member's data; TE's element offsets give it
// whenever a member's bytes are a multiple of 16 (K % 16 == 0 for FP8).
constexpr int64_t kMemberDataAlignment = 16;

}  // namespace

GroupedTensor::GroupedTensor(std::vector<Shape> member_shapes, DType dtype, std::optional<Quantizer> quantizer, Usage usage)
    : member_shapes_(std::move(member_shapes)), dtype_(dtype), quantizer_(std::move(quantizer)), usage_(usage) {
  TEC_USER_CHECK(!member_shapes_.empty(), {}) << "a grouped tensor needs at least one member";
  const Shape& first = member_shapes_.front();
  TEC_USER_CHECK(first.rank() >= 1, {}) << "a grouped tensor's members need a rank of at least 1";
  for (size_t i = 1; i < member_shapes_.size(); ++i) {
    const Shape& s = member_shapes_[i];
    bool same_tail = s.rank() == first.rank();
    for (size_t d = 1; same_tail && d < s.rank(); ++d) same_tail = s[d] == first[d];
    TEC_USER_CHECK(same_tail, {}) << "grouped tensor member " << i << " has shape " << s.str() << ", member 0 has "
                                  << first.str() << "; members may differ in their first dim only";
  }
}

GroupedTensor GroupedTensor::uniform(const TensorProto& grouped) {
  const int64_t n = grouped.group_members;
  TEC_USER_CHECK(n >= 1 && grouped.shape.rank() >= 2 && grouped.shape[0] == n, {})
      << "a grouped tensor of " << n << " members needs shape [" << n << ", ...], got " << grouped.shape.str();
  const Shape member(std::vector<int64_t>(grouped.shape.dims.begin() + 1, grouped.shape.dims.end()));
  return GroupedTensor(std::vector<Shape>(static_cast<size_t>(n), member), grouped.dtype, grouped.quantizer, grouped.usage);
}

Shape GroupedTensor::logical_shape() const {
  int64_t rows = 0;
  for (const Shape& s : member_shapes_) rows = checked_add(rows, s.rows());
  return Shape{rows, member_shapes_.front().cols()};
}

TensorProto GroupedTensor::member(int64_t i) const {
  TEC_INTERNAL_CHECK(i >= 0 && i < size(), {}) << "member " << i << " of " << size();
  TensorProto p = TensorProto::dense(member_shapes_[static_cast<size_t>(i)], dtype_).with_quantizer(quantizer_);
  p.usage = usage_;
  return p;
}

std::vector<GroupedBuffer> GroupedTensor::buffers(const Target& target) const {
  std::vector<std::vector<BufferSpec>> specs;  // per member
  for (int64_t i = 0; i < size(); ++i)
    specs.push_back(with_context(ErrorContext{"grouped tensor", "", "", "member " + std::to_string(i)},
                                 [&] { return member(i).buffers(target); }));
  std::vector<GroupedBuffer> out;
  for (const BufferSpec& s : specs.front()) out.push_back(GroupedBuffer{s, {}, {0}});
  for (size_t i = 0; i < specs.size(); ++i) {
    TEC_INTERNAL_CHECK(specs[i].size() == out.size(), {}) << "members with different buffer roles";
    for (size_t b = 0; b < out.size(); ++b) {
      GroupedBuffer& g = out[b];
      const BufferSpec& s = specs[i][b];
      TEC_INTERNAL_CHECK(s.role == g.spec.role && s.dtype == g.spec.dtype, {}) << "members' buffers differ";
      const bool data = s.role == BufferRole::data || s.role == BufferRole::columnwise_data;
      TEC_USER_CHECK(!data || g.offsets.back() % kMemberDataAlignment == 0, {})
          << "grouped tensor member " << i << "'s " << to_string(s.role) << " would start at byte " << g.offsets.back() << ", off the "
          << kMemberDataAlignment << "-byte alignment GEMMs need; make each member's bytes (rows x cols x " << storage_bytes(s.dtype)
          << ") a multiple of " << kMemberDataAlignment;
      g.member_bytes.push_back(s.bytes);
      g.offsets.push_back(checked_add(g.offsets.back(), s.bytes));
    }
  }
  // Matrices of one width stack to [sum of rows, width] (the logical shape, which GEMM kernels
  // and device layouts read); anything else is the 1-D buffer TE allocates.
  for (size_t b = 0; b < out.size(); ++b) {
    GroupedBuffer& g = out[b];
    g.spec.bytes = g.offsets.back();
    g.spec.shape = Shape{g.spec.bytes / storage_bytes(g.spec.dtype)};
    const Shape& first = specs.front()[b].shape;
    bool stacks = first.rank() == 2;
    int64_t rows = 0;
    for (const auto& member : specs) {
      stacks = stacks && member[b].shape.rank() == 2 && member[b].shape[1] == first[1];
      if (stacks) rows += member[b].shape[0];
    }
    if (stacks) g.spec.shape = Shape{rows, first[1]};
  }
  return out;
}

}  // namespace tec
