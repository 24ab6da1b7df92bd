// The attention half of a transformer layer (issue 25). So far `rope`, the rotary position
// embedding of the query and key heads (RoFormer; TE's apply_rotary_pos_emb), on the CPU
// reference: the GPU lowering, and `attention` through cuDNN, are not written yet, and a plan
// using rope says "no GPU code" naming it.
//
// rope rotates pairs of each head's first rotary_dim channels by the angle position x
// theta^(-2i / rotary_dim) for pair i: the "half" style pairs channel i with i + rotary_dim / 2
// (GPT-NeoX, Hugging Face Llama's rotate_half), "interleaved" pairs 2i with 2i + 1 (GPT-J).
// Channels past rotary_dim pass through. The position is the token's index along the
// sequence dim of a [B, S, H x D] (bshd) or [S, B, H x D] (sbhd) input.
#include <cmath>

#include "core/parallel.h"
#include "ops/common.h"
#include "tec_math.h"

namespace tec {

namespace {

struct RopeConfig {
  int64_t heads, head_dim, rotary_dim;
  bool interleaved, sbhd;
  double theta;
  explicit RopeConfig(const Attributes& a)
      : heads(a.get_int("heads", 0)),
        head_dim(a.get_int("head_dim", 0)),
        rotary_dim(a.get_int("rotary_dim", 0) == 0 ? a.get_int("head_dim", 0) : a.get_int("rotary_dim", 0)),
        interleaved(a.get_string("style", "half") == "interleaved"),
        sbhd(a.get_string("layout", "bshd") == "sbhd"),
        theta(a.get_float("theta", 10000.0)) {}
  // Channel offsets of pair i's two members within a head.
  int64_t first(int64_t i) const { return interleaved ? 2 * i : i; }
  int64_t second(int64_t i) const { return interleaved ? 2 * i + 1 : i + rotary_dim / 2; }
};

void check_rope_attributes(const Attributes& attrs, const ErrorContext& ctx) {
  const RopeConfig c(attrs);
  TEC_USER_CHECK(c.heads >= 1 && c.head_dim >= 2, ctx) << "heads must be positive and head_dim at least 2, got " << c.heads << " and "
                                                        << c.head_dim;
  TEC_USER_CHECK(c.rotary_dim >= 2 && c.rotary_dim <= c.head_dim && c.rotary_dim % 2 == 0, ctx)
      << "rotary_dim must be even and in [2, head_dim = " << c.head_dim << "], got " << c.rotary_dim;
  TEC_USER_CHECK(std::isfinite(c.theta) && c.theta > 1.0, ctx) << "theta must be a finite number above 1, got " << c.theta;
}

InferResult infer_rope(const InferContext& ctx) {
  const RopeConfig c(ctx.node.attrs);
  const TensorProto& x = ctx.inputs[0];
  TEC_USER_CHECK(x.shape.rank() == 3, ctx.error)
      << "input '" << ctx.graph.value(ctx.node.inputs[0]).name << "' must be 3-D, "
      << (c.sbhd ? "[S, B, heads x head_dim] (layout sbhd)" : "[B, S, heads x head_dim] (layout bshd)") << ", got " << x.shape.str();
  require_last_dim(ctx, 0, checked_mul(c.heads, c.head_dim), "heads x head_dim");
  require_high_precision(ctx, 0);
  InferResult result;
  result.outputs.push_back(dense_like(x));
  return result;
}

// The backward needs no saved tensor: the rotation is linear in x.
BackwardResult infer_rope_backward(const BackwardContext& ctx) { return BackwardResult{grads_like_inputs(ctx), {}, {}}; }

// cos and sin of pair i's angle at `position`, from double and rounded once to float. The GPU
// lowering is to read a table the compiler fills with this function.
std::pair<float, float> rope_cos_sin(const RopeConfig& c, int64_t position, int64_t i) {
  const double angle = static_cast<double>(position) * std::pow(c.theta, -2.0 * static_cast<double>(i) / static_cast<double>(c.rotary_dim));
  return {static_cast<float>(std::cos(angle)), static_cast<float>(std::sin(angle))};
}

// Rotates every head of every token of x (values in place) by +angle, or -angle for the
// backward (the rotation's transpose).
void rotate(const RopeConfig& c, const Shape& shape, std::vector<float>& values, bool inverse) {
  const int64_t outer = shape[0], inner = shape[1], width = shape[2];
  parallel_for(outer * inner, [&](int64_t row) {
    const int64_t position = c.sbhd ? row / inner : row % inner;
    float* token = &values[static_cast<size_t>(row * width)];
    for (int64_t i = 0; i < c.rotary_dim / 2; ++i) {
      const auto [cos_angle, sin_angle] = rope_cos_sin(c, position, i);
      for (int64_t h = 0; h < c.heads; ++h) {
        float* head = token + h * c.head_dim;
        tec_rope_rotate(head[c.first(i)], head[c.second(i)], cos_angle, inverse ? -sin_angle : sin_angle, &head[c.first(i)],
                        &head[c.second(i)]);
      }
    }
  });
}

std::vector<HostTensor> reference_rope(const Attributes& attrs, const std::vector<HostTensor>& in) {
  HostTensor y = in[0];
  rotate(RopeConfig(attrs), y.shape, y.values, false);
  return {std::move(y)};
}

// in: dy. dx = R^T dy, the rotation by the opposite angle.
std::vector<HostTensor> backward_reference_rope(const Attributes& attrs, const std::vector<HostTensor>& in) {
  HostTensor dx = in[0];
  rotate(RopeConfig(attrs), dx.shape, dx.values, true);
  return {std::move(dx)};
}

}  // namespace

void register_attention_ops(OpRegistry& registry) {
  registry.add(OpDef{
      .name = "rope",
      .summary = "rotary position embedding of the query or key heads (half-split or interleaved pairs; CPU reference only so far)",
      .min_inputs = 1,
      .max_inputs = 1,
      .attrs =
          {
              {"heads", AttrType::int_, std::nullopt, {}, "heads in the last dim"},
              {"head_dim", AttrType::int_, std::nullopt, {}, "channels per head"},
              {"rotary_dim", AttrType::int_, AttrValue{int64_t{0}}, {}, "leading channels of each head rotated (0: head_dim)"},
              {"style", AttrType::string_, AttrValue{std::string("half")}, {"half", "interleaved"},
               "half: channel i pairs with i + rotary_dim / 2 (GPT-NeoX, Llama); interleaved: 2i with 2i + 1 (GPT-J)"},
              {"theta", AttrType::float_, AttrValue{10000.0}, {}, "the frequency base: pair i turns by theta^(-2i / rotary_dim) per position"},
              {"layout", AttrType::string_, AttrValue{std::string("bshd")}, {"bshd", "sbhd"},
               "bshd: the input is [batch, sequence, heads x head_dim]; sbhd: [sequence, batch, heads x head_dim]"},
          },
      .check_attributes = check_rope_attributes,
      .infer = infer_rope,
      .infer_backward = infer_rope_backward,
      .reference = reference_rope,
      .backward_reference = backward_reference_rope,
  });
}

}  // namespace tec
