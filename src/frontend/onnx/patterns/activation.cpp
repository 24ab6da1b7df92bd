// Activations exporters decompose: GELU in its erf form, 0.5 x (1 + erf(x / sqrt 2)), and its
// tanh form, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), with the factors in any order;
// silu as x * sigmoid(x). Each becomes tec's op.
#include <cmath>

#include "frontend/onnx/onnx_builder.h"

namespace tec::onnx {

// From `start` (a value that multiplies x), follows single-use Mul nodes, collecting the
// other factors, until they are exactly {x, c} with c ~ `scale`. Returns the last Mul.
int Matcher::match_product(const std::string& start, const std::string& x, double scale, std::vector<int>& members) const {
  std::string cur = start;
  double constants = 1.0;
  bool have_x = false;
  for (int step = 0; step < 3; ++step) {
    const int m = sole_consumer(cur, "Mul");
    if (m < 0) return -1;
    const std::string other = graph_.other_input(m, cur);
    members.push_back(m);
    if (auto s = graph_.scalar(other)) {
      constants *= *s;
    } else if (other == x && !have_x) {
      have_x = true;
    } else {
      // x * c computed on its own, then multiplied in.
      const int p = graph_.producer_of(other);
      auto xs = p >= 0 && graph_.internal(other) && is_op(p, "Mul") ? graph_.with_scalar(p) : std::nullopt;
      if (!xs || xs->first != x || have_x) return -1;
      members.push_back(p);
      constants *= xs->second;
      have_x = true;
    }
    cur = node(m).outputs[0];
    if (have_x && graph_.near(constants, scale)) return m;
  }
  return -1;
}

// 1 + f(...): the Add after Erf/Tanh.
int Matcher::plus_one(const std::string& v) const {
  const int a = sole_consumer(v, "Add");
  if (a < 0) return -1;
  auto s = graph_.scalar(graph_.other_input(a, v));
  return s && graph_.near(*s, 1.0) ? a : -1;
}

void Matcher::match_gelu_erf(int e) {
  const std::string& in = node(e).inputs[0];
  const int p = graph_.producer_of(in);
  if (!graph_.internal(in) || p < 0) return;
  std::string x;
  if (is_op(p, "Div") && node(p).inputs.size() == 2 && graph_.scalar(node(p).inputs[1]) && graph_.near(*graph_.scalar(node(p).inputs[1]), std::sqrt(2.0)))
    x = node(p).inputs[0];
  else if (is_op(p, "Mul"))
    if (auto xs = graph_.with_scalar(p); xs && graph_.near(xs->second, std::sqrt(0.5))) x = xs->first;
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
bool Matcher::is_cube(const std::string& v, const std::string& x, std::vector<int>& members) const {
  const int p = graph_.producer_of(v);
  if (p < 0 || !graph_.internal(v)) return false;
  if (is_op(p, "Pow") && node(p).inputs[0] == x && graph_.scalar(node(p).inputs[1]) && graph_.near(*graph_.scalar(node(p).inputs[1]), 3.0)) {
    members.push_back(p);
    return true;
  }
  if (!is_op(p, "Mul")) return false;
  const std::string other = graph_.other_input(p, x);
  if (other.empty()) return false;
  const int q = graph_.producer_of(other);
  if (q < 0 || !graph_.internal(other) || !is_op(q, "Mul") || node(q).inputs[0] != x || node(q).inputs[1] != x) return false;
  members.push_back(p);
  members.push_back(q);
  return true;
}

void Matcher::match_gelu_tanh(int t) {
  const std::string& in = node(t).inputs[0];
  const int p = graph_.producer_of(in);
  if (!graph_.internal(in) || !is_op(p, "Mul")) return;
  auto inner = graph_.with_scalar(p);
  if (!inner || !graph_.near(inner->second, std::sqrt(2.0 / M_PI))) return;
  const int s = graph_.producer_of(inner->first);
  if (!graph_.internal(inner->first) || !is_op(s, "Add")) return;
  for (int order = 0; order < 2; ++order) {
    const std::string x = node(s).inputs[static_cast<size_t>(order)], k = node(s).inputs[static_cast<size_t>(1 - order)];
    const int kp = graph_.producer_of(k);
    if (!graph_.internal(k) || !is_op(kp, "Mul")) continue;
    auto cubic = graph_.with_scalar(kp);
    if (!cubic || !graph_.near(cubic->second, 0.044715)) continue;
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

void Matcher::match_silu(int s) {
  const std::string& x = node(s).inputs[0];
  const int m = sole_consumer(node(s).outputs[0], "Mul");
  if (m < 0 || graph_.other_input(m, node(s).outputs[0]) != x) return;
  add_group(Group{.kind = Group::Kind::silu, .members = {s, m}, .root = m, .x = x, .describe = "x * sigmoid(x) -> silu"});
}

ValueId Builder::emit_gelu(Env& e, const Group& grp, ValueId x, const std::string& out) {
  Attributes a;
  a.values["approximate"] = grp.approximate;
  return emit(e, node(grp.root), "gelu", {x}, a, {}, out);
}

ValueId Builder::emit_silu(Env& e, const Group& grp, ValueId x, const std::string& out) {
  return emit(e, node(grp.root), "silu", {x}, {}, {}, out);
}

}  // namespace tec::onnx
