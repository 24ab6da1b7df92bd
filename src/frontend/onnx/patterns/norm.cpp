// LayerNorm and RMSNorm as exporters decompose them: ReduceMean/Sub/Pow/ReduceMean/Add
// eps/Sqrt/Div, and Pow/ReduceMean/Add eps/Sqrt/Reciprocal/Mul (or Div), each with an optional
// gamma (and beta), and Hugging Face's fp32 round trip in a 16-bit model -> tec's norm.
#include <algorithm>

#include "frontend/onnx/onnx_builder.h"

namespace tec::onnx {

// If `last`'s output flows into a free `op` with a constant 1-D other operand, swallows it
// into the group and stores that constant's name in `into`.
int Matcher::absorb_constant_vector(int last, const char* op, Group& g, std::string& into) const {
  const std::string out = node(last).outputs[0];
  const int next = sole_consumer(out, op);
  if (next < 0) return last;
  const std::string c = graph_.other_input(next, out);
  if (!graph_.known.count(c) || graph_.known.at(c)->dims.size() != 1) return last;
  g.members.push_back(next);
  into = c;
  return next;
}

// Optional Mul by a constant gamma, then optional Add of a constant beta.
int Matcher::affine_tail(int last, Group& g, bool with_beta) const {
  last = absorb_constant_vector(last, "Mul", g, g.weight);
  return with_beta ? absorb_constant_vector(last, "Add", g, g.bias) : last;
}

// eps from Add(v, eps), then Sqrt: returns the Sqrt.
int Matcher::eps_sqrt(const std::string& v, Group& g) const {
  const int add = sole_consumer(v, "Add");
  if (add < 0) return -1;
  auto eps = graph_.scalar(graph_.other_input(add, v));
  if (!eps || *eps <= 0 || *eps >= 1) return -1;
  const int sq = sole_consumer(node(add).outputs[0], "Sqrt");
  if (sq < 0) return -1;
  g.eps = *eps;
  g.members.insert(g.members.end(), {add, sq});
  return sq;
}

// d^2 as Pow(d, 2) or Mul(d, d).
bool Matcher::is_square_of(int i, const std::string& d) const {
  if (is_op(i, "Pow")) return node(i).inputs[0] == d && graph_.scalar(node(i).inputs[1]) && graph_.near(*graph_.scalar(node(i).inputs[1]), 2.0);
  return is_op(i, "Mul") && node(i).inputs[0] == d && node(i).inputs[1] == d;
}

void Matcher::match_layernorm(int r1) {
  if (!graph_.reduces_last_dim_keeping(r1)) return;
  const std::string x = node(r1).inputs[0];
  const int sub = sole_consumer(node(r1).outputs[0], "Sub");
  if (sub < 0 || node(sub).inputs[0] != x) return;
  const std::string d = node(sub).outputs[0];
  const auto& dc = graph_.consumers_of(d);
  if (dc.size() != 2 || graph_.outputs.count(d)) return;
  const int sq = is_square_of(dc[0], d) ? dc[0] : is_square_of(dc[1], d) ? dc[1] : -1;
  const int div = dc[0] == sq ? dc[1] : dc[0];
  if (sq < 0 || !is_op(div, "Div") || node(div).inputs[0] != d) return;
  const int r2 = sole_consumer(node(sq).outputs[0], "ReduceMean");
  if (r2 < 0 || !graph_.reduces_last_dim_keeping(r2)) return;
  Group g{.kind = Group::Kind::layernorm, .members = {r1, sub, sq, r2}, .x = x};
  const int sqrt = eps_sqrt(node(r2).outputs[0], g);
  if (sqrt < 0 || sole_consumer(node(sqrt).outputs[0], "Div") != div) return;
  g.members.push_back(div);
  g.root = affine_tail(div, g, true);
  g.describe = "decomposed LayerNorm (ReduceMean/Sub/Pow/Sqrt/Div) -> layernorm";
  add_group(std::move(g));
}

// 1 / s as Reciprocal(s) or Div(1, s), read only by the pattern: the node, or -1.
int Matcher::reciprocal_of(const std::string& s) const {
  if (const int rec = sole_consumer(s, "Reciprocal"); rec >= 0) return rec;
  const int div = sole_consumer(s, "Div");
  if (div < 0 || node(div).inputs[1] != s) return -1;
  const auto one = graph_.scalar(node(div).inputs[0]);
  return one && *one == 1.0 ? div : -1;
}

void Matcher::match_rmsnorm(int r) {
  if (!graph_.reduces_last_dim_keeping(r)) return;
  const std::string sq_out = node(r).inputs[0];
  const int sq = graph_.producer_of(sq_out);
  if (sq < 0 || !graph_.internal(sq_out)) return;
  const std::string x = node(sq).inputs[0];
  if (!is_square_of(sq, x)) return;
  Group g{.kind = Group::Kind::rmsnorm, .members = {sq, r}, .x = x};
  const int sqrt = eps_sqrt(node(r).outputs[0], g);
  if (sqrt < 0) return;
  int last = -1;
  const std::string s = node(sqrt).outputs[0];
  if (const int rec = reciprocal_of(s); rec >= 0) {
    const int mul = sole_consumer(node(rec).outputs[0], "Mul");
    if (mul < 0 || graph_.other_input(mul, node(rec).outputs[0]) != x) return;
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
int Matcher::absorb_fp32_round_trip(Group& g, int last) {
  const int up = graph_.producer_of(g.x);
  if (up < 0 || !is_op(up, "Cast") || attr_int(node(up), "to", 0) != kFloat || graph_.outputs.count(g.x)) return last;
  const std::string original = node(up).inputs[0];
  const auto type = graph_.types.find(original);
  if (type == graph_.types.end() || (type->second != kFloat16 && type->second != kBfloat16)) return last;
  for (int c : graph_.consumers_of(g.x))
    if (std::find(g.members.begin(), g.members.end(), c) == g.members.end()) return last;
  const int down = sole_consumer(node(last).outputs[0], "Cast");
  if (down < 0 || attr_int(node(down), "to", 0) != type->second) return last;
  g.members.insert(g.members.end(), {up, down});
  g.x = original;
  return down;
}

ValueId Builder::emit_norm_group(Env& e, const Group& grp, ValueId x, const std::string& out) {
  const Node& root = node(grp.root);
  const bool layernorm = grp.kind == Group::Kind::layernorm;
  const int64_t hidden = e.g.value(x).proto.shape.cols();
  Attributes a;
  a.values["hidden"] = hidden;
  a.values["eps"] = grp.eps;
  std::vector<std::vector<float>> params{constant_values(e, grp.weight, hidden, 1.0f, root)};
  if (layernorm) params.push_back(constant_values(e, grp.bias, hidden, 0.0f, root));
  return emit(e, root, layernorm ? "layernorm" : "rmsnorm", {x}, a, params, out);
}

}  // namespace tec::onnx
