#include "core/shape.h"

#include <limits>

#include "core/error.h"

namespace tec {

int64_t checked_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  TEC_USER_CHECK(a >= 0 && b >= 0 && !__builtin_mul_overflow(a, b, &out), {})
      << "size overflow: " << a << " * " << b << " does not fit in 64 bits";
  return out;
}

int64_t checked_add(int64_t a, int64_t b) {
  int64_t out = 0;
  TEC_USER_CHECK(a >= 0 && b >= 0 && !__builtin_add_overflow(a, b, &out), {})
      << "size overflow: " << a << " + " << b << " does not fit in 64 bits";
  return out;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n = checked_mul(n, d);
  TEC_USER_CHECK(n <= kMaxElements, {})
      << "tensor of shape " << str() << " has " << n << " elements, more than the limit "
      << kMaxElements;
  return n;
}

int64_t Shape::rows() const {
  int64_t m = 1;
  for (size_t i = 0; i + 1 < dims.size(); ++i) m = checked_mul(m, dims[i]);
  return m;
}

std::vector<int64_t> Shape::contiguous_strides() const {
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = checked_mul(strides[i], dims[i]);
  return strides;
}

Shape Shape::last_dim_first() const {
  if (dims.empty()) return Shape{1, 1};
  std::vector<int64_t> out{dims.back()};
  out.insert(out.end(), dims.begin(), dims.end() - 1);
  return Shape(std::move(out));
}

Shape Shape::with_last(int64_t k) const {
  Shape out = *this;
  if (out.dims.empty())
    out.dims.push_back(k);
  else
    out.dims.back() = k;
  return out;
}

std::string Shape::str() const {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::vector<float> part_along(const std::vector<float>& values, const Shape& shape, size_t dim, int64_t parts, int64_t index,
                              int64_t groups) {
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < dim; ++i) outer *= shape.dims[i];
  for (size_t i = dim + 1; i < shape.dims.size(); ++i) inner *= shape.dims[i];
  const int64_t along = shape.dims[dim], group = along / groups, chunk = group / parts;
  std::vector<float> out;
  out.reserve(static_cast<size_t>(outer * groups * chunk * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t g = 0; g < groups; ++g) {
      const auto first = values.begin() + static_cast<std::ptrdiff_t>((o * along + g * group + index * chunk) * inner);
      out.insert(out.end(), first, first + static_cast<std::ptrdiff_t>(chunk * inner));
    }
  return out;
}

}  // namespace tec
