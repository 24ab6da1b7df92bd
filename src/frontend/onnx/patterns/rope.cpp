// Hugging Face's apply_rotary_pos_emb as exporters write it: x cos + rotate_half(x) sin, with
// rotate_half = Concat(-x[..., D/2:], x[..., :D/2]) and the cos and sin tables constants of the
// positions -> tec's rope, its theta found from the tables and every entry checked.
#include <cmath>

#include "frontend/onnx/onnx_builder.h"

namespace tec::onnx {

// The constant ints of a Slice's input `i` (starts, ends, axes, steps); nullopt if absent or
// not known.
std::optional<std::vector<int64_t>> Matcher::slice_input(int slice, size_t i) const {
  const auto& in = node(slice).inputs;
  if (i >= in.size() || in[i].empty()) return std::nullopt;
  const auto it = graph_.known.find(in[i]);
  if (it == graph_.known.end()) return std::nullopt;
  return as_ints(*it->second);
}

// Slice of the last axis, [start, end) with step 1: (start, end), or nullopt.
std::optional<std::pair<int64_t, int64_t>> Matcher::last_axis_slice(int slice) const {
  const auto starts = slice_input(slice, 1), ends = slice_input(slice, 2), axes = slice_input(slice, 3), steps = slice_input(slice, 4);
  const int64_t rank = graph_.rank_of(node(slice).inputs[0]);
  if (!starts || !ends || starts->size() != 1 || ends->size() != 1 || !axes || axes->size() != 1) return std::nullopt;
  if ((*axes)[0] != -1 && (*axes)[0] != rank - 1) return std::nullopt;
  if (steps && (steps->size() != 1 || (*steps)[0] != 1)) return std::nullopt;
  return std::make_pair((*starts)[0], (*ends)[0]);
}

// Hugging Face's apply_rotary_pos_emb: x cos + rotate_half(x) sin, rotate_half(x) =
// Concat(Neg(x[..., h:]), x[..., :h]) on the last axis, cos and sin constant tables (checked
// to be rope's when emitting).
void Matcher::match_rope(int cat) {
  const Node& c = node(cat);
  if (c.inputs.size() != 2 || (attr_int(c, "axis", 0) != -1 && attr_int(c, "axis", 0) != graph_.rank_of(c.inputs[0]) - 1)) return;
  const int neg = graph_.producer_of(c.inputs[0]), low = graph_.producer_of(c.inputs[1]);
  if (neg < 0 || low < 0 || !graph_.internal(c.inputs[0]) || !graph_.internal(c.inputs[1]) || !is_op(neg, "Neg") || !is_op(low, "Slice")) return;
  const std::string high_out = node(neg).inputs[0];
  const int high = graph_.producer_of(high_out);
  if (high < 0 || !graph_.internal(high_out) || !is_op(high, "Slice")) return;
  const std::string x = node(low).inputs[0];
  if (node(high).inputs[0] != x || graph_.is_constant(x)) return;
  const auto lo = last_axis_slice(low), hi = last_axis_slice(high);
  if (!lo || !hi || lo->first != 0 || lo->second != hi->first || lo->second < 1) return;
  // x sin: the Mul of the rotated half by a constant; x cos: the Add's other operand.
  const int by_sin = sole_consumer(c.outputs[0], "Mul");
  if (by_sin < 0) return;
  const std::string sin = graph_.other_input(by_sin, c.outputs[0]);
  if (!graph_.is_constant(sin)) return;
  const int add = sole_consumer(node(by_sin).outputs[0], "Add");
  if (add < 0) return;
  const std::string x_cos = graph_.other_input(add, node(by_sin).outputs[0]);
  const int by_cos = graph_.producer_of(x_cos);
  if (by_cos < 0 || !graph_.internal(x_cos) || !is_op(by_cos, "Mul")) return;
  const std::string cos = graph_.other_input(by_cos, x);
  if (cos.empty() || !graph_.is_constant(cos)) return;
  add_group(Group{.kind = Group::Kind::rope, .members = {high, low, neg, cat, by_sin, by_cos, add}, .root = add, .x = x,
                  .weight = cos, .bias = sin, .eps = static_cast<double>(lo->second),
                  .describe = "rotate_half rotary embedding (Slice/Neg/Concat, cos and sin tables) -> rope"});
}

// The rope of x [B, H, S, D] (or [B, S, D], one head) whose cos and sin tables the model
// holds: theta is found from the tables (cos of position 1, pair 1), and every entry must
// then be rope's (positions 0..S-1, pair i of the half style at channels i and i + D/2,
// within 2^-7 of the value: a bf16 model's tables are rounded).
ValueId Builder::emit_spelled_rope(Env& e, const Group& grp, ValueId x, const std::string& out) {
  const Node& root = node(grp.root);
  const ErrorContext ctx = graph_.node_ctx(root);
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
  const bool coarse = cos.elem_type != kFloat || sin.elem_type != kFloat;
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

}  // namespace tec::onnx
