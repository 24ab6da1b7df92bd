// What a mask computed from a run-time integer input is, found by computing it rather than by
// reading its spelling. Hugging Face's models turn `attention_mask` (1 = token, 0 = padding)
// into attention's mask in many ways (GatherND or Flatten/Gather of a bool cast, And with a
// causal triangle, Where of 0 and -inf, (1 - mask) x the dtype's lowest); whatever the ops,
// the mask is a function of the input alone. Evaluated at probe inputs, right-padded sequences
// of several lengths, it either is "key j of sequence b masked when j >= length b (and, if
// causal, when j > i)" at every probe, or tec does not take it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "frontend/onnx/onnx_fold.h"

namespace tec::onnx {

struct PaddingMask {
  bool causal = false;
};

// `nodes`: every node between `input` (an integer graph input [B, S_kv]) and `mask` (an
// additive float mask broadcast to [B, heads, S_q, S_kv]), in an order where each node's
// producers come first; their other inputs are constants in `consts`. nullopt when a node
// cannot be evaluated or the mask is no padding mask at some probe.
std::optional<PaddingMask> probe_padding_mask(const std::vector<const Node*>& nodes, const ConstMap& consts, const ShapeOf& shape_of,
                                              const std::string& input, const std::vector<int64_t>& input_dims, const std::string& mask,
                                              int64_t seq_q);

}  // namespace tec::onnx
