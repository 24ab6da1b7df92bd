// The fp64 forward of the general ops (binary, unary, compare, where, convert, cast, matmul,
// reduce, transpose, softmax, slice, concat, expand, gather, gather_nd, embedding), written from
// their ONNX and numpy definitions, not from tec's plans: the oracle that the gradients autodiff
// builds for them (OpDef::gradient) are checked against, by central differences
// (tests/fp64_train.h). Shapes come from the graph's values (meta fixed them).
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace tec::test::fp64 {

namespace general {

inline std::vector<int64_t> strides_of(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t d = dims.size(); d-- > 1;) s[d - 1] = s[d] * dims[d];
  return s;
}

inline int64_t count_of(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// The coordinates of row-major index `e` over `dims`.
inline std::vector<int64_t> coords_of(int64_t e, const std::vector<int64_t>& dims) {
  std::vector<int64_t> c(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    c[d] = e % dims[d];
    e /= dims[d];
  }
  return c;
}

// numpy broadcasting: the element of `in` (shape `dims`) that output coordinate `c` reads.
inline double broadcast_at(const std::vector<double>& in, const std::vector<int64_t>& dims, const std::vector<int64_t>& c) {
  const std::vector<int64_t> s = strides_of(dims);
  const size_t skip = c.size() - dims.size();
  int64_t offset = 0;
  for (size_t d = 0; d < dims.size(); ++d) offset += (dims[d] == 1 ? 0 : c[skip + d]) * s[d];
  return in.at(static_cast<size_t>(offset));
}

inline int64_t axis_of(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

inline double unary(const std::string& fn, double v) {
  if (fn == "sigmoid") return 1 / (1 + std::exp(-v));
  if (fn == "tanh") return std::tanh(v);
  if (fn == "erf") return std::erf(v);
  if (fn == "sqrt") return std::sqrt(v);
  if (fn == "reciprocal") return 1 / v;
  if (fn == "neg") return -v;
  if (fn == "exp") return std::exp(v);
  if (fn == "log") return std::log(v);
  if (fn == "abs") return std::abs(v);
  if (fn == "cos") return std::cos(v);
  if (fn == "sin") return std::sin(v);
  throw std::runtime_error("the fp64 model has no unary " + fn);
}

inline double binary(const std::string& fn, double a, double b) {
  if (fn == "add") return a + b;
  if (fn == "sub") return a - b;
  if (fn == "mul") return a * b;
  if (fn == "div") return a / b;
  if (fn == "pow") return std::pow(a, b);
  throw std::runtime_error("the fp64 model has no binary " + fn);
}

inline double compare(const std::string& fn, double a, double b) {
  const bool r = fn == "equal"           ? a == b
                 : fn == "less"          ? a < b
                 : fn == "less_equal"    ? a <= b
                 : fn == "greater"       ? a > b
                 : fn == "greater_equal" ? a >= b
                 : fn == "isnan"         ? std::isnan(a)
                 : fn == "not"           ? a == 0
                 : fn == "and"           ? a != 0 && b != 0
                 : fn == "or"            ? a != 0 || b != 0
                 : fn == "xor"           ? (a != 0) != (b != 0)
                                         : throw std::runtime_error("the fp64 model has no compare " + fn);
  return r ? 1 : 0;
}

// ONNX Slice's index range along one axis: (first, count) for start, end and step, clamped.
inline std::pair<int64_t, int64_t> slice_range(int64_t start, int64_t end, int64_t step, int64_t dim) {
  auto clamp = [](int64_t v, int64_t lo, int64_t hi) { return std::max(lo, std::min(v, hi)); };
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = clamp(start, 0, dim), end = clamp(end, 0, dim);
    return {start, std::max<int64_t>(0, (end - start + step - 1) / step)};
  }
  start = clamp(start, 0, dim - 1), end = clamp(end, -1, dim - 1);
  return {start, std::max<int64_t>(0, (start - end - step - 1) / -step)};
}

}  // namespace general

// y of node `n` (one of the general ops) from its inputs `in`; throws for any other op.
inline std::vector<double> general_forward_fp64(const Graph& g, const Node& n, const std::vector<const std::vector<double>*>& in) {
  using namespace general;
  auto dims = [&](size_t i) { return g.value(n.inputs.at(i)).proto.shape.dims; };
  const std::vector<int64_t> out = g.value(n.outputs.at(0)).proto.shape.dims;
  const int64_t count = count_of(out);
  const std::string fn = n.attrs.get_string("fn", "");
  std::vector<double> y(static_cast<size_t>(count));
  auto each = [&](auto&& f) {
    for (int64_t e = 0; e < count; ++e) y[static_cast<size_t>(e)] = f(coords_of(e, out));
  };
  if (n.op == "binary") {
    each([&](const auto& c) { return binary(fn, broadcast_at(*in[0], dims(0), c), broadcast_at(*in[1], dims(1), c)); });
  } else if (n.op == "unary") {
    each([&](const auto& c) { return unary(fn, broadcast_at(*in[0], dims(0), c)); });
  } else if (n.op == "compare") {
    each([&](const auto& c) { return compare(fn, broadcast_at(*in[0], dims(0), c), in.size() > 1 ? broadcast_at(*in[1], dims(1), c) : 0.0); });
  } else if (n.op == "where") {
    each([&](const auto& c) { return broadcast_at(*in[0], dims(0), c) != 0 ? broadcast_at(*in[1], dims(1), c) : broadcast_at(*in[2], dims(2), c); });
  } else if (n.op == "convert") {
    const DType to = g.value(n.outputs[0]).proto.dtype;
    each([&](const auto& c) {
      const double v = broadcast_at(*in[0], dims(0), c);
      return to == DType::uint8 ? (v != 0 ? 1.0 : 0.0) : to == DType::int32 ? std::trunc(v) : v;
    });
  } else if (n.op == "cast" || n.op == "expand") {  // (fp64 does not round)
    each([&](const auto& c) { return broadcast_at(*in[0], dims(0), c); });
  } else if (n.op == "matmul") {
    // numpy: a 1-D operand is a row (left) or a column (right) vector; batch dims broadcast.
    std::vector<int64_t> a = dims(0), b = dims(1);
    if (a.size() == 1) a.insert(a.begin(), 1);
    if (b.size() == 1) b.push_back(1);
    const int64_t m = a[a.size() - 2], k = a.back(), nn = b.back();
    const std::vector<int64_t> a_batch(a.begin(), a.end() - 2), b_batch(b.begin(), b.end() - 2);
    const size_t rank = std::max(a_batch.size(), b_batch.size());
    std::vector<int64_t> batch(rank);
    for (size_t d = 0; d < rank; ++d) {
      const int64_t da = d + a_batch.size() >= rank ? a_batch[d + a_batch.size() - rank] : 1;
      const int64_t db = d + b_batch.size() >= rank ? b_batch[d + b_batch.size() - rank] : 1;
      batch[d] = std::max(da, db);
    }
    // Each operand's batch offset through its own (broadcast) batch dims, then plain loops.
    auto batch_offset = [&](const std::vector<int64_t>& own, const std::vector<int64_t>& c, int64_t matrix) {
      const std::vector<int64_t> s = strides_of(own);
      int64_t o = 0;
      for (size_t d = 0; d < own.size(); ++d) o += (own[d] == 1 ? 0 : c[d + rank - own.size()]) * s[d];
      return o * matrix;
    };
    y.assign(static_cast<size_t>(count_of(batch) * m * nn), 0.0);
    for (int64_t bi = 0; bi < count_of(batch); ++bi) {
      const std::vector<int64_t> c = coords_of(bi, batch);
      const double* pa = in[0]->data() + batch_offset(a_batch, c, m * k);
      const double* pb = in[1]->data() + batch_offset(b_batch, c, k * nn);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < nn; ++j) {
          double acc = 0;
          for (int64_t t = 0; t < k; ++t) acc += pa[i * k + t] * pb[t * nn + j];
          y[static_cast<size_t>((bi * m + i) * nn + j)] = acc;
        }
    }
  } else if (n.op == "reduce") {
    const std::vector<int64_t> x = dims(0);
    std::vector<bool> reduced(x.size(), n.attrs.get_ints("axes").empty());
    for (int64_t a : n.attrs.get_ints("axes")) reduced[static_cast<size_t>(axis_of(a, x.size()))] = true;
    std::vector<int64_t> kept;
    for (size_t d = 0; d < x.size(); ++d) kept.push_back(reduced[d] ? 1 : x[d]);
    std::vector<double> acc(static_cast<size_t>(count_of(kept)), fn == "max" ? -INFINITY : 0.0);
    const std::vector<int64_t> ks = strides_of(kept);
    for (int64_t e = 0; e < count_of(x); ++e) {
      const std::vector<int64_t> c = coords_of(e, x);
      int64_t o = 0;
      for (size_t d = 0; d < x.size(); ++d) o += (reduced[d] ? 0 : c[d]) * ks[d];
      double& r = acc[static_cast<size_t>(o)];
      r = fn == "max" ? std::max(r, (*in[0])[static_cast<size_t>(e)]) : r + (*in[0])[static_cast<size_t>(e)];
    }
    if (fn == "mean")
      for (double& v : acc) v /= static_cast<double>(count_of(x) / count_of(kept));
    y = acc;  // keepdims or not: the same values in the same order
  } else if (n.op == "transpose") {
    const std::vector<int64_t> x = dims(0), xs = strides_of(x);
    std::vector<int64_t> perm = n.attrs.get_ints("perm");
    if (perm.empty())
      for (size_t d = x.size(); d-- > 0;) perm.push_back(static_cast<int64_t>(d));
    each([&](const auto& c) {
      int64_t offset = 0;
      for (size_t d = 0; d < perm.size(); ++d) offset += c[d] * xs[static_cast<size_t>(perm[d])];
      return (*in[0])[static_cast<size_t>(offset)];
    });
  } else if (n.op == "softmax") {
    const size_t axis = static_cast<size_t>(axis_of(n.attrs.get_int("axis", -1), out.size()));
    const int64_t stride = strides_of(out)[axis], extent = out[axis];
    each([&](const auto& c) {
      const int64_t self = [&] {
        int64_t o = 0;
        const std::vector<int64_t> s = strides_of(out);
        for (size_t d = 0; d < out.size(); ++d) o += c[d] * s[d];
        return o;
      }();
      const int64_t first = self - c[axis] * stride;
      double top = -INFINITY, sum = 0;
      for (int64_t j = 0; j < extent; ++j) top = std::max(top, (*in[0])[static_cast<size_t>(first + j * stride)]);
      for (int64_t j = 0; j < extent; ++j) sum += std::exp((*in[0])[static_cast<size_t>(first + j * stride)] - top);
      return std::exp((*in[0])[static_cast<size_t>(self)] - top) / sum;
    });
  } else if (n.op == "slice") {
    const std::vector<int64_t> x = dims(0), xs = strides_of(x), starts = n.attrs.get_ints("starts"), ends = n.attrs.get_ints("ends");
    std::vector<int64_t> axes = n.attrs.get_ints("axes"), steps = n.attrs.get_ints("steps");
    std::vector<int64_t> first(x.size(), 0), step(x.size(), 1);
    for (size_t i = 0; i < starts.size(); ++i) {
      const auto a = static_cast<size_t>(axis_of(axes.empty() ? static_cast<int64_t>(i) : axes[i], x.size()));
      step[a] = steps.empty() ? 1 : steps[i];
      first[a] = slice_range(starts[i], ends[i], step[a], x[a]).first;
    }
    each([&](const auto& c) {
      int64_t offset = 0;
      for (size_t d = 0; d < x.size(); ++d) offset += (first[d] + c[d] * step[d]) * xs[d];
      return (*in[0])[static_cast<size_t>(offset)];
    });
  } else if (n.op == "concat") {
    const size_t axis = static_cast<size_t>(axis_of(n.attrs.get_int("axis", 0), out.size()));
    each([&](std::vector<int64_t> c) {
      size_t i = 0;
      while (c[axis] >= dims(i)[axis]) c[axis] -= dims(i++)[axis];
      return broadcast_at(*in[i], dims(i), c);
    });
  } else if (n.op == "gather" || n.op == "embedding") {
    const std::vector<int64_t> data = n.op == "embedding" ? dims(1) : dims(0);
    const std::vector<double>& table = n.op == "embedding" ? *in[1] : *in[0];
    const std::vector<double>& indices = n.op == "embedding" ? *in[0] : *in[1];
    const size_t axis = n.op == "embedding" ? 0 : static_cast<size_t>(axis_of(n.attrs.get_int("axis", 0), data.size()));
    const size_t index_rank = n.op == "embedding" ? dims(0).size() : dims(1).size();
    const std::vector<int64_t> index_dims = n.op == "embedding" ? dims(0) : dims(1), ds = strides_of(data);
    each([&](const auto& c) {
      std::vector<int64_t> ic(c.begin() + static_cast<std::ptrdiff_t>(axis), c.begin() + static_cast<std::ptrdiff_t>(axis + index_rank));
      int64_t index = static_cast<int64_t>(indices.at(static_cast<size_t>(index_rank == 0 ? 0 : [&] {
        int64_t o = 0;
        const std::vector<int64_t> s = strides_of(index_dims);
        for (size_t d = 0; d < index_rank; ++d) o += ic[d] * s[d];
        return o;
      }())));
      if (index < 0) index += data[axis];
      int64_t offset = index * ds[axis];
      for (size_t d = 0; d < axis; ++d) offset += c[d] * ds[d];
      for (size_t d = axis + 1; d < data.size(); ++d) offset += c[d - 1 + index_rank] * ds[d];
      return table.at(static_cast<size_t>(offset));
    });
  } else if (n.op == "gather_nd") {
    const std::vector<int64_t> data = dims(0), ds = strides_of(data), idx = dims(1);
    const int64_t k = idx.back(), tuple_rank = static_cast<int64_t>(idx.size()) - 1;
    each([&](const auto& c) {
      int64_t tuple = 0;
      for (int64_t d = 0; d < tuple_rank; ++d) tuple = tuple * idx[static_cast<size_t>(d)] + c[static_cast<size_t>(d)];
      int64_t offset = 0;
      for (int64_t t = 0; t < k; ++t) {
        auto index = static_cast<int64_t>((*in[1])[static_cast<size_t>(tuple * k + t)]);
        if (index < 0) index += data[static_cast<size_t>(t)];
        offset += index * ds[static_cast<size_t>(t)];
      }
      for (size_t d = static_cast<size_t>(k); d < data.size(); ++d) offset += c[static_cast<size_t>(tuple_rank) + d - static_cast<size_t>(k)] * ds[d];
      return (*in[0])[static_cast<size_t>(offset)];
    });
  } else {
    throw std::runtime_error("the fp64 model has no op " + n.op);
  }
  return y;
}

}  // namespace tec::test::fp64
