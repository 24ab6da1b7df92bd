// The gated MLP of Llama, Qwen and Gemma: act(x W_gate) * (x W_up), as two projections or one
// fused gate_up projection split in two (onnx_canonical.cpp rewrites the latter into the
// former) -> one linear with the weights concatenated, then swiglu or geglu.
#include <algorithm>

#include "frontend/onnx/onnx_builder.h"

namespace tec::onnx {

// act(x W_gate (+ b)) * (x W_up (+ b)), the product's operands either way round, each
// projection a MatMul (+ Add) or a Gemm, act silu (x * sigmoid(x) either way round) or GELU
// tanh -> one linear with the weights (and biases) concatenated, then swiglu / geglu.
void Matcher::match_gated(int mul) {
  if (!is_op(mul, "Mul") || node(mul).inputs.size() != 2) return;
  for (int order = 0; order < 2; ++order) {
    const std::string act_out = node(mul).inputs[static_cast<size_t>(order)];
    const std::string up_out = node(mul).inputs[static_cast<size_t>(1 - order)];
    const int act_node = graph_.producer_of(act_out);
    if (act_node < 0 || !graph_.internal(act_out) || !graph_.internal(up_out)) continue;
    // The activation: a silu or tanh-GELU pattern, or ONNX's own Gelu (opset 20) with
    // approximate "tanh", as the dynamo exporter writes Gemma's gelu_pytorch_tanh.
    const int gid = group_of[static_cast<size_t>(act_node)];
    Group act;
    if (gid >= 0 && groups[static_cast<size_t>(gid)].root == act_node)
      act = groups[static_cast<size_t>(gid)];
    else if (is_op(act_node, "Gelu") && attr_string(node(act_node), "approximate", "none") == "tanh")
      act = Group{.kind = Group::Kind::gelu, .members = {act_node}, .root = act_node, .x = node(act_node).inputs[0],
                  .approximate = "tanh"};
    else
      continue;
    const bool silu = act.kind == Group::Kind::silu;
    if (!silu && !(act.kind == Group::Kind::gelu && act.approximate == "tanh")) continue;
    const auto gate = projection_of(act.x), up = projection_of(up_out);
    if (!gate || !up || gate->x != up->x || graph_.outputs.count(act.x)) continue;
    for (int c : graph_.consumers_of(act.x))
      if (std::find(act.members.begin(), act.members.end(), c) == act.members.end()) return;
    if (projection_shape(graph_, *gate) != projection_shape(graph_, *up)) {
      const auto [gn, gk] = projection_shape(graph_, *gate);
      const auto [un, uk] = projection_shape(graph_, *up);
      problems_.add(node(mul), "gated MLP: the gate projection ('" + node(gate->members[0]).name + "') maps " + std::to_string(gk) +
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
      for (int mbr : act.members) group_of[static_cast<size_t>(mbr)] = -1;
      groups[static_cast<size_t>(gid)].members.clear();  // absorbed
      groups[static_cast<size_t>(gid)].root = -1;
    }
    add_group(std::move(g));
    return;
  }
}

ValueId Builder::emit_gated(Env& e, const Group& grp, ValueId x, const std::string& out) {
  const Node& root = node(grp.root);
  const auto [n, k] = projection_shape(graph_, grp.gate);
  std::vector<float> w = projection_weight(e, grp.gate), b = projection_bias(e, grp.gate);
  const std::vector<float> w_up = projection_weight(e, grp.up), b_up = projection_bias(e, grp.up);
  w.insert(w.end(), w_up.begin(), w_up.end());
  b.insert(b.end(), b_up.begin(), b_up.end());
  const bool biased = !grp.gate.bias.empty() || !grp.up.bias.empty();
  const auto scales = concatenated(static_scales_of(grp.gate.weight, grp.gate.trans_b, grp.gate.alpha), n,
                                   static_scales_of(grp.up.weight, grp.up.trans_b, grp.up.alpha), n, k, node_ctx(root));
  const ValueId h = emit_linear(e, root, grp.x, x, std::move(w), 2 * n, k, biased ? &b : nullptr, out + ".gate_up", scales);
  return emit(e, root, grp.act, {h}, {}, {}, out);
}

}  // namespace tec::onnx
