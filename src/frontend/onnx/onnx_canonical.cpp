#include "frontend/onnx/onnx_canonical.h"

#include <algorithm>
#include <optional>
#include <set>

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
    // In this order: a rewrite may give a later one the shapes it needs (a Split's parts).
    const size_t original = nodes_.size();
    for (size_t i = 0; i < original; ++i) fused_projection_split(static_cast<int>(i));
    reindex();
    for (size_t i = 0; i < nodes_.size(); ++i) keys_transposed_through_a_3d_view(static_cast<int>(i));
    reindex();
    for (size_t i = 0, n = nodes_.size(); i < n; ++i) head_split_and_key_transpose_in_one(static_cast<int>(i));
    reindex();
    for (size_t i = 0; i < nodes_.size(); ++i) reshape_to_its_own_shape(static_cast<int>(i));
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
    if (n.op_type == "Gather" && n.inputs.size() == 2) {  // data [..axis.., rest] at indices: [..., indices..., rest]
      const auto data = shape_or_constant(n.inputs[0], depth), at = shape_or_constant(n.inputs[1], depth);
      const int64_t rank = data ? static_cast<int64_t>(data->size()) : 0, axis = attr_int_or(n, "axis", 0);
      if (!data || !at || axis < -rank || axis >= rank) return std::nullopt;
      const auto split = static_cast<size_t>(axis < 0 ? axis + rank : axis);
      Dims out(data->begin(), data->begin() + static_cast<std::ptrdiff_t>(split));
      out.insert(out.end(), at->begin(), at->end());
      out.insert(out.end(), data->begin() + static_cast<std::ptrdiff_t>(split) + 1, data->end());
      return out;
    }
    const auto in = shape_of(n.inputs[0], depth + 1);
    if (!in) return std::nullopt;
    static const std::set<std::string> same_shape = {"Softmax", "Identity", "Cast", "LayerNormalization", "RMSNormalization", "Relu",
                                                     "Gelu", "Sigmoid", "Tanh", "Erf", "Neg", "Sqrt", "Reciprocal"};
    if (same_shape.count(n.op_type)) return in;
    if (n.op_type == "Gemm" && n.inputs.size() >= 2) {
      const auto w = shape_or_constant(n.inputs[1], depth);
      if (!w || w->size() != 2 || in->size() != 2) return std::nullopt;
      const bool ta = attr_int_or(n, "transA", 0) != 0, tb = attr_int_or(n, "transB", 0) != 0;
      if ((*in)[ta ? 0 : 1] != (*w)[tb ? 1 : 0]) return std::nullopt;
      return Dims{(*in)[ta ? 1 : 0], (*w)[tb ? 0 : 1]};
    }
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
    for (int64_t d : *in)
      if (d < 0 || __builtin_mul_overflow(numel, d, &numel)) return std::nullopt;  // (hostile shapes)
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
      if (to[i] < 1 || __builtin_mul_overflow(known, to[i], &known)) return std::nullopt;
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
    int64_t bh = 0;
    if (b < 1 || __builtin_mul_overflow(b, h, &bh)) return;
    const int64_t a = (*to3)[0] >= 1 ? (*to3)[0] : bh;
    if (bh != a || (*to4)[2] != d || (*to4)[3] != s) return;
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

  // Split(P, last axis) of a projection P = x W (+ b) (MatMul [+ Add] or Gemm, W and b
  // initializers), optionally through a Reshape that keeps the last dim, as GPT-2's fused
  // c_attn (q, k, v) or a fused gate_up is written: one projection per part, with W's columns
  // (or rows, under transB) and b's entries of that part, each through its own Reshape. The
  // patterns then see three (or two) ordinary projections. The original nodes make part 0; the
  // Split becomes an Identity of it.
  void fused_projection_split(int i) {
    const Node& split = nodes_[static_cast<size_t>(i)];
    if (split.op_type != "Split" || !split.domain.empty() || split.inputs.empty() || !internal(split.inputs[0])) return;
    const auto in_shape = shape_of(split.inputs[0]);
    if (!in_shape || in_shape->empty()) return;
    const int64_t rank = static_cast<int64_t>(in_shape->size()), axis = attr_int_or(split, "axis", 0);
    if (axis != -1 && axis != rank - 1) return;
    const int64_t features = in_shape->back();
    Dims sizes;
    if (split.inputs.size() > 1 && !split.inputs[1].empty()) {
      const auto given = constant_ints(split.inputs[1]);
      if (!given) return;
      sizes = *given;
    } else {
      const int64_t parts = static_cast<int64_t>(split.outputs.size());
      if (parts < 1 || features % parts != 0) return;
      sizes.assign(static_cast<size_t>(parts), features / parts);
    }
    int64_t total = 0;
    for (int64_t n : sizes) total += n >= 1 ? n : features + 1;
    if (sizes.size() != split.outputs.size() || sizes.size() < 2 || total != features) return;
    // Through a Reshape that keeps the last dim (GPT-2: [B x S, 3H] back to [B, S, 3H]).
    std::string projected = split.inputs[0];
    int reshape = -1;
    if (Node* r = producer(projected, "Reshape"); r && internal(r->inputs[0])) {
      const auto to = constant_ints(r->inputs[1]);
      const auto from = shape_of(r->inputs[0]);
      if (!to || !from || from->empty() || from->back() != features || reshaped(from, *to, attr_int_or(*r, "allowzero", 0) != 0) != in_shape)
        return;
      reshape = r->index;
      projected = r->inputs[0];
    }
    // The projection: Gemm(x, W, b) with transA 0, or Add(MatMul(x, W), b) either way round, or MatMul(x, W).
    int gemm = -1, matmul = -1, add = -1;
    std::string weight, bias;
    if (Node* g = producer(projected, "Gemm")) {
      if (attr_int_or(*g, "transA", 0) != 0) return;
      gemm = g->index;
      weight = g->inputs[1];
      bias = g->inputs.size() > 2 ? g->inputs[2] : "";
    } else {
      Node* m = producer(projected, "MatMul");
      if (Node* a = producer(projected, "Add")) {
        for (int side = 0; side < 2 && !m; ++side)
          if (Node* mm = producer(a->inputs[static_cast<size_t>(side)], "MatMul"); mm && internal(a->inputs[static_cast<size_t>(side)])) {
            m = mm;
            bias = a->inputs[static_cast<size_t>(1 - side)];
            add = a->index;
          }
      }
      if (!m) return;
      matmul = m->index;
      weight = m->inputs[1];
    }
    const bool trans_b = gemm >= 0 && attr_int_or(nodes_[static_cast<size_t>(gemm)], "transB", 0) != 0;
    const auto w = initializers_.find(weight);
    if (w == initializers_.end() || !w->second.is_float() || w->second.dims.size() != 2) return;
    const int64_t k = w->second.dims[trans_b ? 1 : 0], n = w->second.dims[trans_b ? 0 : 1];
    if (n != features) return;
    const Tensor* b = nullptr;
    if (!bias.empty()) {
      const auto it = initializers_.find(bias);
      if (it == initializers_.end() || !it->second.is_float() || it->second.numel() != features || it->second.dims.size() != 1) return;
      b = &it->second;
    }
    // Every check passed: rewrite. (Node references go stale as nodes are appended.)
    const Tensor weights = w->second;
    const std::optional<Tensor> biases = b ? std::optional<Tensor>(*b) : std::nullopt;
    const int proj = gemm >= 0 ? gemm : matmul;
    const std::vector<std::string> outs = split.outputs;
    const std::string split_name = split.name;
    int64_t start = 0;
    for (size_t part = 0; part < sizes.size(); ++part) {
      const int64_t width = sizes[part];
      Tensor wp{.elem_type = weights.elem_type, .dims = trans_b ? Dims{width, k} : Dims{k, width}, .floats = {}, .ints = {}};
      for (int64_t r = 0; r < (trans_b ? width : k); ++r)
        for (int64_t c = 0; c < (trans_b ? k : width); ++c)
          wp.floats.push_back(trans_b ? weights.floats[static_cast<size_t>((start + r) * k + c)]
                                      : weights.floats[static_cast<size_t>(r * n + start + c)]);
      std::optional<Tensor> bp;
      if (biases) {
        bp = Tensor{.elem_type = biases->elem_type, .dims = {width}, .floats = {}, .ints = {}};
        bp->floats.assign(biases->floats.begin() + start, biases->floats.begin() + start + width);
      }
      const std::string tag = split_name + "/part" + std::to_string(part);
      const std::string wname = add_constant(tag + "_weight", std::move(wp));
      const std::string bname = bp ? add_constant(tag + "_bias", std::move(*bp)) : "";
      Dims part_shape = *in_shape;
      part_shape.back() = width;
      const std::string shape_name = reshape >= 0 ? add_constant(tag + "_shape", Tensor{.elem_type = kInt64, .dims = {rank}, .floats = {}, .ints = part_shape}) : "";
      if (part == 0) {  // the model's own nodes carry part 0
        Node& p0 = nodes_[static_cast<size_t>(proj)];
        p0.inputs[1] = wname;
        if (gemm >= 0 && !bname.empty()) p0.inputs[2] = bname;
        if (add >= 0) {
          Node& a0 = nodes_[static_cast<size_t>(add)];
          for (auto& in : a0.inputs)
            if (in == bias) in = bname;
        }
        if (reshape >= 0) nodes_[static_cast<size_t>(reshape)].inputs[1] = shape_name;
        Node& s0 = nodes_[static_cast<size_t>(i)];
        s0.op_type = "Identity";
        s0.inputs.resize(1);
        s0.outputs = {outs[0]};
        s0.attrs.clear();
      } else {
        const Node& p0 = nodes_[static_cast<size_t>(proj)];
        std::string value = fresh(tag + "_projection");
        Node pn{.index = static_cast<int>(nodes_.size()), .name = fresh(tag + "_projection"), .op_type = p0.op_type, .domain = "",
                .inputs = {p0.inputs[0], wname}, .outputs = {value}, .attrs = p0.attrs};
        if (gemm >= 0 && !bname.empty()) pn.inputs.push_back(bname);
        nodes_.push_back(std::move(pn));
        if (add >= 0) {
          const std::string biased = fresh(tag + "_biased");
          nodes_.push_back(Node{.index = static_cast<int>(nodes_.size()), .name = fresh(tag + "_bias_add"), .op_type = "Add", .domain = "",
                                .inputs = {value, bname}, .outputs = {biased}, .attrs = {}});
          value = biased;
        }
        const bool last_stage = reshape < 0;
        if (last_stage) {
          nodes_.push_back(Node{.index = static_cast<int>(nodes_.size()), .name = fresh(tag + "_identity"), .op_type = "Identity",
                                .domain = "", .inputs = {value}, .outputs = {outs[part]}, .attrs = {}});
        } else {
          const Node& r0 = nodes_[static_cast<size_t>(reshape)];
          nodes_.push_back(Node{.index = static_cast<int>(nodes_.size()), .name = fresh(tag + "_reshape"), .op_type = "Reshape",
                                .domain = "", .inputs = {value, shape_name}, .outputs = {outs[part]}, .attrs = r0.attrs});
        }
      }
      start += width;
    }
    const std::string why = "a fused projection split in " + std::to_string(sizes.size()) +
                            " along its features, read as one projection per part";
    for (int touched : {proj, add, reshape, i})
      if (touched >= 0) notes_[touched] = why;
  }

  std::string add_constant(const std::string& base, Tensor value) {
    Node c;
    c.index = static_cast<int>(nodes_.size());
    c.name = fresh(base + "/constant");
    c.op_type = "Constant";
    c.outputs = {fresh(base)};
    Attribute a;
    a.type = Attribute::Type::tensor;
    a.t = std::move(value);
    c.attrs["value"] = std::move(a);
    nodes_.push_back(std::move(c));
    return nodes_.back().outputs[0];
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
