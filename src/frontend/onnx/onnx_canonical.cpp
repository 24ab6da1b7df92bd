#include "frontend/onnx/onnx_canonical.h"

#include <algorithm>
#include <optional>

namespace tec::onnx {

namespace {

using Dims = std::vector<int64_t>;

// How deep a shape is looked for through its producers: exporters' chains are a few nodes,
// and a hostile graph must not recurse without end.
constexpr int kMaxShapeDepth = 16;

class Canonicalizer {
 public:
  Canonicalizer(std::vector<Node>& nodes, const std::map<std::string, Tensor>& initializers, const std::vector<ValueInfo>& inputs,
                const std::set<std::string>& outputs)
      : nodes_(nodes), initializers_(initializers), outputs_(outputs) {
    for (const ValueInfo& in : inputs) {
      Dims d;
      for (const Dim& dim : in.dims) d.push_back(dim.value);
      if (in.has_shape && std::all_of(d.begin(), d.end(), [](int64_t v) { return v >= 1; })) input_shapes_[in.name] = d;
    }
    for (const Node& n : nodes_) {
      for (const auto& out : n.outputs) names_.insert(out);
      names_.insert(n.name);
    }
    reindex();
  }

  std::map<int, std::string> run() {
    const size_t original = nodes_.size();
    for (size_t i = 0; i < original; ++i) keys_transposed_through_a_3d_view(static_cast<int>(i));
    reindex();
    for (size_t i = 0; i < original; ++i) head_split_and_key_transpose_in_one(static_cast<int>(i));
    reindex();
    for (size_t i = 0; i < original; ++i) reshape_to_its_own_shape(static_cast<int>(i));
    return notes_;
  }

 private:
  void reindex() {
    shapes_.clear();
    producer_.clear();
    readers_.clear();
    for (const Node& n : nodes_) {
      for (const auto& out : n.outputs)
        if (!out.empty()) producer_[out] = n.index;
      for (const auto& in : n.inputs)
        if (!in.empty()) ++readers_[in];
    }
  }

  Node* producer(const std::string& v, const char* op) {
    const auto it = producer_.find(v);
    if (it == producer_.end()) return nullptr;
    Node& n = nodes_[static_cast<size_t>(it->second)];
    return n.op_type == op && n.domain.empty() ? &n : nullptr;
  }
  // Read by one node and not a graph output: a rewrite may change how it is made.
  bool internal(const std::string& v) const {
    const auto it = readers_.find(v);
    return it != readers_.end() && it->second == 1 && !outputs_.count(v);
  }

  // An integer constant as the exporters write shapes: an initializer or a Constant node.
  std::optional<Dims> constant_ints(const std::string& v) const {
    if (const auto it = initializers_.find(v); it != initializers_.end())
      return it->second.is_float() ? std::nullopt : std::optional<Dims>(it->second.ints);
    const auto p = producer_.find(v);
    if (p == producer_.end()) return std::nullopt;
    const Node& n = nodes_[static_cast<size_t>(p->second)];
    if (n.op_type != "Constant" || !n.domain.empty()) return std::nullopt;
    const auto value = n.attrs.find("value");
    if (value == n.attrs.end() || !value->second.t || value->second.t->is_float()) return std::nullopt;
    return value->second.t->ints;
  }

  static std::optional<Dims> perm_of(const Node& n) {
    const auto it = n.attrs.find("perm");
    if (it == n.attrs.end() || it->second.type != Attribute::Type::ints) return std::nullopt;
    return it->second.ints;
  }

  // The shape of `v` where the structure fixes it: a static graph input, a Reshape to a
  // constant shape, a Transpose, Unsqueeze or Expand of a known shape.
  std::optional<Dims> shape_of(const std::string& v, int depth = 0) const {
    // Memoized: a hostile graph's diamonds would otherwise be walked once per path.
    if (const auto known = shapes_.find(v); known != shapes_.end()) return known->second;
    auto shape = find_shape(v, depth);
    shapes_[v] = shape;
    return shape;
  }
  std::optional<Dims> find_shape(const std::string& v, int depth) const {
    if (const auto it = input_shapes_.find(v); it != input_shapes_.end()) return it->second;
    const auto p = producer_.find(v);
    if (p == producer_.end() || depth > kMaxShapeDepth) return std::nullopt;
    const Node& n = nodes_[static_cast<size_t>(p->second)];
    if (!n.domain.empty() || n.inputs.empty()) return std::nullopt;
    if (n.op_type == "Reshape" && n.inputs.size() == 2) {
      auto to = constant_ints(n.inputs[1]);
      if (!to) return std::nullopt;
      if (std::all_of(to->begin(), to->end(), [](int64_t d) { return d >= 1; })) return to;
      return reshaped(shape_of(n.inputs[0], depth + 1), *to, attr_int_or(n, "allowzero", 0) != 0);
    }
    if (is_binary(n.op_type) && n.inputs.size() == 2) {
      const auto a = shape_or_constant(n.inputs[0], depth), b = shape_or_constant(n.inputs[1], depth);
      return a && b ? broadcast(*a, *b) : std::nullopt;
    }
    const auto in = shape_of(n.inputs[0], depth + 1);
    if (!in) return std::nullopt;
    if (n.op_type == "Softmax" || n.op_type == "Identity" || n.op_type == "Cast") return in;
    if (n.op_type == "MatMul" && n.inputs.size() == 2) {  // [..., m, k] x [..., k, n], batch dims broadcast
      const auto w = shape_or_constant(n.inputs[1], depth);
      if (!w || w->size() < 2 || in->size() < 2 || in->back() != (*w)[w->size() - 2]) return std::nullopt;
      auto batch = broadcast(Dims(in->begin(), in->end() - 2), Dims(w->begin(), w->end() - 2));
      if (!batch) return std::nullopt;
      batch->push_back((*in)[in->size() - 2]);
      batch->push_back(w->back());
      return batch;
    }
    if (n.op_type == "Transpose") {
      const auto perm = perm_of(n);
      if (!perm || perm->size() != in->size()) return std::nullopt;
      Dims out;
      for (int64_t a : *perm) {
        if (a < 0 || a >= static_cast<int64_t>(in->size())) return std::nullopt;
        out.push_back((*in)[static_cast<size_t>(a)]);
      }
      return out;
    }
    if (n.op_type == "Expand" && n.inputs.size() == 2) {
      const auto to = constant_ints(n.inputs[1]);
      if (!to || to->size() < in->size()) return std::nullopt;
      Dims out = *to;
      const size_t lead = to->size() - in->size();
      for (size_t d = 0; d < in->size(); ++d) {
        const int64_t a = (*in)[d], b = (*to)[lead + d];
        if (a != b && a != 1 && b != 1) return std::nullopt;
        out[lead + d] = a == 1 ? b : a;
      }
      return out;
    }
    return std::nullopt;
  }

  static bool is_binary(const std::string& op) { return op == "Add" || op == "Sub" || op == "Mul" || op == "Div"; }

  static int64_t attr_int_or(const Node& n, const char* name, int64_t fallback) {
    const auto it = n.attrs.find(name);
    return it == n.attrs.end() || it->second.type != Attribute::Type::int_ ? fallback : it->second.i;
  }

  // The shape of a constant (an initializer or a Constant node's value), else shape_of.
  std::optional<Dims> shape_or_constant(const std::string& v, int depth) const {
    if (const auto it = initializers_.find(v); it != initializers_.end()) return it->second.dims;
    if (const auto p = producer_.find(v); p != producer_.end()) {
      const Node& n = nodes_[static_cast<size_t>(p->second)];
      if (n.op_type == "Constant" && n.domain.empty())
        if (const auto value = n.attrs.find("value"); value != n.attrs.end() && value->second.t) return value->second.t->dims;
    }
    return shape_of(v, depth + 1);
  }

  static std::optional<Dims> broadcast(Dims a, Dims b) {
    if (a.size() < b.size()) std::swap(a, b);
    const size_t lead = a.size() - b.size();
    for (size_t d = 0; d < b.size(); ++d) {
      int64_t& x = a[lead + d];
      const int64_t y = b[d];
      if (x != y && x != 1 && y != 1) return std::nullopt;
      if (x == 1) x = y;
    }
    return a;
  }

  // ONNX Reshape's target with 0 (copy the input's dim, unless allowzero) and one -1
  // (inferred) resolved against a known input shape.
  static std::optional<Dims> reshaped(const std::optional<Dims>& in, Dims to, bool allowzero) {
    if (!in) return std::nullopt;
    int64_t numel = 1, known = 1;
    for (int64_t d : *in) numel *= d;
    int inferred = -1;
    for (size_t i = 0; i < to.size(); ++i) {
      if (to[i] == 0 && !allowzero) {
        if (i >= in->size()) return std::nullopt;
        to[i] = (*in)[i];
      }
      if (to[i] == -1) {
        if (inferred >= 0) return std::nullopt;
        inferred = static_cast<int>(i);
        continue;
      }
      if (to[i] < 1) return std::nullopt;
      known *= to[i];
    }
    if (inferred >= 0) {
      if (known == 0 || numel % known != 0) return std::nullopt;
      to[static_cast<size_t>(inferred)] = numel / known;
    } else if (known != numel) {
      return std::nullopt;
    }
    return to;
  }

  std::string fresh(const std::string& base) {
    std::string name = base;
    for (int k = 1; names_.count(name); ++k) name = base + "_" + std::to_string(k);
    names_.insert(name);
    return name;
  }

  // Appends a Constant node holding `dims` as an INT64 tensor; returns its output.
  std::string add_shape_constant(const Node& beside, const Dims& dims) {
    Node c;
    c.index = static_cast<int>(nodes_.size());
    c.name = fresh(beside.name + "/canonical_shape");
    c.op_type = "Constant";
    c.outputs = {fresh(beside.name + "/canonical_shape_value")};
    Attribute value;
    value.type = Attribute::Type::tensor;
    value.t = Tensor{.elem_type = kInt64, .dims = {static_cast<int64_t>(dims.size())}, .floats = {}, .ints = dims};
    c.attrs["value"] = value;
    nodes_.push_back(c);
    return nodes_.back().outputs[0];
  }

  static Attribute ints_attribute(Dims v) {
    Attribute a;
    a.type = Attribute::Type::ints;
    a.ints = std::move(v);
    return a;
  }

  // Reshape(x, [A, S, D]) -> Transpose(perm [0, 2, 1]) -> Reshape([B, H, D, S]) with A = B x H,
  // as torch.onnx's dynamo exporter writes k^T in scaled_dot_product_attention, is
  // Transpose(Reshape(x, [B, H, S, D]), perm [0, 1, 3, 2]): the same elements in the same
  // places (a reshape that only splits the leading dim moves nothing). The Reshape is dropped
  // too where x is [B, H, S, D] already; repeat_kv's Expand then meets its own Reshape.
  void keys_transposed_through_a_3d_view(int i) {
    const Node& reshape4 = nodes_[static_cast<size_t>(i)];
    if (reshape4.op_type != "Reshape" || !reshape4.domain.empty() || reshape4.inputs.size() != 2) return;
    Node* mid = producer(reshape4.inputs[0], "Transpose");
    if (!mid || !internal(reshape4.inputs[0]) || perm_of(*mid) != Dims{0, 2, 1}) return;
    Node* first = producer(mid->inputs[0], "Reshape");
    if (!first || !internal(mid->inputs[0]) || first->inputs.size() != 2) return;
    const auto to3 = constant_ints(first->inputs[1]), to4 = constant_ints(reshape4.inputs[1]);
    if (!to3 || !to4 || to3->size() != 3 || to4->size() != 4) return;
    // The leading dim of either may be -1 (inferred): both reshapes keep the element count,
    // so it is the other's (A = B x H).
    const auto positive = [](const Dims& v, size_t from) { return std::all_of(v.begin() + from, v.end(), [](int64_t x) { return x >= 1; }); };
    if (!positive(*to3, 1) || !positive(*to4, 1) || ((*to3)[0] < 1 && (*to4)[0] < 1)) return;
    if ((*to3)[0] != -1 && (*to3)[0] < 1) return;
    if ((*to4)[0] != -1 && (*to4)[0] < 1) return;
    const int64_t s = (*to3)[1], d = (*to3)[2], h = (*to4)[1];
    const int64_t b = (*to4)[0] >= 1 ? (*to4)[0] : (*to3)[0] / h;
    const int64_t a = (*to3)[0] >= 1 ? (*to3)[0] : b * h;
    if (b < 1 || b * h != a || (*to4)[2] != d || (*to4)[3] != s) return;
    const Dims heads = {b, h, s, d};
    const int first_index = first->index, mid_index = mid->index;
    if (shape_of(first->inputs[0]) == heads) {
      first->op_type = "Identity";
      first->inputs.resize(1);
      first->attrs.clear();
    } else {
      const std::string shape = add_shape_constant(*first, heads);  // (appends: references into nodes_ go stale)
      first = &nodes_[static_cast<size_t>(first_index)];
      first->inputs[1] = shape;
      first->attrs.erase("allowzero");
    }
    mid = &nodes_[static_cast<size_t>(mid_index)];
    Node& last = nodes_[static_cast<size_t>(i)];
    mid->op_type = "Identity";
    mid->attrs.clear();
    last.op_type = "Transpose";
    last.inputs.resize(1);
    last.attrs.clear();
    last.attrs["perm"] = ints_attribute({0, 1, 3, 2});
    const std::string why = "part of a key transpose written through a 3-D view, Reshape [" + std::to_string(a) + ", " +
                            std::to_string(s) + ", " + std::to_string(d) + "] -> Transpose -> Reshape; read as one Transpose of the " +
                            "last two dims";
    notes_[first->index] = why;
    notes_[mid->index] = why;
    notes_[last.index] = why;
  }

  // Transpose(perm [0, 2, 3, 1]) of a [B, S, H, D] split into heads, as the exporters write
  // Hugging Face's eager `key.view(...).transpose(1, 2)` followed by `.transpose(2, 3)`, is
  // the head split Transpose(perm [0, 2, 1, 3]) and then the key transpose (perm [0, 1, 3, 2]):
  // written as those two, each is what the attention pattern looks for.
  void head_split_and_key_transpose_in_one(int i) {
    Node& t = nodes_[static_cast<size_t>(i)];
    if (t.op_type != "Transpose" || !t.domain.empty() || t.inputs.size() != 1 || perm_of(t) != Dims{0, 2, 3, 1}) return;
    if (!producer(t.inputs[0], "Reshape")) return;  // only where heads are being split
    const std::string split = fresh(t.outputs[0] + "/heads");
    Node second;
    second.index = static_cast<int>(nodes_.size());
    second.name = fresh(t.name + "/key_transpose");
    second.op_type = "Transpose";
    second.inputs = {split};
    second.outputs = {t.outputs[0]};
    second.attrs["perm"] = ints_attribute({0, 1, 3, 2});
    t.outputs[0] = split;
    t.attrs["perm"] = ints_attribute({0, 2, 1, 3});
    notes_[t.index] = "a Transpose [0, 2, 3, 1] read as the head split [0, 2, 1, 3] and then a key transpose ('" + second.name + "')";
    notes_[second.index] = "the key transpose of '" + t.name + "' (a Transpose [0, 2, 3, 1] in the model)";
    nodes_.push_back(std::move(second));
  }

  // A Reshape to the shape its input has already moves nothing (the legacy exporter writes one
  // after attention's output, before the heads are merged): an Identity, so that the patterns
  // see the producer.
  void reshape_to_its_own_shape(int i) {
    Node& r = nodes_[static_cast<size_t>(i)];
    if (r.op_type != "Reshape" || !r.domain.empty() || r.inputs.size() != 2 || notes_.count(r.index)) return;
    const auto to = constant_ints(r.inputs[1]);
    const auto from = shape_of(r.inputs[0]);
    if (!to || !from || reshaped(from, *to, attr_int_or(r, "allowzero", 0) != 0) != from) return;
    r.op_type = "Identity";
    r.inputs.resize(1);
    r.attrs.clear();
    notes_[r.index] = "a Reshape to the shape its input already has";
  }

  std::vector<Node>& nodes_;
  const std::map<std::string, Tensor>& initializers_;
  const std::set<std::string>& outputs_;
  std::map<std::string, Dims> input_shapes_;
  std::set<std::string> names_;
  std::map<std::string, int> producer_;
  std::map<std::string, int> readers_;
  std::map<int, std::string> notes_;
  mutable std::map<std::string, std::optional<Dims>> shapes_;  // shape_of's answers since the last reindex
};

}  // namespace

std::map<int, std::string> canonicalize(std::vector<Node>& nodes, const std::map<std::string, Tensor>& initializers,
                                        const std::vector<ValueInfo>& inputs, const std::set<std::string>& outputs) {
  return Canonicalizer(nodes, initializers, inputs, outputs).run();
}

}  // namespace tec::onnx
