// The fp64 reference of the examples' math, written independently of the library: the
// oracle that end-to-end tests (CPU reference and GPU) measure their error against. Rows are
// independent, so a test may pass a sample of rows.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "core/random.h"
#include "ir/graph.h"
#include "reference/convert.h"

namespace tec::test::fp64 {

using Matrix = std::vector<double>;  // row-major

struct Model {
  std::map<std::string, std::vector<double>> weights;  // by value name, bf16-rounded
  int64_t rows, hidden;
};

inline Model weights_of(const Graph& g) {
  Model m;
  for (const Value& v : g.values) {
    if (v.kind != ValueKind::weight) continue;
    TEC_INTERNAL_CHECK(v.weight->kind == WeightSource::Kind::random, {}) << "the fp64 model regenerates random weights only";
    auto values = random_weight(v.weight->seed, v.name, v.proto.shape.numel(), v.weight->mean, v.weight->stddev);
    std::vector<double>& w = m.weights[v.name];
    for (float x : values) w.push_back(reference::round_to_bf16(x));
  }
  return m;
}

// y[r][j] = sum_i x[r][i] w[j][i] (+ b[j])
inline Matrix linear(const Matrix& x, int64_t rows, int64_t k, const std::vector<double>& w, const std::vector<double>* b) {
  const int64_t n = static_cast<int64_t>(w.size()) / k;
  Matrix y(static_cast<size_t>(rows * n));
  parallel_for(rows, [&](int64_t r) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = b ? (*b)[static_cast<size_t>(j)] : 0.0;
      for (int64_t i = 0; i < k; ++i) acc += x[static_cast<size_t>(r * k + i)] * w[static_cast<size_t>(j * k + i)];
      y[static_cast<size_t>(r * n + j)] = acc;
    }
  });
  return y;
}

inline Matrix norm(const Matrix& x, int64_t rows, int64_t k, const std::vector<double>& gamma, const std::vector<double>* beta,
            double eps) {
  Matrix y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    if (beta) {
      for (int64_t i = 0; i < k; ++i) mean += x[static_cast<size_t>(r * k + i)];
      mean /= static_cast<double>(k);
    }
    for (int64_t i = 0; i < k; ++i) var += std::pow(x[static_cast<size_t>(r * k + i)] - mean, 2);
    const double rs = 1.0 / std::sqrt(var / static_cast<double>(k) + eps);
    for (int64_t i = 0; i < k; ++i)
      y[static_cast<size_t>(r * k + i)] =
          (x[static_cast<size_t>(r * k + i)] - mean) * rs * gamma[static_cast<size_t>(i)] + (beta ? (*beta)[static_cast<size_t>(i)] : 0.0);
  }
  return y;
}

inline double gelu_tanh(double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); }
inline double silu(double v) { return v / (1 + std::exp(-v)); }

// examples/mlp_tiny.json: x + fc2(gelu_tanh(fc1(layernorm(x))))
inline Matrix mlp_branch(const Model& m, const Matrix& x) {
  const int64_t t = m.rows, h = m.hidden, f = static_cast<int64_t>(m.weights.at("fc1.bias").size());
  Matrix a = linear(norm(x, t, h, m.weights.at("ln.weight"), &m.weights.at("ln.bias"), 1e-5), t, h, m.weights.at("fc1.weight"),
                    &m.weights.at("fc1.bias"));
  for (double& v : a) v = gelu_tanh(v);
  return linear(a, t, f, m.weights.at("fc2.weight"), &m.weights.at("fc2.bias"));
}

// examples/swiglu_mlp.json: x + down(swiglu(gate_up(rmsnorm(x))))
inline Matrix swiglu_branch(const Model& m, const Matrix& x) {
  const int64_t t = m.rows, h = m.hidden;
  const Matrix gu = linear(norm(x, t, h, m.weights.at("norm.weight"), nullptr, 1e-6), t, h, m.weights.at("gate_up.weight"), nullptr);
  const int64_t f = static_cast<int64_t>(gu.size()) / t / 2;
  Matrix a(static_cast<size_t>(t * f));
  for (int64_t r = 0; r < t; ++r)
    for (int64_t j = 0; j < f; ++j)
      a[static_cast<size_t>(r * f + j)] = silu(gu[static_cast<size_t>(r * 2 * f + j)]) * gu[static_cast<size_t>(r * 2 * f + f + j)];
  return linear(a, t, f, m.weights.at("down.weight"), nullptr);
}

}  // namespace tec::test::fp64
