#include "frontend/onnx/onnx_import.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <set>
#include <sstream>

#include "frontend/onnx/onnx_canonical.h"
#include "frontend/onnx/onnx_mask_probe.h"
#include "frontend/onnx/onnx_fold.h"
#include "ops/common.h"

namespace tec {

namespace {

using onnx::ConstMap;
using onnx::ShapeOf;
using onnx::Tensor;
using onnx::TensorPtr;
using onnx::as_ints;
using onnx::attr_float;
using onnx::attr_int;
using onnx::attr_ints;
using onnx::attr_string;
using onnx::axis_of;
using onnx::flatten_dims;
using onnx::reshape_dims;
using onnx::squeeze_dims;
using onnx::tec_dtype;
using onnx::unsqueeze_dims;

// ONNX reductions and comparisons on run-time values: tec's reduce and compare functions.
const std::map<std::string, std::string> kReductions = {{"ReduceMean", "mean"}, {"ReduceSum", "sum"}, {"ReduceMax", "max"}};
const std::map<std::string, std::string> kComparisons = {
    {"Equal", "equal"},     {"Less", "less"}, {"LessOrEqual", "less_equal"}, {"Greater", "greater"}, {"GreaterOrEqual", "greater_equal"},
    {"IsNaN", "isnan"},     {"Not", "not"},   {"And", "and"},                {"Or", "or"},           {"Xor", "xor"}};

// Comparisons and logic on run-time values.
constexpr const char* kComparisonClaim =
    "float, int32 or bool tensors with numpy broadcasting -> a bool (general path); or in attention's padding mask (see GatherND)";

const std::vector<OnnxOpClaim> kClaims = {
    {"MatMul", 13, 2, 2, {}, "float tensors; a constant 2-D B becomes a TE linear, two run-time operands a general matmul (batch "
                     "broadcasting; fp32 accumulation on CUDA cores, the general path), or part of attention's spelling"},
    {"Gemm", 13, 2, 3, {}, "float tensors; constant B with transA=0 becomes a linear (alpha and beta folded into the constants); "
                     "other forms run as transpose/matmul/scale/add (the general path)"},
    {"Add", 13, 2, 2, {}, "float tensors; equal shapes become the residual add, a constant over the last dim a bias, other "
                    "broadcasts a general add (a GPU row kernel)"},
    {"Sub", 13, 2, 2, {}, "float tensors, numpy broadcasting (a GPU row kernel, or part of a LayerNorm pattern)"},
    {"Mul", 13, 2, 2, {}, "float tensors; by a constant scalar becomes scale, otherwise numpy broadcasting (a GPU row kernel)"},
    {"Div", 13, 2, 2, {}, "float tensors, numpy broadcasting (a GPU row kernel, or part of a GELU/LayerNorm pattern)"},
    {"Relu", 13, 1, 1, {}, "float tensors"},
    {"Gelu", 20, 1, 1, {}, "approximate 'none' (erf) or 'tanh'"},
    {"Sigmoid", 13, 1, 1, {}, "float tensors (a GPU row kernel; x*sigmoid(x) becomes silu)"},
    {"Tanh", 13, 1, 1, {}, "float tensors (a GPU row kernel, or part of the GELU tanh pattern)"},
    {"Erf", 13, 1, 1, {}, "float tensors (a GPU row kernel, or part of the GELU erf pattern)"},
    {"Sqrt", 13, 1, 1, {}, "float tensors (a GPU row kernel, or part of a norm pattern)"},
    {"Reciprocal", 13, 1, 1, {}, "float tensors (a GPU row kernel, or part of the RMSNorm pattern)"},
    {"Neg", 13, 1, 1, {}, "float tensors (a GPU row kernel)"},
    {"Exp", 13, 1, 1, {}, "float tensors (a GPU row kernel)"},
    {"Log", 13, 1, 1, {}, "float tensors (a GPU row kernel)"},
    {"Abs", 13, 1, 1, {}, "float tensors (a GPU row kernel)"},
    {"Pow", 13, 2, 2, {}, "float tensors, float exponent (a GPU row kernel, or part of a GELU/norm pattern)"},
    {"ReduceMean", 13, 1, 2, {1}, "float tensors; axes constant (general path, or part of a norm pattern)"},
    {"ReduceSum", 13, 1, 2, {1}, "float tensors; axes constant (general path)"},
    {"ReduceMax", 13, 1, 2, {1}, "float tensors; axes constant (an attribute before opset 18, an input from 18) (general path)"},
    {"LayerNormalization", 17, 2, 3, {1, 2}, "Scale and B constant; the Mean and InvStdDev outputs run as general ops"},
    {"RMSNormalization", 23, 2, 2, {1}, "Scale constant"},
    {"Attention", 23, 3, 7, {}, "3-D Q, K, V [batch, seq, heads x head_size] with q_num_heads and kv_num_heads, or 4-D [batch, heads, "
                           "seq, head_size] (MHA, GQA, MQA; self or cross; V's head size may differ), is_causal, scale, a float "
                           "attn_mask (added to the scores). Not yet: a boolean attn_mask, past key/value, nonpad_kv_seqlen, "
                           "softcap, windows, the extra outputs. On the GPU through cuDNN in bf16 or fp16 (an fp32 model's inference "
                           "plan casts q, k and v to bf16 and the output back, the CPU reference alike)"},
    {"Slice", 13, 3, 5, {1, 2, 3, 4}, "starts, ends, axes and steps constant (general path; empty slices refused), or as rotate_half in "
                        "the rotary embedding exporters write for Hugging Face's apply_rotary_pos_emb: x cos + cat(-x[..., D/2:], "
                        "x[..., :D/2]) sin, the cos and sin tables constants of the positions 0..S-1 -> tec's rope"},
    {"Softmax", 13, 1, 1, {}, "float tensors, any axis (general path), or as attention's softmax in the spelling exporters write for "
                         "scaled_dot_product_attention: Softmax(MatMul(q, Transpose(k)) x scale + mask) MatMul v, each scale and "
                         "the mask optional -> tec's attention (a constant causal mask becomes its causal flag)"},
    {"Expand", 13, 2, 2, {1}, "shape constant (general path), or in Hugging Face's repeat_kv before attention's spelling: "
                        "Reshape(Expand(Unsqueeze(k, 2), [B, KVH, n, S, D]), [B, KVH x n, S, D]) -> tec's GQA attention"},
    {"Split", 13, 1, 2, {1}, "split constant, or num_outputs (opset 18), or equal parts (general path: slices), or of a projection's "
                        "output along its features (GPT-2's fused c_attn, a fused gate_up) -> one linear per part"},
    {"Reshape", 13, 2, 2, {1}, "shape constant"},
    {"Flatten", 13, 1, 1, {}, ""},
    {"Transpose", 13, 1, 1, {}, "float tensors (a GPU row kernel)"},
    {"Squeeze", 13, 1, 2, {1}, "axes constant"},
    {"Unsqueeze", 13, 1, 2, {1}, "axes constant"},
    {"Identity", 13, 1, 1, {}, "tensors only"},
    {"Cast", 13, 1, 1, {}, "between FLOAT, FLOAT16 and BFLOAT16 at run time (a GPU row kernel; none at all when the input has "
                     "that type already), to and from BOOL, INT64 and INT32 (general path: integers are int32, toward zero); any "
                     "type in constant subgraphs"},
    {"Constant", 13, 0, 0, {}, ""},
    {"Shape", 13, 1, 1, {}, "folded: tec fixes every shape per profile"},
    {"Cos", 7, 1, 1, {}, "float tensors (a GPU row kernel, through double arithmetic rounded once); a constant one (the rotary "
                     "embedding's tables, made in forward from inv_freq and the positions) folds"},
    {"Sin", 7, 1, 1, {}, "float tensors (see Cos)"},
    {"Trilu", 14, 1, 2, {1}, "only where it computes a constant (Hugging Face's causal mask: triu of -inf, then attention's causal "
                         "flag)"},
    {"Gather", 13, 2, 2, {}, "of a constant 2-D float table along axis 0 at run-time indices (an embedding lookup: token ids, "
                           "an INT64 or INT32 graph input, become int32; an id outside the table is an error at run time) -> "
                           "tec's embedding; any other along any axis (general path, int32 indices, checked at run time); or "
                           "where it computes a constant (shape arithmetic)"},
    {"IsNaN", 9, 1, 1, {}, "float tensors (general path); as the guard transformers' sdpa attention writes after its softmax, "
                         "Where(IsNaN(p), 0, p), it joins the attention"},
    {"ConstantOfShape", 9, 1, 1, {0}, "folded (torch.onnx's expand: the shape of ones it compares against)"},
    {"Equal", 11, 2, 2, {}, kComparisonClaim},
    {"Where", 9, 3, 3, {}, "a bool condition, float, int32 or bool branches (general path); or attention's NaN guard (see IsNaN), or in "
                       "a padding mask (see GatherND)"},
    {"And", 7, 2, 2, {}, kComparisonClaim},
    {"Or", 7, 2, 2, {}, kComparisonClaim},
    {"Xor", 7, 2, 2, {}, kComparisonClaim},
    {"Not", 1, 1, 1, {}, kComparisonClaim},
    {"Less", 9, 2, 2, {}, kComparisonClaim},
    {"LessOrEqual", 12, 2, 2, {}, kComparisonClaim},
    {"Greater", 9, 2, 2, {}, kComparisonClaim},
    {"GreaterOrEqual", 12, 2, 2, {}, kComparisonClaim},
    {"GatherND", 11, 2, 2, {}, "batch_dims 0 (general path, int32 index tuples, checked at run time); or in attention's mask made "
                             "from an INT64/INT32 graph input (transformers' attention_mask): evaluated at right-padded probe masks it "
                             "must be the key padding, with or without the causal triangle, whatever its ops -> the attention's "
                             "sequence lengths (cuDNN's padding mask; the input's rows must be ones, then zeros)"},
    {"Concat", 13, 1, kVariadicInputs, {}, "float, int32 or bool tensors (general path), or as rotate_half in the rotary "
                                             "embedding (see Slice)"},
    {"QuantizeLinear", 13, 2, 3, {1, 2}, "FLOAT8E4M3FN; on a constant (folded), or as a Q->DQ pair on a MatMul/Gemm input, which "
                                   "chooses the recipe: a scalar scale fp8-static (the model's scales kept), block_size 128 "
                                   "fp8-block, block_size 32 with E8M0 scales mxfp8 (scales computed at run time)"},
    {"DequantizeLinear", 13, 2, 3, {1, 2}, "on a constant (stored FP8/INT8 weights: folded, or under fp8-static the FP8 codes and scales "
                                     "kept, per tensor, per output channel or block_size along K), or closing a Q->DQ pair"},
};

const OnnxOpClaim* find_claim(const std::string& op) {
  for (const auto& c : kClaims)
    if (c.op == op) return &c;
  return nullptr;
}

// A collected problem: one line of the final error.
struct Problem {
  int index;  // node position in the file, -1 for the graph
  std::string node, op_type, domain, why;
};

// A pattern found in the ONNX graph: several nodes that become one TE op, emitted when the
// walk reaches `root` (the last of them in data-flow order).
// x W (+ b) as an exporter writes a Linear: MatMul by a constant 2-D weight [K, N] with an
// optional Add of a constant [N], or Gemm (transA = 0) with a constant B ([K, N], or [N, K]
// with transB) and an optional constant C, alpha and beta.
struct Projection {
  std::string x;       // the run-time input
  std::string weight;  // the constant B
  bool trans_b = false;
  double alpha = 1.0;
  std::string bias;    // the constant [N] (or a scalar C); "" for none
  double beta = 1.0;
  std::vector<int> members;
};

struct Group {
  enum class Kind : uint8_t { linear_bias, gelu, silu, gated, layernorm, rmsnorm, qdq, attention, rope } kind;
  std::vector<int> members;
  int root = -1;
  std::string x;                // the pattern's run-time input
  std::string approximate;      // gelu: "tanh" or "none"
  std::string weight, bias;     // constants: linear weight/bias, norm gamma/beta (may be empty); rope: cos, sin tables
  Projection gate, up;          // gated: the two projections
  std::string act;              // gated: "swiglu" or "geglu"
  double eps = 0;
  RecipeKind qdq_recipe = RecipeKind::bf16;
  // attention: x is q; the keys, values, the additive mask ("" for none), and the constant
  // scalars the scores are multiplied (or, second true, divided) by, read when emitting (a
  // scale an exporter computes from shapes is constant only per profile).
  std::string key, value, mask;
  std::vector<std::pair<std::string, bool>> scales;
  // attention whose q, k and v an exporter split into heads, Transpose(Reshape(flat, [B, S, H,
  // D])): x, key and value are the flat [B, S, H x D] tensors tec's attention reads as they
  // are, with these head counts and the Reshapes' shape constants (checked when emitting).
  int64_t heads = 0, kv_heads = 0;  // 0: q, k and v are 4-D [B, H, S, D]
  std::vector<std::string> split_shapes;
  std::string merge_shape;  // the output merged back by Reshape(Transpose(y)) to this shape; "" if not
  // Hugging Face's repeat_kv before the attention: keys and values [B, KVH, S, D] repeated to
  // [B, KVH x n, S, D] (GQA), which tec's attention does itself; the Expand's [B, KVH, n, S, D]
  // per tensor (checked against their shapes when emitting), empty where there is none.
  std::vector<int64_t> key_repeat, value_repeat;
  // The softmax's output passes Where(IsNaN(p), 0, p) (transformers' sdpa): exact only where
  // no query row has every key masked, which emission checks.
  bool nan_guard = false;
  std::string describe;         // for the report
};

class Importer {
 public:
  Importer(const onnx::Model& m, const FrontendOptions& o) : m_(m), opt_(o), nodes_(m.nodes) {}

  OnnxImport run() {
    index_values();
    order_nodes();
    check_claims();
    if (malformed_) throw_problems();
    canonicalize();
    skip_noop_casts();
    find_constants();
    fold_known_constants();
    if (opt_.onnx_patterns) find_patterns();
    else group_of_.assign(nodes_.size(), -1);
    check_no_kv_cache();
    find_padding_masks();
    check_constant_only_ops();
    check_qdq_placement();
    throw_problems();
    OnnxImport result;
    for (const auto& profile : profiles()) result.graphs.push_back(build(profile));
    throw_problems();
    for (const onnx::Node& n : nodes_) {
      std::string became = became_[static_cast<size_t>(n.index)];
      if (const auto note = canonical_notes_.find(n.index); note != canonical_notes_.end())
        became += " [canonical form: " + note->second + "]";
      // The op the model wrote, where a rewrite changed it (m_ holds the file's nodes).
      const std::string& op = static_cast<size_t>(n.index) < m_.nodes.size() ? m_.nodes[static_cast<size_t>(n.index)].op_type : n.op_type;
      result.nodes.push_back({n.name, op, became});
    }
    return result;
  }

 private:
  // ---- structure -------------------------------------------------------------------------

  ErrorContext file_ctx() const { return ErrorContext{"onnx", "", "", m_.file}; }
  ErrorContext node_ctx(const onnx::Node& n) const {
    return ErrorContext{"onnx", n.name, n.op_type, m_.file + " node " + std::to_string(n.index)};
  }
  const onnx::Node& node(int i) const { return nodes_[static_cast<size_t>(i)]; }

  void index_values() {
    std::set<std::string> defined;
    for (const auto& in : m_.inputs) {
      TEC_USER_CHECK(defined.insert(in.name).second, file_ctx()) << "graph input '" << in.name << "' is listed twice";
    }
    for (const auto& [name, t] : m_.initializers) defined.insert(name);
    for (const onnx::Node& n : nodes_)
      for (const auto& out : n.outputs) {
        if (out.empty()) continue;
        TEC_USER_CHECK(defined.insert(out).second, node_ctx(n))
            << "value '" << out << "' is produced twice (ONNX graphs are single-assignment)";
        producer_[out] = n.index;
      }
    for (const onnx::Node& n : nodes_)
      for (const auto& in : n.inputs) {
        if (in.empty()) continue;
        TEC_USER_CHECK(defined.count(in), node_ctx(n))
            << "input '" << in << "' is not a graph input, an initializer or any node's output";
        consumers_[in].push_back(n.index);
      }
    for (const auto& out : m_.outputs) {
      TEC_USER_CHECK(defined.count(out.name), file_ctx()) << "graph output '" << out.name << "' is never produced";
      outputs_.insert(out.name);
    }
  }

  // Kahn's algorithm in file order; what is left over lies on a cycle, reported as a path.
  void order_nodes() {
    const size_t n = nodes_.size();
    std::vector<int> pending(n, 0);
    for (const onnx::Node& nd : nodes_)
      for (const auto& in : nd.inputs)
        if (!in.empty() && producer_.count(in)) ++pending[static_cast<size_t>(nd.index)];
    std::vector<int> ready;
    for (size_t i = n; i-- > 0;)
      if (pending[i] == 0) ready.push_back(static_cast<int>(i));
    while (!ready.empty()) {
      const int i = ready.back();
      ready.pop_back();
      order_.push_back(i);
      std::vector<int> next;
      for (const auto& out : node(i).outputs)
        if (!out.empty() && consumers_.count(out))
          for (int c : consumers_[out])
            if (--pending[static_cast<size_t>(c)] == 0) next.push_back(c);
      std::sort(next.rbegin(), next.rend());
      ready.insert(ready.end(), next.begin(), next.end());
      std::sort(ready.rbegin(), ready.rend());
    }
    if (order_.size() == n) return;
    // Walk producers from a leftover node until one repeats: that is the cycle.
    int at = -1;
    for (size_t i = 0; i < n; ++i)
      if (pending[i] > 0) at = static_cast<int>(i);
    std::vector<int> path;
    std::set<int> seen;
    while (seen.insert(at).second) {
      path.push_back(at);
      for (const auto& in : node(at).inputs)
        if (!in.empty() && producer_.count(in) && pending[static_cast<size_t>(producer_[in])] > 0) {
          at = producer_[in];
          break;
        }
    }
    std::string cycle;
    auto from = std::find(path.begin(), path.end(), at);
    for (auto it = path.rbegin(); it != std::make_reverse_iterator(from) + 1 && it != path.rend(); ++it)
      cycle += (cycle.empty() ? "" : " -> ") + node(*it).name;
    cycle += " -> " + node(at).name;
    TEC_USER_ERROR(node_ctx(node(at))) << "the graph has a cycle: " << cycle;
  }

  // Exporters' other spellings of what the patterns look for, rewritten first
  // (onnx_canonical.h); the graph is indexed and ordered again around the rewritten nodes.
  void canonicalize() {
    canonical_notes_ = onnx::canonicalize(nodes_, m_.initializers, m_.inputs, outputs_);
    if (canonical_notes_.empty()) return;
    producer_.clear();
    consumers_.clear();
    order_.clear();
    index_values();
    order_nodes();
  }

  // The element type of every value the structure tells it for (-1 elsewhere), in topological
  // order, for the Casts below.
  std::map<std::string, int32_t> elem_types() const {
    static const std::set<std::string> same = {"Relu", "Gelu", "Sigmoid", "Tanh", "Erf", "Sqrt", "Reciprocal", "Neg", "Pow",
                                               "ReduceMean", "LayerNormalization", "RMSNormalization", "Transpose",
                                               "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "MatMul", "Gemm",
                                               "Add", "Sub", "Mul", "Div", "Gather", "Concat", "Attention", "Softmax", "Slice",
                                               "Cos", "Sin", "Trilu", "Expand"};
    std::map<std::string, int32_t> type;
    for (const auto& in : m_.inputs) type[in.name] = in.elem_type;
    for (const auto& [name, t] : m_.initializers) type[name] = t.elem_type;
    auto of = [&](const std::string& v) { return type.count(v) ? type.at(v) : -1; };
    for (int i : order_) {
      const onnx::Node& n = node(i);
      if (!n.domain.empty() || n.outputs.empty()) continue;
      int32_t t = -1;
      if (n.op_type == "Cast") t = static_cast<int32_t>(attr_int(n, "to", -1));
      else if (n.op_type == "Shape") t = onnx::kInt64;
      else if (n.op_type == "Constant" && n.attrs.count("value") && n.attrs.at("value").t) t = n.attrs.at("value").t->elem_type;
      else if (n.op_type == "DequantizeLinear" && n.inputs.size() > 1) t = of(n.inputs[1]);
      else if (same.count(n.op_type) && !n.inputs.empty())
        t = of(n.inputs[0]) >= 0 || n.inputs.size() < 2 ? of(n.inputs[0]) : of(n.inputs[1]);
      if (t >= 0) type[n.outputs[0]] = t;
    }
    return type;
  }

  // A Cast to the type its input already has changes nothing: exporters write them around
  // Hugging Face's RMSNorm (`.to(float32)`, `.to(input_dtype)`) in fp32 models. Its readers
  // read the input instead, so that the patterns see through it; one that is a graph output
  // stays.
  void skip_noop_casts() {
    noop_cast_.assign(nodes_.size(), false);
    types_ = elem_types();
    const auto& type = types_;
    std::map<std::string, std::string> alias;
    for (int i : order_) {
      onnx::Node& n = nodes_[static_cast<size_t>(i)];
      for (auto& in : n.inputs)
        if (alias.count(in)) in = alias.at(in);
      if (!n.domain.empty() || outputs_.count(n.outputs[0])) continue;
      if (n.op_type == "Identity") {  // (the canonical rewrites leave these where data stays put)
        noop_cast_[static_cast<size_t>(i)] = true;
        alias[n.outputs[0]] = n.inputs[0];
        continue;
      }
      if (n.op_type != "Cast") continue;
      const auto it = type.find(n.inputs[0]);
      if (it == type.end()) continue;
      const int32_t to = static_cast<int32_t>(attr_int(n, "to", -1));
      if (it->second == to) {
        noop_cast_[static_cast<size_t>(i)] = true;
        alias[n.outputs[0]] = n.inputs[0];
        continue;
      }
      // A round trip through fp32 (x -> Cast(FLOAT) -> Cast back), which the exporters write
      // after Hugging Face's softmax in fp32 of a bf16 or fp16 model, gives x exactly.
      const int up = producer_of(n.inputs[0]);
      if (up < 0 || node(up).op_type != "Cast" || !node(up).domain.empty() || attr_int(node(up), "to", -1) != onnx::kFloat) continue;
      const auto source = type.find(node(up).inputs[0]);
      if (source == type.end() || source->second != to || (to != onnx::kFloat16 && to != onnx::kBfloat16)) continue;
      noop_cast_[static_cast<size_t>(i)] = true;
      alias[n.outputs[0]] = node(up).inputs[0];
      const auto readers = consumers_.find(n.inputs[0]);
      if (readers != consumers_.end() && readers->second.size() == 1 && !outputs_.count(n.inputs[0]))
        noop_cast_[static_cast<size_t>(up)] = true;  // read by the second Cast alone: gone with it
    }
    if (alias.empty()) return;
    consumers_.clear();  // the skipped Casts read nothing now: their readers read past them
    for (const onnx::Node& n : nodes_)
      for (const auto& in : n.inputs)
        if (!in.empty() && !noop_cast_[static_cast<size_t>(n.index)]) consumers_[in].push_back(n.index);
  }

  void problem(const onnx::Node& n, std::string why) {
    problems_.push_back({n.index, n.name, n.op_type, n.domain, std::move(why)});
  }
  bool has_problem(const onnx::Node& n) const {
    return std::any_of(problems_.begin(), problems_.end(), [&](const Problem& p) { return p.index == n.index; });
  }

  void throw_problems() {
    if (problems_.empty()) return;
    std::stable_sort(problems_.begin(), problems_.end(), [](const Problem& a, const Problem& b) { return a.index < b.index; });
    std::set<std::pair<int, std::string>> seen;
    std::string lines;
    for (const Problem& p : problems_) {
      if (!seen.insert({p.index, p.why}).second) continue;
      lines += "\n  node '" + p.node + "' (" + p.op_type + (p.domain.empty() ? "" : " in domain " + p.domain) + ", opset " +
               std::to_string(m_.opset) + "): " + p.why;
    }
    std::set<int> nodes;
    for (const auto& [index, why] : seen) nodes.insert(index);
    const std::string text = std::to_string(nodes.size()) + " node(s) tec cannot compile (no plan written):" + lines;
    throw Error(ErrorKind::unsupported, file_ctx(), text);
  }

  void check_claims() {
    for (const onnx::Node& n : nodes_) {
      // Every stage after this one may read a node's first output, whatever its op or domain.
      if (n.outputs.empty()) {
        problem(n, n.op_type + " has no outputs (every ONNX node writes at least one)");
        malformed_ = true;
        continue;
      }
      if (!n.domain.empty()) {
        problem(n, "domain '" + n.domain + "' is not supported (tec reads the default ONNX domain)");
        continue;
      }
      const OnnxOpClaim* claim = find_claim(n.op_type);
      if (!claim) {
        problem(n, "op " + n.op_type + " is not supported (te-compile --onnx-ops lists what is)");
        continue;
      }
      // Every later stage indexes inputs and outputs: a node outside its op's arity stops the
      // import here (with the other such nodes, in one error).
      const int inputs = static_cast<int>(n.inputs.size());
      if (inputs < claim->min_inputs || inputs > claim->max_inputs || n.outputs.empty()) {
        const std::string range = claim->max_inputs == kVariadicInputs      ? std::to_string(claim->min_inputs) + " or more"
                                  : claim->max_inputs > claim->min_inputs ? std::to_string(claim->min_inputs) + " to " +
                                                                                std::to_string(claim->max_inputs)
                                                                          : std::to_string(claim->min_inputs);
        problem(n, n.op_type + " takes " + range + " inputs and at least 1 output, this one has " + std::to_string(inputs) +
                       " and " + std::to_string(n.outputs.size()));
        malformed_ = true;
        continue;
      }
      if (m_.opset < claim->since_opset)
        problem(n, n.op_type + " needs opset " + std::to_string(claim->since_opset) + " or newer");
      if ((n.op_type == "QuantizeLinear" || n.op_type == "DequantizeLinear") && m_.opset < 21 &&
          n.attrs.count("block_size"))
        problem(n, "block_size needs opset 21");
    }
  }

  // ---- constants -------------------------------------------------------------------------

  bool is_constant(const std::string& v) const { return v.empty() || constant_values_.count(v) != 0; }

  // Which values are constant: initializers, and the outputs of foldable nodes whose inputs
  // are all constant (Shape needs only its input's shape, fixed per profile).
  void find_constants() {
    for (const auto& [name, t] : m_.initializers) constant_values_.insert(name);
    constant_node_.assign(nodes_.size(), false);
    for (int i : order_) {
      const onnx::Node& n = node(i);
      if (!n.domain.empty() || !onnx::foldable(n.op_type)) continue;
      bool all = n.op_type == "Shape";
      if (!all) {
        all = true;
        for (const auto& in : n.inputs) all = all && is_constant(in);
      }
      if (!all) continue;
      constant_node_[static_cast<size_t>(i)] = true;
      for (const auto& out : n.outputs)
        if (!out.empty()) constant_values_.insert(out);
    }
    for (const onnx::Node& n : nodes_) {
      const OnnxOpClaim* claim = find_claim(n.op_type);
      if (!claim || !n.domain.empty()) continue;
      for (int slot : claim->constant_inputs) {
        const auto s = static_cast<size_t>(slot);
        if (s < n.inputs.size() && !is_constant(n.inputs[s]))
          problem(n, "input " + std::to_string(slot) + " ('" + n.inputs[s] +
                         "') must be a constant (an initializer, or computed from constants) for tec");
      }
    }
  }

  // Ops tec takes only where they compute constants: after find_patterns, each one left on
  // run-time values is named. (Every other claimed op has a general form.)
  void check_constant_only_ops() {
    for (const onnx::Node& n : nodes_) {
      const auto i = static_cast<size_t>(n.index);
      if (constant_node_[i] || group_of_[i] >= 0 || mask_node_[i] || !n.domain.empty()) continue;
      if (n.op_type == "Trilu" || n.op_type == "ConstantOfShape")
        problem(n, n.op_type + " on run-time values is not supported; tec takes it only where it computes a constant (a causal "
                               "mask, a shape)");
    }
  }

  // Folds the constants that need no shapes, so that patterns can read their values.
  void fold_known_constants() {
    for (const auto& [name, t] : m_.initializers) known_[name] = std::make_shared<const Tensor>(t);
    for (int i : order_) {
      if (!constant_node_[static_cast<size_t>(i)]) continue;
      const onnx::Node& n = node(i);
      if (n.op_type == "Shape") continue;
      bool inputs_known = true;
      for (const auto& in : n.inputs) inputs_known = inputs_known && (in.empty() || known_.count(in));
      if (!inputs_known) continue;
      auto outs = with_context(node_ctx(n), [&] { return onnx::fold(n, known_, nullptr); });
      for (size_t o = 0; o < outs.size() && o < n.outputs.size(); ++o) known_[n.outputs[o]] = std::move(outs[o]);
    }
    for (const auto& [name, t] : known_) {
      if (t->numel() != 1) continue;
      if (t->elem_type == onnx::kBfloat16) constant_tolerance_ = std::max(constant_tolerance_, 0x1p-8);
      if (t->elem_type == onnx::kFloat16) constant_tolerance_ = std::max(constant_tolerance_, 0x1p-10);
    }
  }

  // A pattern's constant (GELU's sqrt(2/pi), 0.044715, ...) as the model stores it: bf16 and
  // fp16 models round them to their dtype (0.044715 is 0.044677734375 in bf16).
  bool near(double a, double b) const { return std::fabs(a - b) <= constant_tolerance_ * std::max(1.0, std::fabs(b)); }

  std::optional<double> scalar(const std::string& v) const {
    auto it = known_.find(v);
    if (it == known_.end() || it->second->numel() != 1) return std::nullopt;
    return it->second->at(0);
  }

  // ---- patterns --------------------------------------------------------------------------

  int producer_of(const std::string& v) const {
    auto it = producer_.find(v);
    return it == producer_.end() ? -1 : it->second;
  }
  const std::vector<int>& consumers_of(const std::string& v) const {
    static const std::vector<int> none;
    auto it = consumers_.find(v);
    return it == consumers_.end() ? none : it->second;
  }
  // A value read by exactly one node, and not a graph output: a pattern may swallow it.
  bool internal(const std::string& v) const { return consumers_of(v).size() == 1 && !outputs_.count(v); }
  bool free_node(int i) const { return i >= 0 && group_of_[static_cast<size_t>(i)] < 0 && !constant_node_[static_cast<size_t>(i)]; }
  // A free node of the default domain's `op` (a "MatMul" of another domain is not ONNX's, and
  // check_claims has only rejected it, not checked its arity).
  bool is_op(int i, const char* op) const { return free_node(i) && node(i).op_type == op && node(i).domain.empty(); }
  // The single consumer of v if it is a free `op` node.
  int sole_consumer(const std::string& v, const char* op) const {
    if (!internal(v)) return -1;
    const int c = consumers_of(v)[0];
    return is_op(c, op) ? c : -1;
  }
  // For a commutative binary node reading `v`, the other operand.
  std::string other_input(int i, const std::string& v) const {
    const auto& in = node(i).inputs;
    if (in.size() != 2) return "";
    return in[0] == v ? in[1] : in[1] == v ? in[0] : "";
  }
  // The two inputs of a binary node as (runtime, scalar constant), in either order.
  std::optional<std::pair<std::string, double>> with_scalar(int i) const {
    const auto& in = node(i).inputs;
    if (in.size() != 2) return std::nullopt;
    if (auto s = scalar(in[1]); s && !is_constant(in[0])) return std::make_pair(in[0], *s);
    if (auto s = scalar(in[0]); s && !is_constant(in[1])) return std::make_pair(in[1], *s);
    return std::nullopt;
  }
  std::optional<std::vector<int64_t>> reduce_axes(int i) const {
    const onnx::Node& n = node(i);
    if (auto a = attr_ints(n, "axes")) return a;
    if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
      auto it = known_.find(n.inputs[1]);
      if (it == known_.end()) return std::nullopt;
      return as_ints(*it->second);
    }
    return std::vector<int64_t>{};
  }
  bool reduces_last_dim_keeping(int i) const {
    auto axes = reduce_axes(i);
    if (!axes || axes->size() != 1 || attr_int(node(i), "keepdims", 1) != 1) return false;
    return (*axes)[0] == -1 || (*axes)[0] == rank_of(node(i).inputs[0]) - 1;
  }

  // The rank of a value when the structure alone tells it (exporters write the reduced axis
  // of a norm as rank-1 as often as -1); -1 when unknown.
  int64_t rank_of(const std::string& v) const {
    auto it = ranks_.find(v);
    return it == ranks_.end() ? -1 : it->second;
  }

  // Ranks in topological order (no recursion: a hostile graph may be a million nodes deep).
  void find_ranks() {
    for (const auto& [name, t] : known_) ranks_[name] = static_cast<int64_t>(t->dims.size());
    for (const auto& in : m_.inputs)
      if (in.has_shape) ranks_[in.name] = static_cast<int64_t>(in.dims.size());
    static const std::set<std::string> same = {"Relu", "Gelu", "Sigmoid", "Tanh", "Erf", "Sqrt", "Reciprocal", "Neg",
                                               "LayerNormalization", "RMSNormalization", "Transpose", "Cast", "Identity",
                                               "QuantizeLinear", "DequantizeLinear", "Attention"};
    static const std::set<std::string> broadcast = {"Add", "Sub", "Mul", "Div", "Pow", "MatMul"};
    for (int i : order_) {
      const onnx::Node& n = node(i);
      if (n.outputs.empty() || n.inputs.empty() || ranks_.count(n.outputs[0])) continue;
      int64_t r = -1;
      if (same.count(n.op_type) || (n.op_type == "ReduceMean" && attr_int(n, "keepdims", 1) == 1)) r = rank_of(n.inputs[0]);
      else if (n.op_type == "Gemm") r = 2;
      else if (n.op_type == "Reshape" && n.inputs.size() > 1 && known_.count(n.inputs[1])) r = known_.at(n.inputs[1])->numel();
      else if (broadcast.count(n.op_type) && n.inputs.size() == 2 && rank_of(n.inputs[0]) >= 0 && rank_of(n.inputs[1]) >= 0)
        r = std::max(rank_of(n.inputs[0]), rank_of(n.inputs[1]));
      if (r >= 0) ranks_[n.outputs[0]] = r;
    }
  }

  void add_group(Group g) {
    const int id = static_cast<int>(groups_.size());
    for (int mbr : g.members) group_of_[static_cast<size_t>(mbr)] = id;
    groups_.push_back(std::move(g));
  }

  // From `start` (a value that multiplies x), follows single-use Mul nodes, collecting the
  // other factors, until they are exactly {x, c} with c ~ `scale`. Returns the last Mul.
  int match_product(const std::string& start, const std::string& x, double scale, std::vector<int>& members) const {
    std::string cur = start;
    double constants = 1.0;
    bool have_x = false;
    for (int step = 0; step < 3; ++step) {
      const int m = sole_consumer(cur, "Mul");
      if (m < 0) return -1;
      const std::string other = other_input(m, cur);
      members.push_back(m);
      if (auto s = scalar(other)) {
        constants *= *s;
      } else if (other == x && !have_x) {
        have_x = true;
      } else {
        // x * c computed on its own, then multiplied in.
        const int p = producer_of(other);
        auto xs = p >= 0 && internal(other) && is_op(p, "Mul") ? with_scalar(p) : std::nullopt;
        if (!xs || xs->first != x || have_x) return -1;
        members.push_back(p);
        constants *= xs->second;
        have_x = true;
      }
      cur = node(m).outputs[0];
      if (have_x && near(constants, scale)) return m;
    }
    return -1;
  }

  // 1 + f(...): the Add after Erf/Tanh.
  int plus_one(const std::string& v) const {
    const int a = sole_consumer(v, "Add");
    if (a < 0) return -1;
    auto s = scalar(other_input(a, v));
    return s && near(*s, 1.0) ? a : -1;
  }

  void match_gelu_erf(int e) {
    const std::string& in = node(e).inputs[0];
    const int p = producer_of(in);
    if (!internal(in) || p < 0) return;
    std::string x;
    if (is_op(p, "Div") && node(p).inputs.size() == 2 && scalar(node(p).inputs[1]) && near(*scalar(node(p).inputs[1]), std::sqrt(2.0)))
      x = node(p).inputs[0];
    else if (is_op(p, "Mul"))
      if (auto xs = with_scalar(p); xs && near(xs->second, std::sqrt(0.5))) x = xs->first;
    if (x.empty()) return;
    const int a = plus_one(node(e).outputs[0]);
    if (a < 0) return;
    std::vector<int> members{p, e, a};
    const int root = match_product(node(a).outputs[0], x, 0.5, members);
    if (root < 0) return;
    add_group(Group{.kind = Group::Kind::gelu, .members = members, .root = root, .x = x, .approximate = "none",
                    .describe = "decomposed GELU (erf form) -> gelu"});
  }

  // x^3 as Pow(x, 3), x*(x*x) or (x*x)*x.
  bool is_cube(const std::string& v, const std::string& x, std::vector<int>& members) const {
    const int p = producer_of(v);
    if (p < 0 || !internal(v)) return false;
    if (is_op(p, "Pow") && node(p).inputs[0] == x && scalar(node(p).inputs[1]) && near(*scalar(node(p).inputs[1]), 3.0)) {
      members.push_back(p);
      return true;
    }
    if (!is_op(p, "Mul")) return false;
    const std::string other = other_input(p, x);
    if (other.empty()) return false;
    const int q = producer_of(other);
    if (q < 0 || !internal(other) || !is_op(q, "Mul") || node(q).inputs[0] != x || node(q).inputs[1] != x) return false;
    members.push_back(p);
    members.push_back(q);
    return true;
  }

  void match_gelu_tanh(int t) {
    const std::string& in = node(t).inputs[0];
    const int p = producer_of(in);
    if (!internal(in) || !is_op(p, "Mul")) return;
    auto inner = with_scalar(p);
    if (!inner || !near(inner->second, std::sqrt(2.0 / M_PI))) return;
    const int s = producer_of(inner->first);
    if (!internal(inner->first) || !is_op(s, "Add")) return;
    for (int order = 0; order < 2; ++order) {
      const std::string x = node(s).inputs[static_cast<size_t>(order)], k = node(s).inputs[static_cast<size_t>(1 - order)];
      const int kp = producer_of(k);
      if (!internal(k) || !is_op(kp, "Mul")) continue;
      auto cubic = with_scalar(kp);
      if (!cubic || !near(cubic->second, 0.044715)) continue;
      std::vector<int> members{p, s, kp, t};
      if (!is_cube(cubic->first, x, members)) continue;
      const int a = plus_one(node(t).outputs[0]);
      if (a < 0) return;
      members.push_back(a);
      const int root = match_product(node(a).outputs[0], x, 0.5, members);
      if (root < 0) return;
      add_group(Group{.kind = Group::Kind::gelu, .members = members, .root = root, .x = x, .approximate = "tanh",
                      .describe = "decomposed GELU (tanh form) -> gelu"});
      return;
    }
  }

  void match_silu(int s) {
    const std::string& x = node(s).inputs[0];
    const int m = sole_consumer(node(s).outputs[0], "Mul");
    if (m < 0 || other_input(m, node(s).outputs[0]) != x) return;
    add_group(Group{.kind = Group::Kind::silu, .members = {s, m}, .root = m, .x = x, .describe = "x * sigmoid(x) -> silu"});
  }

  // A MatMul by a constant 2-D weight, free to be swallowed.
  bool is_weight_matmul(int i) const {
    if (!is_op(i, "MatMul")) return false;
    auto it = known_.find(node(i).inputs[1]);
    return it != known_.end() && it->second->dims.size() == 2 && it->second->is_float() && !is_constant(node(i).inputs[0]);
  }

  // `v` as a projection x W (+ b) whose nodes no pattern holds yet; nullopt otherwise.
  std::optional<Projection> projection_of(const std::string& v) const {
    const int p = producer_of(v);
    if (p < 0) return std::nullopt;
    if (is_weight_matmul(p))
      return Projection{.x = node(p).inputs[0], .weight = node(p).inputs[1], .members = {p}};
    if (is_op(p, "Add") && node(p).inputs.size() == 2)
      for (int order = 0; order < 2; ++order) {
        const std::string product = node(p).inputs[static_cast<size_t>(order)], b = node(p).inputs[static_cast<size_t>(1 - order)];
        const int mm = producer_of(product);
        if (mm < 0 || !internal(product) || !is_weight_matmul(mm) || !known_.count(b)) continue;
        const Tensor& bt = *known_.at(b);
        const int64_t n = known_.at(node(mm).inputs[1])->dims[1];
        if (!bt.is_float() || bt.numel() != n || bt.dims.empty() || bt.dims.back() != n) continue;
        return Projection{.x = node(mm).inputs[0], .weight = node(mm).inputs[1], .bias = b, .members = {mm, p}};
      }
    if (is_op(p, "Gemm") && attr_int(node(p), "transA", 0) == 0 && !is_constant(node(p).inputs[0]) &&
        known_.count(node(p).inputs[1])) {
      const onnx::Node& g = node(p);
      const Tensor& b = *known_.at(g.inputs[1]);
      if (b.dims.size() != 2 || !b.is_float()) return std::nullopt;
      Projection proj{.x = g.inputs[0], .weight = g.inputs[1], .trans_b = attr_int(g, "transB", 0) != 0,
                      .alpha = attr_float(g, "alpha", 1.0f), .beta = attr_float(g, "beta", 1.0f), .members = {p}};
      if (g.inputs.size() > 2 && !g.inputs[2].empty()) {
        const auto c = known_.find(g.inputs[2]);
        const int64_t n = proj.trans_b ? b.dims[0] : b.dims[1];
        if (c == known_.end() || !c->second->is_float() || (c->second->numel() != n && c->second->numel() != 1) ||
            (c->second->numel() == n && !c->second->dims.empty() && c->second->dims.back() != n))
          return std::nullopt;
        proj.bias = g.inputs[2];
      }
      return proj;
    }
    return std::nullopt;
  }

  // A projection's [N] x [K] shape, from its constant.
  std::pair<int64_t, int64_t> projection_shape(const Projection& p) const {
    const Tensor& w = *known_.at(p.weight);
    return p.trans_b ? std::make_pair(w.dims[0], w.dims[1]) : std::make_pair(w.dims[1], w.dims[0]);
  }

  // act(x W_gate (+ b)) * (x W_up (+ b)), the product's operands either way round, each
  // projection a MatMul (+ Add) or a Gemm, act silu (x * sigmoid(x) either way round) or GELU
  // tanh -> one linear with the weights (and biases) concatenated, then swiglu / geglu.
  void match_gated(int mul) {
    if (!is_op(mul, "Mul") || node(mul).inputs.size() != 2) return;
    for (int order = 0; order < 2; ++order) {
      const std::string act_out = node(mul).inputs[static_cast<size_t>(order)];
      const std::string up_out = node(mul).inputs[static_cast<size_t>(1 - order)];
      const int act_node = producer_of(act_out);
      if (act_node < 0 || !internal(act_out) || !internal(up_out)) continue;
      // The activation: a silu or tanh-GELU pattern, or ONNX's own Gelu (opset 20) with
      // approximate "tanh", as the dynamo exporter writes Gemma's gelu_pytorch_tanh.
      const int gid = group_of_[static_cast<size_t>(act_node)];
      Group act;
      if (gid >= 0 && groups_[static_cast<size_t>(gid)].root == act_node)
        act = groups_[static_cast<size_t>(gid)];
      else if (is_op(act_node, "Gelu") && attr_string(node(act_node), "approximate", "none") == "tanh")
        act = Group{.kind = Group::Kind::gelu, .members = {act_node}, .root = act_node, .x = node(act_node).inputs[0],
                    .approximate = "tanh"};
      else
        continue;
      const bool silu = act.kind == Group::Kind::silu;
      if (!silu && !(act.kind == Group::Kind::gelu && act.approximate == "tanh")) continue;
      const auto gate = projection_of(act.x), up = projection_of(up_out);
      if (!gate || !up || gate->x != up->x || outputs_.count(act.x)) continue;
      for (int c : consumers_of(act.x))
        if (std::find(act.members.begin(), act.members.end(), c) == act.members.end()) return;
      if (projection_shape(*gate) != projection_shape(*up)) {
        const auto [gn, gk] = projection_shape(*gate);
        const auto [un, uk] = projection_shape(*up);
        problem(node(mul), "gated MLP: the gate projection ('" + node(gate->members[0]).name + "') maps " + std::to_string(gk) +
                               " features to " + std::to_string(gn) + ", the up projection ('" + node(up->members[0]).name +
                               "') " + std::to_string(uk) + " to " + std::to_string(un) +
                               "; act(gate) * up needs both the same shape");
        return;
      }
      Group g{.kind = Group::Kind::gated, .members = act.members, .root = mul, .x = gate->x};
      g.members.insert(g.members.end(), gate->members.begin(), gate->members.end());
      g.members.insert(g.members.end(), up->members.begin(), up->members.end());
      g.members.push_back(mul);
      g.gate = *gate;
      g.up = *up;
      g.act = silu ? "swiglu" : "geglu";
      g.describe = std::string(silu ? "gated SwiGLU" : "gated GEGLU") + " (two projections + " + (silu ? "silu" : "gelu") +
                   " * up) -> linear with the weights concatenated, then " + g.act;
      if (gid >= 0) {
        for (int mbr : act.members) group_of_[static_cast<size_t>(mbr)] = -1;
        groups_[static_cast<size_t>(gid)].members.clear();  // absorbed
        groups_[static_cast<size_t>(gid)].root = -1;
      }
      add_group(std::move(g));
      return;
    }
  }

  // If `last`'s output flows into a free `op` with a constant 1-D other operand, swallows it
  // into the group and stores that constant's name in `into`.
  int absorb_constant_vector(int last, const char* op, Group& g, std::string& into) const {
    const std::string out = node(last).outputs[0];
    const int next = sole_consumer(out, op);
    if (next < 0) return last;
    const std::string c = other_input(next, out);
    if (!known_.count(c) || known_.at(c)->dims.size() != 1) return last;
    g.members.push_back(next);
    into = c;
    return next;
  }

  // Optional Mul by a constant gamma, then optional Add of a constant beta.
  int affine_tail(int last, Group& g, bool with_beta) const {
    last = absorb_constant_vector(last, "Mul", g, g.weight);
    return with_beta ? absorb_constant_vector(last, "Add", g, g.bias) : last;
  }

  // eps from Add(v, eps), then Sqrt: returns the Sqrt.
  int eps_sqrt(const std::string& v, Group& g) const {
    const int add = sole_consumer(v, "Add");
    if (add < 0) return -1;
    auto eps = scalar(other_input(add, v));
    if (!eps || *eps <= 0 || *eps >= 1) return -1;
    const int sq = sole_consumer(node(add).outputs[0], "Sqrt");
    if (sq < 0) return -1;
    g.eps = *eps;
    g.members.insert(g.members.end(), {add, sq});
    return sq;
  }

  // d^2 as Pow(d, 2) or Mul(d, d).
  bool is_square_of(int i, const std::string& d) const {
    if (is_op(i, "Pow")) return node(i).inputs[0] == d && scalar(node(i).inputs[1]) && near(*scalar(node(i).inputs[1]), 2.0);
    return is_op(i, "Mul") && node(i).inputs[0] == d && node(i).inputs[1] == d;
  }

  void match_layernorm(int r1) {
    if (!reduces_last_dim_keeping(r1)) return;
    const std::string x = node(r1).inputs[0];
    const int sub = sole_consumer(node(r1).outputs[0], "Sub");
    if (sub < 0 || node(sub).inputs[0] != x) return;
    const std::string d = node(sub).outputs[0];
    const auto& dc = consumers_of(d);
    if (dc.size() != 2 || outputs_.count(d)) return;
    const int sq = is_square_of(dc[0], d) ? dc[0] : is_square_of(dc[1], d) ? dc[1] : -1;
    const int div = dc[0] == sq ? dc[1] : dc[0];
    if (sq < 0 || !is_op(div, "Div") || node(div).inputs[0] != d) return;
    const int r2 = sole_consumer(node(sq).outputs[0], "ReduceMean");
    if (r2 < 0 || !reduces_last_dim_keeping(r2)) return;
    Group g{.kind = Group::Kind::layernorm, .members = {r1, sub, sq, r2}, .x = x};
    const int sqrt = eps_sqrt(node(r2).outputs[0], g);
    if (sqrt < 0 || sole_consumer(node(sqrt).outputs[0], "Div") != div) return;
    g.members.push_back(div);
    g.root = affine_tail(div, g, true);
    g.describe = "decomposed LayerNorm (ReduceMean/Sub/Pow/Sqrt/Div) -> layernorm";
    add_group(std::move(g));
  }

  // 1 / s as Reciprocal(s) or Div(1, s), read only by the pattern: the node, or -1.
  int reciprocal_of(const std::string& s) const {
    if (const int rec = sole_consumer(s, "Reciprocal"); rec >= 0) return rec;
    const int div = sole_consumer(s, "Div");
    if (div < 0 || node(div).inputs[1] != s) return -1;
    const auto one = scalar(node(div).inputs[0]);
    return one && *one == 1.0 ? div : -1;
  }

  void match_rmsnorm(int r) {
    if (!reduces_last_dim_keeping(r)) return;
    const std::string sq_out = node(r).inputs[0];
    const int sq = producer_of(sq_out);
    if (sq < 0 || !internal(sq_out)) return;
    const std::string x = node(sq).inputs[0];
    if (!is_square_of(sq, x)) return;
    Group g{.kind = Group::Kind::rmsnorm, .members = {sq, r}, .x = x};
    const int sqrt = eps_sqrt(node(r).outputs[0], g);
    if (sqrt < 0) return;
    int last = -1;
    const std::string s = node(sqrt).outputs[0];
    if (const int rec = reciprocal_of(s); rec >= 0) {
      const int mul = sole_consumer(node(rec).outputs[0], "Mul");
      if (mul < 0 || other_input(mul, node(rec).outputs[0]) != x) return;
      g.members.insert(g.members.end(), {rec, mul});
      last = mul;
    } else if (const int div = sole_consumer(s, "Div"); div >= 0 && node(div).inputs[0] == x) {
      g.members.push_back(div);
      last = div;
    } else {
      return;
    }
    last = absorb_fp32_round_trip(g, last);
    g.root = affine_tail(last, g, false);
    g.describe = "decomposed RMSNorm (Pow/ReduceMean/Sqrt/Reciprocal) -> rmsnorm";
    add_group(std::move(g));
  }

  // Hugging Face's RMSNorm in an fp16 / bf16 model computes in fp32 between two Casts:
  // x32 = Cast(x, FLOAT), the norm of x32, Cast back to x's type. tec's norm computes in fp32
  // and rounds once, so the Casts join the group and its input becomes x. Returns the node the
  // group's value now leaves from.
  int absorb_fp32_round_trip(Group& g, int last) {
    const int up = producer_of(g.x);
    if (up < 0 || !is_op(up, "Cast") || attr_int(node(up), "to", 0) != onnx::kFloat || outputs_.count(g.x)) return last;
    const std::string original = node(up).inputs[0];
    const auto type = types_.find(original);
    if (type == types_.end() || (type->second != onnx::kFloat16 && type->second != onnx::kBfloat16)) return last;
    for (int c : consumers_of(g.x))
      if (std::find(g.members.begin(), g.members.end(), c) == g.members.end()) return last;
    const int down = sole_consumer(node(last).outputs[0], "Cast");
    if (down < 0 || attr_int(node(down), "to", 0) != type->second) return last;
    g.members.insert(g.members.end(), {up, down});
    g.x = original;
    return down;
  }

  void match_linear_bias(int mm) {
    if (!is_weight_matmul(mm)) return;
    const std::string y = node(mm).outputs[0];
    const int add = sole_consumer(y, "Add");
    if (add < 0) return;
    const std::string b = other_input(add, y);
    auto it = known_.find(b);
    const int64_t n = known_.at(node(mm).inputs[1])->dims[1];
    if (it == known_.end() || it->second->numel() != n || !it->second->is_float() || it->second->dims.empty() ||
        it->second->dims.back() != n)
      return;
    add_group(Group{.kind = Group::Kind::linear_bias, .members = {mm, add}, .root = add, .x = node(mm).inputs[0],
                    .weight = node(mm).inputs[1], .bias = b, .describe = "MatMul + Add -> linear with bias"});
  }

  // Why a Q/DQ scale constant cannot be used, or "" when every value is a positive finite number.
  static std::string bad_scale(const Tensor& scale) {
    for (int64_t i = 0; i < scale.numel(); ++i) {
      const double v = scale.at(static_cast<size_t>(i));
      if (!(std::isfinite(v) && v > 0.0)) {
        std::ostringstream text;
        text << "its scale must be a positive finite number, got " << v;
        if (scale.numel() > 1) text << " at index " << i;
        return text.str();
      }
    }
    return "";
  }

  bool nonzero_zero_point(const onnx::Node& q) const {
    if (q.inputs.size() < 3 || q.inputs[2].empty() || !known_.count(q.inputs[2])) return false;
    const auto& zero = known_.at(q.inputs[2])->floats;
    return std::any_of(zero.begin(), zero.end(), [](float z) { return z != 0.0f; });
  }

  // Q -> DQ on a run-time value: the pair picks the quantizer of the GEMM that reads it. A
  // scalar FLOAT8E4M3FN scale is the model's calibrated static scale (recipe fp8-static, kept in
  // qdq_scale_); block_size 128 chooses fp8-block and E8M0 block_size 32 mxfp8, whose
  // activation scales tec computes at run time as TE does.
  void match_qdq(int q) {
    if (!is_op(q, "QuantizeLinear") || is_constant(node(q).inputs[0])) return;
    const std::string y = node(q).outputs[0];
    const int dq = sole_consumer(y, "DequantizeLinear");
    if (dq < 0) return;
    const onnx::Node& qn = node(q);
    const onnx::Node& dn = node(dq);
    Group g{.kind = Group::Kind::qdq, .members = {q, dq}, .root = dq, .x = qn.inputs[0]};
    auto scale = known_.find(qn.inputs[1]);
    auto dq_scale = known_.find(dn.inputs[1]);
    int32_t out_type = static_cast<int32_t>(attr_int(qn, "output_dtype", 0));
    if (qn.inputs.size() > 2 && !qn.inputs[2].empty() && known_.count(qn.inputs[2])) out_type = known_.at(qn.inputs[2])->elem_type;
    if (out_type == 0) out_type = onnx::kUint8;
    const int64_t block = attr_int(qn, "block_size", 0);
    std::string why;
    if (scale == known_.end() || dq_scale == known_.end()) why = "its scale is not a known constant";
    else if (!scale->second->is_float() || !dq_scale->second->is_float()) why = "its scale is not a float tensor";
    else if (out_type != onnx::kFloat8E4M3FN)
      why = "it quantizes to " + onnx::elem_type_name(out_type) +
            "; tec maps FLOAT8E4M3FN Q/DQ onto TE's forward FP8 formats (E5M2 is for gradients, integer formats are not TE's)";
    else if (const std::string bad = bad_scale(*scale->second); !bad.empty()) why = bad;
    else if (scale->second->dims != dq_scale->second->dims || scale->second->floats != dq_scale->second->floats)
      why = "QuantizeLinear and DequantizeLinear have different scales ('" + qn.inputs[1] + "', '" + dn.inputs[1] +
            "'); a pair that rescales is not a quantizer";
    else if (nonzero_zero_point(qn))
      why = "its zero point is not 0";
    else if (block == 0 && scale->second->numel() == 1) g.qdq_recipe = RecipeKind::fp8_static;
    else if (block == 128 && attr_int(qn, "axis", 1) == -1) g.qdq_recipe = RecipeKind::fp8_block;
    else if (block == 32 && scale->second->elem_type == onnx::kFloat8E8M0 && attr_int(qn, "axis", 1) == -1)
      g.qdq_recipe = RecipeKind::mxfp8;
    else
      why = "its scale granularity (" + std::string(block ? "block_size " + std::to_string(block) : "per-axis") +
            ") matches no TE recipe (scalar: fp8-static, the model's scale; block_size 128 on axis -1: fp8-block; block_size "
            "32 with E8M0 scales on axis -1: mxfp8)";
    if (!why.empty()) {
      problem(qn, "Q/DQ pair cannot be mapped: " + why);
      return;
    }
    if (g.qdq_recipe == RecipeKind::fp8_static) qdq_scale_[dn.outputs[0]] = scale->second->floats.at(0);
    g.describe = g.qdq_recipe == RecipeKind::fp8_static
                     ? "Q/DQ pair -> the GEMM input's static FP8 scale " + std::to_string(scale->second->floats.at(0))
                     : std::string("Q/DQ pair -> ") + std::string(to_string(g.qdq_recipe)) + " quantizer of the GEMM input";
    add_group(std::move(g));
  }

  // Perm of a Transpose that swaps the last two axes and keeps the others.
  static bool swaps_last_two(const onnx::Node& t) {
    const auto perm = attr_ints(t, "perm");
    if (!perm || perm->size() < 2) return false;
    const int64_t n = static_cast<int64_t>(perm->size());
    for (int64_t i = 0; i < n - 2; ++i)
      if ((*perm)[static_cast<size_t>(i)] != i) return false;
    return (*perm)[static_cast<size_t>(n - 2)] == n - 1 && (*perm)[static_cast<size_t>(n - 1)] == n - 2;
  }

  // v = Mul(v', c) (either way round) by a constant, swallowed: v becomes v', c joins the scales.
  void strip_constant_factor(std::string& v, Group& g) const {
    const int m = producer_of(v);
    if (m < 0 || !internal(v) || !is_op(m, "Mul")) return;
    const auto& in = node(m).inputs;
    for (int side = 0; side < 2; ++side)
      if (is_constant(in[static_cast<size_t>(side)]) && !is_constant(in[static_cast<size_t>(1 - side)])) {
        g.scales.emplace_back(in[static_cast<size_t>(side)], false);
        g.members.push_back(m);
        v = in[static_cast<size_t>(1 - side)];
        return;
      }
  }

  // Hugging Face's repeat_kv: v = Reshape(Expand(Unsqueeze(x, axis 2), [B, KVH, n, S, D]),
  // [B, KVH x n, S, D]), each read only here, with constant shapes: query head h then reads kv
  // head h / n, as tec's GQA attention does. v becomes x; the Expand's dims are returned.
  std::vector<int64_t> strip_repeat_kv(std::string& v, Group& g) const {
    const int r = producer_of(v);
    if (r < 0 || !internal(v) || !is_op(r, "Reshape") || node(r).inputs.size() < 2 || !known_.count(node(r).inputs[1])) return {};
    const std::string expanded = node(r).inputs[0];
    const int e = producer_of(expanded);
    if (e < 0 || !internal(expanded) || !is_op(e, "Expand") || node(e).inputs.size() < 2 || !known_.count(node(e).inputs[1])) return {};
    const std::string unsqueezed = node(e).inputs[0];
    const int u = producer_of(unsqueezed);
    if (u < 0 || !internal(unsqueezed) || !is_op(u, "Unsqueeze")) return {};
    std::optional<std::vector<int64_t>> axes = attr_ints(node(u), "axes");
    if (!axes && node(u).inputs.size() > 1 && known_.count(node(u).inputs[1])) axes = as_ints(*known_.at(node(u).inputs[1]));
    const std::string x = node(u).inputs[0];
    // x's rank may be unknown here (a rope's output): the emitter checks its shape.
    if (!axes || *axes != std::vector<int64_t>{2} || (rank_of(x) != 4 && rank_of(x) != -1) || is_constant(x)) return {};
    const std::vector<int64_t> d = as_ints(*known_.at(node(e).inputs[1])), to = as_ints(*known_.at(node(r).inputs[1]));
    if (d.size() != 5 || to.size() != 4 || d[2] < 1 || to[0] != d[0] || to[1] % d[2] != 0 || to[1] / d[2] != d[1] || to[2] != d[3] ||
        to[3] != d[4])
      return {};
    g.members.insert(g.members.end(), {r, e, u});
    v = x;
    return d;
  }

  // v = Transpose(Reshape(flat, [B, S, H, D]), perm [0, 2, 1, 3]), both read only here, with a
  // known shape constant: an exporter's split of [B, S, H x D] into heads.
  struct HeadSplit {
    std::string flat, shape;
    int64_t heads;
    std::vector<int> members;
  };
  std::optional<HeadSplit> head_split_of(const std::string& v) const {
    const int t = producer_of(v);
    if (t < 0 || !internal(v) || !is_op(t, "Transpose") || attr_ints(node(t), "perm") != std::vector<int64_t>{0, 2, 1, 3})
      return std::nullopt;
    const std::string split = node(t).inputs[0];
    const int r = producer_of(split);
    if (r < 0 || !internal(split) || !is_op(r, "Reshape") || node(r).inputs.size() < 2 || rank_of(node(r).inputs[0]) != 3)
      return std::nullopt;
    const auto shape = known_.find(node(r).inputs[1]);
    if (shape == known_.end()) return std::nullopt;
    const std::vector<int64_t> dims = as_ints(*shape->second);
    if (dims.size() != 4 || dims[2] < 1) return std::nullopt;
    return HeadSplit{node(r).inputs[0], node(r).inputs[1], dims[2], {t, r}};
  }

  // scaled_dot_product_attention as exporters spell it (torch.onnx's decomposition, which
  // scales q and k^T by sqrt(scale) each; Hugging Face's eager attention, which divides the
  // scores): Softmax(MatMul(q [x c], Transpose(k) [x c]) [x or / c] [+ mask]) MatMul v, q, k, v
  // [batch, heads, seq, head_dim] (or [batch x heads, seq, head_dim]) -> tec's attention.
  void match_attention(int sm) {
    const onnx::Node& softmax = node(sm);
    const int64_t axis = attr_int(softmax, "axis", -1);
    if (axis != -1 && axis != rank_of(softmax.inputs[0]) - 1) return;
    std::string probs = softmax.outputs[0];
    const std::vector<int> guard = nan_guard_of(probs);
    if (!guard.empty()) probs = node(guard.back()).outputs[0];
    const int pv = sole_consumer(probs, "MatMul");
    if (pv < 0 || node(pv).inputs[0] != probs || is_constant(node(pv).inputs[1])) return;
    Group g{.kind = Group::Kind::attention, .members = {sm, pv}, .root = pv};
    g.members.insert(g.members.end(), guard.begin(), guard.end());
    g.nan_guard = !guard.empty();
    g.value = node(pv).inputs[1];
    std::string scores = softmax.inputs[0];
    // + mask: the Add's other operand, beside the scores' chain.
    if (const int add = producer_of(scores); add >= 0 && internal(scores) && is_op(add, "Add")) {
      for (int side = 0; side < 2 && g.mask.empty(); ++side) {
        const std::string chain = node(add).inputs[static_cast<size_t>(side)];
        const int p = producer_of(chain);
        if (p >= 0 && internal(chain) && (is_op(p, "MatMul") || is_op(p, "Mul") || is_op(p, "Div"))) {
          g.mask = node(add).inputs[static_cast<size_t>(1 - side)];
          scores = chain;
        }
      }
      if (g.mask.empty()) return;
      g.members.push_back(add);
    }
    // x c or / c after the MatMul.
    if (const int m = producer_of(scores); m >= 0 && internal(scores) && (is_op(m, "Mul") || is_op(m, "Div"))) {
      const auto& in = node(m).inputs;
      const bool divide = node(m).op_type == "Div";
      if (is_constant(in[1]) && !is_constant(in[0])) {
        g.scales.emplace_back(in[1], divide);
        scores = in[0];
      } else if (!divide && is_constant(in[0]) && !is_constant(in[1])) {
        g.scales.emplace_back(in[0], false);
        scores = in[1];
      } else {
        return;
      }
      g.members.push_back(m);
    }
    const int qk = producer_of(scores);
    if (qk < 0 || !internal(scores) || !is_op(qk, "MatMul")) return;
    g.members.push_back(qk);
    std::string q = node(qk).inputs[0], keys_t = node(qk).inputs[1];
    strip_constant_factor(q, g);
    strip_constant_factor(keys_t, g);
    const int t = producer_of(keys_t);
    if (t < 0 || !internal(keys_t) || !is_op(t, "Transpose") || !swaps_last_two(node(t))) return;
    g.members.push_back(t);
    std::string k = node(t).inputs[0];
    strip_constant_factor(k, g);
    g.key_repeat = strip_repeat_kv(k, g);
    g.value_repeat = strip_repeat_kv(g.value, g);
    if (g.key_repeat.empty() != g.value_repeat.empty()) return;  // one of the two repeated: not GQA as tec knows it
    if (is_constant(q) || is_constant(k)) return;
    g.x = q;
    g.key = k;
    g.describe = "MatMul/Softmax/MatMul attention -> attention";
    if (!g.key_repeat.empty()) g.describe += " (repeat_kv's Expand of the keys and values: GQA)";
    if (g.nan_guard) g.describe += " (the softmax's NaN guard, Where(IsNaN(p), 0, p), with it)";
    // Heads split from flat tensors on the way in, and merged on the way out: tec's attention
    // reads and writes the flat [B, S, H x D] form, so those Transposes and Reshapes go too.
    const auto sq = head_split_of(g.x), sk = head_split_of(g.key), sv = head_split_of(g.value);
    if (sq && sk && sv) {
      for (const HeadSplit* split : {&*sq, &*sk, &*sv}) {
        g.members.insert(g.members.end(), split->members.begin(), split->members.end());
        g.split_shapes.push_back(split->shape);
      }
      g.x = sq->flat;
      g.key = sk->flat;
      g.value = sv->flat;
      g.heads = sq->heads;
      g.kv_heads = sk->heads;
      g.describe += " (heads split and merged in place)";
    }
    const int merge = sole_consumer(node(pv).outputs[0], "Transpose");
    const int flatten = merge >= 0 ? sole_consumer(node(merge).outputs[0], "Reshape") : -1;
    if (flatten >= 0 && attr_ints(node(merge), "perm") == std::vector<int64_t>{0, 2, 1, 3} && node(flatten).inputs.size() > 1 &&
        known_.count(node(flatten).inputs[1]) &&
        (known_.at(node(flatten).inputs[1])->numel() == 3 || known_.at(node(flatten).inputs[1])->numel() == 2)) {
      g.members.insert(g.members.end(), {merge, flatten});
      g.root = flatten;
      g.merge_shape = node(flatten).inputs[1];
    }
    add_group(std::move(g));
  }

  // transformers' sdpa attention after its softmax: Where(IsNaN(p), 0, p), zeroing the rows
  // whose every key is masked. Returns {IsNaN, Where} when `probs` feeds exactly that, else {}.
  std::vector<int> nan_guard_of(const std::string& probs) const {
    const auto& readers = consumers_of(probs);
    if (readers.size() != 2 || outputs_.count(probs)) return {};
    const int is_nan = is_op(readers[0], "IsNaN") ? readers[0] : is_op(readers[1], "IsNaN") ? readers[1] : -1;
    const int where = is_op(readers[0], "Where") ? readers[0] : is_op(readers[1], "Where") ? readers[1] : -1;
    if (is_nan < 0 || where < 0 || !internal(node(is_nan).outputs[0])) return {};
    const auto& in = node(where).inputs;
    if (in[0] != node(is_nan).outputs[0] || in[2] != probs || !known_.count(in[1])) return {};
    const Tensor& zero = *known_.at(in[1]);
    if (!zero.is_float() || zero.numel() != 1 || zero.at(0) != 0.0) return {};
    return {is_nan, where};
  }

  // The constant ints of a Slice's input `i` (starts, ends, axes, steps); nullopt if absent or
  // not known.
  std::optional<std::vector<int64_t>> slice_input(int slice, size_t i) const {
    const auto& in = node(slice).inputs;
    if (i >= in.size() || in[i].empty()) return std::nullopt;
    const auto it = known_.find(in[i]);
    if (it == known_.end()) return std::nullopt;
    return as_ints(*it->second);
  }

  // Slice of the last axis, [start, end) with step 1: (start, end), or nullopt.
  std::optional<std::pair<int64_t, int64_t>> last_axis_slice(int slice) const {
    const auto starts = slice_input(slice, 1), ends = slice_input(slice, 2), axes = slice_input(slice, 3), steps = slice_input(slice, 4);
    const int64_t rank = rank_of(node(slice).inputs[0]);
    if (!starts || !ends || starts->size() != 1 || ends->size() != 1 || !axes || axes->size() != 1) return std::nullopt;
    if ((*axes)[0] != -1 && (*axes)[0] != rank - 1) return std::nullopt;
    if (steps && (steps->size() != 1 || (*steps)[0] != 1)) return std::nullopt;
    return std::make_pair((*starts)[0], (*ends)[0]);
  }

  // Hugging Face's apply_rotary_pos_emb: x cos + rotate_half(x) sin, rotate_half(x) =
  // Concat(Neg(x[..., h:]), x[..., :h]) on the last axis, cos and sin constant tables (checked
  // to be rope's when emitting).
  void match_rope(int cat) {
    const onnx::Node& c = node(cat);
    if (c.inputs.size() != 2 || (attr_int(c, "axis", 0) != -1 && attr_int(c, "axis", 0) != rank_of(c.inputs[0]) - 1)) return;
    const int neg = producer_of(c.inputs[0]), low = producer_of(c.inputs[1]);
    if (neg < 0 || low < 0 || !internal(c.inputs[0]) || !internal(c.inputs[1]) || !is_op(neg, "Neg") || !is_op(low, "Slice")) return;
    const std::string high_out = node(neg).inputs[0];
    const int high = producer_of(high_out);
    if (high < 0 || !internal(high_out) || !is_op(high, "Slice")) return;
    const std::string x = node(low).inputs[0];
    if (node(high).inputs[0] != x || is_constant(x)) return;
    const auto lo = last_axis_slice(low), hi = last_axis_slice(high);
    if (!lo || !hi || lo->first != 0 || lo->second != hi->first || lo->second < 1) return;
    // x sin: the Mul of the rotated half by a constant; x cos: the Add's other operand.
    const int by_sin = sole_consumer(c.outputs[0], "Mul");
    if (by_sin < 0) return;
    const std::string sin = other_input(by_sin, c.outputs[0]);
    if (!is_constant(sin)) return;
    const int add = sole_consumer(node(by_sin).outputs[0], "Add");
    if (add < 0) return;
    const std::string x_cos = other_input(add, node(by_sin).outputs[0]);
    const int by_cos = producer_of(x_cos);
    if (by_cos < 0 || !internal(x_cos) || !is_op(by_cos, "Mul")) return;
    const std::string cos = other_input(by_cos, x);
    if (cos.empty() || !is_constant(cos)) return;
    add_group(Group{.kind = Group::Kind::rope, .members = {high, low, neg, cat, by_sin, by_cos, add}, .root = add, .x = x,
                    .weight = cos, .bias = sin, .eps = static_cast<double>(lo->second),
                    .describe = "rotate_half rotary embedding (Slice/Neg/Concat, cos and sin tables) -> rope"});
  }

  void find_patterns() {
    find_ranks();
    group_of_.assign(nodes_.size(), -1);
    auto each = [&](const char* op, void (Importer::*match)(int)) {
      for (int i : order_)
        if (is_op(i, op)) (this->*match)(i);
    };
    each("ReduceMean", &Importer::match_layernorm);
    each("ReduceMean", &Importer::match_rmsnorm);
    each("Erf", &Importer::match_gelu_erf);
    each("Tanh", &Importer::match_gelu_tanh);
    each("Sigmoid", &Importer::match_silu);
    each("Mul", &Importer::match_gated);
    each("MatMul", &Importer::match_linear_bias);
    each("QuantizeLinear", &Importer::match_qdq);
    each("Concat", &Importer::match_rope);
    each("Softmax", &Importer::match_attention);
  }

  // A graph input whose values an attention reads as keys or values after Concat with the new
  // ones: a KV cache (transformers' use_cache=True export, past_key_values.* -> present.*).
  // tec's attention patterns compute a forward over the whole sequence, so such a model is
  // named rather than compiled with a cache it does not have.
  void check_no_kv_cache() {
    std::map<std::string, int32_t> float_inputs;
    for (const auto& in : m_.inputs)
      if (onnx::is_float_type(in.elem_type) && !known_.count(in.name)) float_inputs[in.name] = in.elem_type;
    // `v` through the views exporters put between a cache and the attention (a Concat of one
    // input among them: transformers' first update of an empty cache layer).
    auto through_views = [&](std::string v) {
      static const std::set<std::string> views = {"Reshape", "Unsqueeze", "Squeeze", "Expand", "Transpose", "Identity", "Cast", "Flatten"};
      for (int depth = 0; depth < 16; ++depth) {
        const int p = producer_of(v);
        const bool single_concat = p >= 0 && node(p).op_type == "Concat" && node(p).inputs.size() == 1;
        if (p < 0 || (!views.count(node(p).op_type) && !single_concat) || node(p).inputs.empty()) break;
        v = node(p).inputs[0];
      }
      return v;
    };
    std::set<std::string> named;
    for (const Group& g : groups_) {
      if (g.kind != Group::Kind::attention) continue;
      for (const bool keys : {true, false}) {
        const int cat = producer_of(through_views(keys ? g.key : g.value));
        if (cat < 0 || node(cat).op_type != "Concat") continue;
        for (const std::string& part : node(cat).inputs) {
          const std::string cache = through_views(part);
          if (!float_inputs.count(cache) || !named.insert(cache).second) continue;
          problem(node(cat), "input '" + cache + "' is a KV cache (use_cache=True): an attention reads it as its " +
                                 (keys ? "keys" : "values") + " after this Concat with the new ones. tec compiles a "
                                 "forward over the whole sequence: export with use_cache=False (text generation over a KV cache "
                                 "is not built yet). --no-onnx-patterns compiles this graph as it is, one step at the past length "
                                 "its profile fixes, on the general path");
        }
      }
    }
  }

  // Q/DQ pairs must feed GEMM inputs only, and then every GEMM's, since one recipe holds
  // for the whole plan.
  void check_qdq_placement() {
    std::set<RecipeKind> kinds;
    for (const Group& g : groups_) {
      if (g.kind != Group::Kind::qdq) continue;
      kinds.insert(g.qdq_recipe);
      const std::string out = node(g.root).outputs[0];
      for (int c : consumers_of(out)) {
        const onnx::Node& cn = node(c);
        const bool gemm_a = (cn.op_type == "MatMul" || cn.op_type == "Gemm") && cn.inputs[0] == out;
        if (!gemm_a)
          problem(node(g.root), "Q/DQ output '" + out + "' feeds " + cn.op_type + " '" + cn.name +
                                    "', not a MatMul/Gemm input A: tec quantizes GEMM operands only");
        else
          qdq_gemms_.insert(c);
      }
      if (outputs_.count(out)) problem(node(g.root), "Q/DQ output '" + out + "' is a graph output");
    }
    for (const onnx::Node& n : nodes_) {
      if (constant_node_[static_cast<size_t>(n.index)] || group_of_[static_cast<size_t>(n.index)] >= 0) continue;
      if (n.op_type == "QuantizeLinear" || n.op_type == "DequantizeLinear")
        if (!has_problem(n))
          problem(n, n.op_type + " on a run-time value is supported only as a Q -> DQ pair on a MatMul/Gemm input");
    }
    if (kinds.size() > 1) problem(node(order_.at(0)), "Q/DQ pairs ask for more than one recipe; tec applies one per plan");
    if (kinds.size() == 1) qdq_recipe_ = *kinds.begin();
    if (!qdq_recipe_) return;
    for (const onnx::Node& n : nodes_)
      if ((n.op_type == "MatMul" || n.op_type == "Gemm") && !constant_node_[static_cast<size_t>(n.index)] &&
          !qdq_gemms_.count(n.index))
        problem(n, "this GEMM's input has no Q/DQ pair while others have; tec applies one recipe to every GEMM");
  }

  // ---- profiles --------------------------------------------------------------------------

  std::vector<std::map<std::string, int64_t>> profiles() {
    std::set<std::string> names;
    for (const auto& in : m_.inputs) {
      const ErrorContext ctx{"onnx", in.name, "", m_.file + " graph input '" + in.name + "'"};
      TEC_UNSUPPORTED_CHECK(in.elem_type >= 0, ctx) << "input '" << in.name << "' is not a tensor";
      // (Integer inputs are int32 in the plan: token ids, padding masks, or any index the general path reads.)
      TEC_UNSUPPORTED_CHECK(is_integer_input(in.elem_type) || tec_dtype(in.elem_type).has_value(), ctx)
          << "input '" << in.name << "' is " << onnx::elem_type_name(in.elem_type)
          << "; tec takes FLOAT, FLOAT16, BFLOAT16, INT64 and INT32 inputs (integers as int32)";
      TEC_USER_CHECK(in.has_shape, ctx) << "input '" << in.name << "' has no shape; tec needs every input's rank";
      for (size_t d = 0; d < in.dims.size(); ++d) {
        if (in.dims[d].value >= 1) continue;
        TEC_USER_CHECK(!in.dims[d].param.empty(), ctx)
            << "dim " << d << " of input '" << in.name << "' is dynamic and unnamed; name it (dim_param) or fix it";
        names.insert(in.dims[d].param);
      }
    }
    size_t count = 1;
    for (const auto& [name, sizes] : opt_.dim_overrides) {
      TEC_USER_CHECK(names.count(name), (ErrorContext{"onnx", "", "", "--shape/--profiles " + name}))
          << "the model has no symbolic dim '" << name << "'"
          << (names.empty() ? std::string(" (all its dims are fixed)") : "; its symbolic dims: " + join(names));
      TEC_USER_CHECK(count == 1 || sizes.size() == 1 || sizes.size() == count, (ErrorContext{"onnx", "", "", "--profiles " + name}))
          << "profile lists differ in length";
      count = std::max(count, sizes.size());
      for (int64_t s : sizes)
        TEC_USER_CHECK(s >= 1 && s <= kMaxDim, (ErrorContext{"onnx", "", "", "--shape " + name})) << "size " << s << " is out of range";
    }
    for (const auto& name : names)
      TEC_USER_CHECK(opt_.dim_overrides.count(name), (ErrorContext{"onnx", "", "", m_.file}))
          << "the model's dim '" << name << "' is symbolic; give its size with --shape " << name << "=N (or --profiles "
          << name << "=N1,N2,...)";
    std::vector<std::map<std::string, int64_t>> out;
    for (size_t p = 0; p < count; ++p) {
      std::map<std::string, int64_t> profile;
      for (const auto& [name, sizes] : opt_.dim_overrides) profile[name] = sizes[sizes.size() == 1 ? 0 : p];
      out.push_back(std::move(profile));
    }
    return out;
  }

  static std::string join(const std::set<std::string>& names) {
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
    return s;
  }

  // ---- building one profile's graph ------------------------------------------------------

  struct Env {
    Graph g;
    std::map<std::string, ValueId> runtime;
    ConstMap consts;
    std::set<std::string> names;  // node and value names in use
    std::map<std::string, ValueId> lengths;  // per padding-mask input: its sequence_lengths
    ConstMap mask_values;                     // padding masks' inputs and nodes at a probe of all tokens
  };

  std::string unique(Env& e, const std::string& base) {
    std::string name = base;
    for (int i = 2; !e.names.insert(name).second; ++i) name = base + "_" + std::to_string(i);
    return name;
  }

  ValueId runtime(Env& e, const std::string& v, const onnx::Node& n) {
    auto it = e.runtime.find(v);
    TEC_INTERNAL_CHECK(it != e.runtime.end(), node_ctx(n)) << "value '" << v << "' was not emitted";
    return it->second;
  }

  // A constant as a weight value, in the dtype of the run-time operand it meets.
  ValueId weight_value(Env& e, const std::string& v, DType dtype, const std::string& source) {
    const Tensor& t = *e.consts.at(v);
    const bool integer = dtype == DType::int32 || dtype == DType::uint8;  // (ids, bools: exact in float)
    TEC_UNSUPPORTED_CHECK(t.is_float() || integer, (ErrorContext{"onnx", v, "", source}))
        << "constant '" << v << "' is " << onnx::elem_type_name(t.elem_type) << "; tec's run-time ops take float tensors here";
    std::vector<float> values = t.floats;
    if (!t.is_float())
      for (int64_t i : t.ints) values.push_back(static_cast<float>(i));
    Value w;
    w.name = unique(e, v);
    w.kind = ValueKind::weight;
    w.source = source;
    w.proto = TensorProto::dense(Shape(t.dims), dtype);
    w.weight = WeightSource{.kind = WeightSource::Kind::values, .values = std::make_shared<const std::vector<float>>(std::move(values)),
                            .origin = "ONNX constant '" + v + "'"};
    return e.g.add_value(std::move(w));
  }

  ValueId operand(Env& e, const std::string& v, DType dtype, const onnx::Node& n) {
    if (e.consts.count(v)) return weight_value(e, v, dtype, node_ctx(n).location);
    return runtime(e, v, n);
  }

  // Adds one tec node; its params take `param_values` in order. Returns the output value.
  ValueId emit(Env& e, const onnx::Node& src, const std::string& op, std::vector<ValueId> inputs, Attributes attrs,
               std::vector<std::vector<float>> param_values, const std::string& out_name) {
    const OpDef& def = builtin_ops().get(op);
    Node nd;
    nd.name = unique(e, src.name);
    nd.op = op;
    nd.source = node_ctx(src).location;
    nd.attrs = std::move(attrs);
    const ErrorContext ctx{"onnx", src.name, src.op_type, nd.source};
    check_and_default_attributes(def, nd.attrs, ctx);
    nd.inputs = std::move(inputs);
    const DType dtype = e.g.value(nd.inputs.at(0)).proto.dtype;
    if (def.params) {
      const auto specs = def.params(nd.attrs, dtype);
      TEC_INTERNAL_CHECK(specs.size() == param_values.size(), ctx) << op << " takes " << specs.size() << " params";
      for (size_t i = 0; i < specs.size(); ++i) {
        TEC_INTERNAL_CHECK(static_cast<int64_t>(param_values[i].size()) == specs[i].shape.numel(), ctx)
            << "param " << specs[i].suffix << " has " << param_values[i].size() << " values for " << specs[i].shape.str();
        Value w;
        w.name = unique(e, nd.name + "." + specs[i].suffix);
        w.kind = ValueKind::weight;
        w.source = nd.source;
        w.proto = TensorProto::dense(specs[i].shape, specs[i].dtype);
        w.weight = WeightSource{.kind = WeightSource::Kind::values,
                                .values = std::make_shared<const std::vector<float>>(std::move(param_values[i])),
                                .origin = "ONNX node '" + src.name + "'"};
        nd.inputs.push_back(e.g.add_value(std::move(w)));
      }
    }
    std::vector<TensorProto> protos;
    for (ValueId in : nd.inputs) protos.push_back(e.g.value(in).proto);
    InferResult r = with_context(ctx, [&] { return def.infer(InferContext{e.g, nd, ctx, protos}); });
    Value out;
    out.name = unique(e, out_name);
    out.source = nd.source;
    out.proto = r.outputs.at(0);
    nd.outputs.push_back(e.g.add_value(std::move(out)));
    const ValueId id = nd.outputs[0];
    e.g.add_node(std::move(nd));
    return id;
  }

  // A reshape to `dims`, or the value itself when nothing changes.
  ValueId reshape_to(Env& e, const onnx::Node& src, ValueId v, const std::vector<int64_t>& dims, const std::string& out) {
    if (e.g.value(v).proto.shape.dims == dims) return v;
    Attributes a;
    a.values["shape"] = dims;
    return emit(e, src, "reshape", {v}, a, {}, out);
  }

  static bool is_integer_input(int32_t elem_type) { return elem_type == onnx::kInt64 || elem_type == onnx::kInt32; }

  // ---- padding masks ---------------------------------------------------------------------
  // Attention masks computed at run time from an integer graph input (transformers'
  // attention_mask): the nodes between the two are found here, and evaluated at probe masks
  // when emitting (onnx_mask_probe.h); the attention then reads each sequence's length.

  void find_padding_masks() {
    mask_node_.assign(nodes_.size(), false);
    std::map<std::string, std::pair<std::set<int>, std::string>> masks;  // per mask value: its nodes and input
    std::set<int> all;
    for (const Group& g : groups_) {
      if (g.kind != Group::Kind::attention || g.mask.empty() || is_constant(g.mask) || masks.count(g.mask)) continue;
      std::set<int> found;
      std::string input;
      if (!mask_subgraph(g.mask, found, input, 0) || input.empty()) continue;
      all.insert(found.begin(), found.end());
      masks[g.mask] = {std::move(found), input};
    }
    // Closed (the layers' masks may share nodes): what the nodes make is read by them, or is a
    // mask the attentions add.
    auto is_mask_of_attention = [&](const std::string& v, int c) {
      const int gid = group_of_[static_cast<size_t>(c)];
      return masks.count(v) && gid >= 0 && groups_[static_cast<size_t>(gid)].kind == Group::Kind::attention &&
             groups_[static_cast<size_t>(gid)].mask == v;
    };
    for (int i : all)
      for (const auto& out : node(i).outputs) {
        if (outputs_.count(out)) return;
        for (int c : consumers_of(out))
          if (!all.count(c) && !constant_node_[static_cast<size_t>(c)] && !is_mask_of_attention(out, c)) return;  // (Shape: constant)
      }
    for (auto& [mask, found] : masks) {
      std::vector<int> ordered;
      for (int i : order_)
        if (found.first.count(i)) ordered.push_back(i);
      for (int i : ordered) mask_node_[static_cast<size_t>(i)] = true;
      mask_nodes_[mask] = ordered;
      padding_inputs_[mask] = found.second;
    }
  }

  // Collects the producers of `v` back to constants and one integer graph input.
  bool mask_subgraph(const std::string& v, std::set<int>& found, std::string& input, int depth) const {
    if (is_constant(v)) return true;
    if (depth > 64) return false;
    for (const auto& in : m_.inputs)
      if (in.name == v) {
        if (!is_integer_input(in.elem_type) || (!input.empty() && input != v)) return false;
        input = v;
        return true;
      }
    const int p = producer_of(v);
    if (p < 0 || !node(p).domain.empty() || !onnx::foldable(node(p).op_type) || group_of_[static_cast<size_t>(p)] >= 0) return false;
    if (!found.insert(p).second) return true;
    for (const auto& in : node(p).inputs)
      if (!in.empty() && !mask_subgraph(in, found, input, depth + 1)) return false;
    return true;
  }

  bool read_by_padding_masks(const std::string& input) const {
    const auto readers = consumers_.find(input);
    if (readers == consumers_.end() || readers->second.empty() || outputs_.count(input)) return false;
    return std::all_of(readers->second.begin(), readers->second.end(), [&](int r) { return mask_node_[static_cast<size_t>(r)]; });
  }

  std::string mask_input_of(int i) const {
    for (const auto& [mask, nodes] : mask_nodes_)
      if (std::find(nodes.begin(), nodes.end(), i) != nodes.end()) return padding_inputs_.at(mask);
    return "";
  }

  onnx::PaddingMask probe_padding(Env& e, const std::string& mask, int64_t seq_q, const ErrorContext& ctx) {
    const std::string& input = padding_inputs_.at(mask);
    std::vector<const onnx::Node*> nodes;
    for (int i : mask_nodes_.at(mask)) nodes.push_back(&node(i));
    const onnx::ShapeOf shape_of = [&e](const std::string& v) -> std::optional<Shape> {
      const auto it = e.runtime.find(v);
      return it == e.runtime.end() ? std::nullopt : std::optional<Shape>(e.g.value(it->second).proto.shape);
    };
    const auto found = onnx::probe_padding_mask(nodes, e.consts, shape_of, input, e.g.value(e.runtime.at(input)).proto.shape.dims, mask, seq_q);
    TEC_UNSUPPORTED_CHECK(found.has_value(), ctx)
        << "the attention's mask '" << mask << "' is computed at run time from input '" << input
        << "' and is no padding mask tec knows: evaluated at right-padded probe masks, it is not 0 for the keys each query sees "
           "(before its sequence's length, and, if causal, at or before the query) and at most -1e4 for the others";
    return *found;
  }

  ValueId sequence_lengths_of(Env& e, const std::string& input, const onnx::Node& at) {
    if (const auto it = e.lengths.find(input); it != e.lengths.end()) return it->second;
    const ValueId lengths = emit(e, at, "sequence_lengths", {e.runtime.at(input)}, {}, {}, input + ".lengths");
    e.g.nodes.back().name = unique(e, input + ".sequence_lengths");  // (named for its input, not for the first attention reading it)
    e.lengths[input] = lengths;
    return lengths;
  }

  // Whether every reader of `v` takes it as an embedding lookup's indices, through views
  // (Reshape, Squeeze, Unsqueeze, Flatten, Identity: the exporters flatten token ids first).
  bool read_as_token_ids(const std::string& v, int depth) const {
    static const std::set<std::string> views = {"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"};
    const auto readers = consumers_.find(v);
    if (readers == consumers_.end() || readers->second.empty() || depth > 8 || outputs_.count(v)) return false;
    for (int r : readers->second) {
      const onnx::Node& n = node(r);
      const bool lookup = is_embedding_lookup(n) && n.inputs[1] == v && n.inputs[0] != v;
      const bool view = n.domain.empty() && views.count(n.op_type) && n.inputs[0] == v && read_as_token_ids(n.outputs[0], depth + 1);
      if (!lookup && !view) return false;
    }
    return true;
  }

  // Gather of a constant table at run-time indices along axis 0: an embedding lookup.
  bool is_embedding_lookup(const onnx::Node& n) const {
    if (n.op_type != "Gather" || !n.domain.empty() || n.inputs.size() != 2) return false;
    const int64_t axis = attr_int(n, "axis", 0);
    return (axis == 0 || axis == -2) && is_constant(n.inputs[0]) && !is_constant(n.inputs[1]);
  }

  void emit_embedding(Env& e, const onnx::Node& n) {
    const ErrorContext ctx = node_ctx(n);
    TEC_UNSUPPORTED_CHECK(is_embedding_lookup(n), ctx) << "Gather on run-time data is not supported (tec takes a constant table's rows)";
    const Tensor& table = *e.consts.at(n.inputs[0]);
    TEC_UNSUPPORTED_CHECK(table.dims.size() == 2 && table.is_float(), ctx)
        << "an embedding lookup reads a 2-D float table; '" << n.inputs[0] << "' is " << onnx::elem_type_name(table.elem_type)
        << " of rank " << table.dims.size();
    const ValueId ids = runtime(e, n.inputs[1], n);
    TEC_UNSUPPORTED_CHECK(e.g.value(ids).proto.dtype == DType::int32, ctx)
        << "the indices '" << n.inputs[1] << "' are computed at run time from floats; tec takes token ids from an INT64 or INT32 "
        << "graph input";
    Attributes a;
    a.values["num_embeddings"] = table.dims[0];
    a.values["embedding_dim"] = table.dims[1];
    a.values["dtype"] = std::string(to_string(tec_dtype(table.elem_type).value_or(DType::fp32)));
    e.runtime[n.outputs[0]] = emit(e, n, "embedding", {ids}, a, {table.floats}, n.outputs[0]);
  }

  static std::vector<float> transposed(const Tensor& w) {  // [K, N] -> [N, K]
    const int64_t k = w.dims[0], n = w.dims[1];
    std::vector<float> out(static_cast<size_t>(k * n));
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < n; ++j) out[static_cast<size_t>(j * k + i)] = w.floats[static_cast<size_t>(i * n + j)];
    return out;
  }

  // A projection's weight as a linear's [N, K] (alpha folded in), and its bias [N] (beta folded
  // in; zeros without one).
  std::vector<float> projection_weight(const Env& e, const Projection& p) const {
    const Tensor& b = *e.consts.at(p.weight);
    std::vector<float> w = p.trans_b ? b.floats : transposed(b);
    if (p.alpha != 1.0)
      for (float& v : w) v *= static_cast<float>(p.alpha);
    return w;
  }
  std::vector<float> projection_bias(const Env& e, const Projection& p) const {
    const int64_t n = projection_shape(p).first;
    std::vector<float> out(static_cast<size_t>(n), 0.0f);
    if (p.bias.empty()) return out;
    const Tensor& c = *e.consts.at(p.bias);
    for (int64_t j = 0; j < n; ++j)
      out[static_cast<size_t>(j)] = static_cast<float>(p.beta) * c.floats[c.numel() == 1 ? 0 : static_cast<size_t>(j)];
    return out;
  }

  using StaticScales = WeightSource::StaticScales;

  // fp8-static: the scales of a weight the model stores as FP8 codes (a folded
  // DequantizeLinear of FLOAT8E4M3FN), in the layout of tec's [N, K] weight (the ONNX B
  // transposed unless `nk`, Gemm's transB), alpha folded in. nullopt for any other weight.
  std::optional<StaticScales> static_scales_of(const std::string& weight, bool nk, double alpha) const {
    const int p = producer_of(weight);
    if (!static_ || p < 0 || node(p).op_type != "DequantizeLinear" || !constant_node_[static_cast<size_t>(p)]) return std::nullopt;
    const onnx::Node& dq = node(p);
    const auto codes = known_.find(dq.inputs[0]);
    if (codes == known_.end() || codes->second->elem_type != onnx::kFloat8E4M3FN || !known_.count(dq.inputs[1])) return std::nullopt;
    const ErrorContext ctx = node_ctx(dq);
    const Tensor& w = *codes->second;
    const Tensor& scale = *known_.at(dq.inputs[1]);
    const std::string what = "DequantizeLinear '" + dq.name + "' of weight '" + weight + "': ";
    TEC_USER_CHECK(w.dims.size() == 2, ctx) << what << "a GEMM weight must be 2-D, got " << Shape(w.dims).str();
    TEC_USER_CHECK(scale.is_float(), ctx) << what << "its scale is " << onnx::elem_type_name(scale.elem_type) << ", not a float tensor";
    const std::string bad = bad_scale(scale);
    TEC_USER_CHECK(bad.empty(), ctx) << what << bad;
    const int64_t n = nk ? w.dims[0] : w.dims[1], k = nk ? w.dims[1] : w.dims[0];
    const int64_t n_axis = nk ? 0 : 1, k_axis = 1 - n_axis;
    const int64_t axis = with_context(ctx, [&] { return axis_of(attr_int(dq, "axis", 1), 2, "axis"); });
    const int64_t block = attr_int(dq, "block_size", 0);
    auto scaled = [&](double v) { return static_cast<float>(v * alpha); };
    StaticScales out;
    auto values = std::make_shared<std::vector<float>>();
    if (block == 0 && scale.numel() == 1) {
      values->push_back(scaled(scale.floats[0]));
    } else if (block == 0) {
      TEC_UNSUPPORTED_CHECK(axis == n_axis && scale.numel() == n, ctx)
          << what << "per-axis scales along K (axis " << k_axis << ") are not a TE granularity; tec takes one scale per tensor, "
          << "per output channel (axis " << n_axis << ") or block_size along K";
      for (float v : scale.floats) values->push_back(scaled(v));
      out.block_rows = 1;
    } else {
      TEC_UNSUPPORTED_CHECK(axis == k_axis, ctx)
          << what << "block_size runs along axis " << axis << ", the weight's N; tec takes blocks along K (axis " << k_axis << ")";
      TEC_USER_CHECK(block >= 1 && k % block == 0, ctx) << what << "block_size " << block << " does not divide K=" << k;
      const int64_t blocks = k / block;
      TEC_USER_CHECK(scale.numel() == n * blocks, ctx) << what << "block scales hold " << scale.numel() << " values, the weight needs " << n * blocks;
      for (int64_t r = 0; r < n; ++r)
        for (int64_t b = 0; b < blocks; ++b)
          values->push_back(scaled(scale.floats[static_cast<size_t>(nk ? r * blocks + b : b * n + r)]));
      out.block_rows = 1;
      out.block_cols = static_cast<int>(block);
    }
    out.scale_inv = std::move(values);
    return out;
  }

  // The static scales of [W_a; W_b] (rows n_a then n_b): one per tensor if both are that one,
  // else both expanded to per row, or to blocks when either has blocks.
  static std::optional<StaticScales> concatenated(const std::optional<StaticScales>& a, int64_t n_a, const std::optional<StaticScales>& b,
                                                  int64_t n_b, int64_t k, const ErrorContext& ctx) {
    if (!a || !b) return std::nullopt;
    if (a->block_rows == 0 && b->block_rows == 0 && *a->scale_inv == *b->scale_inv) return a;
    const int cols = std::max(a->block_cols, b->block_cols);
    TEC_UNSUPPORTED_CHECK(a->block_cols == 0 || b->block_cols == 0 || a->block_cols == b->block_cols, ctx)
        << "the gate and up weights have block sizes " << a->block_cols << " and " << b->block_cols << "; tec concatenates them into one linear";
    const int64_t blocks = cols ? k / cols : 1;
    auto expand = [&](const StaticScales& s, int64_t rows, std::vector<float>& out) {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < blocks; ++c)
          out.push_back((*s.scale_inv)[static_cast<size_t>(s.block_rows == 0 ? 0 : s.block_cols == 0 ? r : r * blocks + c)]);
    };
    auto values = std::make_shared<std::vector<float>>();
    expand(*a, n_a, *values);
    expand(*b, n_b, *values);
    return StaticScales{std::move(values), 1, cols};
  }

  // A linear reading run-time `x` (the ONNX value `x_name`): under fp8-static with its input's
  // static scale (from its Q/DQ pair) and its weight's (from its DequantizeLinear).
  ValueId emit_linear(Env& e, const onnx::Node& src, const std::string& x_name, ValueId x, std::vector<float> weight_nk, int64_t n,
                      int64_t k, const std::vector<float>* bias, const std::string& out, std::optional<StaticScales> scales = {}) {
    Attributes a;
    a.values["in_features"] = k;
    a.values["out_features"] = n;
    a.values["bias"] = bias != nullptr;
    if (const auto it = qdq_scale_.find(x_name); static_ && it != qdq_scale_.end()) a.values["input_scale"] = static_cast<double>(it->second);
    std::vector<std::vector<float>> params{std::move(weight_nk)};
    if (bias) params.push_back(*bias);
    const Shape xs = e.g.value(x).proto.shape;
    TEC_USER_CHECK(xs.rank() >= 1 && xs.cols() == k, node_ctx(src))
        << "input has shape " << xs.str() << ", the weight expects " << k << " features";
    const ValueId y = emit(e, src, "linear", {x}, a, std::move(params), out);
    if (scales) e.g.value(e.g.nodes.back().inputs.at(1)).weight->static_scales = std::move(scales);
    return y;
  }

  static Attributes fn_attr(const std::string& fn) {
    Attributes a;
    a.values["fn"] = fn;
    return a;
  }

  void emit_group(Env& e, const Group& grp) {
    const onnx::Node& root = node(grp.root);
    const std::string out = root.outputs[0];
    const ValueId x = runtime(e, grp.x, root);
    auto values = [&](const std::string& name, int64_t count, float fill) {
      if (name.empty()) return std::vector<float>(static_cast<size_t>(count), fill);
      const Tensor& t = *e.consts.at(name);
      TEC_UNSUPPORTED_CHECK(t.numel() == count, node_ctx(root))
          << "constant '" << name << "' has " << t.numel() << " values, expected " << count;
      return t.floats;
    };
    switch (grp.kind) {
      case Group::Kind::linear_bias: {
        const Tensor& w = *e.consts.at(grp.weight);
        std::vector<float> b = values(grp.bias, w.dims[1], 0);
        e.runtime[out] = emit_linear(e, root, grp.x, x, transposed(w), w.dims[1], w.dims[0], &b, out,
                                     static_scales_of(grp.weight, false, 1.0));
        break;
      }
      case Group::Kind::gelu: {
        Attributes a;
        a.values["approximate"] = grp.approximate;
        e.runtime[out] = emit(e, root, "gelu", {x}, a, {}, out);
        break;
      }
      case Group::Kind::silu: e.runtime[out] = emit(e, root, "silu", {x}, {}, {}, out); break;
      case Group::Kind::gated: {
        const auto [n, k] = projection_shape(grp.gate);
        std::vector<float> w = projection_weight(e, grp.gate), b = projection_bias(e, grp.gate);
        const std::vector<float> w_up = projection_weight(e, grp.up), b_up = projection_bias(e, grp.up);
        w.insert(w.end(), w_up.begin(), w_up.end());
        b.insert(b.end(), b_up.begin(), b_up.end());
        const bool biased = !grp.gate.bias.empty() || !grp.up.bias.empty();
        const auto scales = concatenated(static_scales_of(grp.gate.weight, grp.gate.trans_b, grp.gate.alpha), n,
                                         static_scales_of(grp.up.weight, grp.up.trans_b, grp.up.alpha), n, k, node_ctx(root));
        const ValueId h = emit_linear(e, root, grp.x, x, std::move(w), 2 * n, k, biased ? &b : nullptr, out + ".gate_up", scales);
        e.runtime[out] = emit(e, root, grp.act, {h}, {}, {}, out);
        break;
      }
      case Group::Kind::layernorm:
      case Group::Kind::rmsnorm: {
        const int64_t hidden = e.g.value(x).proto.shape.cols();
        Attributes a;
        a.values["hidden"] = hidden;
        a.values["eps"] = grp.eps;
        std::vector<std::vector<float>> params{values(grp.weight, hidden, 1.0f)};
        if (grp.kind == Group::Kind::layernorm) params.push_back(values(grp.bias, hidden, 0.0f));
        e.runtime[out] = emit(e, root, grp.kind == Group::Kind::layernorm ? "layernorm" : "rmsnorm", {x}, a, params, out);
        break;
      }
      case Group::Kind::qdq: e.runtime[out] = x; break;
      case Group::Kind::attention: e.runtime[out] = emit_spelled_attention(e, grp, x, out); break;
      case Group::Kind::rope: e.runtime[out] = emit_spelled_rope(e, grp, x, out); break;
    }
  }

  // Whether a constant mask is the causal one: [.., S, S] (leading dims 1), 0 on and below the
  // diagonal, at most -1e4 above it (-inf, or the dtype's lowest: exp underflows to exactly 0
  // there for any score below 9000, as a masked key's weight is).
  static bool is_causal_mask(const Tensor& m, int64_t seq, int64_t seq_kv) {
    if (m.dims.size() < 2 || seq != seq_kv || m.dims[m.dims.size() - 1] != seq || m.dims[m.dims.size() - 2] != seq) return false;
    // Leading dims (batch, heads) may repeat the [S, S] mask, as a mask expanded to the batch
    // does: every copy must be the causal one.
    const int64_t copies = m.numel() / (seq * seq);
    for (int64_t c = 0; c < copies; ++c)
      for (int64_t i = 0; i < seq; ++i)
        for (int64_t j = 0; j < seq; ++j) {
          const double v = m.at(static_cast<size_t>((c * seq + i) * seq + j));
          if (j <= i ? v != 0.0 : !(v <= -1e4)) return false;
        }
    return true;
  }

  // Whether some row of a constant additive mask masks every key (all at most -1e4).
  static bool masks_a_whole_row(const Tensor& m) {
    if (m.dims.empty() || !m.is_float()) return true;
    const int64_t keys = m.dims.back(), rows = keys > 0 ? m.numel() / keys : 0;
    for (int64_t r = 0; r < rows; ++r) {
      bool all = true;
      for (int64_t j = 0; j < keys && all; ++j) all = m.at(static_cast<size_t>(r * keys + j)) <= -1e4;
      if (all) return true;
    }
    return false;
  }

  // Whether reshaping [d0, d1, d2] by the ONNX shape `dims` (0 copies a dim, -1 is inferred)
  // gives `want`.
  static bool reshapes_to(const Shape& from, const std::vector<int64_t>& dims, const std::vector<int64_t>& want) {
    if (dims.size() != want.size()) return false;
    for (size_t i = 0; i < dims.size(); ++i) {
      const int64_t d = dims[i] == 0 && i < from.rank() ? from[i] : dims[i];
      if (d != -1 && d != want[i]) return false;
    }
    return true;
  }

  // The rope of x [B, H, S, D] (or [B, S, D], one head) whose cos and sin tables the model
  // holds: theta is found from the tables (cos of position 1, pair 1), and every entry must
  // then be rope's (positions 0..S-1, pair i of the half style at channels i and i + D/2,
  // within 2^-7 of the value: a bf16 model's tables are rounded).
  ValueId emit_spelled_rope(Env& e, const Group& grp, ValueId x, const std::string& out) {
    const onnx::Node& root = node(grp.root);
    const ErrorContext ctx = node_ctx(root);
    const Shape xs = e.g.value(x).proto.shape;
    TEC_UNSUPPORTED_CHECK(xs.rank() == 3 || xs.rank() == 4, ctx) << "the rotary embedding's input is " << xs.str()
                                                                 << "; tec takes [batch, heads, seq, head_dim] or [batch, seq, head_dim]";
    const int64_t d = xs[xs.rank() - 1], seq = xs[xs.rank() - 2], half = static_cast<int64_t>(grp.eps);
    TEC_UNSUPPORTED_CHECK(half * 2 == d && d >= 4, ctx) << "rotate_half splits the head at " << half << " of " << d
                                                        << "; tec's rope rotates the whole head (rotary_dim = head_dim)";
    const Tensor &cos = *e.consts.at(grp.weight), &sin = *e.consts.at(grp.bias);
    auto table_fits = [&](const Tensor& t) {
      if (t.numel() != seq * d || t.dims.size() < 2 || t.dims.back() != d || t.dims[t.dims.size() - 2] != seq) return false;
      return true;
    };
    TEC_UNSUPPORTED_CHECK(table_fits(cos) && table_fits(sin) && cos.is_float() && sin.is_float(), ctx)
        << "the rotary embedding's cos and sin tables must be [seq, head_dim] = [" << seq << ", " << d
        << "] (leading dims 1), one row per position";
    // The lowest frequency, pair half - 1's theta^(-2 (half - 1) / D), from the angle of the
    // last position p whose angle stays below 3 radians: theta is that frequency to the power
    // -D / (2 (half - 1)), about -1, so a table's error (~2^-9 of an entry in bf16) stays ~2^-9
    // of theta. (Pair 1's angle would magnify it D / 2 times: 30% at D = 128 from a bf16 table.)
    const int64_t slow = half - 1;
    const auto angle_at = [&](int64_t p) {
      return std::atan2(sin.at(static_cast<size_t>(p * d + slow)), cos.at(static_cast<size_t>(p * d + slow)));
    };
    double frequency = seq > 1 ? angle_at(1) : 0.0;
    TEC_UNSUPPORTED_CHECK(seq > 1 && frequency > 0.0 && frequency < 1.0, ctx)
        << "the rotary embedding's tables give no frequency to find theta from (need two positions or more)";
    if (const int64_t p = std::min<int64_t>(seq - 1, static_cast<int64_t>(3.0 / frequency)); p > 1) {
      const double angle = angle_at(p);
      if (angle > 0.0) frequency = angle / static_cast<double>(p);
    }
    const double estimate = std::pow(frequency, -static_cast<double>(d) / (2.0 * static_cast<double>(slow)));
    // Tables of float precision give theta to about 1e-6 of itself, a bf16 model's to a few
    // percent: the model's theta is the first of the estimate rounded to 6, 3, 2 or 1
    // significant digits (10000, 500000), or the estimate itself, whose tables agree with every
    // entry; for 16-bit tables the roundest first (their entries fit thetas a percent apart).
    auto fits = [&](double theta, int64_t* bad_p, int64_t* bad_i) {
      for (int64_t p = 0; p < seq; ++p)
        for (int64_t i = 0; i < d; ++i) {
          const double angle = static_cast<double>(p) * std::pow(theta, -2.0 * static_cast<double>(i % half) / static_cast<double>(d));
          const size_t at = static_cast<size_t>(p * d + i);
          const double tolerance = 1.0 / 128.0;  // a bf16 table's rounding
          if (std::fabs(cos.at(at) - std::cos(angle)) > tolerance || std::fabs(sin.at(at) - std::sin(angle)) > tolerance) {
            *bad_p = p;
            *bad_i = i;
            return false;
          }
        }
      return true;
    };
    auto rounded = [](double v, int digits) {
      const double scale = std::pow(10.0, std::floor(std::log10(v)) - digits + 1);
      return std::round(v / scale) * scale;
    };
    double theta = 0.0;
    int64_t bad_p = 0, bad_i = 0;
    const bool coarse = cos.elem_type != onnx::kFloat || sin.elem_type != onnx::kFloat;
    const std::vector<double> candidates =
        coarse ? std::vector<double>{rounded(estimate, 1), rounded(estimate, 2), rounded(estimate, 3), rounded(estimate, 6), estimate}
               : std::vector<double>{rounded(estimate, 6), rounded(estimate, 3), rounded(estimate, 2), rounded(estimate, 1), estimate};
    for (double candidate : candidates)
      if (std::fabs(candidate - estimate) <= 0.05 * estimate && fits(candidate, &bad_p, &bad_i)) {
        theta = candidate;
        break;
      }
    TEC_UNSUPPORTED_CHECK(theta > 0.0, ctx) << "the rotary embedding's tables are not rope's for theta " << estimate << " (nor a round "
                                            << "number near it) at position " << bad_p << ", channel " << bad_i
                                            << " (positions must be 0..S-1, both halves of a head alike)";
    Attributes a;
    a.values["head_dim"] = d;
    a.values["theta"] = theta;
    a.values["style"] = std::string("half");
    if (xs.rank() == 3) {
      a.values["heads"] = int64_t{1};
      return emit(e, root, "rope", {x}, a, {}, out);
    }
    // [B, H, S, D] -> tec's [B, S, H x D] and back.
    a.values["heads"] = xs[1];
    Attributes perm;
    perm.values["perm"] = std::vector<int64_t>{0, 2, 1, 3};
    std::optional<ValueId> flat = flat_before_heads(e, x);
    if (!flat) flat = reshape_to(e, root, emit(e, root, "transpose", {x}, perm, {}, out + ".bshd"), {xs[0], seq, checked_mul(xs[1], d)},
                                 out + ".flat");
    const ValueId turned = emit(e, root, "rope", {*flat}, a, {}, out + ".rope");
    const ValueId split = reshape_to(e, root, turned, {xs[0], seq, xs[1], d}, out + ".heads");
    return emit(e, root, "transpose", {split}, perm, {}, out);
  }

  ValueId emit_spelled_attention(Env& e, const Group& grp, ValueId q, const std::string& out) {
    const onnx::Node& root = node(grp.root);
    const ErrorContext ctx = node_ctx(root);
    const ValueId k = runtime(e, grp.key, root), v = runtime(e, grp.value, root);
    // repeat_kv's Expand must have repeated exactly these keys and values.
    for (const auto& [t, d] : {std::pair{k, &grp.key_repeat}, std::pair{v, &grp.value_repeat}}) {
      if (d->empty()) continue;
      const Shape& s = e.g.value(t).proto.shape;
      TEC_UNSUPPORTED_CHECK(s.rank() == 4 && s[0] == (*d)[0] && s[1] == (*d)[1] && s[2] == (*d)[3] && s[3] == (*d)[4], ctx)
          << "repeat_kv's Expand to [" << (*d)[0] << ", " << (*d)[1] << ", " << (*d)[2] << ", " << (*d)[3] << ", " << (*d)[4]
          << "] reads '" << e.g.value(t).name << "' " << s.str() << ", not [batch, kv_heads, seq, head_dim]";
    }
    if (grp.heads > 0) {
      // The Reshapes this replaces must have split [B, S, H x D] into [B, S, H, D].
      const ValueId flats[3] = {q, k, v};
      const int64_t heads[3] = {grp.heads, grp.kv_heads, grp.kv_heads};
      for (int i = 0; i < 3; ++i) {
        const Shape& f = e.g.value(flats[i]).proto.shape;
        const std::vector<int64_t> dims = as_ints(*e.consts.at(grp.split_shapes[static_cast<size_t>(i)]));
        TEC_UNSUPPORTED_CHECK(f.rank() == 3 && f[2] % heads[i] == 0 && reshapes_to(f, dims, {f[0], f[1], heads[i], f[2] / heads[i]}), ctx)
            << "attention's heads are split from '" << e.g.value(flats[i]).name << "' " << f.str() << " by a Reshape that is not "
            << "[batch, seq, heads, head_dim]";
      }
    }
    double scale = 1.0;
    for (const auto& [name, divide] : grp.scales) {
      const Tensor& c = *e.consts.at(name);
      TEC_UNSUPPORTED_CHECK(c.numel() == 1 && c.is_float(), ctx)
          << "the attention's scores are scaled by constant '" << name << "', which is not one float";
      scale = divide ? scale / c.at(0) : scale * c.at(0);
    }
    const Shape qs = e.g.value(q).proto.shape, ks = e.g.value(k).proto.shape;  // copies: operand() below may add a value
    TEC_UNSUPPORTED_CHECK(qs.rank() == 3 || qs.rank() == 4, ctx)
        << "attention's q is " << qs.str() << "; tec takes [batch, heads, seq, head_dim] or [batch x heads, seq, head_dim]";
    Attributes a;
    a.values["scale"] = scale;
    a.values["causal"] = false;
    std::optional<ValueId> mask;
    if (!grp.mask.empty()) {
      const int64_t seq = qs[qs.rank() - 2], seq_kv = ks[ks.rank() - 2];
      const bool padding = padding_inputs_.count(grp.mask) != 0;
      if (padding) {
        a.values["causal"] = probe_padding(e, grp.mask, seq, ctx).causal;
        a.values["mask"] = std::string("padding");
        mask = sequence_lengths_of(e, padding_inputs_.at(grp.mask), root);
      } else if (e.consts.count(grp.mask) && e.consts.at(grp.mask)->is_float() && is_causal_mask(*e.consts.at(grp.mask), seq, seq_kv)) {
        a.values["causal"] = true;
      } else {
        mask = operand(e, grp.mask, e.g.value(q).proto.dtype, root);
      }
      // tec's attention gives NaN, not the guard's zeros, for a row whose every key is masked
      // by an additive mask (a padding mask's empty sequence gives zeros, as the guard does).
      TEC_UNSUPPORTED_CHECK(!grp.nan_guard || padding || a.get_bool("causal", false) ||
                                (e.consts.count(grp.mask) && !masks_a_whole_row(*e.consts.at(grp.mask))),
                            ctx)
          << "the softmax's output passes a NaN guard, Where(IsNaN(p), 0, p), and the mask '" << grp.mask
          << "' is computed at run time and is no padding mask of an integer input: tec cannot tell whether a query row has "
             "every key masked, where the guard gives zeros";
    }
    if (grp.heads > 0) {
      a.values["heads"] = grp.heads;
      a.values["kv_heads"] = grp.kv_heads;
    }
    if (grp.merge_shape.empty()) {
      if (grp.heads == 0) return emit_attention_of(e, root, q, k, v, mask, a, out);
      // Flat in, 4-D [B, H, S, Dv] out: the attention's [B, S, H x Dv], split into heads.
      const ValueId y = emit_attention_of(e, root, q, k, v, mask, a, out + ".flat");
      const Shape ys = e.g.value(y).proto.shape;
      const ValueId split = reshape_to(e, root, y, {ys[0], ys[1], grp.heads, ys[2] / grp.heads}, out + ".heads");
      Attributes perm;
      perm.values["perm"] = std::vector<int64_t>{0, 2, 1, 3};
      return emit(e, root, "transpose", {split}, perm, {}, out);
    }
    // The heads merged back: tec's attention makes [B, S, H x Dv], what Transpose + Reshape make
    // of [B, H, S, Dv], so its output is the Reshape's; or, merged to rows as a Gemm reads them
    // (GPT-2's c_proj), [B x S, H x Dv], a reshape of it.
    const std::vector<int64_t> merged = as_ints(*e.consts.at(grp.merge_shape));
    if (merged.size() == 2) {
      const ValueId y = emit_attention_of(e, root, q, k, v, mask, a, out + ".merged", true);
      const Shape ys = e.g.value(y).proto.shape;
      const std::vector<int64_t> rows = {checked_mul(ys[0], ys[1]), ys[2]};
      TEC_UNSUPPORTED_CHECK(reshapes_to(ys, merged, rows) || (merged[0] == -1 && merged[1] == ys[2]), ctx)
          << "attention's heads are merged by a Reshape to a shape other than [batch x seq, heads x head_dim] of " << ys.str();
      return reshape_to(e, root, y, rows, out);
    }
    const ValueId y = emit_attention_of(e, root, q, k, v, mask, a, out, true);
    const Shape& ys = e.g.value(y).proto.shape;
    TEC_UNSUPPORTED_CHECK(reshapes_to(ys, merged, ys.dims), ctx)
        << "attention's heads are merged by a Reshape to a shape other than [batch, seq, heads x head_dim] " << ys.str();
    return y;
  }

  // Norm over the dims from `axis` on: reshaped to one last dim when there are several.
  void emit_norm(Env& e, const onnx::Node& n, bool layernorm) {
    TEC_UNSUPPORTED_CHECK(attr_int(n, "stash_type", 1) == 1, node_ctx(n)) << "stash_type must be 1 (float)";
    const ValueId x = runtime(e, n.inputs[0], n);
    const Shape xs = e.g.value(x).proto.shape;
    TEC_USER_CHECK(xs.rank() >= 1, node_ctx(n)) << "input is a scalar";
    const int64_t axis = with_context(node_ctx(n), [&] { return axis_of(attr_int(n, "axis", -1), xs.rank(), "axis"); });
    int64_t hidden = 1;
    for (size_t d = static_cast<size_t>(axis); d < xs.rank(); ++d) hidden *= xs.dims[d];
    std::vector<int64_t> rows_dims(xs.dims.begin(), xs.dims.begin() + axis);
    rows_dims.push_back(hidden);
    auto param = [&](size_t slot, float fill) {
      if (slot >= n.inputs.size() || n.inputs[slot].empty()) return std::vector<float>(static_cast<size_t>(hidden), fill);
      const Tensor& t = *e.consts.at(n.inputs[slot]);
      TEC_UNSUPPORTED_CHECK(t.is_float(), node_ctx(n)) << "input " << slot << " is not a float tensor";
      if (t.numel() == hidden) return t.floats;
      TEC_UNSUPPORTED_CHECK(t.numel() == 1, node_ctx(n))
          << "input " << slot << " has shape " << Shape(t.dims).str() << "; tec takes the normalized shape or a scalar";
      return std::vector<float>(static_cast<size_t>(hidden), t.floats[0]);
    };
    const std::string out = n.outputs[0];
    const ValueId flat = reshape_to(e, n, x, rows_dims, out + ".rows");
    Attributes a;
    a.values["hidden"] = hidden;
    a.values["eps"] = static_cast<double>(attr_float(n, "epsilon", 1e-5f));
    std::vector<std::vector<float>> params{param(1, 1.0f)};
    if (layernorm) params.push_back(param(2, 0.0f));
    const ValueId y = emit(e, n, layernorm ? "layernorm" : "rmsnorm", {flat}, a, params, flat == x ? out : out + ".norm");
    e.runtime[out] = reshape_to(e, n, y, xs.dims, out);
    if (layernorm) emit_norm_statistics(e, n, flat, xs, axis);
  }

  // LayerNormalization's optional Mean and InvStdDev outputs, when something reads them:
  // computed beside the fused norm with the general ops (CPU reference).
  void emit_norm_statistics(Env& e, const onnx::Node& n, ValueId rows, const Shape& xs, int64_t axis) {
    auto wanted = [&](size_t o) {
      return o < n.outputs.size() && !n.outputs[o].empty() && (!consumers_of(n.outputs[o]).empty() || outputs_.count(n.outputs[o]));
    };
    if (!wanted(1) && !wanted(2)) return;
    std::vector<int64_t> stat_dims = xs.dims;
    for (size_t d = static_cast<size_t>(axis); d < stat_dims.size(); ++d) stat_dims[d] = 1;
    Attributes mean_attrs;
    mean_attrs.values["axes"] = std::vector<int64_t>{-1};
    mean_attrs.values["keepdims"] = true;
    mean_attrs.values["fn"] = std::string("mean");
    const std::string base = n.outputs[0];
    const ValueId mean = emit(e, n, "reduce", {rows}, mean_attrs, {}, base + ".mean");
    if (wanted(1)) e.runtime[n.outputs[1]] = reshape_to(e, n, mean, stat_dims, n.outputs[1]);
    if (!wanted(2)) return;
    const ValueId d = emit(e, n, "binary", {rows, mean}, fn_attr("sub"), {}, base + ".centered");
    const ValueId sq = emit(e, n, "binary", {d, d}, fn_attr("mul"), {}, base + ".squared");
    const ValueId var = emit(e, n, "reduce", {sq}, mean_attrs, {}, base + ".variance");
    const std::string eps_name = base + ".epsilon";
    e.consts[eps_name] = std::make_shared<const Tensor>(Tensor{onnx::kFloat, {1}, {attr_float(n, "epsilon", 1e-5f)}, {}});
    const ValueId eps = weight_value(e, eps_name, e.g.value(var).proto.dtype, node_ctx(n).location);
    const ValueId sum = emit(e, n, "binary", {var, eps}, fn_attr("add"), {}, base + ".variance_eps");
    const ValueId root = emit(e, n, "unary", {sum}, fn_attr("sqrt"), {}, base + ".stddev");
    const ValueId inv = emit(e, n, "unary", {root}, fn_attr("reciprocal"), {}, base + ".inv_stddev");
    e.runtime[n.outputs[2]] = reshape_to(e, n, inv, stat_dims, n.outputs[2]);
  }

  void emit_gemm(Env& e, const onnx::Node& n) {
    const bool trans_a = attr_int(n, "transA", 0) != 0, trans_b = attr_int(n, "transB", 0) != 0;
    const float alpha = attr_float(n, "alpha", 1.0f), beta = attr_float(n, "beta", 1.0f);
    const std::string out = n.outputs[0];
    const bool b_const = e.consts.count(n.inputs[1]) != 0;
    const bool c_given = n.inputs.size() > 2 && !n.inputs[2].empty();
    ValueId a = operand(e, n.inputs[0], DType::fp32, n);
    const DType dtype = e.g.value(a).proto.dtype;
    if (trans_a) {
      Attributes t;
      t.values["perm"] = std::vector<int64_t>{1, 0};
      a = emit(e, n, "transpose", {a}, t, {}, out + ".a_t");
    }
    if (b_const) {
      const Tensor& b = *e.consts.at(n.inputs[1]);
      TEC_USER_CHECK(b.dims.size() == 2 && b.is_float(), node_ctx(n)) << "B must be a 2-D float matrix";
      // Linear weight [N, K]: B^T, or B itself when transB.
      std::vector<float> w = trans_b ? b.floats : transposed(b);
      const int64_t n_out = trans_b ? b.dims[0] : b.dims[1], k = trans_b ? b.dims[1] : b.dims[0];
      for (float& v : w) v *= alpha;
      std::optional<std::vector<float>> bias;
      bool c_done = !c_given || beta == 0.0f;
      if (c_given && !c_done && e.consts.count(n.inputs[2])) {
        const Tensor& c = *e.consts.at(n.inputs[2]);
        if (c.numel() == 1 || (c.numel() == n_out && c.dims.back() == n_out)) {
          bias = std::vector<float>(static_cast<size_t>(n_out));
          for (int64_t j = 0; j < n_out; ++j) (*bias)[static_cast<size_t>(j)] = beta * c.floats[c.numel() == 1 ? 0 : static_cast<size_t>(j)];
          c_done = true;
        }
      }
      ValueId y = emit_linear(e, n, n.inputs[0], a, std::move(w), n_out, k, bias ? &*bias : nullptr, c_done ? out : out + ".ab",
                              static_scales_of(n.inputs[1], trans_b, alpha));
      if (!c_done) y = add_c(e, n, y, dtype, beta, out);
      e.runtime[out] = y;
      return;
    }
    ValueId b = operand(e, n.inputs[1], dtype, n);
    if (trans_b) {
      Attributes t;
      t.values["perm"] = std::vector<int64_t>{1, 0};
      b = emit(e, n, "transpose", {b}, t, {}, out + ".b_t");
    }
    const bool last = !c_given || beta == 0.0f;
    ValueId y = emit(e, n, "matmul", {a, b}, {}, {}, alpha == 1.0f && last ? out : out + ".ab");
    if (alpha != 1.0f) {
      Attributes s;
      s.values["scale"] = static_cast<double>(alpha);
      y = emit(e, n, "scale", {y}, s, {}, last ? out : out + ".alpha_ab");
    }
    if (!last) y = add_c(e, n, y, dtype, beta, out);
    e.runtime[out] = y;
  }

  ValueId add_c(Env& e, const onnx::Node& n, ValueId y, DType dtype, float beta, const std::string& out) {
    ValueId c = operand(e, n.inputs[2], dtype, n);
    if (beta != 1.0f) {
      Attributes s;
      s.values["scale"] = static_cast<double>(beta);
      c = emit(e, n, "scale", {c}, s, {}, out + ".beta_c");
    }
    return emit(e, n, "binary", {y, c}, fn_attr("add"), {}, out);
  }

  void emit_binary(Env& e, const onnx::Node& n, const std::string& fn) {
    const std::string out = n.outputs[0];
    const std::string &a_name = n.inputs[0], &b_name = n.inputs[1];
    const bool a_const = e.consts.count(a_name) != 0, b_const = e.consts.count(b_name) != 0;
    const ValueId any = runtime(e, a_const ? b_name : a_name, n);
    const DType dtype = e.g.value(any).proto.dtype;
    const Shape rs = e.g.value(any).proto.shape;
    if ((fn == "add" || fn == "mul") && (a_const || b_const)) {
      const Tensor& c = *e.consts.at(a_const ? a_name : b_name);
      if (fn == "mul" && c.numel() == 1 && c.is_float()) {
        Attributes s;
        s.values["scale"] = static_cast<double>(c.floats[0]);
        e.runtime[out] = emit(e, n, "scale", {any}, s, {}, out);
        return;
      }
      const bool last_dim_vector = c.is_float() && rs.rank() >= 1 && c.numel() == rs.cols() && !c.dims.empty() &&
                                   c.dims.back() == rs.cols() && c.dims.size() <= rs.rank();
      if (fn == "add" && last_dim_vector) {
        Attributes b;
        b.values["features"] = rs.cols();
        e.runtime[out] = emit(e, n, "bias", {any}, b, {c.floats}, out);
        return;
      }
    }
    if (fn == "add" && !a_const && !b_const) {
      const TensorProto &pa = e.g.value(runtime(e, a_name, n)).proto, &pb = e.g.value(runtime(e, b_name, n)).proto;
      if (pa.shape == pb.shape && pa.dtype == pb.dtype) {
        e.runtime[out] = emit(e, n, "add", {runtime(e, a_name, n), runtime(e, b_name, n)}, {}, {}, out);
        return;
      }
    }
    e.runtime[out] = emit(e, n, "binary", {operand(e, a_name, dtype, n), operand(e, b_name, dtype, n)}, fn_attr(fn), {}, out);
  }

  // ONNX Attention (opset 23): tec's attention, whose GQA maps query head h to kv head
  // h / (q_num_heads / kv_num_heads) as ONNX's does. The 3-D form, [batch, seq, heads x
  // head_dim] with the head counts as attributes, maps directly; the 4-D form, [batch, heads,
  // seq, head_dim], through transposes.
  void emit_attention(Env& e, const onnx::Node& n) {
    const ErrorContext ctx = node_ctx(n);
    static const char* const kOptionalInputs[] = {"attn_mask", "past_key", "past_value", "nonpad_kv_seqlen"};
    for (size_t i = 4; i < n.inputs.size(); ++i)
      TEC_UNSUPPORTED_CHECK(n.inputs[i].empty(), ctx)
          << "input " << i << " ('" << n.inputs[i] << "', " << (i < 7 ? kOptionalInputs[i - 3] : "past the spec's seven")
          << "): tec's attention takes Q, K, V and a float attn_mask, with is_causal for the causal mask";
    static const char* const kExtraOutputs[] = {"present_key", "present_value", "qk_matmul_output"};
    TEC_USER_CHECK(!n.outputs.empty() && !n.outputs[0].empty(), ctx) << "Attention has no output Y";
    for (size_t i = 1; i < n.outputs.size(); ++i)
      TEC_UNSUPPORTED_CHECK(n.outputs[i].empty(), ctx) << "output " << i << " ('" << n.outputs[i] << "', "
                                                       << (i <= 3 ? kExtraOutputs[i - 1] : "past the spec's four")
                                                       << "): tec's attention makes Y alone";
    // Attributes a later opset adds (opset 25's sliding windows) change the result: refused
    // unless tec knows them.
    static const std::set<std::string> kKnown = {"is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode",
                                                 "scale",     "softcap",      "softmax_precision"};
    for (const auto& [name, value] : n.attrs) TEC_UNSUPPORTED_CHECK(kKnown.count(name) != 0, ctx) << "attribute " << name;
    TEC_UNSUPPORTED_CHECK(attr_float(n, "softcap", 0.0f) == 0.0f, ctx) << "softcap " << attr_float(n, "softcap", 0.0f);
    TEC_UNSUPPORTED_CHECK(attr_int(n, "qk_matmul_output_mode", 0) == 0, ctx)
        << "qk_matmul_output_mode " << attr_int(n, "qk_matmul_output_mode", 0);
    const ValueId q = runtime(e, n.inputs[0], n), k = runtime(e, n.inputs[1], n), v = runtime(e, n.inputs[2], n);
    // attn_mask: a float one is added to the scaled scores (tec's additive mask); a boolean one
    // (true: attend) is not taken yet.
    std::optional<ValueId> mask;
    if (n.inputs.size() > 3 && !n.inputs[3].empty()) {
      const auto type = types_.find(n.inputs[3]);
      const bool boolean = e.consts.count(n.inputs[3]) ? e.consts.at(n.inputs[3])->elem_type == onnx::kBool
                                                       : type != types_.end() && type->second == onnx::kBool;
      TEC_UNSUPPORTED_CHECK(!boolean, ctx) << "input 3 ('" << n.inputs[3]
                                           << "', attn_mask) is boolean; tec's attention takes a float (additive) attn_mask";
      mask = operand(e, n.inputs[3], e.g.value(q).proto.dtype, n);
    }
    const int64_t rank = static_cast<int64_t>(e.g.value(q).proto.shape.rank());
    Attributes a;
    a.values["causal"] = attr_int(n, "is_causal", 0) != 0;
    a.values["scale"] = static_cast<double>(attr_float(n, "scale", 0.0f));  // 0: 1 / sqrt(head_dim), ONNX's default too
    const int64_t heads = attr_int(n, "q_num_heads", 0), kv_heads = attr_int(n, "kv_num_heads", 0);
    if (rank == 4) {
      // The heads come from the shapes; the attributes, if given, must agree.
      const Shape &qs = e.g.value(q).proto.shape, &ks = e.g.value(k).proto.shape;
      TEC_USER_CHECK((heads == 0 || heads == qs[1]) && (kv_heads == 0 || kv_heads == ks.dims.at(1)), ctx)
          << "q_num_heads " << heads << " and kv_num_heads " << kv_heads << " disagree with Q " << qs.str() << " and K " << ks.str();
    } else {
      TEC_USER_CHECK(heads >= 1 && kv_heads >= 1, ctx)
          << "3-D Q, K and V need the attributes q_num_heads and kv_num_heads (>= 1), got " << heads << " and " << kv_heads;
      a.values["heads"] = heads;
      a.values["kv_heads"] = kv_heads;
    }
    e.runtime[n.outputs[0]] = emit_attention_of(e, n, q, k, v, mask, a, n.outputs[0]);
  }

  // tec's attention of q, k, v in ONNX's forms: 3-D [batch, seq, heads x head_dim] with the
  // head counts in `a` (or, absent, one head: [batch x heads, seq, head_dim]), or 4-D [batch,
  // heads, seq, head_dim], which becomes tec's 3-D form through a transpose and a reshape each
  // way (the output stays 3-D with `flat_output`). `a` holds causal and scale; an optional
  // additive mask broadcasts to [B, heads, S, S_kv].
  // t [B, H, S, D] made by transpose [0, 2, 1, 3] of reshape [B, S, H, D] of w [B, S, H x D]:
  // w, the form tec's rope and attention read, so that heads split only to be merged again
  // cost nothing (the unread split goes with the unused nodes at the end of build).
  std::optional<ValueId> flat_before_heads(const Env& e, ValueId t) const {
    const Value& heads = e.g.value(t);
    if (heads.producer < 0 || heads.proto.shape.rank() != 4) return std::nullopt;
    const Node& turn = e.g.node(heads.producer);
    if (turn.op != "transpose" || turn.attrs.get_ints("perm") != std::vector<int64_t>{0, 2, 1, 3}) return std::nullopt;
    const Value& split = e.g.value(turn.inputs.at(0));
    if (split.producer < 0 || e.g.node(split.producer).op != "reshape") return std::nullopt;
    const ValueId flat = e.g.node(split.producer).inputs.at(0);
    const Shape& f = e.g.value(flat).proto.shape;
    const Shape& h = heads.proto.shape;
    if (f != Shape({h[0], h[2], h[1] * h[3]})) return std::nullopt;
    return flat;
  }

  ValueId emit_attention_of(Env& e, const onnx::Node& n, ValueId q, ValueId k, ValueId v, std::optional<ValueId> mask, Attributes a,
                            const std::string& out, bool flat_output = false) {
    const ErrorContext ctx = node_ctx(n);
    const int64_t rank = static_cast<int64_t>(e.g.value(q).proto.shape.rank());
    TEC_UNSUPPORTED_CHECK(rank == 3 || rank == 4, ctx) << "Q is " << e.g.value(q).proto.shape.str() << "; attention takes 3-D or 4-D inputs";
    for (ValueId t : {k, v})
      TEC_USER_CHECK(static_cast<int64_t>(e.g.value(t).proto.shape.rank()) == rank, ctx)
          << "Q is " << rank << "-D and '" << e.g.value(t).name << "' is " << e.g.value(t).proto.shape.str() << "; all three have one rank";
    if (rank == 4) {
      const Shape qs = e.g.value(q).proto.shape, ks = e.g.value(k).proto.shape, vs = e.g.value(v).proto.shape;
      TEC_USER_CHECK(ks[1] == vs[1], ctx) << "K " << ks.str() << " and V " << vs.str() << " differ in their head count";
      a.values["heads"] = qs[1];
      a.values["kv_heads"] = ks[1];
      auto to_bshd = [&](ValueId t, const std::string& suffix) {
        if (auto flat = flat_before_heads(e, t)) return *flat;
        const Shape s = e.g.value(t).proto.shape;
        Attributes perm;
        perm.values["perm"] = std::vector<int64_t>{0, 2, 1, 3};
        const ValueId moved = emit(e, n, "transpose", {t}, perm, {}, out + "." + suffix + "_bshd");
        return reshape_to(e, n, moved, {s[0], s[2], checked_mul(s[1], s[3])}, out + "." + suffix + "_3d");
      };
      q = to_bshd(q, "q");
      k = to_bshd(k, "k");
      v = to_bshd(v, "v");
    } else if (!a.has("heads")) {
      a.values["heads"] = int64_t{1};
      a.values["kv_heads"] = int64_t{1};
    }
    const int64_t heads = a.get_int("heads", 1), kv_heads = a.get_int("kv_heads", 1);
    // Copies: emitting nodes below adds values, which may move every value.
    const Shape q_shape = e.g.value(q).proto.shape;
    const Shape v_shape = e.g.value(v).proto.shape;
    TEC_USER_CHECK(q_shape[2] % heads == 0, ctx) << "Q's last dim " << q_shape[2] << " is not a multiple of q_num_heads " << heads;
    TEC_USER_CHECK(v_shape.rank() == 3 && v_shape[2] % kv_heads == 0, ctx)
        << "V is " << v_shape.str() << "; its last dim must be a multiple of kv_num_heads " << kv_heads;
    a.values["head_dim"] = q_shape[2] / heads;
    a.values["v_head_dim"] = v_shape[2] / kv_heads;
    std::vector<ValueId> inputs{q, k, v};
    if (mask) {
      inputs.push_back(*mask);
      if (!a.has("mask")) a.values["mask"] = std::string("additive");
    }
    if (rank == 3 || flat_output) return emit(e, n, "attention", inputs, a, {}, out);
    const ValueId y = emit(e, n, "attention", inputs, a, {}, out + ".bshd");
    const ValueId split = reshape_to(e, n, y, {q_shape[0], q_shape[1], heads, v_shape[2] / kv_heads}, out + ".heads");
    Attributes perm;
    perm.values["perm"] = std::vector<int64_t>{0, 2, 1, 3};
    return emit(e, n, "transpose", {split}, perm, {}, out);
  }

  // The ONNX ops whose run-time form is one of tec's general-path ops (ir/general_kernel.h):
  // softmax, compare, where, concat, expand, slice (Split: one slice per output). Returns false
  // for other ops.
  bool emit_general(Env& e, const onnx::Node& n) {
    const std::string& op = n.op_type;
    const std::string& out = n.outputs.at(0);
    // Constants meet the dtype of the first run-time input from `first` on.
    auto runtime_dtype = [&](size_t first) {
      for (size_t i = first; i < n.inputs.size(); ++i)
        if (!n.inputs[i].empty() && !e.consts.count(n.inputs[i])) return e.g.value(runtime(e, n.inputs[i], n)).proto.dtype;
      return DType::fp32;
    };
    auto operands = [&](size_t first, size_t last, DType dtype) {
      std::vector<ValueId> values;
      for (size_t i = first; i < last; ++i) values.push_back(operand(e, n.inputs.at(i), dtype, n));
      return values;
    };
    auto constant_ints = [&](size_t slot) {
      return slot < n.inputs.size() && !n.inputs[slot].empty() ? as_ints(*e.consts.at(n.inputs[slot])) : std::vector<int64_t>{};
    };
    Attributes a;
    if (op == "Softmax") {
      a.values["axis"] = attr_int(n, "axis", -1);
      e.runtime[out] = emit(e, n, "softmax", {runtime(e, n.inputs[0], n)}, a, {}, out);
    } else if (auto it = kComparisons.find(op); it != kComparisons.end()) {
      const bool logic = it->second == "not" || it->second == "and" || it->second == "or" || it->second == "xor";
      e.runtime[out] = emit(e, n, "compare", operands(0, n.inputs.size(), logic ? DType::uint8 : runtime_dtype(0)), fn_attr(it->second), {}, out);
    } else if (op == "Where") {
      std::vector<ValueId> in = operands(0, 1, DType::uint8), branches = operands(1, 3, runtime_dtype(1));
      in.insert(in.end(), branches.begin(), branches.end());
      e.runtime[out] = emit(e, n, "where", in, {}, {}, out);
    } else if (op == "Concat") {
      a.values["axis"] = attr_int(n, "axis", 0);
      e.runtime[out] = emit(e, n, "concat", operands(0, n.inputs.size(), runtime_dtype(0)), a, {}, out);
    } else if (op == "Expand") {
      a.values["shape"] = constant_ints(1);
      e.runtime[out] = emit(e, n, "expand", {runtime(e, n.inputs[0], n)}, a, {}, out);
    } else if (op == "Slice") {
      a.values["starts"] = constant_ints(1);
      a.values["ends"] = constant_ints(2);
      a.values["axes"] = constant_ints(3);
      a.values["steps"] = constant_ints(4);
      e.runtime[out] = emit(e, n, "slice", {runtime(e, n.inputs[0], n)}, a, {}, out);
    } else if (op == "Split") {
      emit_split(e, n);
    } else {
      return false;
    }
    return true;
  }

  // Split along `axis`: the sizes from input 1, or parts as equal as num_outputs (opset 18) or
  // the output count allow (the last smaller), each part one slice.
  void emit_split(Env& e, const onnx::Node& n) {
    const ValueId x = runtime(e, n.inputs[0], n);
    const Shape& shape = e.g.value(x).proto.shape;
    const int64_t rank = static_cast<int64_t>(shape.rank()), axis = attr_int(n, "axis", 0);
    TEC_USER_CHECK(axis >= -rank && axis < rank, node_ctx(n)) << "axis " << axis << " is out of range for rank " << rank;
    const int64_t extent = shape.dims[static_cast<size_t>(axis < 0 ? axis + rank : axis)];
    std::vector<int64_t> sizes = n.inputs.size() > 1 && !n.inputs[1].empty() ? as_ints(*e.consts.at(n.inputs[1])) : std::vector<int64_t>{};
    if (sizes.empty()) {
      const int64_t parts = attr_int(n, "num_outputs", static_cast<int64_t>(n.outputs.size())), each = (extent + parts - 1) / parts;
      for (int64_t start = 0; start < extent; start += each) sizes.push_back(std::min(each, extent - start));
    }
    int64_t total = 0;
    for (int64_t size : sizes) total += size;
    TEC_USER_CHECK(sizes.size() == n.outputs.size() && total == extent, node_ctx(n))
        << "the parts (" << sizes.size() << ", " << total << " in all) do not split axis " << axis << " of extent " << extent << " into "
        << n.outputs.size() << " outputs";
    int64_t start = 0;
    for (size_t o = 0; o < sizes.size(); ++o) {
      Attributes a;
      a.values["starts"] = std::vector<int64_t>{start};
      a.values["ends"] = std::vector<int64_t>{start + sizes[o]};
      a.values["axes"] = std::vector<int64_t>{axis};
      if (!n.outputs[o].empty()) e.runtime[n.outputs[o]] = emit(e, n, "slice", {x}, a, {}, n.outputs[o]);
      start += sizes[o];
    }
  }

  // One ONNX node that no pattern took.
  void emit_node(Env& e, const onnx::Node& n) {
    const std::string& op = n.op_type;
    const std::string out = n.outputs.empty() ? "" : n.outputs[0];
    if (emit_general(e, n)) return;
    auto in0 = [&] { return runtime(e, n.inputs.at(0), n); };
    auto shape0 = [&] { return e.g.value(in0()).proto.shape; };
    if (auto it = onnx::kBinaryFunctions.find(op); it != onnx::kBinaryFunctions.end()) return emit_binary(e, n, it->second);
    if (auto it = onnx::kUnaryFunctions.find(op); it != onnx::kUnaryFunctions.end()) {
      e.runtime[out] = emit(e, n, "unary", {in0()}, fn_attr(it->second), {}, out);
      return;
    }
    if (op == "Relu") {
      e.runtime[out] = emit(e, n, "relu", {in0()}, {}, {}, out);
      return;
    }
    if (op == "Gelu") {
      const std::string approx = attr_string(n, "approximate", "none");
      TEC_UNSUPPORTED_CHECK(approx == "none" || approx == "tanh", node_ctx(n)) << "approximate '" << approx << "'";
      Attributes a;
      a.values["approximate"] = approx;
      e.runtime[out] = emit(e, n, "gelu", {in0()}, a, {}, out);
      return;
    }
    if (op == "MatMul") {
      const bool b_const = e.consts.count(n.inputs[1]) != 0;
      if (b_const && !e.consts.count(n.inputs[0])) {
        const Tensor& b = *e.consts.at(n.inputs[1]);
        if (b.dims.size() == 2 && b.is_float() && shape0().rank() >= 2) {
          e.runtime[out] = emit_linear(e, n, n.inputs[0], in0(), transposed(b), b.dims[1], b.dims[0], nullptr, out,
                                       static_scales_of(n.inputs[1], false, 1.0));
          return;
        }
      }
      const ValueId a = operand(e, n.inputs[0], DType::fp32, n);
      const ValueId bv = operand(e, n.inputs[1], e.g.value(a).proto.dtype, n);
      e.runtime[out] = emit(e, n, "matmul", {a, bv}, {}, {}, out);
      return;
    }
    if (op == "Gemm") return emit_gemm(e, n);
    if (op == "Gather" && is_embedding_lookup(n)) return emit_embedding(e, n);
    if (op == "Gather" || op == "GatherND") {
      TEC_UNSUPPORTED_CHECK(op == "Gather" || attr_int(n, "batch_dims", 0) == 0, node_ctx(n)) << "GatherND with batch_dims other than 0";
      Attributes a;
      if (op == "Gather") a.values["axis"] = attr_int(n, "axis", 0);
      e.runtime[out] = emit(e, n, op == "Gather" ? "gather" : "gather_nd", {in0(), operand(e, n.inputs.at(1), DType::int32, n)}, a, {}, out);
      return;
    }
    if (op == "Cos" || op == "Sin") {  // (a constant one folds in double: onnx_fold.cpp)
      e.runtime[out] = emit(e, n, "unary", {in0()}, fn_attr(op == "Cos" ? "cos" : "sin"), {}, out);
      return;
    }
    if (op == "Attention") return emit_attention(e, n);
    if (op == "LayerNormalization" || op == "RMSNormalization") return emit_norm(e, n, op == "LayerNormalization");
    if (auto it = kReductions.find(op); it != kReductions.end()) {
      std::vector<int64_t> axes;
      if (auto a = attr_ints(n, "axes")) axes = *a;
      else if (n.inputs.size() > 1 && !n.inputs[1].empty()) axes = as_ints(*e.consts.at(n.inputs[1]));
      if (axes.empty() && attr_int(n, "noop_with_empty_axes", 0) != 0) {
        e.runtime[out] = emit(e, n, "identity", {in0()}, {}, {}, out);
        return;
      }
      Attributes a;
      a.values["axes"] = axes;
      a.values["keepdims"] = attr_int(n, "keepdims", 1) != 0;
      a.values["fn"] = it->second;
      e.runtime[out] = emit(e, n, "reduce", {in0()}, a, {}, out);
      return;
    }
    auto reshape_node = [&](std::vector<int64_t> dims) {
      const ValueId x = in0();
      Attributes a;
      a.values["shape"] = dims.empty() ? std::vector<int64_t>{1} : dims;
      TEC_UNSUPPORTED_CHECK(!dims.empty() || e.g.value(x).proto.shape.numel() == 1, node_ctx(n)) << "empty shape";
      e.runtime[out] = emit(e, n, "reshape", {x}, a, {}, out);
    };
    if (op == "Reshape") {
      auto dims = with_context(node_ctx(n), [&] {
        return reshape_dims(shape0().dims, as_ints(*e.consts.at(n.inputs[1])), attr_int(n, "allowzero", 0) != 0);
      });
      TEC_UNSUPPORTED_CHECK(!dims.empty(), node_ctx(n)) << "reshaping to a scalar (rank 0) is not supported";
      return reshape_node(dims);
    }
    if (op == "Flatten")
      return reshape_node(with_context(node_ctx(n), [&] { return flatten_dims(shape0().dims, attr_int(n, "axis", 1)); }));
    if (op == "Squeeze") {
      std::optional<std::vector<int64_t>> axes;
      if (n.inputs.size() > 1 && !n.inputs[1].empty()) axes = as_ints(*e.consts.at(n.inputs[1]));
      auto dims = with_context(node_ctx(n), [&] { return squeeze_dims(shape0().dims, axes); });
      TEC_UNSUPPORTED_CHECK(!dims.empty(), node_ctx(n)) << "squeezing to a scalar (rank 0) is not supported";
      return reshape_node(dims);
    }
    if (op == "Unsqueeze")
      return reshape_node(with_context(node_ctx(n), [&] { return unsqueeze_dims(shape0().dims, as_ints(*e.consts.at(n.inputs[1]))); }));
    if (op == "Transpose") {
      Attributes a;
      if (auto perm = attr_ints(n, "perm")) a.values["perm"] = *perm;
      e.runtime[out] = emit(e, n, "transpose", {in0()}, a, {}, out);
      return;
    }
    if (op == "Identity") {
      e.runtime[out] = emit(e, n, "identity", {in0()}, {}, {}, out);
      return;
    }
    if (op == "Cast") {
      const auto to = static_cast<int32_t>(attr_int(n, "to", 0));
      const DType from = e.g.value(in0()).proto.dtype;
      const bool integers = to == onnx::kInt64 || to == onnx::kInt32 || to == onnx::kBool || to == onnx::kUint8;
      if (integers || from == DType::int32 || from == DType::uint8) {  // to or from ints and bools: the general path
        const bool to_int = to == onnx::kInt64 || to == onnx::kInt32;
        TEC_UNSUPPORTED_CHECK(integers || tec_dtype(to).has_value(), node_ctx(n))
            << "Cast to " << onnx::elem_type_name(to) << " at run time is not supported";
        Attributes a;
        a.values["dtype"] = std::string(to_string(to_int ? DType::int32 : integers ? DType::uint8 : *tec_dtype(to)));
        e.runtime[out] = emit(e, n, "convert", {in0()}, a, {}, out);
        return;
      }
      auto dtype = tec_dtype(to);
      TEC_UNSUPPORTED_CHECK(dtype.has_value(), node_ctx(n))
          << "Cast to " << onnx::elem_type_name(to) << " at run time is not supported (FLOAT, FLOAT16, BFLOAT16 are)";
      Attributes a;
      a.values["dtype"] = std::string(to_string(*dtype));
      e.runtime[out] = emit(e, n, "cast", {in0()}, a, {}, out);
      return;
    }
    TEC_UNSUPPORTED(node_ctx(n)) << op << " on run-time values is not supported";
  }

  Graph build(const std::map<std::string, int64_t>& profile) {
    Env e;
    e.g.name = m_.graph_name.empty() ? std::filesystem::path(m_.file).stem().string() : m_.graph_name;
    e.g.source_file = m_.file;
    e.g.mode = opt_.mode;
    e.g.target = opt_.target;
    e.g.dims = profile;
    // The model's Q/DQ pairs choose the recipe; --recipe replaces it (tec's own scaling then,
    // with the Q/DQ weights dequantized).
    e.g.recipe = Recipe::defaults(opt_.recipe ? *opt_.recipe : qdq_recipe_ ? *qdq_recipe_ : RecipeKind::bf16);
    if (e.g.recipe.kind == RecipeKind::fp8_static && qdq_recipe_ != RecipeKind::fp8_static)
      throw Error(ErrorKind::usage, file_ctx(),
                  qdq_recipe_ ? "fp8-static takes a per-tensor scale for each GEMM input from the model's Q/DQ pairs; this model's "
                                "pairs have block scales (recipe " + std::string(to_string(*qdq_recipe_)) + ")"
                              : std::string("fp8-static takes its scales from the model's QuantizeLinear/DequantizeLinear pairs; "
                                            "this model has none (use fp8-current or fp8-delayed)"));
    static_ = e.g.recipe.kind == RecipeKind::fp8_static;
    for (const auto& in : m_.inputs) {
      Value v;
      v.name = unique(e, in.name);
      v.kind = ValueKind::input;
      v.source = m_.file + " graph input '" + in.name + "'";
      std::vector<int64_t> dims;
      for (const auto& d : in.dims) dims.push_back(d.value >= 1 ? d.value : profile.at(d.param));
      Shape s(dims);
      with_context(ErrorContext{"onnx", in.name, "", v.source}, [&] { (void)s.numel(); });
      // Integer inputs (token ids, padding masks) are int32 in the plan; te-run narrows INT64 .npy files.
      v.proto = TensorProto::dense(std::move(s), is_integer_input(in.elem_type) ? DType::int32 : *tec_dtype(in.elem_type));
      v.proto.requires_grad = opt_.mode == Mode::train && !is_integer_input(in.elem_type);
      const ValueId id = e.g.add_value(std::move(v));
      e.runtime[in.name] = id;
      e.g.inputs.push_back(id);
    }
    e.consts = known_;
    ShapeOf shape_of = [&e](const std::string& v) -> std::optional<Shape> {
      auto it = e.runtime.find(v);
      if (it != e.runtime.end()) return e.g.value(it->second).proto.shape;
      const auto in_mask = e.mask_values.find(v);  // (a padding mask's values: their shapes, for Shape nodes)
      if (in_mask != e.mask_values.end()) return Shape(in_mask->second->dims);
      return std::nullopt;
    };
    for (const auto& [mask, input] : padding_inputs_) {  // the padding masks' inputs at a probe of all tokens
      const Shape dims = e.g.value(e.runtime.at(input)).proto.shape;
      e.mask_values[input] = std::make_shared<const Tensor>(
          Tensor{.elem_type = onnx::kInt64, .dims = dims.dims, .floats = {}, .ints = std::vector<int64_t>(static_cast<size_t>(dims.numel()), 1)});
    }
    became_.assign(nodes_.size(), "");
    emitted_.assign(nodes_.size(), {});
    std::set<std::string> failed;  // values a failed node should have made
    for (int i : order_) {
      const onnx::Node& n = node(i);
      const int gid = group_of_[static_cast<size_t>(i)];
      bool blocked = false;
      for (const auto& in : n.inputs) blocked = blocked || failed.count(in);
      if (blocked) {
        for (const auto& out : n.outputs) failed.insert(out);
        continue;
      }
      try {
        if (constant_node_[static_cast<size_t>(i)]) {
          if (!e.consts.count(n.outputs.at(0))) {
            auto outs = with_context(node_ctx(n), [&] { return onnx::fold(n, e.consts, shape_of); });
            for (size_t o = 0; o < outs.size() && o < n.outputs.size(); ++o) e.consts[n.outputs[o]] = std::move(outs[o]);
          }
          became_[static_cast<size_t>(i)] = "folded into a constant";
          continue;
        }
        if (noop_cast_[static_cast<size_t>(i)]) {
          became_[static_cast<size_t>(i)] =
              n.op_type == "Identity" ? "nothing: an Identity (its readers read its input)"
                                      : "nothing: a Cast to the type its input already has, or a round trip through FLOAT back to it "
                                        "(its readers read the input)";
          continue;
        }
        if (mask_node_[static_cast<size_t>(i)]) {
          // Its values at the probe of all tokens, so that Shape nodes reading it fold; the
          // attention's emission checks the mask itself (probe_padding).
          try {
            ConstMap values = e.consts;
            values.insert(e.mask_values.begin(), e.mask_values.end());
            auto outs = onnx::fold(n, values, shape_of);
            for (size_t o = 0; o < outs.size() && o < n.outputs.size(); ++o) e.mask_values[n.outputs[o]] = std::move(outs[o]);
          } catch (const Error&) {
            // (no shape then: a Shape reading it, or the probe, names the problem)
          }
          became_[static_cast<size_t>(i)] = "part of attention's padding mask from input '" + mask_input_of(i) +
                                            "': the attention reads each sequence's length (sequence_lengths)";
          continue;
        }
        if (gid >= 0) {
          const Group& grp = groups_[static_cast<size_t>(gid)];
          if (grp.root == i && !emit_group_or_general(e, grp)) continue;  // (its members' reports say why)
          const int shown = grp.kind == Group::Kind::gated ? grp.members.back() : grp.root;
          became_[static_cast<size_t>(i)] = grp.describe + " ('" + node(shown).name + "')";
          continue;
        }
        emit_plain(e, i, "no pattern took it");
      } catch (const Error& err) {
        if (err.kind() != ErrorKind::unsupported && err.kind() != ErrorKind::invalid_input) throw;
        problem(n, err.message());
        for (const auto& out : n.outputs) failed.insert(out);
      }
    }
    for (const auto& out : m_.outputs) {
      if (failed.count(out.name)) continue;
      auto it = e.runtime.find(out.name);
      if (it == e.runtime.end()) {
        const int p = producer_of(out.name);
        if (p >= 0) problem(node(p), "graph output '" + out.name + "' is a constant; tec compiles run-time computations only");
        else TEC_UNSUPPORTED(file_ctx()) << "graph output '" << out.name << "' is a constant";
        continue;
      }
      ValueId id = it->second;
      // An output must be made by a node of its own (an input or an alias is copied).
      if (e.g.value(id).producer < 0 || e.g.value(id).name != out.name ||
          std::count(e.g.outputs.begin(), e.g.outputs.end(), id)) {
        const onnx::Node synthetic{.index = -1, .name = "output_" + out.name, .op_type = "Identity"};
        const onnx::Node& src = producer_of(out.name) >= 0 ? node(producer_of(out.name)) : synthetic;
        id = emit(e, src, "identity", {id}, {}, {}, out.name);
      }
      e.g.outputs.push_back(id);
      if (out.elem_type > 0 && tec_dtype(out.elem_type) && *tec_dtype(out.elem_type) != e.g.value(id).proto.dtype)
        problems_.push_back({-1, out.name, "output", "", "graph output '" + out.name + "' is declared " + onnx::elem_type_name(out.elem_type) + " but computes " +
                    std::string(to_string(e.g.value(id).proto.dtype))});
    }
    throw_problems();
    verify(e.g);
    return without_unread_nodes(std::move(e.g));
  }

  // One node as it is (emit_node), and what it became for the report; `why_general` says why
  // no pattern took a node that went the general path (and any node of a refused pattern).
  void emit_plain(Env& e, int i, const std::string& why_general, bool refused_pattern = false) {
    const size_t before = e.g.nodes.size();
    emit_node(e, node(i));
    std::string ops;
    bool general = false;
    for (size_t k = before; k < e.g.nodes.size(); ++k) {
      ops += (ops.empty() ? "" : " + ") + e.g.nodes[k].op;
      general = general || builtin_ops().get(e.g.nodes[k].op).general;
      emitted_[static_cast<size_t>(i)].push_back(e.g.nodes[k].name);
    }
    became_[static_cast<size_t>(i)] = ops.empty() ? "an alias"
                                      : ops + (qdq_gemms_.count(i) ? " (input quantized by its Q/DQ pair)" : "") +
                                            (general || refused_pattern ? " (general path: " + why_general + ")" : "");
  }

  // A pattern whose emission refuses what it found (rope tables that are no rope's, a mask that
  // is no padding, shapes its op does not take) leaves its nodes to the general path, which
  // computes them as the model writes them; the report says which pattern and why. False then.
  // A pattern whose nodes cannot all be emitted alone (an input only the pattern reads, such as
  // a padding mask it probed) keeps the pattern's error.
  bool emit_group_or_general(Env& e, const Group& grp) {
    try {
      emit_group(e, grp);
      return true;
    } catch (const Error& err) {
      if (err.kind() != ErrorKind::unsupported || !members_stand_alone(e, grp)) throw;
      std::vector<int> members;  // in topological order
      for (int i : order_)
        if (std::find(grp.members.begin(), grp.members.end(), i) != grp.members.end()) members.push_back(i);
      for (int m : members) emit_plain(e, m, "the pattern '" + grp.describe + "' found here refused it: " + err.message(), true);
      return false;
    }
  }

  // Whether every input of the group's nodes is a constant, emitted already, or made by another of them.
  bool members_stand_alone(const Env& e, const Group& grp) const {
    std::set<std::string> made;
    for (int m : grp.members) made.insert(node(m).outputs.begin(), node(m).outputs.end());
    for (int m : grp.members)
      for (const std::string& in : node(m).inputs)
        if (!in.empty() && !e.consts.count(in) && !e.runtime.count(in) && !made.count(in)) return false;
    return true;
  }

  // The graph without the nodes nothing reads (a split into heads a pattern read around), and
  // the values only they used; the report says so for the ONNX nodes that made them.
  Graph without_unread_nodes(Graph g) {
    std::vector<bool> read(g.values.size(), false), kept(g.nodes.size(), false);
    for (ValueId out : g.outputs) read[static_cast<size_t>(out)] = true;
    for (size_t n = g.nodes.size(); n-- > 0;) {
      const Node& node = g.nodes[n];
      kept[n] = std::any_of(node.outputs.begin(), node.outputs.end(), [&](ValueId v) { return read[static_cast<size_t>(v)]; });
      if (kept[n])
        for (ValueId in : node.inputs) read[static_cast<size_t>(in)] = true;
    }
    if (std::all_of(kept.begin(), kept.end(), [](bool k) { return k; })) return g;
    // `g` keeps its name, recipe, mode and the rest; its values and nodes are rebuilt.
    std::vector<Value> values = std::move(g.values);
    std::vector<Node> nodes = std::move(g.nodes);
    const std::vector<ValueId> inputs = std::move(g.inputs), outputs = std::move(g.outputs);
    g.values.clear();
    g.nodes.clear();
    g.inputs.clear();
    g.outputs.clear();
    std::vector<ValueId> moved(values.size(), -1);
    auto take = [&](ValueId v) {
      if (moved[static_cast<size_t>(v)] < 0) {
        Value copy = values[static_cast<size_t>(v)];
        copy.producer = -1;
        moved[static_cast<size_t>(v)] = g.add_value(std::move(copy));
      }
      return moved[static_cast<size_t>(v)];
    };
    for (ValueId in : inputs) g.inputs.push_back(take(in));
    std::set<std::string> removed;
    for (size_t n = 0; n < nodes.size(); ++n) {
      if (!kept[n]) {
        removed.insert(nodes[n].name);
        continue;
      }
      Node node = std::move(nodes[n]);
      for (ValueId& in : node.inputs) in = take(in);
      for (ValueId& o : node.outputs) o = take(o);
      g.add_node(std::move(node));
    }
    for (ValueId o : outputs) g.outputs.push_back(take(o));
    for (size_t i = 0; i < emitted_.size(); ++i)
      if (!emitted_[i].empty() && std::all_of(emitted_[i].begin(), emitted_[i].end(), [&](const std::string& name) { return removed.count(name); }))
        became_[i] = "nothing: what it made (" + became_[i] + ") is read by no one once a pattern read around it";
    verify(g);
    return g;
  }

  const onnx::Model& m_;
  const FrontendOptions& opt_;
  std::vector<onnx::Node> nodes_;  // m_'s nodes, with readers of a no-op Cast reading its input
  std::vector<bool> noop_cast_;    // per node: an Identity, or a Cast to the type its input already has
  std::map<int, std::string> canonical_notes_;  // per node index: what canonicalize() rewrote, for the report
  std::map<std::string, int32_t> types_;  // element types the structure tells (elem_types)
  std::vector<std::vector<std::string>> emitted_;  // per ONNX node, the tec nodes it became (build)
  std::map<std::string, int> producer_;
  std::map<std::string, std::vector<int>> consumers_;
  std::set<std::string> outputs_;
  std::vector<int> order_;
  std::set<std::string> constant_values_;
  std::vector<bool> constant_node_;
  ConstMap known_;
  std::vector<Group> groups_;
  std::vector<int> group_of_;
  std::vector<bool> mask_node_;                          // part of a padding mask (find_padding_masks)
  std::map<std::string, std::vector<int>> mask_nodes_;   // per padding mask value: its nodes in order
  std::map<std::string, std::string> padding_inputs_;    // per padding mask value: the integer input
  std::set<int> qdq_gemms_;
  std::optional<RecipeKind> qdq_recipe_;
  std::map<std::string, float> qdq_scale_;  // a static Q/DQ pair's output -> its scale
  bool static_ = false;                      // building for fp8-static: keep the Q/DQ scales
  std::vector<Problem> problems_;
  bool malformed_ = false;  // a node outside its op's arity: nothing after check_claims runs
  std::vector<std::string> became_;
  std::map<std::string, int64_t> ranks_;
  double constant_tolerance_ = 1e-4;  // relative; looser for scalars stored in bf16 / fp16 (near)
};

}  // namespace

const std::vector<OnnxOpClaim>& onnx_op_claims() { return kClaims; }

OnnxImport import_onnx(const onnx::Model& model, const FrontendOptions& options) { return Importer(model, options).run(); }

OnnxImport load_onnx_graphs(const std::string& path, const FrontendOptions& options) {
  return import_onnx(onnx::read_model_file(path), options);
}

}  // namespace tec
