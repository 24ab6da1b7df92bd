// Shapes and strides, in elements, with overflow-checked arithmetic. A tensor of shape
// (d0, ..., dn-1) is viewed as the matrix [M, K], M = d0*...*dn-2, K = dn-1 (LAYOUTS.md §0).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace tec {

// Upper bounds for anything read from a model: one dim, and the elements of one tensor.
inline constexpr int64_t kMaxDim = int64_t{1} << 31;
inline constexpr int64_t kMaxElements = int64_t{1} << 40;

struct Shape {
  std::vector<int64_t> dims;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d) : dims(d) {}
  explicit Shape(std::vector<int64_t> d) : dims(std::move(d)) {}

  size_t rank() const { return dims.size(); }
  int64_t operator[](size_t i) const { return dims[i]; }
  int64_t back() const { return dims.empty() ? 1 : dims.back(); }
  // Product of the dims; throws if it overflows kMaxElements.
  int64_t numel() const;
  // The [M, K] matrix view.
  int64_t rows() const;
  int64_t cols() const { return back(); }
  // Row-major strides in elements.
  std::vector<int64_t> contiguous_strides() const;
  // The same shape with the last dim moved to the front: [K, d0, ..., dn-2] (LAYOUTS.md §1.1).
  Shape last_dim_first() const;
  Shape with_last(int64_t k) const;
  std::string str() const;  // "[2048, 4096]"

  bool operator==(const Shape&) const = default;
};

// Overflow-checked helpers; they throw Error(internal) on overflow because every caller
// validates its inputs against kMaxDim/kMaxElements first.
int64_t checked_mul(int64_t a, int64_t b);
int64_t checked_add(int64_t a, int64_t b);
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Part `index` of `parts` equal parts along `dim` of `values`, a row-major tensor of `shape`:
// a tensor-parallel rank's slice. With `groups` > 1 the dim is `groups` equal groups and the
// part is taken from each in turn (a gated linear's weight: the rank's gate rows, then its up
// rows). The caller checked that the sizes divide.
std::vector<float> part_along(const std::vector<float>& values, const Shape& shape, size_t dim, int64_t parts, int64_t index,
                              int64_t groups = 1);

}  // namespace tec
