#include "frontend/onnx/onnx_mask_probe.h"

#include "core/error.h"

namespace tec::onnx {

namespace {

// The mask at one probe: the input holding right-padded sequences of `lengths`.
std::optional<Tensor> evaluate(const std::vector<const Node*>& nodes, ConstMap values, const ShapeOf& shape_of, const std::string& input,
                               const std::vector<int64_t>& dims, const std::vector<int64_t>& lengths, const std::string& mask) {
  Tensor probe{.elem_type = kInt64, .dims = dims, .floats = {}, .ints = {}};
  for (int64_t b = 0; b < dims[0]; ++b)
    for (int64_t j = 0; j < dims[1]; ++j) probe.ints.push_back(j < lengths[static_cast<size_t>(b)] ? 1 : 0);
  values[input] = std::make_shared<const Tensor>(std::move(probe));
  for (const Node* n : nodes) {
    if (!foldable(n->op_type) || !n->domain.empty()) return std::nullopt;
    std::vector<TensorPtr> outs;
    try {
      outs = fold(*n, values, shape_of);
    } catch (const Error&) {
      return std::nullopt;  // not a mask tec can compute: the caller leaves it to the general path
    }
    for (size_t o = 0; o < outs.size() && o < n->outputs.size(); ++o) values[n->outputs[o]] = outs[o];
  }
  const auto it = values.find(mask);
  if (it == values.end()) return std::nullopt;
  return *it->second;
}

// Whether `m`, broadcast to [B, heads, seq_q, S_kv] (from [B|1, heads|1, seq_q|1, S_kv]), is 0 where key j is visible to query i of
// sequence b and at most -1e4 (exp underflows to 0 beside any visible score) where it is not.
bool is_padding_mask(const Tensor& m, const std::vector<int64_t>& lengths, int64_t seq_q, int64_t seq_kv, bool causal) {
  if (!m.is_float() || m.dims.size() < 2 || m.dims.size() > 4) return false;
  std::vector<int64_t> d(4 - m.dims.size(), 1);
  d.insert(d.end(), m.dims.begin(), m.dims.end());
  const auto batch = static_cast<int64_t>(lengths.size());
  if ((d[0] != 1 && d[0] != batch) || (d[2] != 1 && d[2] != seq_q) || d[3] != seq_kv) return false;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < d[1]; ++h)
      for (int64_t i = 0; i < seq_q; ++i)
        for (int64_t j = 0; j < seq_kv; ++j) {
          const auto at = static_cast<size_t>((((d[0] == 1 ? 0 : b) * d[1] + h) * d[2] + (d[2] == 1 ? 0 : i)) * seq_kv + j);
          const bool visible = j < lengths[static_cast<size_t>(b)] && (!causal || j <= i);
          const double v = m.at(at);
          if (visible ? v != 0.0 : !(v <= -1e4)) return false;
        }
  return true;
}

}  // namespace

std::optional<PaddingMask> probe_padding_mask(const std::vector<const Node*>& nodes, const ConstMap& consts, const ShapeOf& shape_of,
                                              const std::string& input, const std::vector<int64_t>& input_dims, const std::string& mask,
                                              int64_t seq_q) {
  if (input_dims.size() != 2 || input_dims[0] < 1 || input_dims[1] < 1 || input_dims[0] * input_dims[1] > (int64_t{1} << 20)) return std::nullopt;
  const int64_t batch = input_dims[0], seq = input_dims[1];
  // All tokens; then lengths spread over [1, S] (one token alone, a short and a long sequence).
  std::vector<std::vector<int64_t>> probes{std::vector<int64_t>(static_cast<size_t>(batch), seq)};
  for (int64_t k = 1; k <= 3; ++k) {
    std::vector<int64_t> lengths;
    for (int64_t b = 0; b < batch; ++b) lengths.push_back(1 + (b * 5 + k * 7) % seq);
    probes.push_back(lengths);
  }
  std::optional<bool> causal;
  for (const auto& lengths : probes) {
    const auto m = evaluate(nodes, consts, shape_of, input, input_dims, lengths, mask);
    if (!m) return std::nullopt;
    const bool as_causal = is_padding_mask(*m, lengths, seq_q, seq, true), as_full = is_padding_mask(*m, lengths, seq_q, seq, false);
    if (!as_causal && !as_full) return std::nullopt;
    const bool now = as_causal && !as_full ? true : !as_causal && as_full ? false : causal.value_or(as_causal);
    if (causal && *causal != now) return std::nullopt;
    if (as_causal != as_full) causal = now;  // (a probe of one-token sequences cannot tell)
  }
  return PaddingMask{causal.value_or(true)};
}

}  // namespace tec::onnx
