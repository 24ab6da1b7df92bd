// Projections: MatMul by a constant weight plus a constant bias -> a linear with bias; the
// projection forms the gated MLP reads; and Q -> DQ pairs on a GEMM's input, which choose the
// recipe (a scalar scale: fp8-static with the model's scale; block_size 128: fp8-block;
// E8M0 block_size 32: mxfp8).
#include <cmath>
#include <sstream>

#include "frontend/onnx/onnx_builder.h"

namespace tec::onnx {

std::string bad_scale(const Tensor& scale) {
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

std::pair<int64_t, int64_t> projection_shape(const OnnxGraph& graph, const Projection& p) {
  const Tensor& w = *graph.known.at(p.weight);
  return p.trans_b ? std::make_pair(w.dims[0], w.dims[1]) : std::make_pair(w.dims[1], w.dims[0]);
}

// A MatMul by a constant 2-D weight, free to be swallowed.
bool Matcher::is_weight_matmul(int i) const {
  if (!is_op(i, "MatMul")) return false;
  auto it = graph_.known.find(node(i).inputs[1]);
  return it != graph_.known.end() && it->second->dims.size() == 2 && it->second->is_float() && !graph_.is_constant(node(i).inputs[0]);
}

// `v` as a projection x W (+ b) whose nodes no pattern holds yet; nullopt otherwise.
std::optional<Projection> Matcher::projection_of(const std::string& v) const {
  const int p = graph_.producer_of(v);
  if (p < 0) return std::nullopt;
  if (is_weight_matmul(p))
    return Projection{.x = node(p).inputs[0], .weight = node(p).inputs[1], .members = {p}};
  if (is_op(p, "Add") && node(p).inputs.size() == 2)
    for (int order = 0; order < 2; ++order) {
      const std::string product = node(p).inputs[static_cast<size_t>(order)], b = node(p).inputs[static_cast<size_t>(1 - order)];
      const int mm = graph_.producer_of(product);
      if (mm < 0 || !graph_.internal(product) || !is_weight_matmul(mm) || !graph_.known.count(b)) continue;
      const Tensor& bt = *graph_.known.at(b);
      const int64_t n = graph_.known.at(node(mm).inputs[1])->dims[1];
      if (!bt.is_float() || bt.numel() != n || bt.dims.empty() || bt.dims.back() != n) continue;
      return Projection{.x = node(mm).inputs[0], .weight = node(mm).inputs[1], .bias = b, .members = {mm, p}};
    }
  if (is_op(p, "Gemm") && attr_int(node(p), "transA", 0) == 0 && !graph_.is_constant(node(p).inputs[0]) &&
      graph_.known.count(node(p).inputs[1])) {
    const Node& g = node(p);
    const Tensor& b = *graph_.known.at(g.inputs[1]);
    if (b.dims.size() != 2 || !b.is_float()) return std::nullopt;
    Projection proj{.x = g.inputs[0], .weight = g.inputs[1], .trans_b = attr_int(g, "transB", 0) != 0,
                    .alpha = attr_float(g, "alpha", 1.0f), .beta = attr_float(g, "beta", 1.0f), .members = {p}};
    if (g.inputs.size() > 2 && !g.inputs[2].empty()) {
      const auto c = graph_.known.find(g.inputs[2]);
      const int64_t n = proj.trans_b ? b.dims[0] : b.dims[1];
      if (c == graph_.known.end() || !c->second->is_float() || (c->second->numel() != n && c->second->numel() != 1) ||
          (c->second->numel() == n && !c->second->dims.empty() && c->second->dims.back() != n))
        return std::nullopt;
      proj.bias = g.inputs[2];
    }
    return proj;
  }
  return std::nullopt;
}

void Matcher::match_linear_bias(int mm) {
  if (!is_weight_matmul(mm)) return;
  const std::string y = node(mm).outputs[0];
  const int add = sole_consumer(y, "Add");
  if (add < 0) return;
  const std::string b = graph_.other_input(add, y);
  auto it = graph_.known.find(b);
  const int64_t n = graph_.known.at(node(mm).inputs[1])->dims[1];
  if (it == graph_.known.end() || it->second->numel() != n || !it->second->is_float() || it->second->dims.empty() ||
      it->second->dims.back() != n)
    return;
  add_group(Group{.kind = Group::Kind::linear_bias, .members = {mm, add}, .root = add, .x = node(mm).inputs[0],
                  .weight = node(mm).inputs[1], .bias = b, .describe = "MatMul + Add -> linear with bias"});
}

bool Matcher::nonzero_zero_point(const Node& q) const {
  if (q.inputs.size() < 3 || q.inputs[2].empty() || !graph_.known.count(q.inputs[2])) return false;
  const auto& zero = graph_.known.at(q.inputs[2])->floats;
  return std::any_of(zero.begin(), zero.end(), [](float z) { return z != 0.0f; });
}

// Q -> DQ on a run-time value: the pair picks the quantizer of the GEMM that reads it. A
// scalar FLOAT8E4M3FN scale is the model's calibrated static scale (recipe fp8-static, kept in
// qdq_scale); block_size 128 chooses fp8-block and E8M0 block_size 32 mxfp8, whose
// activation scales tec computes at run time as TE does.
void Matcher::match_qdq(int q) {
  if (!is_op(q, "QuantizeLinear") || graph_.is_constant(node(q).inputs[0])) return;
  const std::string y = node(q).outputs[0];
  const int dq = sole_consumer(y, "DequantizeLinear");
  if (dq < 0) return;
  const Node& qn = node(q);
  const Node& dn = node(dq);
  Group g{.kind = Group::Kind::qdq, .members = {q, dq}, .root = dq, .x = qn.inputs[0]};
  auto scale = graph_.known.find(qn.inputs[1]);
  auto dq_scale = graph_.known.find(dn.inputs[1]);
  int32_t out_type = static_cast<int32_t>(attr_int(qn, "output_dtype", 0));
  if (qn.inputs.size() > 2 && !qn.inputs[2].empty() && graph_.known.count(qn.inputs[2])) out_type = graph_.known.at(qn.inputs[2])->elem_type;
  if (out_type == 0) out_type = kUint8;
  const int64_t block = attr_int(qn, "block_size", 0);
  std::string why;
  if (scale == graph_.known.end() || dq_scale == graph_.known.end()) why = "its scale is not a known constant";
  else if (!scale->second->is_float() || !dq_scale->second->is_float()) why = "its scale is not a float tensor";
  else if (out_type != kFloat8E4M3FN)
    why = "it quantizes to " + elem_type_name(out_type) +
          "; tec maps FLOAT8E4M3FN Q/DQ onto TE's forward FP8 formats (E5M2 is for gradients, integer formats are not TE's)";
  else if (const std::string bad = bad_scale(*scale->second); !bad.empty()) why = bad;
  else if (scale->second->dims != dq_scale->second->dims || scale->second->floats != dq_scale->second->floats)
    why = "QuantizeLinear and DequantizeLinear have different scales ('" + qn.inputs[1] + "', '" + dn.inputs[1] +
          "'); a pair that rescales is not a quantizer";
  else if (nonzero_zero_point(qn))
    why = "its zero point is not 0";
  else if (block == 0 && scale->second->numel() == 1) g.qdq_recipe = RecipeKind::fp8_static;
  else if (block == 128 && attr_int(qn, "axis", 1) == -1) g.qdq_recipe = RecipeKind::fp8_block;
  else if (block == 32 && scale->second->elem_type == kFloat8E8M0 && attr_int(qn, "axis", 1) == -1)
    g.qdq_recipe = RecipeKind::mxfp8;
  else
    why = "its scale granularity (" + std::string(block ? "block_size " + std::to_string(block) : "per-axis") +
          ") matches no TE recipe (scalar: fp8-static, the model's scale; block_size 128 on axis -1: fp8-block; block_size "
          "32 with E8M0 scales on axis -1: mxfp8)";
  if (!why.empty()) {
    problems_.add(qn, "Q/DQ pair cannot be mapped: " + why);
    return;
  }
  if (g.qdq_recipe == RecipeKind::fp8_static) qdq_scale[dn.outputs[0]] = scale->second->floats.at(0);
  g.describe = g.qdq_recipe == RecipeKind::fp8_static
                   ? "Q/DQ pair -> the GEMM input's static FP8 scale " + std::to_string(scale->second->floats.at(0))
                   : std::string("Q/DQ pair -> ") + std::string(to_string(g.qdq_recipe)) + " quantizer of the GEMM input";
  add_group(std::move(g));
}

// Q/DQ pairs must feed GEMM inputs only, and then every GEMM's, since one recipe holds
// for the whole plan.
void Matcher::check_qdq_placement() {
  std::set<RecipeKind> kinds;
  for (const Group& g : groups) {
    if (g.kind != Group::Kind::qdq) continue;
    kinds.insert(g.qdq_recipe);
    const std::string out = node(g.root).outputs[0];
    for (int c : graph_.consumers_of(out)) {
      const Node& cn = node(c);
      const bool gemm_a = (cn.op_type == "MatMul" || cn.op_type == "Gemm") && cn.inputs[0] == out;
      if (!gemm_a)
        problems_.add(node(g.root), "Q/DQ output '" + out + "' feeds " + cn.op_type + " '" + cn.name +
                                  "', not a MatMul/Gemm input A: tec quantizes GEMM operands only");
      else
        qdq_gemms.insert(c);
    }
    if (graph_.outputs.count(out)) problems_.add(node(g.root), "Q/DQ output '" + out + "' is a graph output");
  }
  for (const Node& n : graph_.nodes) {
    if (graph_.constant_node[static_cast<size_t>(n.index)] || group_of[static_cast<size_t>(n.index)] >= 0) continue;
    if (n.op_type == "QuantizeLinear" || n.op_type == "DequantizeLinear")
      if (!problems_.has(n))
        problems_.add(n, n.op_type + " on a run-time value is supported only as a Q -> DQ pair on a MatMul/Gemm input");
  }
  if (kinds.size() > 1) problems_.add(node(graph_.order.at(0)), "Q/DQ pairs ask for more than one recipe; tec applies one per plan");
  if (kinds.size() == 1) qdq_recipe = *kinds.begin();
  if (!qdq_recipe) return;
  for (const Node& n : graph_.nodes)
    if ((n.op_type == "MatMul" || n.op_type == "Gemm") && !graph_.constant_node[static_cast<size_t>(n.index)] &&
        !qdq_gemms.count(n.index))
      problems_.add(n, "this GEMM's input has no Q/DQ pair while others have; tec applies one recipe to every GEMM");
}

ValueId Builder::emit_linear_bias(Env& e, const Group& grp, ValueId x, const std::string& out) {
  const Tensor& w = *e.consts.at(grp.weight);
  std::vector<float> b = constant_values(e, grp.bias, w.dims[1], 0, node(grp.root));
  return emit_linear(e, node(grp.root), grp.x, x, transposed(w), w.dims[1], w.dims[0], &b, out, static_scales_of(grp.weight, false, 1.0));
}

// The pair quantizes the GEMM that reads it (check_qdq_placement): its value is x's.
ValueId Builder::emit_qdq(Env&, const Group&, ValueId x, const std::string&) { return x; }

}  // namespace tec::onnx
