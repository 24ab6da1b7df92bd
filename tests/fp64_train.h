// The fp64 oracle of train plans' gradients, independent of the library: an fp64 forward of
// the graph (fp64_model.h's linear and norm, the activations below) and each sampled gradient
// entry as a central difference of the loss L = <dy, y> (step 1e-6 relative: exact to ~1e-9,
// far below any bound), and for examples/mlp.json its backward written out. The CPU
// reference's train tests (tests/reference/train_test.cpp) and the GPU's
// (tests/gpu/train_gpu_test.cpp) read a trained session's tensors through `Read`.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "compiler.h"
#include "fp64_general.h"
#include "fp64_model.h"
#include "reference/executor.h"
#include "tec_math.h"

namespace tec::test::fp64 {

using Tensors = std::map<std::string, std::vector<double>>;
// A session's tensor by name (inputs, outputs, state), after its training step.
using Read = std::function<HostTensor(const std::string&)>;

inline std::vector<double> as_double(const HostTensor& t) { return std::vector<double>(t.values.begin(), t.values.end()); }

inline double gelu_erf(double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }

// The fp64 forward of a graph's nodes (the ops this test covers), from its inputs and weights.
inline Tensors forward_fp64(const Graph& g, Tensors values) {
  const std::set<std::string> general = {"binary", "unary",  "compare", "where",  "convert", "cast",   "expand",   "matmul",
                                         "reduce", "transpose", "softmax", "slice", "concat", "gather", "embedding", "gather_nd"};
  for (const Node& n : g.nodes) {
    auto in = [&](size_t i) -> const std::vector<double>& { return values.at(g.value(n.inputs.at(i)).name); };
    if (general.count(n.op)) {
      std::vector<const std::vector<double>*> inputs;
      for (size_t i = 0; i < n.inputs.size(); ++i) inputs.push_back(&in(i));
      values[g.value(n.outputs[0]).name] = general_forward_fp64(g, n, inputs);
      continue;
    }
    const Shape& shape = g.value(n.inputs[0]).proto.shape;
    const int64_t rows = shape.rows(), k = shape.cols();
    std::vector<double> y;
    if (n.op == "linear") {
      y = linear(in(0), rows, k, in(1), n.attrs.get_bool("bias", true) ? &in(2) : nullptr);
    } else if (n.op == "layernorm" || n.op == "rmsnorm") {
      std::vector<double> gamma = in(1);
      if (n.attrs.get_bool("zero_centered_gamma", false))
        for (double& v : gamma) v += 1;
      y = norm(in(0), rows, k, gamma, n.op == "layernorm" ? &in(2) : nullptr, n.attrs.get_float("eps", 1e-5));
    } else if (n.op == "gelu" || n.op == "relu" || n.op == "silu") {
      y = in(0);
      for (double& v : y)
        v = n.op == "relu"                                         ? std::max(v, 0.0)
            : n.op == "silu"                                       ? silu(v)
            : n.attrs.get_string("approximate", "tanh") == "tanh" ? gelu_tanh(v)
                                                                   : gelu_erf(v);
    } else if (n.op == "swiglu" || n.op == "geglu") {
      const int64_t half = k / 2;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < half; ++j) {
          const double a = in(0)[static_cast<size_t>(r * k + j)], b = in(0)[static_cast<size_t>(r * k + half + j)];
          y.push_back((n.op == "swiglu" ? silu(a) : gelu_tanh(a)) * b);
        }
    } else if (n.op == "add") {
      y = in(0);
      for (size_t i = 0; i < y.size(); ++i) y[i] += in(1)[i];
    } else if (n.op == "bias") {
      y = in(0);
      for (size_t i = 0; i < y.size(); ++i) y[i] += in(1)[i % static_cast<size_t>(k)];
    } else if (n.op == "scale") {
      y = in(0);
      for (double& v : y) v *= n.attrs.get_float("scale", 1);
    } else if (n.op == "l2norm") {
      y = in(0);
      for (int64_t r = 0; r < rows; ++r) {
        double sum = 0;
        for (int64_t i = 0; i < k; ++i) sum += y[static_cast<size_t>(r * k + i)] * y[static_cast<size_t>(r * k + i)];
        for (int64_t i = 0; i < k; ++i) y[static_cast<size_t>(r * k + i)] /= std::sqrt(sum + n.attrs.get_float("eps", 1e-6));
      }
    } else if (n.op == "dropout") {
      const double p = n.attrs.get_float("p", 0.1);
      y = in(0);
      for (size_t i = 0; i < y.size(); ++i)
        y[i] = tec_dropout_keep(static_cast<unsigned long long>(n.attrs.get_int("seed", 0)), i, static_cast<float>(p)) ? y[i] / (1 - p) : 0;
    } else if (n.op == "rope") {
      const int64_t heads = n.attrs.get_int("heads", 0), head_dim = n.attrs.get_int("head_dim", 0);
      const int64_t rotary = n.attrs.get_int("rotary_dim", 0) == 0 ? head_dim : n.attrs.get_int("rotary_dim", 0);
      const bool interleaved = n.attrs.get_string("style", "half") == "interleaved", sbhd = n.attrs.get_string("layout", "bshd") == "sbhd";
      const double theta = n.attrs.get_float("theta", 10000.0);
      y = in(0);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t position = sbhd ? r / shape[1] : r % shape[1];
        for (int64_t i = 0; i < rotary / 2; ++i) {
          const double angle = static_cast<double>(position) * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(rotary));
          for (int64_t h = 0; h < heads; ++h) {
            double& a = y[static_cast<size_t>(r * k + h * head_dim + (interleaved ? 2 * i : i))];
            double& b = y[static_cast<size_t>(r * k + h * head_dim + (interleaved ? 2 * i + 1 : i + rotary / 2))];
            const double a0 = a, b0 = b;
            a = a0 * std::cos(angle) - b0 * std::sin(angle);
            b = b0 * std::cos(angle) + a0 * std::sin(angle);
          }
        }
      }
    } else if (n.op == "attention") {
      const int64_t heads = n.attrs.get_int("heads", 0), head_dim = n.attrs.get_int("head_dim", 0);
      const int64_t kv_heads = n.attrs.get_int("kv_heads", 0) == 0 ? heads : n.attrs.get_int("kv_heads", 0);
      const int64_t v_dim = n.attrs.get_int("v_head_dim", 0) == 0 ? head_dim : n.attrs.get_int("v_head_dim", 0);
      const bool causal = n.attrs.get_bool("causal", false), sbhd = n.attrs.get_string("layout", "bshd") == "sbhd";
      const double scale = n.attrs.get_float("scale", 0.0) == 0.0 ? 1 / std::sqrt(static_cast<double>(head_dim)) : n.attrs.get_float("scale", 0.0);
      const Shape& kv_shape = g.value(n.inputs.at(1)).proto.shape;
      const int64_t batch = sbhd ? shape[1] : shape[0], seq = sbhd ? shape[0] : shape[1], kv_seq = sbhd ? kv_shape[0] : kv_shape[1];
      const std::vector<double>&q = in(0), &key = in(1), &v = in(2);
      auto at = [&](int64_t b, int64_t position, int64_t h, int64_t seq_of, int64_t width_heads, int64_t width) {
        return static_cast<size_t>(((sbhd ? position * batch + b : b * seq_of + position) * width_heads + h) * width);
      };
      y.assign(static_cast<size_t>(batch * seq * heads * v_dim), 0.0);  // padded rows stay 0
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t i = 0; i < seq; ++i) {
            const int64_t length = n.inputs.size() == 4 ? static_cast<int64_t>(in(3).at(static_cast<size_t>(b))) : kv_seq;
            if (n.inputs.size() == 4 && i >= length) continue;
            const int64_t kvh = h / (heads / kv_heads), keys = causal ? std::min(i + 1, length) : length;
            std::vector<double> p(static_cast<size_t>(keys));
            double total = 0.0;
            for (int64_t j = 0; j < keys; ++j) {
              double dot = 0.0;
              for (int64_t d = 0; d < head_dim; ++d)
                dot += q[at(b, i, h, seq, heads, head_dim) + static_cast<size_t>(d)] * key[at(b, j, kvh, kv_seq, kv_heads, head_dim) + static_cast<size_t>(d)];
              p[static_cast<size_t>(j)] = std::exp(scale * dot);  // small test scores: no max subtraction needed in fp64
              total += p[static_cast<size_t>(j)];
            }
            for (int64_t j = 0; j < keys; ++j)
              for (int64_t d = 0; d < v_dim; ++d)
                y[at(b, i, h, seq, heads, v_dim) + static_cast<size_t>(d)] += p[static_cast<size_t>(j)] / total * v[at(b, j, kvh, kv_seq, kv_heads, v_dim) + static_cast<size_t>(d)];
          }
    } else if (n.op == "sequence_lengths") {  // each row's leading ones (right padding)
      for (int64_t r = 0; r < rows; ++r) {
        int64_t length = 0;
        while (length < k && in(0)[static_cast<size_t>(r * k + length)] != 0) ++length;
        y.push_back(static_cast<double>(length));
      }
    } else if (n.op == "identity" || n.op == "reshape" || n.op == "quantize" || n.op == "dequantize") {
      y = in(0);  // straight through: the fp64 model does not quantize
    } else if (n.op == "moe_router") {
      const int64_t experts = n.attrs.get_int("num_experts", 0), top_k = n.attrs.get_int("top_k", 0);
      const std::vector<double> logits = linear(in(0), rows, k, in(1), nullptr);
      std::vector<double> indices;
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<double> p(logits.begin() + r * experts, logits.begin() + (r + 1) * experts);
        const double top = *std::max_element(p.begin(), p.end());
        double sum = 0;
        for (double& v : p) {
          v = n.attrs.get_string("score_function", "softmax") == "softmax" ? std::exp(v - top) : 1 / (1 + std::exp(-v));
          sum += v;
        }
        if (n.attrs.get_string("score_function", "softmax") == "softmax")
          for (double& v : p) v /= sum;
        std::vector<int64_t> order(static_cast<size_t>(experts));
        for (int64_t e = 0; e < experts; ++e) order[static_cast<size_t>(e)] = e;
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)]; });
        double total = 0;
        for (int64_t j = 0; j < top_k; ++j) total += p[static_cast<size_t>(order[static_cast<size_t>(j)])];
        for (int64_t j = 0; j < top_k; ++j) {
          const double w = p[static_cast<size_t>(order[static_cast<size_t>(j)])];
          y.push_back(n.attrs.get_bool("normalize_topk", false) ? w / total : w);
          indices.push_back(static_cast<double>(order[static_cast<size_t>(j)]));
        }
      }
      values[g.value(n.outputs[1]).name] = std::move(indices);
    } else if (n.op == "moe_permute") {
      // Rows in expert order, stable within an expert (moe_permute's layout).
      const std::vector<double>& indices = in(1);
      const int64_t experts = n.attrs.get_int("num_experts", 0), top_k = static_cast<int64_t>(indices.size()) / rows;
      std::vector<double> m_splits(static_cast<size_t>(experts)), row_map(indices.size());
      for (double e : indices) m_splits[static_cast<size_t>(e)] += 1;
      std::vector<double> next(static_cast<size_t>(experts));
      for (int64_t e = 1; e < experts; ++e) next[static_cast<size_t>(e)] = next[static_cast<size_t>(e - 1)] + m_splits[static_cast<size_t>(e - 1)];
      y.resize(indices.size() * static_cast<size_t>(k));
      const std::vector<double>& x = in(0);
      for (size_t s = 0; s < indices.size(); ++s) {
        row_map[s] = next[static_cast<size_t>(indices[s])]++;
        std::copy_n(&x[(s / static_cast<size_t>(top_k)) * static_cast<size_t>(k)], k, &y[static_cast<size_t>(row_map[s]) * static_cast<size_t>(k)]);
      }
      values[g.value(n.outputs[1]).name] = std::move(m_splits);
      values[g.value(n.outputs[2]).name] = std::move(row_map);
    } else if (n.op == "grouped_linear") {
      const int64_t out = n.attrs.get_int("out_features", 0);
      const bool bias = n.attrs.get_bool("bias", false);
      // Each input looked up once: a map lookup per multiply-add made this the slowest test in CI.
      const std::vector<double>&x = in(0), &m_splits = in(1), &w = in(2);
      const std::vector<double>* b = bias ? &in(3) : nullptr;
      int64_t row = 0;
      for (size_t e = 0; e < m_splits.size(); ++e)
        for (int64_t i = 0; i < static_cast<int64_t>(m_splits[e]); ++i, ++row)
          for (int64_t j = 0; j < out; ++j) {
            const size_t w_row = e * static_cast<size_t>(out) + static_cast<size_t>(j);
            double acc = b ? (*b)[w_row] : 0.0;
            for (int64_t c = 0; c < k; ++c) acc += x[static_cast<size_t>(row * k + c)] * w[w_row * static_cast<size_t>(k) + static_cast<size_t>(c)];
            y.push_back(acc);
          }
    } else if (n.op == "moe_unpermute") {
      const std::vector<double>& row_map = in(1);
      const std::vector<double>& weights = in(2);
      const auto tokens = static_cast<size_t>(g.value(n.inputs[2]).proto.shape.rows()), slots_per_token = weights.size() / tokens;
      const std::vector<double>& x = in(0);
      y.assign(tokens * static_cast<size_t>(k), 0.0);
      for (size_t s = 0; s < weights.size(); ++s)
        for (int64_t c = 0; c < k; ++c)
          y[(s / slots_per_token) * static_cast<size_t>(k) + static_cast<size_t>(c)] +=
              weights[s] * x[static_cast<size_t>(row_map[s]) * static_cast<size_t>(k) + static_cast<size_t>(c)];
    } else {
      throw std::runtime_error("the fp64 model has no op " + n.op);
    }
    values[g.value(n.outputs[0]).name] = std::move(y);
  }
  return values;
}

// The graph as the frontend builds it (forward only, every value's shape fixed), for the
// fp64 model.
inline Graph forward_graph(const std::string& path, int64_t tokens) {
  FrontendOptions o;
  o.mode = Mode::train;  // (requires_grad says which values the step gives a gradient)
  o.dim_overrides["T"] = {tokens};
  o.recipe = RecipeKind::bf16;
  return meta(load_json_graphs(path, o).at(0));
}

struct GradientCheck {
  std::string name;   // the tensor whose gradient is checked
  double error;       // ||g - g_ref|| / ||g_ref|| over the sampled entries
  double rms_error = 0;  // sqrt(mean (g - g_ref)^2): where g_ref is 0 (attention's key bias), the bound
};

// After a training step: dx and the growth of every weight's main_grad over the step
// (`before`: the main_grads before it; none: zero) against central differences of the fp64
// forward of the loss <dy, y> over `g` (the frontend's graph after meta, in train mode), at up
// to `samples` entries of each. Weights that take no gradient (ONNX constants, frozen) enter
// with their values from the model.
inline std::vector<GradientCheck> gradient_checks(const Graph& g, int samples, const Read& read, const Tensors& before = {}) {
  Tensors values;
  for (const Value& v : g.values) {
    if (v.kind == ValueKind::input) values[v.name] = as_double(read(v.name));
    if (v.kind != ValueKind::weight) continue;
    if (!v.proto.requires_grad && v.weight && v.weight->values)
      values[v.name] = std::vector<double>(v.weight->values->begin(), v.weight->values->end());
    else
      values[v.name] = as_double(read(v.name + ".master"));
  }
  Tensors dys;
  for (ValueId out : g.outputs) dys[g.value(out).name] = as_double(read("d" + g.value(out).name));
  auto loss = [&](const Tensors& at) {
    const Tensors all = forward_fp64(g, at);
    double l = 0;
    for (const auto& [name, dy] : dys)
      for (size_t i = 0; i < dy.size(); ++i) l += dy[i] * all.at(name)[i];
    return l;
  };
  std::vector<GradientCheck> checks;
  for (const Value& v : g.values) {
    if (v.kind != ValueKind::input && v.kind != ValueKind::weight) continue;
    if (!v.proto.requires_grad) continue;  // routing, masks, token ids, frozen constants
    std::vector<double> got;
    if (v.kind == ValueKind::input) {
      got = as_double(read("d" + v.name));
    } else {
      got = as_double(read(v.name + ".main_grad"));
      for (size_t i = 0; i < got.size(); ++i) got[i] -= (before.count(v.name + ".main_grad") ? before.at(v.name + ".main_grad")[i] : 0.0);
    }
    const size_t n = got.size(), count = std::min(n, static_cast<size_t>(samples));
    double diff = 0, norm = 0;
    for (size_t j = 0; j < count; ++j) {
      const size_t i = (j * 7919 + 13) % n;  // spread over the tensor
      Tensors at = values;
      const double x = at[v.name][i], h = 1e-6 * std::max(1.0, std::abs(x));
      at[v.name][i] = x + h;
      const double up = loss(at);
      at[v.name][i] = x - h;
      const double want = (up - loss(at)) / (2 * h);
      diff += (got[i] - want) * (got[i] - want);
      norm += want * want;
    }
    checks.push_back({v.name, std::sqrt(diff / std::max(norm, 1e-300)), std::sqrt(diff / static_cast<double>(std::max<size_t>(count, 1)))});
  }
  return checks;
}

inline std::vector<GradientCheck> gradient_checks(const std::string& path, int64_t tokens, int samples, const Read& read,
                                                  const Tensors& before = {}) {
  return gradient_checks(forward_graph(path, tokens), samples, read, before);
}


// examples/mlp.json at full size (h=4096, ffn=16384) after one training step: the fp64 backward
// of its formula, written out (central differences would need a 2-GFLOP forward per entry), at
// sampled rows of dx (at most four) and sampled entries of dW1, db1, dW2, db2: each needs only
// its rows or columns of the fp64 backward. Returns ||g - g_fp64|| / ||g_fp64|| per tensor.
inline std::map<std::string, double> mlp_gradient_errors(int64_t t, const Read& read, const Tensors& before = {}, int samples = 12) {
  const int64_t h = 4096, f = 16384;
  auto get = [&](const std::string& name) { return as_double(read(name)); };
  const auto x = get("x"), dy = get("dy"), gamma = get("ln.weight.master"), beta = get("ln.bias.master");
  const auto w1 = get("fc1.weight.master"), b1 = get("fc1.bias.master"), w2 = get("fc2.weight.master");
  const auto n = norm(x, t, h, gamma, &beta, 1e-5);
  // h1[:, j], the fc1 pre-activation of column j, and da[:, j] = dy W2[:, j], for every row.
  auto h1_column = [&](int64_t j) {
    std::vector<double> c(static_cast<size_t>(t));
    for (int64_t row = 0; row < t; ++row) {
      double acc = b1[static_cast<size_t>(j)];
      for (int64_t i = 0; i < h; ++i) acc += n[static_cast<size_t>(row * h + i)] * w1[static_cast<size_t>(j * h + i)];
      c[static_cast<size_t>(row)] = acc;
    }
    return c;
  };
  auto da_column = [&](int64_t j) {
    std::vector<double> c(static_cast<size_t>(t));
    for (int64_t row = 0; row < t; ++row)
      for (int64_t o = 0; o < h; ++o) c[static_cast<size_t>(row)] += dy[static_cast<size_t>(row * h + o)] * w2[static_cast<size_t>(o * f + j)];
    return c;
  };
  auto dgelu = [](double v) { return (gelu_tanh(v + 1e-6) - gelu_tanh(v - 1e-6)) / 2e-6; };
  struct Errors {
    double diff = 0, norm = 0;
    void add(double got, double want) {
      diff += (got - want) * (got - want);
      norm += want * want;
    }
    double rel() const { return std::sqrt(diff / norm); }
  };
  std::map<std::string, Errors> errors;
  auto grown = [&](const std::string& name) {  // the step's gradient: main_grad's growth over it
    std::vector<double> g = get(name);
    if (const auto it = before.find(name); it != before.end())
      for (size_t i = 0; i < g.size(); ++i) g[i] -= it->second[i];
    return g;
  };
  const auto dw1 = grown("fc1.weight.main_grad"), db1 = grown("fc1.bias.main_grad"), dw2 = grown("fc2.weight.main_grad"),
             db2 = grown("fc2.bias.main_grad");
  for (int sample = 0; sample < samples; ++sample) {
    const int64_t j = (sample * 7919 + 5) % f;
    const auto h1 = h1_column(j), da = da_column(j);
    double db1_want = 0;
    std::vector<double> dh1(static_cast<size_t>(t)), a(static_cast<size_t>(t));
    for (int64_t row = 0; row < t; ++row) {
      dh1[static_cast<size_t>(row)] = da[static_cast<size_t>(row)] * dgelu(h1[static_cast<size_t>(row)]);
      a[static_cast<size_t>(row)] = gelu_tanh(h1[static_cast<size_t>(row)]);
      db1_want += dh1[static_cast<size_t>(row)];
    }
    errors["fc1.bias"].add(db1[static_cast<size_t>(j)], db1_want);
    for (int e = 0; e < 8; ++e) {
      const int64_t i = (e * 104729 + sample * 31) % h;  // an input feature of fc1, an output of fc2
      double dw1_want = 0, dw2_want = 0;
      for (int64_t row = 0; row < t; ++row) {
        dw1_want += dh1[static_cast<size_t>(row)] * n[static_cast<size_t>(row * h + i)];
        dw2_want += dy[static_cast<size_t>(row * h + i)] * a[static_cast<size_t>(row)];
      }
      errors["fc1.weight"].add(dw1[static_cast<size_t>(j * h + i)], dw1_want);
      errors["fc2.weight"].add(dw2[static_cast<size_t>(i * f + j)], dw2_want);
    }
  }
  for (int64_t o = 0; o < h; o += 97) {
    double want = 0;
    for (int64_t row = 0; row < t; ++row) want += dy[static_cast<size_t>(row * h + o)];
    errors["fc2.bias"].add(db2[static_cast<size_t>(o)], want);
  }
  // dx at sampled rows: the whole backward of those rows (rows are independent).
  const auto dx = get("dx");
  for (int64_t row = 3; row < t; row += std::max<int64_t>(41, t / 4)) {
    const double* xr = &x[static_cast<size_t>(row * h)];
    std::vector<double> dn(static_cast<size_t>(h), 0.0);
    for (int64_t j = 0; j < f; ++j) {
      double h1 = b1[static_cast<size_t>(j)], da = 0;
      for (int64_t i = 0; i < h; ++i) h1 += n[static_cast<size_t>(row * h + i)] * w1[static_cast<size_t>(j * h + i)];
      for (int64_t o = 0; o < h; ++o) da += dy[static_cast<size_t>(row * h + o)] * w2[static_cast<size_t>(o * f + j)];
      const double dh1 = da * dgelu(h1);
      for (int64_t i = 0; i < h; ++i) dn[static_cast<size_t>(i)] += dh1 * w1[static_cast<size_t>(j * h + i)];
    }
    double mean = 0, var = 0;
    for (int64_t i = 0; i < h; ++i) mean += xr[i] / static_cast<double>(h);
    for (int64_t i = 0; i < h; ++i) var += (xr[i] - mean) * (xr[i] - mean) / static_cast<double>(h);
    const double rs = 1 / std::sqrt(var + 1e-5);
    double mean_g = 0, mean_gx = 0;
    for (int64_t i = 0; i < h; ++i) {
      const double g = dn[static_cast<size_t>(i)] * gamma[static_cast<size_t>(i)];
      mean_g += g / static_cast<double>(h);
      mean_gx += g * (xr[i] - mean) * rs / static_cast<double>(h);
    }
    for (int64_t i = 0; i < h; ++i) {
      const double g = dn[static_cast<size_t>(i)] * gamma[static_cast<size_t>(i)];
      const double want = dy[static_cast<size_t>(row * h + i)] + rs * (g - mean_g - (xr[i] - mean) * rs * mean_gx);
      errors["x"].add(dx[static_cast<size_t>(row * h + i)], want);
    }
  }
  std::map<std::string, double> out;
  for (const auto& [name, e] : errors) out[name] = e.rel();
  return out;
}

// Bounds on ||g - g_fp64|| / ||g_fp64|| per recipe, for dx and every weight gradient of the
// examples (docs/training.md): bf16 rounds x, dy, every activation and gradient to bf16;
// the FP8 recipes quantize the GEMM operands (E4M3 forward, E5M2 gradients), MXFP8 with 1x32
// power-of-two scales, NVFP4 to 4 bits (E2M1 with 1x16 scales) - its bound is that of 4-bit
// gradients. fp8-delayed runs three steps first, so that its scales come from a real amax
// history (a fresh plan starts at scale 1, as TE's does).
struct RecipeBound {
  RecipeKind recipe;
  double bound;
  int steps;
};
inline const std::vector<RecipeBound> kRecipeBounds = {
    {RecipeKind::bf16, 0.01, 1},        {RecipeKind::fp8_current, 0.15, 1}, {RecipeKind::fp8_delayed, 0.15, 4},
    {RecipeKind::fp8_block, 0.15, 1},   {RecipeKind::mxfp8, 0.15, 1},       {RecipeKind::nvfp4, 0.5, 1},
};

}  // namespace tec::test::fp64
