// The ONNX frontend's patterns: groups of exporter nodes that become one TE op (a decomposed
// LayerNorm -> layernorm, MatMul/Softmax/MatMul -> attention, ...). Each is one row of the
// table in patterns/table.cpp, {kind, root op, match, emit}: the match starts at every free
// node of its root op (in topological order) and adds a Group; the emission (onnx_builder.h)
// turns the Group into tec nodes when the walk reaches its root. Both live in the family's
// file, patterns/<family>.cpp. What no pattern takes goes node by node (onnx_nodes.cpp).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "frontend/onnx/onnx_graph.h"
#include "ir/graph.h"
#include "ir/recipe.h"

namespace tec::onnx {

// x W (+ b) as an exporter writes a Linear: MatMul by a constant 2-D weight [K, N] with an
// optional Add of a constant [N], or Gemm (transA = 0) with a constant B ([K, N], or [N, K]
// with transB) and an optional constant C, alpha and beta.
struct Projection {
  std::string x;       // the run-time input
  std::string weight;  // the constant B
  bool trans_b = false;
  double alpha = 1.0;
  std::string bias;  // the constant [N] (or a scalar C); "" for none
  double beta = 1.0;
  std::vector<int> members;
};
// A projection's [N] x [K] shape, from its constant.
std::pair<int64_t, int64_t> projection_shape(const OnnxGraph& graph, const Projection& p);
// Why a Q/DQ scale constant cannot be used, or "" when every value is a positive finite number.
std::string bad_scale(const Tensor& scale);

// A pattern found in the graph: several nodes that become one TE op, emitted when the walk
// reaches `root` (the last of them in data-flow order).
struct Group {
  enum class Kind : uint8_t { linear_bias, gelu, silu, gated, layernorm, rmsnorm, qdq, attention, rope } kind;
  std::vector<int> members;
  int root = -1;
  std::string x;             // the pattern's run-time input
  std::string approximate;   // gelu: "tanh" or "none"
  std::string weight, bias;  // constants: linear weight/bias, norm gamma/beta (may be empty); rope: cos, sin tables
  Projection gate, up;       // gated: the two projections
  std::string act;           // gated: "swiglu" or "geglu"
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
  std::string describe;  // for the report
};

// Attention masks computed at run time from an integer graph input (transformers'
// attention_mask): the nodes between the two, evaluated at probe masks when emitting
// (onnx_mask_probe.h); the attention then reads each sequence's length.
struct PaddingMasks {
  std::vector<bool> is_mask_node;                  // per ONNX node
  std::map<std::string, std::vector<int>> nodes;   // per mask value: its nodes, producers first
  std::map<std::string, std::string> input;        // per mask value: the integer graph input
  std::string input_of_node(int i) const;
};

class Matcher;
class Builder;
struct Env;

struct OnnxPattern {
  Group::Kind kind;
  const char* family;   // patterns/<family>.cpp
  const char* root_op;  // the match starts at every free node of this op
  const char* name;     // for the report: "decomposed LayerNorm"
  void (Matcher::*match)(int root);
  ValueId (Builder::*emit)(Env& e, const Group& g, ValueId x, const std::string& out);
};
// The table, in the order the matches run (a gated MLP absorbs the silu or GELU found before
// it; attention reads through the rope found before it).
const std::vector<OnnxPattern>& onnx_patterns();
const OnnxPattern& pattern_of(Group::Kind kind);

// Finds the groups over an analysed graph, then the checks that read them.
class Matcher {
 public:
  Matcher(const OnnxGraph& graph, Problems& problems) : group_of(graph.nodes.size(), -1), graph_(graph), problems_(problems) {}

  void find_patterns();       // every row of the table (ranks first)
  void find_padding_masks();  // patterns/padding_mask.cpp
  void check_no_kv_cache();   // patterns/attention.cpp
  void check_qdq_placement(); // patterns/linear.cpp
  // Why no pattern took node i, for the report: the patterns that start at its op, if any.
  std::string why_no_pattern(int i) const;

  bool in_group(int i) const { return group_of[static_cast<size_t>(i)] >= 0; }
  const Group& group_at(int i) const { return groups[static_cast<size_t>(group_of[static_cast<size_t>(i)])]; }

  std::vector<Group> groups;
  std::vector<int> group_of;  // per ONNX node: its group, -1 for none
  PaddingMasks padding;
  std::set<int> qdq_gemms;                   // MatMul/Gemm nodes whose input A has a Q/DQ pair
  std::optional<RecipeKind> qdq_recipe;      // the recipe the Q/DQ pairs ask for
  std::map<std::string, float> qdq_scale;    // a static Q/DQ pair's output -> its scale

  // ---- the table's matches, one per row -----------------------------------------------------
  void match_gelu_erf(int e);     // patterns/activation.cpp
  void match_gelu_tanh(int t);
  void match_silu(int s);
  void match_gated(int mul);
  void match_layernorm(int r1);   // patterns/norm.cpp
  void match_rmsnorm(int r);
  void match_linear_bias(int mm); // patterns/linear.cpp
  void match_qdq(int q);
  void match_rope(int cat);       // patterns/rope.cpp
  void match_attention(int sm);   // patterns/attention.cpp

 private:
  const Node& node(int i) const { return graph_.node(i); }
  ErrorContext node_ctx(const Node& n) const { return graph_.node_ctx(n); }
  // A free node: in no group and not constant.
  bool free_node(int i) const { return i >= 0 && group_of[static_cast<size_t>(i)] < 0 && !graph_.is_constant_node(i); }
  // A free node of the default domain's `op` (a "MatMul" of another domain is not ONNX's, and
  // check_claims has only rejected it, not checked its arity).
  bool is_op(int i, const char* op) const { return free_node(i) && node(i).op_type == op && node(i).domain.empty(); }
  // The single consumer of v if it is a free `op` node, else -1.
  int sole_consumer(const std::string& v, const char* op) const;
  void add_group(Group g);

  // activation
  int match_product(const std::string& start, const std::string& x, double scale, std::vector<int>& members) const;
  int plus_one(const std::string& v) const;
  bool is_cube(const std::string& v, const std::string& x, std::vector<int>& members) const;
  bool is_weight_matmul(int i) const;
  std::optional<Projection> projection_of(const std::string& v) const;
  // norm
  int absorb_constant_vector(int last, const char* op, Group& g, std::string& into) const;
  int affine_tail(int last, Group& g, bool with_beta) const;
  int eps_sqrt(const std::string& v, Group& g) const;
  bool is_square_of(int i, const std::string& d) const;
  int reciprocal_of(const std::string& s) const;
  int absorb_fp32_round_trip(Group& g, int last);
  // linear
  bool nonzero_zero_point(const Node& q) const;
  // rope
  std::optional<std::vector<int64_t>> slice_input(int slice, size_t i) const;
  std::optional<std::pair<int64_t, int64_t>> last_axis_slice(int slice) const;
  // attention
  struct HeadSplit {
    std::string flat, shape;
    int64_t heads;
    std::vector<int> members;
  };
  void strip_constant_factor(std::string& v, Group& g) const;
  std::vector<int64_t> strip_repeat_kv(std::string& v, Group& g) const;
  std::optional<HeadSplit> head_split_of(const std::string& v) const;
  std::vector<int> nan_guard_of(const std::string& probs) const;
  // padding masks
  bool mask_subgraph(const std::string& v, std::set<int>& found, std::string& input, int depth) const;

  const OnnxGraph& graph_;
  Problems& problems_;
  bool searched_ = false;  // find_patterns ran (not so under --no-onnx-patterns)
};

}  // namespace tec::onnx
