// The attention half of a transformer layer (issue 25): `rope`, the rotary position embedding
// of the query and key heads (RoFormer; TE's apply_rotary_pos_emb), and `attention`, scaled
// dot-product attention (TE's DotProductAttention). Here: shapes, saved tensors and the CPU
// reference; on the GPU rope is a row kernel (kernels/row.cu) and attention cuDNN's SDPA
// (src/runtime/attention.h), forward only so far.
//
// rope rotates pairs of each head's first rotary_dim channels by the angle position x
// theta^(-2i / rotary_dim) for pair i: the "half" style pairs channel i with i + rotary_dim / 2
// (GPT-NeoX, Hugging Face Llama's rotate_half), "interleaved" pairs 2i with 2i + 1 (GPT-J).
// Channels past rotary_dim pass through. The position is the token's index along the
// sequence dim of a [B, S, H x D] (bshd) or [S, B, H x D] (sbhd) input.
#include <algorithm>
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

}  // namespace

std::vector<double> rope_inverse_frequencies(const Attributes& attrs) {
  const RopeConfig c(attrs);
  std::vector<double> out;
  for (int64_t i = 0; i < c.rotary_dim / 2; ++i)
    out.push_back(std::pow(c.theta, -2.0 * static_cast<double>(i) / static_cast<double>(c.rotary_dim)));
  return out;
}

namespace {

// Rotates every head of every token of x (values in place) by +angle, or -angle for the
// backward (the rotation's transpose).
void rotate(const Attributes& attrs, const Shape& shape, std::vector<float>& values, bool inverse) {
  const RopeConfig c(attrs);
  const int64_t outer = shape[0], inner = shape[1], width = shape[2];
  const std::vector<double> inv_frequency = rope_inverse_frequencies(attrs);
  parallel_for(outer * inner, [&](int64_t row) {
    const int64_t position = c.sbhd ? row / inner : row % inner;
    float* token = &values[static_cast<size_t>(row * width)];
    for (int64_t i = 0; i < c.rotary_dim / 2; ++i) {
      float cos_angle, sin_angle;
      tec_rope_cos_sin(position, inv_frequency[static_cast<size_t>(i)], &cos_angle, &sin_angle);
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
  rotate(attrs, y.shape, y.values, false);
  return {std::move(y)};
}

// in: dy. dx = R^T dy, the rotation by the opposite angle.
std::vector<HostTensor> backward_reference_rope(const Attributes& attrs, const std::vector<HostTensor>& in) {
  HostTensor dx = in[0];
  rotate(attrs, dx.shape, dx.values, true);
  return {std::move(dx)};
}

// ---- attention ----
//
// o = softmax(scale q k^T + mask) v per head: q [B, S, heads x head_dim], k [B, S_kv, kv_heads x
// head_dim], v [B, S_kv, kv_heads x v_head_dim], o [B, S, heads x v_head_dim] (or every one
// [S, B, ...] under layout sbhd). S_kv may differ from S (cross-attention). kv_heads divides
// heads: query head h reads kv head h / (heads / kv_heads) (GQA; MQA at kv_heads = 1). causal
// masks the keys after the query's own position, aligned at the top left (query i sees keys
// j <= i), as ONNX's Attention and cuDNN's default. An optional fourth input is, by the
// attribute `mask`, either seq_lens (padding; int32 [B], cuDNN's padding mask; self-attention
// only), each sequence's valid length: keys past it are masked, and query rows past it give
// zeros and get no gradient; or an additive mask (additive; float, broadcast to [B, heads, S,
// S_kv] from [S, S_kv], [heads|1, S, S_kv] or [B|1, heads|1, S, S_kv]; cuDNN's bias, ONNX's
// float attn_mask, Hugging Face's 4-D mask), added to the scaled scores; it gets no gradient. As flash
// attention, a train plan saves the softmax's log-sum-exp per query row and head ([B, heads, S]
// fp32) and o besides q, k, v (and seq_lens): cuDNN's backward reads o (its rowsum(do o)); the
// reference's backward makes o again in fp64 instead. The reference sums in fp64, so against an
// fp64 computation it differs by the rounding of its inputs and output to the model dtype.

struct AttentionConfig {
  int64_t heads, kv_heads, head_dim, v_head_dim;
  bool causal, sbhd, additive_mask;
  double scale;
  explicit AttentionConfig(const Attributes& a)
      : heads(a.get_int("heads", 0)),
        kv_heads(a.get_int("kv_heads", 0) == 0 ? a.get_int("heads", 0) : a.get_int("kv_heads", 0)),
        head_dim(a.get_int("head_dim", 0)),
        v_head_dim(a.get_int("v_head_dim", 0) == 0 ? a.get_int("head_dim", 0) : a.get_int("v_head_dim", 0)),
        causal(a.get_bool("causal", false)),
        sbhd(a.get_string("layout", "bshd") == "sbhd"),
        additive_mask(a.get_string("mask", "padding") == "additive"),
        scale(a.get_float("scale", 0.0) == 0.0 ? 1.0 / std::sqrt(static_cast<double>(a.get_int("head_dim", 1)))
                                               : a.get_float("scale", 0.0)) {}
  int64_t batch_of(const Shape& t) const { return sbhd ? t[1] : t[0]; }
  int64_t seq_of(const Shape& t) const { return sbhd ? t[0] : t[1]; }
};

void check_attention_attributes(const Attributes& attrs, const ErrorContext& ctx) {
  const AttentionConfig c(attrs);
  TEC_USER_CHECK(c.heads >= 1 && c.head_dim >= 1 && c.v_head_dim >= 1, ctx)
      << "heads, head_dim and v_head_dim must be positive, got " << c.heads << ", " << c.head_dim << " and " << c.v_head_dim;
  TEC_USER_CHECK(c.kv_heads >= 1 && c.heads % c.kv_heads == 0, ctx)
      << "kv_heads must divide heads = " << c.heads << " (each kv head serves heads / kv_heads query heads), got " << c.kv_heads;
  TEC_USER_CHECK(std::isfinite(c.scale) && c.scale > 0.0, ctx) << "scale must be a positive finite number (0: 1 / sqrt(head_dim)), got "
                                                               << attrs.get_float("scale", 0.0);
}

InferResult infer_attention(const InferContext& ctx) {
  const AttentionConfig c(ctx.node.attrs);
  const char* layout = c.sbhd ? "[S, B, " : "[B, S, ";
  const char* names[3] = {"q", "k", "v"};
  const char* widths_named[3] = {"heads x head_dim", "kv_heads x head_dim", "kv_heads x v_head_dim"};
  const int64_t widths[3] = {checked_mul(c.heads, c.head_dim), checked_mul(c.kv_heads, c.head_dim), checked_mul(c.kv_heads, c.v_head_dim)};
  const TensorProto &q = ctx.inputs[0], &k = ctx.inputs[1];
  for (int slot = 0; slot < 3; ++slot) {
    const TensorProto& t = ctx.inputs[static_cast<size_t>(slot)];
    const std::string& name = ctx.graph.value(ctx.node.inputs[static_cast<size_t>(slot)]).name;
    TEC_USER_CHECK(t.shape.rank() == 3, ctx.error) << "input '" << name << "' (" << names[slot] << ") must be 3-D " << layout
                                                   << widths_named[slot] << "], got " << t.shape.str();
    TEC_USER_CHECK(t.shape[2] == widths[slot], ctx.error) << "input '" << name << "' (" << names[slot] << ") has last dim " << t.shape[2]
                                                          << ", expected " << widths_named[slot] << " = " << widths[slot];
    TEC_USER_CHECK(c.batch_of(t.shape) == c.batch_of(q.shape), ctx.error)
        << "input '" << name << "' (" << names[slot] << ") is " << t.shape.str() << ", but q is " << q.shape.str() << ": the batch differs";
    require_high_precision(ctx, slot);
  }
  TEC_USER_CHECK(c.seq_of(ctx.inputs[2].shape) == c.seq_of(k.shape), ctx.error)
      << "k is " << k.shape.str() << " and v " << ctx.inputs[2].shape.str() << ": a key and its value need the same sequence";
  const bool padded = ctx.inputs.size() == 4 && !c.additive_mask;
  if (ctx.inputs.size() == 4 && c.additive_mask) {
    // Broadcast to [B, heads, S, S_kv]: the trailing two dims exact, each leading one 1 or full.
    const TensorProto& mask = ctx.inputs[3];
    const Shape& m = mask.shape;
    const std::string& name = ctx.graph.value(ctx.node.inputs[3]).name;
    const int64_t full[4] = {c.batch_of(q.shape), c.heads, c.seq_of(q.shape), c.seq_of(k.shape)};
    bool fits = m.rank() >= 2 && m.rank() <= 4;
    for (size_t d = 0; fits && d < m.rank(); ++d) {
      const int64_t want = full[4 - m.rank() + d];
      fits = m[d] == want || (d + 2 < m.rank() && m[d] == 1);
    }
    TEC_USER_CHECK(fits && !mask.is_quantized() && mask.dtype != DType::int32, ctx.error)
        << "input '" << name << "' (the additive mask) must be float and broadcast to [B, heads, S, S_kv] = [" << full[0] << ", "
        << full[1] << ", " << full[2] << ", " << full[3] << "] from [S, S_kv], [heads or 1, S, S_kv] or [B or 1, heads or 1, S, "
        << "S_kv], got " << to_string(mask.dtype) << " " << m.str();
  }
  if (padded) {
    const TensorProto& lens = ctx.inputs[3];
    TEC_USER_CHECK(lens.dtype == DType::int32 && !lens.is_quantized() && lens.shape == Shape{c.batch_of(q.shape)}, ctx.error)
        << "input '" << ctx.graph.value(ctx.node.inputs[3]).name << "' (seq_lens, the padding mask) must be int32 ["
        << c.batch_of(q.shape) << "], one length per sequence, got " << to_string(lens.dtype) << " " << lens.shape.str();
    TEC_USER_CHECK(c.seq_of(k.shape) == c.seq_of(q.shape), ctx.error)
        << "seq_lens (the padding mask) is for self-attention: k's sequence " << c.seq_of(k.shape) << " is not q's "
        << c.seq_of(q.shape);
  }
  InferResult result;
  Shape out = q.shape;
  out.dims[2] = checked_mul(c.heads, c.v_head_dim);
  result.outputs.push_back(TensorProto::dense(out, q.dtype));
  for (int slot = 0; slot < 3; ++slot) result.saved.push_back(save_input(ctx, slot, names[slot]));
  if (ctx.inputs.size() == 4) result.saved.push_back(save_input(ctx, 3, c.additive_mask ? "mask" : "seq_lens"));
  result.saved.push_back({"softmax_lse", TensorProto::dense(Shape{c.batch_of(q.shape), c.heads, c.seq_of(q.shape)}, DType::fp32), -1});
  result.saved.push_back({"o", TensorProto::dense(out, q.dtype), -1});
  return result;
}

BackwardResult infer_attention_backward(const BackwardContext& ctx) {
  BackwardResult result;
  result.grad_inputs = grads_like_inputs(ctx);
  if (result.grad_inputs.size() == 4) result.grad_inputs[3] = std::nullopt;  // seq_lens or the additive mask: no gradient
  result.reads = read_all_saved(ctx);
  return result;
}

// One head's channels in a [B, seq, heads x width] (or [seq, B, ...]) tensor: the offset of
// row `position` of batch `b`, head `h`.
struct HeadView {
  bool sbhd;
  int64_t batch, seq, heads, width;
  HeadView(const AttentionConfig& c, const Shape& t, int64_t heads_in, int64_t width_in)
      : sbhd(c.sbhd), batch(c.batch_of(t)), seq(c.seq_of(t)), heads(heads_in), width(width_in) {}
  size_t at(int64_t b, int64_t position, int64_t h) const {
    const int64_t row = sbhd ? position * batch + b : b * seq + position;
    return static_cast<size_t>((row * heads + h) * width);
  }
};

// The three views, and each sequence's valid length: seq_lens when given (checked), else
// the keys' sequence.
struct AttentionViews {
  HeadView q, k, v, o;
  int64_t group;  // query heads per kv head
  std::vector<int64_t> lengths;
  // The additive mask, broadcast: element (b, h, i, j) is at b * mask_strides[0] + ... (0
  // along a broadcast dim).
  const HostTensor* mask = nullptr;
  int64_t mask_strides[4] = {0, 0, 0, 0};
  double mask_at(int64_t b, int64_t h, int64_t i, int64_t j) const {
    if (!mask) return 0.0;
    return mask->values[static_cast<size_t>(b * mask_strides[0] + h * mask_strides[1] + i * mask_strides[2] + j * mask_strides[3])];
  }
};

AttentionViews views_of(const AttentionConfig& c, const HostTensor& q, const HostTensor& k, const HostTensor* seq_lens,
                        const HostTensor* mask = nullptr) {
  Shape o = q.shape;
  o.dims[2] = c.heads * c.v_head_dim;
  AttentionViews views{HeadView(c, q.shape, c.heads, c.head_dim), HeadView(c, k.shape, c.kv_heads, c.head_dim),
                       HeadView(c, k.shape, c.kv_heads, c.v_head_dim), HeadView(c, o, c.heads, c.v_head_dim), c.heads / c.kv_heads,
                       std::vector<int64_t>(static_cast<size_t>(c.batch_of(q.shape)), c.seq_of(k.shape))};
  if (mask) {
    views.mask = mask;
    const Shape& m = mask->shape;
    int64_t stride = 1;
    for (size_t d = m.rank(); d-- > 0;) {
      views.mask_strides[4 - m.rank() + d] = m[d] == 1 && d + 2 < m.rank() ? 0 : stride;
      stride *= m[d];
    }
  }
  if (!seq_lens) return views;
  for (size_t b = 0; b < views.lengths.size(); ++b) {
    const float v = seq_lens->values.at(b);
    TEC_USER_CHECK(v >= 0.0f && v <= static_cast<float>(views.k.seq), {})
        << "seq_lens[" << b << "] = " << v << ": a sequence's valid length must be in [0, " << views.k.seq << "]";
    views.lengths[b] = static_cast<int64_t>(v);
  }
  return views;
}

// Whether query row i of batch b attends at all (padded rows do not).
bool row_attends(const AttentionViews& v, const HostTensor* seq_lens, int64_t b, int64_t i) {
  return !seq_lens || i < v.lengths[static_cast<size_t>(b)];
}

// scale q_i . k_j for the keys query i sees (j < the valid length, and j <= i when causal), in fp64.
void scores_of(const AttentionConfig& c, const AttentionViews& views, const float* qi, const HostTensor& k, int64_t b, int64_t h,
               int64_t i, std::vector<double>& scores) {
  const int64_t kvh = h / views.group;
  const int64_t length = views.lengths[static_cast<size_t>(b)];
  const int64_t keys = c.causal ? std::min(i + 1, length) : length;
  scores.resize(static_cast<size_t>(std::max<int64_t>(keys, 0)));
  for (int64_t j = 0; j < keys; ++j) {
    const float* kj = &k.values[views.k.at(b, j, kvh)];
    double dot = 0.0;
    for (int64_t d = 0; d < c.head_dim; ++d) dot += static_cast<double>(qi[d]) * kj[d];
    scores[static_cast<size_t>(j)] = c.scale * dot + views.mask_at(b, h, i, j);
  }
}

double log_sum_exp(const std::vector<double>& scores) {
  const double top = *std::max_element(scores.begin(), scores.end());
  double sum = 0.0;
  for (double s : scores) sum += std::exp(s - top);
  return top + std::log(sum);
}

// in: q, k, v, [seq_lens]. out: o, and what train plans keep: the log-sum-exp [B, heads, S] (0
// for padded rows) and o's copy.
std::vector<HostTensor> reference_attention(const Attributes& attrs, const std::vector<HostTensor>& in) {
  const AttentionConfig c(attrs);
  const HostTensor &q = in[0], &k = in[1], &v = in[2];
  const HostTensor* fourth = in.size() > 3 && !in[3].values.empty() ? &in[3] : nullptr;
  const HostTensor* seq_lens = c.additive_mask ? nullptr : fourth;
  const AttentionViews views = views_of(c, q, k, seq_lens, c.additive_mask ? fourth : nullptr);
  const int64_t batch = views.q.batch, seq = views.q.seq;
  Shape out_shape = q.shape;
  out_shape.dims[2] = c.heads * c.v_head_dim;
  HostTensor o{out_shape, std::vector<float>(static_cast<size_t>(out_shape.numel()))};
  HostTensor lse{Shape{batch, c.heads, seq}, std::vector<float>(static_cast<size_t>(batch * c.heads * seq))};
  parallel_for(batch * c.heads * seq, [&](int64_t index) {
    const int64_t b = index / (c.heads * seq), h = index / seq % c.heads, i = index % seq, kvh = h / views.group;
    if (!row_attends(views, seq_lens, b, i)) return;  // a padded row: zeros (o starts so), lse 0
    std::vector<double> scores;
    scores_of(c, views, &q.values[views.q.at(b, i, h)], k, b, h, i, scores);
    if (scores.empty()) return;  // no key to attend (an empty sequence): zeros
    const double row_lse = log_sum_exp(scores);
    std::vector<double> out(static_cast<size_t>(c.v_head_dim), 0.0);
    for (size_t j = 0; j < scores.size(); ++j) {
      const double p = std::exp(scores[j] - row_lse);
      const float* vj = &v.values[views.v.at(b, static_cast<int64_t>(j), kvh)];
      for (int64_t d = 0; d < c.v_head_dim; ++d) out[static_cast<size_t>(d)] += p * vj[d];
    }
    for (int64_t d = 0; d < c.v_head_dim; ++d) o.values[views.o.at(b, i, h) + static_cast<size_t>(d)] = static_cast<float>(out[static_cast<size_t>(d)]);
    lse.values[static_cast<size_t>(index)] = static_cast<float>(row_lse);
  });
  HostTensor saved_o = o;
  return {std::move(o), std::move(lse), std::move(saved_o)};
}

// in: q, k, v, [seq_lens], the log-sum-exp, o (unused here), do. With P = exp(scale q k^T - lse): dv = P^T do,
// ds = P (do v^T - rowsum(do o)), dq = scale ds k, dk = scale ds^T q; a kv head's dk and dv sum
// over the query heads it serves. In fp64; o is made again from P and v.
std::vector<HostTensor> backward_reference_attention(const Attributes& attrs, const std::vector<HostTensor>& in) {
  const AttentionConfig c(attrs);
  const bool fourth = in.size() == 7;  // seq_lens or the additive mask
  const HostTensor &q = in[0], &k = in[1], &v = in[2], &lse = in[fourth ? 4 : 3], &dout = in[fourth ? 6 : 5];
  const HostTensor* seq_lens = fourth && !c.additive_mask ? &in[3] : nullptr;
  const AttentionViews views = views_of(c, q, k, seq_lens, fourth && c.additive_mask ? &in[3] : nullptr);
  const int64_t seq = views.q.seq;
  HostTensor dq{q.shape, std::vector<float>(q.values.size())};
  std::vector<double> dk(k.values.size(), 0.0), dv(v.values.size(), 0.0);
  // One task per (batch, kv head): it alone writes that kv head's dk and dv.
  parallel_for(views.q.batch * c.kv_heads, [&](int64_t task) {
    const int64_t b = task / c.kv_heads, kvh = task % c.kv_heads;
    std::vector<double> scores, p, dq_row(static_cast<size_t>(c.head_dim)), o(static_cast<size_t>(c.v_head_dim));
    for (int64_t h = kvh * views.group; h < (kvh + 1) * views.group; ++h)
      for (int64_t i = 0; i < seq; ++i) {
        if (!row_attends(views, seq_lens, b, i)) continue;  // padded rows: no gradient (dq stays 0)
        const float* qi = &q.values[views.q.at(b, i, h)];
        const float* doi = &dout.values[views.o.at(b, i, h)];
        scores_of(c, views, qi, k, b, h, i, scores);
        const double row_lse = lse.values[static_cast<size_t>((b * c.heads + h) * seq + i)];
        p.resize(scores.size());
        std::fill(o.begin(), o.end(), 0.0);
        for (size_t j = 0; j < scores.size(); ++j) {
          p[j] = std::exp(scores[j] - row_lse);
          const float* vj = &v.values[views.v.at(b, static_cast<int64_t>(j), kvh)];
          for (int64_t d = 0; d < c.v_head_dim; ++d) o[static_cast<size_t>(d)] += p[j] * vj[d];
        }
        double do_dot_o = 0.0;
        for (int64_t d = 0; d < c.v_head_dim; ++d) do_dot_o += doi[d] * o[static_cast<size_t>(d)];
        std::fill(dq_row.begin(), dq_row.end(), 0.0);
        for (size_t j = 0; j < scores.size(); ++j) {
          const size_t kj = views.k.at(b, static_cast<int64_t>(j), kvh), vj = views.v.at(b, static_cast<int64_t>(j), kvh);
          double dp = 0.0;
          for (int64_t d = 0; d < c.v_head_dim; ++d) {
            dp += doi[d] * static_cast<double>(v.values[vj + static_cast<size_t>(d)]);
            dv[vj + static_cast<size_t>(d)] += p[j] * doi[d];
          }
          const double ds = p[j] * (dp - do_dot_o);
          for (int64_t d = 0; d < c.head_dim; ++d) {
            dk[kj + static_cast<size_t>(d)] += c.scale * ds * qi[d];
            dq_row[static_cast<size_t>(d)] += c.scale * ds * k.values[kj + static_cast<size_t>(d)];
          }
        }
        for (int64_t d = 0; d < c.head_dim; ++d) dq.values[views.q.at(b, i, h) + static_cast<size_t>(d)] = static_cast<float>(dq_row[static_cast<size_t>(d)]);
      }
  });
  auto as_float = [](const Shape& shape, const std::vector<double>& values) {
    return HostTensor{shape, std::vector<float>(values.begin(), values.end())};
  };
  std::vector<HostTensor> grads{std::move(dq), as_float(k.shape, dk), as_float(v.shape, dv)};
  if (fourth) grads.emplace_back();  // seq_lens or the mask: no gradient
  return grads;
}

}  // namespace

void register_attention_ops(OpRegistry& registry) {
  registry.add(OpDef{
      .name = "rope",
      .summary = "rotary position embedding of the query or key heads (half-split or interleaved pairs; a GPU row kernel)",
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
  registry.add(OpDef{
      .name = "attention",
      .summary = "scaled dot-product attention of q, k, v (MHA, GQA, MQA; self or cross; causal or not; an optional fourth input: "
                 "a padding mask as int32 seq_lens [B], or an additive mask; cuDNN SDPA on the GPU, its backward on the CPU reference)",
      .min_inputs = 3,
      .max_inputs = 4,
      .attrs =
          {
              {"heads", AttrType::int_, std::nullopt, {}, "query heads"},
              {"kv_heads", AttrType::int_, AttrValue{int64_t{0}}, {}, "key and value heads, dividing heads (0: heads)"},
              {"head_dim", AttrType::int_, std::nullopt, {}, "channels per head of q and k"},
              {"v_head_dim", AttrType::int_, AttrValue{int64_t{0}}, {}, "channels per head of v and the output (0: head_dim)"},
              {"causal", AttrType::bool_, AttrValue{false}, {}, "query i sees keys 0..i (top-left aligned)"},
              {"scale", AttrType::float_, AttrValue{0.0}, {}, "the softmax scale (0: 1 / sqrt(head_dim))"},
              {"layout", AttrType::string_, AttrValue{std::string("bshd")}, {"bshd", "sbhd"},
               "bshd: inputs [batch, sequence, heads x head_dim]; sbhd: [sequence, batch, heads x head_dim]"},
              {"mask", AttrType::string_, AttrValue{std::string("padding")}, {"padding", "additive"},
               "what the optional fourth input is: padding, int32 seq_lens [B]; additive, a float mask added to the scaled "
               "scores, broadcast to [B, heads, S, S_kv]"},
          },
      .check_attributes = check_attention_attributes,
      .infer = infer_attention,
      .infer_backward = infer_attention_backward,
      .reference = reference_attention,
      .backward_reference = backward_reference_attention,
  });
}

}  // namespace tec
