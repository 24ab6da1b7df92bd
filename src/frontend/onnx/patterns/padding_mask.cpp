// Attention masks computed at run time from an integer graph input (transformers'
// attention_mask): the nodes between the input and the mask an attention pattern adds are
// found after the patterns, evaluated at probe masks when emitting (onnx_mask_probe.h), and the
// attention reads each sequence's length instead (tec's sequence_lengths op).
#include <algorithm>

#include "frontend/onnx/onnx_builder.h"

namespace tec::onnx {

void Matcher::find_padding_masks() {
  padding.is_mask_node.assign(graph_.nodes.size(), false);
  std::map<std::string, std::pair<std::set<int>, std::string>> masks;  // per mask value: its nodes and input
  std::set<int> all;
  for (const Group& g : groups) {
    if (g.kind != Group::Kind::attention || g.mask.empty() || graph_.is_constant(g.mask) || masks.count(g.mask)) continue;
    std::set<int> found;
    std::string input;
    if (!mask_subgraph(g.mask, found, input, 0) || input.empty()) continue;
    all.insert(found.begin(), found.end());
    masks[g.mask] = {std::move(found), input};
  }
  // Closed (the layers' masks may share nodes): what the nodes make is read by them, or is a
  // mask the attentions add.
  auto is_mask_of_attention = [&](const std::string& v, int c) {
    const int gid = group_of[static_cast<size_t>(c)];
    return masks.count(v) && gid >= 0 && groups[static_cast<size_t>(gid)].kind == Group::Kind::attention &&
           groups[static_cast<size_t>(gid)].mask == v;
  };
  for (int i : all)
    for (const auto& out : node(i).outputs) {
      if (graph_.outputs.count(out)) return;
      for (int c : graph_.consumers_of(out))
        if (!all.count(c) && !graph_.constant_node[static_cast<size_t>(c)] && !is_mask_of_attention(out, c)) return;  // (Shape: constant)
    }
  for (auto& [mask, found] : masks) {
    std::vector<int> ordered;
    for (int i : graph_.order)
      if (found.first.count(i)) ordered.push_back(i);
    for (int i : ordered) padding.is_mask_node[static_cast<size_t>(i)] = true;
    padding.nodes[mask] = ordered;
    padding.input[mask] = found.second;
  }
}

// Collects the producers of `v` back to constants and one integer graph input.
bool Matcher::mask_subgraph(const std::string& v, std::set<int>& found, std::string& input, int depth) const {
  if (graph_.is_constant(v)) return true;
  if (depth > 64) return false;
  for (const auto& in : graph_.model.inputs)
    if (in.name == v) {
      if (!is_integer_input(in.elem_type) || (!input.empty() && input != v)) return false;
      input = v;
      return true;
    }
  const int p = graph_.producer_of(v);
  if (p < 0 || !node(p).domain.empty() || !foldable(node(p).op_type) || group_of[static_cast<size_t>(p)] >= 0) return false;
  if (!found.insert(p).second) return true;
  for (const auto& in : node(p).inputs)
    if (!in.empty() && !mask_subgraph(in, found, input, depth + 1)) return false;
  return true;
}

std::string PaddingMasks::input_of_node(int i) const {
  for (const auto& [mask, members] : nodes)
    if (std::find(members.begin(), members.end(), i) != members.end()) return input.at(mask);
  return "";
}

PaddingMask Builder::probe_padding(Env& e, const std::string& mask, int64_t seq_q, const ErrorContext& ctx) const {
  const std::string& input = matches_.padding.input.at(mask);
  std::vector<const Node*> nodes;
  for (int i : matches_.padding.nodes.at(mask)) nodes.push_back(&node(i));
  const ShapeOf shape_of = [&e](const std::string& v) -> std::optional<Shape> {
    const auto it = e.runtime.find(v);
    return it == e.runtime.end() ? std::nullopt : std::optional<Shape>(e.g.value(it->second).proto.shape);
  };
  const auto found = probe_padding_mask(nodes, e.consts, shape_of, input, e.g.value(e.runtime.at(input)).proto.shape.dims, mask, seq_q);
  TEC_UNSUPPORTED_CHECK(found.has_value(), ctx)
      << "the attention's mask '" << mask << "' is computed at run time from input '" << input
      << "' and is no padding mask tec knows: evaluated at right-padded probe masks, it is not 0 for the keys each query sees "
         "(before its sequence's length, and, if causal, at or before the query) and at most -1e4 for the others";
  return *found;
}

ValueId Builder::sequence_lengths_of(Env& e, const std::string& input, const Node& at) const {
  if (const auto it = e.lengths.find(input); it != e.lengths.end()) return it->second;
  const ValueId lengths = emit(e, at, "sequence_lengths", {e.runtime.at(input)}, {}, {}, input + ".lengths");
  e.g.nodes.back().name = unique(e, input + ".sequence_lengths");  // (named for its input, not for the first attention reading it)
  e.lengths[input] = lengths;
  return lengths;
}

// Whether every reader of `v` takes it as an embedding lookup's indices, through views

}  // namespace tec::onnx
