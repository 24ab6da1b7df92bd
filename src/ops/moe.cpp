// The MoE layer (ARCHITECTURE.md §13): moe_router picks k experts per token, moe_permute
// puts the tokens in expert order and counts them (m_splits), grouped_linear runs one GEMM
// per expert over its rows (TE's GroupedLinear), moe_unpermute takes the k expert outputs of
// each token back to token order as their weighted sum. Routing is data: m_splits and the row
// map are tensors the graph makes every run, so one plan serves any routing. In train plans
// each op has a backward on the CPU reference; the routing (indices, m_splits, row map) gets
// no gradient, and the router's gradient reaches its logits through the k chosen weights.
//
// Integer tensors (indices, m_splits, row map) travel as int32; the CPU reference holds them
// as exact floats, so the ops cap the token slots at 2^24.
#include <cmath>

#include "core/parallel.h"
#include "ops/common.h"
#include "tec_math.h"

namespace tec {

namespace {

constexpr int64_t kMaxTokenSlots = int64_t{1} << 24;  // exact in float
constexpr int64_t kMaxExperts = 1024;

const std::string& input_name(const InferContext& ctx, int slot) {
  return ctx.graph.value(ctx.node.inputs.at(static_cast<size_t>(slot))).name;
}

void require_int32(const InferContext& ctx, int slot, const Shape& shape, const char* what) {
  const TensorProto& p = ctx.inputs.at(static_cast<size_t>(slot));
  TEC_USER_CHECK(p.dtype == DType::int32 && !p.is_quantized(), ctx.error)
      << "input '" << input_name(ctx, slot) << "' (" << what << ") must be int32, got " << to_string(p.dtype);
  TEC_USER_CHECK(p.shape == shape, ctx.error)
      << "input '" << input_name(ctx, slot) << "' (" << what << ") has shape " << p.shape.str() << ", expected " << shape.str();
}

void check_token_slots(const InferContext& ctx, int64_t slots) {
  TEC_USER_CHECK(slots <= kMaxTokenSlots, ctx.error)
      << "tokens x top_k = " << slots << " exceeds the " << kMaxTokenSlots << " token slots an MoE layer routes";
}

// The integer an int32 tensor holds (the CPU reference sees them as exact floats); callers check the range first.
int64_t index_value(float v) { return static_cast<int64_t>(v); }

// ---- moe_router ----

struct RouterConfig {
  int64_t hidden, experts, top_k;
  int score_function;
  bool normalize;
  explicit RouterConfig(const Attributes& a)
      : hidden(a.get_int("in_features", 0)),
        experts(a.get_int("num_experts", 0)),
        top_k(a.get_int("top_k", 0)),
        score_function(a.get_string("score_function", "softmax") == "sigmoid" ? TEC_SCORE_SIGMOID : TEC_SCORE_SOFTMAX),
        normalize(a.get_bool("normalize_topk", false)) {}
};

void check_router_attributes(const Attributes& attrs, const ErrorContext& ctx) {
  const RouterConfig c(attrs);
  TEC_USER_CHECK(c.hidden >= 1, ctx) << "in_features must be positive, got " << c.hidden;
  TEC_USER_CHECK(c.experts >= 1 && c.experts <= kMaxExperts, ctx)
      << "num_experts must be in [1, " << kMaxExperts << "], got " << c.experts;
  TEC_USER_CHECK(c.top_k >= 1 && c.top_k <= c.experts, ctx)
      << "top_k must be in [1, num_experts = " << c.experts << "], got " << c.top_k;
}

std::vector<ParamSpec> router_params(const Attributes& attrs, DType dtype) {
  const RouterConfig c(attrs);
  return {{"weight", Shape{c.experts, c.hidden}, dtype, 0.0f, 1.0f / std::sqrt(static_cast<float>(c.hidden))}};
}

InferResult infer_router(const InferContext& ctx) {
  const RouterConfig c(ctx.node.attrs);
  require_rank_at_least(ctx, 0, 1);
  require_high_precision(ctx, 0);
  require_last_dim(ctx, 0, c.hidden, "in_features");
  const int64_t tokens = ctx.inputs[0].shape.rows();
  check_token_slots(ctx, checked_mul(tokens, c.top_k));
  InferResult result;
  result.outputs.push_back(TensorProto::dense(Shape{tokens, c.top_k}, DType::fp32));
  result.outputs.push_back(TensorProto::dense(Shape{tokens, c.top_k}, DType::int32));
  // The backward makes the scores again from x and W (as the forward did, bit for bit) rather
  // than keep [tokens, experts] of them.
  result.saved.push_back(save_input(ctx, 0, "input"));
  result.saved.push_back(save_input(ctx, 1, "weight"));
  return result;
}

BackwardResult infer_router_backward(const BackwardContext& ctx) {
  BackwardResult result;
  result.grad_inputs = grads_like_inputs(ctx);
  result.reads = {{0, Usage{true, false}}, {1, Usage{true, false}}};
  result.grad_reads = {{0, false, false}};  // the weights'; the indices have no gradient
  return result;
}

// logits[e] = x . W[e] in the row kernels' sum order (tec_row_sum_order), then
// tec_router_select: the GPU's router kernel computes the same bits.
std::vector<HostTensor> reference_router(const Attributes& attrs, const std::vector<HostTensor>& in) {
  const RouterConfig c(attrs);
  const HostTensor& x = in[0];
  const HostTensor& w = in[1];
  const int64_t tokens = x.shape.rows(), k = c.top_k;
  HostTensor weights{Shape{tokens, k}, std::vector<float>(static_cast<size_t>(tokens * k))};
  HostTensor indices{Shape{tokens, k}, std::vector<float>(static_cast<size_t>(tokens * k))};
  parallel_for(tokens, [&](int64_t t) {
    std::vector<float> scores(static_cast<size_t>(c.experts));
    const float* xt = &x.values[static_cast<size_t>(t * c.hidden)];
    for (int64_t e = 0; e < c.experts; ++e) {
      const float* we = &w.values[static_cast<size_t>(e * c.hidden)];
      scores[static_cast<size_t>(e)] = tec_row_sum_order(c.hidden, [&](long long i) { return xt[i] * we[i]; });
    }
    std::vector<int> chosen(static_cast<size_t>(k));
    tec_router_select(scores.data(), static_cast<int>(c.experts), static_cast<int>(k), c.score_function, c.normalize ? 1 : 0,
                      &weights.values[static_cast<size_t>(t * k)], chosen.data());
    for (int64_t j = 0; j < k; ++j) indices.values[static_cast<size_t>(t * k + j)] = static_cast<float>(chosen[static_cast<size_t>(j)]);
  });
  return {std::move(weights), std::move(indices)};
}

// in: x, W, d(weights). The scores and the choice made again as the forward made them, then
// d(weights) back through the normalisation (w_j = p_j / S: dp_j = (dw_j - sum_m dw_m w_m) / S)
// and the score function to the logits (softmax: dl = p (dp - sum p dp); sigmoid: dl = dp p
// (1 - p)); dx = dl W, dW = dl^T x. Every sum in fp32, in index order.
std::vector<HostTensor> backward_reference_router(const Attributes& attrs, const std::vector<HostTensor>& in) {
  const RouterConfig c(attrs);
  const HostTensor& x = in[0];
  const HostTensor& w = in[1];
  const HostTensor& dweights = in[2];
  const int64_t tokens = x.shape.rows(), k = c.top_k, experts = c.experts, h = c.hidden;
  std::vector<float> dlogits(static_cast<size_t>(tokens * experts));
  parallel_for(tokens, [&](int64_t t) {
    std::vector<float> p(static_cast<size_t>(experts)), weights(static_cast<size_t>(k)), dp(static_cast<size_t>(experts), 0.0f);
    std::vector<int> chosen(static_cast<size_t>(k));
    const float* xt = &x.values[static_cast<size_t>(t * h)];
    for (int64_t e = 0; e < experts; ++e) {
      const float* we = &w.values[static_cast<size_t>(e * h)];
      p[static_cast<size_t>(e)] = tec_row_sum_order(h, [&](long long i) { return xt[i] * we[i]; });
    }
    tec_router_select(p.data(), static_cast<int>(experts), static_cast<int>(k), c.score_function, c.normalize ? 1 : 0, weights.data(),
                      chosen.data());  // p: every expert's score now
    const float* dw = &dweights.values[static_cast<size_t>(t * k)];
    float total = 0.0f, dot = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      total += p[static_cast<size_t>(chosen[static_cast<size_t>(j)])];
      dot += dw[j] * weights[static_cast<size_t>(j)];
    }
    for (int64_t j = 0; j < k; ++j)
      dp[static_cast<size_t>(chosen[static_cast<size_t>(j)])] = c.normalize ? (dw[j] - dot) / total : dw[j];
    float* dl = &dlogits[static_cast<size_t>(t * experts)];
    if (c.score_function == TEC_SCORE_SOFTMAX) {
      float p_dot_dp = 0.0f;
      for (int64_t e = 0; e < experts; ++e) p_dot_dp += p[static_cast<size_t>(e)] * dp[static_cast<size_t>(e)];
      for (int64_t e = 0; e < experts; ++e) dl[e] = p[static_cast<size_t>(e)] * (dp[static_cast<size_t>(e)] - p_dot_dp);
    } else {
      for (int64_t e = 0; e < experts; ++e) dl[e] = dp[static_cast<size_t>(e)] * p[static_cast<size_t>(e)] * (1.0f - p[static_cast<size_t>(e)]);
    }
  });
  HostTensor dx{x.shape, std::vector<float>(static_cast<size_t>(tokens * h))};
  parallel_for(tokens, [&](int64_t t) {
    for (int64_t i = 0; i < h; ++i) {
      float acc = 0.0f;
      for (int64_t e = 0; e < experts; ++e) acc += dlogits[static_cast<size_t>(t * experts + e)] * w.values[static_cast<size_t>(e * h + i)];
      dx.values[static_cast<size_t>(t * h + i)] = acc;
    }
  });
  HostTensor dw{w.shape, std::vector<float>(static_cast<size_t>(experts * h))};
  parallel_for(experts, [&](int64_t e) {
    for (int64_t i = 0; i < h; ++i) {
      float acc = 0.0f;
      for (int64_t t = 0; t < tokens; ++t) acc += dlogits[static_cast<size_t>(t * experts + e)] * x.values[static_cast<size_t>(t * h + i)];
      dw.values[static_cast<size_t>(e * h + i)] = acc;
    }
  });
  return {std::move(dx), std::move(dw)};
}

// ---- moe_permute ----

int64_t experts_of(const Attributes& attrs) { return attrs.get_int("num_experts", 0); }

void check_experts_attribute(const Attributes& attrs, const ErrorContext& ctx) {
  const int64_t e = experts_of(attrs);
  TEC_USER_CHECK(e >= 1 && e <= kMaxExperts, ctx) << "num_experts must be in [1, " << kMaxExperts << "], got " << e;
}

InferResult infer_permute(const InferContext& ctx) {
  const int64_t experts = experts_of(ctx.node.attrs);
  require_rank_at_least(ctx, 0, 1);
  require_high_precision(ctx, 0);
  const TensorProto& x = ctx.inputs[0];
  const TensorProto& indices = ctx.inputs[1];
  TEC_USER_CHECK(indices.shape.rank() == 2 && indices.shape[0] == x.shape.rows(), ctx.error)
      << "input '" << input_name(ctx, 1) << "' (the experts of each token) needs shape [" << x.shape.rows()
      << " tokens, top_k], got " << indices.shape.str();
  require_int32(ctx, 1, indices.shape, "the experts of each token");
  const int64_t slots = indices.shape.numel();
  check_token_slots(ctx, slots);
  InferResult result;
  result.outputs.push_back(TensorProto::dense(Shape{slots, x.shape.cols()}, x.dtype));
  result.outputs.push_back(TensorProto::dense(Shape{experts}, DType::int32));
  result.outputs.push_back(TensorProto::dense(Shape{slots}, DType::int32));
  result.saved.push_back(save_input(ctx, 1, "indices"));  // the backward routes the gradient back by them
  return result;
}

BackwardResult infer_permute_backward(const BackwardContext& ctx) {
  BackwardResult result;
  result.grad_inputs = {dense_like(ctx.inputs[0]), std::nullopt};
  result.reads = {{0, Usage{true, false}}};
  result.grad_reads = {{0, false, false}};  // the permuted tokens'; m_splits and the row map have none
  return result;
}

// Slot s = t * k + j (token t's j-th expert) goes to row rows[s] of the permuted tokens: rows
// in expert order, and within an expert in slot order (stable, so the layout depends on the
// routing alone). `counts` gets the rows per expert.
std::vector<int64_t> permuted_rows(const HostTensor& indices, int64_t experts, std::vector<int64_t>& counts) {
  const int64_t slots = indices.shape.numel(), k = indices.shape.cols();
  counts.assign(static_cast<size_t>(experts), 0);
  for (int64_t s = 0; s < slots; ++s) {
    const float v = indices.values[static_cast<size_t>(s)];
    TEC_USER_CHECK(v >= 0.0f && v < static_cast<float>(experts), {})
        << "token " << s / k << " is routed to expert " << v << " (slot " << s % k << "), outside [0, " << experts << ")";
    ++counts[static_cast<size_t>(index_value(v))];
  }
  std::vector<int64_t> next(static_cast<size_t>(experts), 0);
  for (int64_t e = 1; e < experts; ++e) next[static_cast<size_t>(e)] = next[static_cast<size_t>(e - 1)] + counts[static_cast<size_t>(e - 1)];
  std::vector<int64_t> rows(static_cast<size_t>(slots));
  for (int64_t s = 0; s < slots; ++s) rows[static_cast<size_t>(s)] = next[static_cast<size_t>(index_value(indices.values[static_cast<size_t>(s)]))]++;
  return rows;
}

std::vector<HostTensor> reference_permute(const Attributes& attrs, const std::vector<HostTensor>& in) {
  const HostTensor& x = in[0];
  const HostTensor& indices = in[1];
  const int64_t slots = indices.shape.numel(), k = indices.shape.cols(), cols = x.shape.cols();
  std::vector<int64_t> counts;
  const std::vector<int64_t> rows = permuted_rows(indices, experts_of(attrs), counts);
  HostTensor permuted{Shape{slots, cols}, std::vector<float>(static_cast<size_t>(slots * cols))};
  HostTensor m_splits{Shape{static_cast<int64_t>(counts.size())}, std::vector<float>(counts.begin(), counts.end())};
  HostTensor row_map{Shape{slots}, std::vector<float>(rows.begin(), rows.end())};
  for (int64_t s = 0; s < slots; ++s)
    std::copy_n(&x.values[static_cast<size_t>((s / k) * cols)], cols, &permuted.values[static_cast<size_t>(rows[static_cast<size_t>(s)] * cols)]);
  return {std::move(permuted), std::move(m_splits), std::move(row_map)};
}

// in: the indices, d(permuted). dx[t] = the sum over j of d(permuted)[row of slot t * k + j],
// j from 0 up, in fp32.
std::vector<HostTensor> backward_reference_permute(const Attributes& attrs, const std::vector<HostTensor>& in) {
  const HostTensor& indices = in[0];
  const HostTensor& dpermuted = in[1];
  const int64_t tokens = indices.shape.rows(), k = indices.shape.cols(), cols = dpermuted.shape.cols();
  std::vector<int64_t> counts;
  const std::vector<int64_t> rows = permuted_rows(indices, experts_of(attrs), counts);
  HostTensor dx{Shape{tokens, cols}, std::vector<float>(static_cast<size_t>(tokens * cols))};
  parallel_for(tokens, [&](int64_t t) {
    for (int64_t c = 0; c < cols; ++c) {
      float acc = 0.0f;
      for (int64_t j = 0; j < k; ++j) acc += dpermuted.values[static_cast<size_t>(rows[static_cast<size_t>(t * k + j)] * cols + c)];
      dx.values[static_cast<size_t>(t * cols + c)] = acc;
    }
  });
  return {std::move(dx), HostTensor{}};
}

// ---- grouped_linear ----

struct GroupedConfig {
  int64_t gemms, in_features, out_features;
  bool bias;
  explicit GroupedConfig(const Attributes& a)
      : gemms(a.get_int("num_gemms", 0)),
        in_features(a.get_int("in_features", 0)),
        out_features(a.get_int("out_features", 0)),
        bias(a.get_bool("bias", false)) {}
};

void check_grouped_attributes(const Attributes& attrs, const ErrorContext& ctx) {
  const GroupedConfig c(attrs);
  TEC_USER_CHECK(c.gemms >= 1 && c.gemms <= kMaxExperts, ctx) << "num_gemms must be in [1, " << kMaxExperts << "], got " << c.gemms;
  TEC_USER_CHECK(c.in_features >= 1 && c.out_features >= 1, ctx)
      << "in_features and out_features must be positive, got " << c.in_features << " and " << c.out_features;
}

std::vector<ParamSpec> grouped_params(const Attributes& attrs, DType dtype) {
  const GroupedConfig c(attrs);
  const float stddev = 1.0f / std::sqrt(static_cast<float>(c.in_features));
  std::vector<ParamSpec> params{{"weight", Shape{c.gemms, c.out_features, c.in_features}, dtype, 0.0f, stddev, c.gemms}};
  if (c.bias) params.push_back({"bias", Shape{c.gemms, c.out_features}, dtype, 0.0f, 0.02f});
  return params;
}

InferResult infer_grouped(const InferContext& ctx) {
  const GroupedConfig c(ctx.node.attrs);
  TEC_USER_CHECK(ctx.inputs[0].shape.rank() == 2, ctx.error)
      << "input '" << input_name(ctx, 0) << "' (the tokens in expert order) must be 2-D [rows, in_features], got "
      << ctx.inputs[0].shape.str();
  require_last_dim(ctx, 0, c.in_features, "in_features");
  require_int32(ctx, 1, Shape{c.gemms}, "m_splits, the rows of each GEMM");
  check_token_slots(ctx, ctx.inputs[0].shape.rows());
  const TensorProto& x = ctx.inputs[0];
  const TensorProto& w = ctx.inputs[2];
  TEC_INTERNAL_CHECK(w.shape == Shape({c.gemms, c.out_features, c.in_features}), ctx.error) << "weight shape " << w.shape.str();
  // Each member of a grouped FP8 weight is one GEMM's operand: cuBLASLt's and tec's FP8
  // GEMMs want K and N in multiples of 16.
  for (const auto& [operand, dim, name] : {std::tuple{&x, c.in_features, "K (in_features)"}, std::tuple{&w, c.out_features, "N (out_features)"}})
    if (operand->is_quantized())
      TEC_USER_CHECK(dim % 16 == 0, ctx.error) << to_string(operand->quantizer->kind) << " grouped GEMM needs " << name
                                               << " divisible by 16, got " << dim;
  InferResult result;
  result.outputs.push_back(TensorProto::dense(x.shape.with_last(c.out_features), x.dtype));
  result.saved.push_back(save_input(ctx, 0, "input"));
  result.saved.push_back(save_input(ctx, 1, "m_splits"));
  result.saved.push_back(save_input(ctx, 2, "weight"));
  return result;
}

BackwardResult infer_grouped_backward(const BackwardContext& ctx) {
  const GroupedConfig c(ctx.node.attrs);
  BackwardResult result;
  result.grad_inputs = grads_like_inputs(ctx);
  result.grad_inputs[1] = std::nullopt;  // m_splits: routing
  // As linear's: wgrad reads x^T (columnwise), dgrad W^T (columnwise), each expert's own rows.
  result.reads = {{0, Usage{false, true}}, {1, Usage{true, false}}, {2, Usage{false, true}}};
  result.grad_reads = {{0, true, false}, {0, true, true}};
  if (c.bias) result.grad_reads.push_back({0, false, false});
  return result;
}

// The expert of each of `rows` rows: m_splits[e] rows for expert e, in expert order. Hostile
// splits (negative, or not summing to the rows) are refused naming the split.
std::vector<int64_t> experts_of_rows(const HostTensor& splits, int64_t gemms, int64_t rows) {
  std::vector<int64_t> expert_of_row(static_cast<size_t>(rows));
  int64_t row = 0;
  for (int64_t e = 0; e < gemms; ++e) {
    const float m = splits.values[static_cast<size_t>(e)];
    TEC_USER_CHECK(m >= 0.0f && m <= static_cast<float>(rows - row), {})
        << "m_splits[" << e << "] = " << m << ": the splits must be >= 0 and sum to the " << rows << " rows of the input (the "
        << "experts before it take " << row << ")";
    for (int64_t i = 0; i < index_value(m); ++i) expert_of_row[static_cast<size_t>(row + i)] = e;
    row += index_value(m);
  }
  TEC_USER_CHECK(row == rows, {}) << "m_splits sum to " << row << ", the input has " << rows << " rows";
  return expert_of_row;
}

// Rows [offset_e, offset_e + m_splits[e]) of x times W[e]^T (+ b[e]), each element one fp32
// sum along K in index order, as linear's reference.
std::vector<HostTensor> reference_grouped(const Attributes& attrs, const std::vector<HostTensor>& in) {
  const GroupedConfig c(attrs);
  const HostTensor& x = in[0];
  const HostTensor& w = in[2];
  const int64_t rows = x.shape.rows(), k = c.in_features, n = c.out_features;
  const std::vector<int64_t> expert_of_row = experts_of_rows(in[1], c.gemms, rows);
  HostTensor y{x.shape.with_last(n), std::vector<float>(static_cast<size_t>(rows * n))};
  parallel_for(rows, [&](int64_t r) {
    const int64_t e = expert_of_row[static_cast<size_t>(r)];
    const float* xr = &x.values[static_cast<size_t>(r * k)];
    for (int64_t j = 0; j < n; ++j) {
      const float* wj = &w.values[static_cast<size_t>((e * n + j) * k)];
      float acc = 0.0f;
      for (int64_t i = 0; i < k; ++i) acc += xr[i] * wj[i];
      if (c.bias) acc += in[3].values[static_cast<size_t>(e * n + j)];
      y.values[static_cast<size_t>(r * n + j)] = acc;
    }
  });
  return {std::move(y)};
}

// in: x (columnwise copy), m_splits, W (columnwise copy), dy quantized rowwise, dy quantized
// columnwise, [dy]. Per expert e over its rows: dx = dy W[e], dW[e] = dy^T x, db[e] = the
// column sums of dy (tec_column_sum_order over the expert's rows); the GEMMs' sums in fp32 in
// index order. An expert with no rows gets zero dW and db.
std::vector<HostTensor> backward_reference_grouped(const Attributes& attrs, const std::vector<HostTensor>& in) {
  const GroupedConfig c(attrs);
  const HostTensor& x = in[0];
  const HostTensor& w = in[2];
  const HostTensor& dy_rows = in[3];
  const HostTensor& dy_cols = in[4];
  const int64_t rows = x.shape.rows(), k = c.in_features, n = c.out_features;
  const std::vector<int64_t> expert_of_row = experts_of_rows(in[1], c.gemms, rows);
  std::vector<int64_t> first_row(static_cast<size_t>(c.gemms + 1), 0);
  for (int64_t e = 0; e < c.gemms; ++e) first_row[static_cast<size_t>(e + 1)] = first_row[static_cast<size_t>(e)] + index_value(in[1].values[static_cast<size_t>(e)]);
  HostTensor dx{x.shape, std::vector<float>(static_cast<size_t>(rows * k))};
  parallel_for(rows, [&](int64_t r) {
    const int64_t e = expert_of_row[static_cast<size_t>(r)];
    const float* dy = &dy_rows.values[static_cast<size_t>(r * n)];
    for (int64_t i = 0; i < k; ++i) {
      float acc = 0.0f;
      for (int64_t j = 0; j < n; ++j) acc += dy[j] * w.values[static_cast<size_t>((e * n + j) * k + i)];
      dx.values[static_cast<size_t>(r * k + i)] = acc;
    }
  });
  HostTensor dw{w.shape, std::vector<float>(static_cast<size_t>(c.gemms * n * k))};
  parallel_for(c.gemms * n, [&](int64_t ej) {
    const int64_t e = ej / n, j = ej % n;
    for (int64_t i = 0; i < k; ++i) {
      float acc = 0.0f;
      for (int64_t r = first_row[static_cast<size_t>(e)]; r < first_row[static_cast<size_t>(e + 1)]; ++r)
        acc += dy_cols.values[static_cast<size_t>(r * n + j)] * x.values[static_cast<size_t>(r * k + i)];
      dw.values[static_cast<size_t>(ej * k + i)] = acc;
    }
  });
  std::vector<HostTensor> grads{std::move(dx), HostTensor{}, std::move(dw)};
  if (c.bias) {
    const HostTensor& dy = in[5];
    HostTensor db{Shape{c.gemms, n}, std::vector<float>(static_cast<size_t>(c.gemms * n))};
    for (int64_t e = 0; e < c.gemms; ++e) {
      const int64_t begin = first_row[static_cast<size_t>(e)];
      tec_column_sum_order(first_row[static_cast<size_t>(e + 1)] - begin, n, &db.values[static_cast<size_t>(e * n)],
                           [&](int64_t r, int64_t j) { return dy.values[static_cast<size_t>((begin + r) * n + j)]; });
    }
    grads.push_back(std::move(db));
  }
  return grads;
}

// ---- moe_unpermute ----

InferResult infer_unpermute(const InferContext& ctx) {
  const TensorProto& y = ctx.inputs[0];
  const TensorProto& weights = ctx.inputs[2];
  TEC_USER_CHECK(y.shape.rank() == 2, ctx.error)
      << "input '" << input_name(ctx, 0) << "' (the expert outputs in expert order) must be 2-D, got " << y.shape.str();
  require_high_precision(ctx, 0);
  TEC_USER_CHECK(weights.shape.rank() == 2 && weights.shape.numel() == y.shape[0] && weights.dtype == DType::fp32 &&
                     !weights.is_quantized(),
                 ctx.error)
      << "input '" << input_name(ctx, 2) << "' (the router's weights) must be fp32 [tokens, top_k] with tokens x top_k = "
      << y.shape[0] << " rows, got " << to_string(weights.dtype) << " " << weights.shape.str();
  require_int32(ctx, 1, Shape{y.shape[0]}, "the row map, moe_permute's second extra output");
  InferResult result;
  result.outputs.push_back(TensorProto::dense(Shape{weights.shape[0], y.shape.cols()}, y.dtype));
  for (int slot = 0; slot < 3; ++slot) result.saved.push_back(save_input(ctx, slot, slot == 0 ? "input" : slot == 1 ? "row_map" : "weights"));
  return result;
}

BackwardResult infer_unpermute_backward(const BackwardContext& ctx) {
  BackwardResult result;
  result.grad_inputs = grads_like_inputs(ctx);
  result.grad_inputs[1] = std::nullopt;  // the row map: routing
  result.reads = read_all_saved(ctx);
  return result;
}

void check_row_map(const HostTensor& row_map, int64_t rows) {
  for (size_t s = 0; s < row_map.values.size(); ++s) {
    const float r = row_map.values[s];
    TEC_USER_CHECK(r >= 0.0f && r < static_cast<float>(rows), {})
        << "row map entry " << s << " is " << r << ", outside the " << rows << " rows of the expert outputs";
  }
}

// out[t] = sum over j of weights[t, j] * y[row_map[t * k + j]], in fp32, j from 0 up.
std::vector<HostTensor> reference_unpermute(const Attributes&, const std::vector<HostTensor>& in) {
  const HostTensor& y = in[0];
  const HostTensor& row_map = in[1];
  const HostTensor& weights = in[2];
  const int64_t tokens = weights.shape[0], k = weights.shape.cols(), cols = y.shape.cols();
  check_row_map(row_map, y.shape.rows());
  HostTensor out{Shape{tokens, cols}, std::vector<float>(static_cast<size_t>(tokens * cols))};
  parallel_for(tokens, [&](int64_t t) {
    for (int64_t c = 0; c < cols; ++c) {
      float acc = 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t r = index_value(row_map.values[static_cast<size_t>(t * k + j)]);
        acc += weights.values[static_cast<size_t>(t * k + j)] * y.values[static_cast<size_t>(r * cols + c)];
      }
      out.values[static_cast<size_t>(t * cols + c)] = acc;
    }
  });
  return {std::move(out)};
}

// in: y, the row map, the weights, d(out). dy[row of slot s] = weights[s] * d(out)[s / k] (rows
// no slot maps to get zero); d(weights)[s] = the dot of d(out)[s / k] with y[row of s], in fp32
// in tec_row_sum_order (the GPU's block of TEC_ROW_THREADS per slot).
std::vector<HostTensor> backward_reference_unpermute(const Attributes&, const std::vector<HostTensor>& in) {
  const HostTensor& y = in[0];
  const HostTensor& row_map = in[1];
  const HostTensor& weights = in[2];
  const HostTensor& dout = in[3];
  const int64_t slots = weights.shape.numel(), k = weights.shape.cols(), cols = y.shape.cols();
  check_row_map(row_map, y.shape.rows());
  HostTensor dy{y.shape, std::vector<float>(y.values.size(), 0.0f)};
  HostTensor dweights{weights.shape, std::vector<float>(static_cast<size_t>(slots))};
  parallel_for(slots, [&](int64_t s) {
    const int64_t r = index_value(row_map.values[static_cast<size_t>(s)]);
    const float* d = &dout.values[static_cast<size_t>((s / k) * cols)];
    const float* yr = &y.values[static_cast<size_t>(r * cols)];
    dweights.values[static_cast<size_t>(s)] = tec_row_sum_order(cols, [&](long long c) { return d[c] * yr[c]; });
  });
  // In slot order on one thread: a row map that names a row twice (a hostile plan's) leaves the
  // last slot's values, the same every run.
  for (int64_t s = 0; s < slots; ++s) {
    const int64_t r = index_value(row_map.values[static_cast<size_t>(s)]);
    for (int64_t c = 0; c < cols; ++c)
      dy.values[static_cast<size_t>(r * cols + c)] = weights.values[static_cast<size_t>(s)] * dout.values[static_cast<size_t>((s / k) * cols + c)];
  }
  return {std::move(dy), HostTensor{}, std::move(dweights)};
}

}  // namespace

void register_moe_ops(OpRegistry& registry) {
  registry.add(OpDef{
      .name = "moe_router",
      .summary = "MoE router: logits x W^T, softmax or sigmoid scores, top-k experts per token (weights, and indices as "
                 "the extra output 'indices')",
      .min_inputs = 1,
      .max_inputs = 1,
      .extra_outputs = {"indices"},
      .attrs =
          {
              {"in_features", AttrType::int_, std::nullopt, {}, "H, the hidden size"},
              {"num_experts", AttrType::int_, std::nullopt, {}, "E, the experts"},
              {"top_k", AttrType::int_, std::nullopt, {}, "experts per token"},
              {"score_function", AttrType::string_, AttrValue{std::string("softmax")}, {"softmax", "sigmoid"},
               "softmax over all experts, or each expert's sigmoid"},
              {"normalize_topk", AttrType::bool_, AttrValue{false}, {}, "divide the k weights by their sum"},
          },
      .check_attributes = check_router_attributes,
      .params = router_params,
      .infer = infer_router,
      .infer_backward = infer_router_backward,
      .reference = reference_router,
      .backward_reference = backward_reference_router,
  });
  registry.add(OpDef{
      .name = "moe_permute",
      .summary = "tokens to expert order; extra outputs 'm_splits' (rows per expert) and 'row_map' (slot t*k+j -> row)",
      .min_inputs = 2,
      .max_inputs = 2,
      .extra_outputs = {"m_splits", "row_map"},
      .attrs = {{"num_experts", AttrType::int_, std::nullopt, {}, "E, the experts"}},
      .check_attributes = check_experts_attribute,
      .infer = infer_permute,
      .infer_backward = infer_permute_backward,
      .reference = reference_permute,
      .backward_reference = backward_reference_permute,
  });
  registry.add(OpDef{
      .name = "grouped_linear",
      .summary = "one GEMM per expert over its rows, y = x W[e]^T (+ b[e]), with the rows per expert (m_splits) read at run "
                 "time (TE GroupedLinear)",
      .min_inputs = 2,
      .max_inputs = 2,
      .attrs =
          {
              {"num_gemms", AttrType::int_, std::nullopt, {}, "E, the GEMMs (experts)"},
              {"in_features", AttrType::int_, std::nullopt, {}, "K"},
              {"out_features", AttrType::int_, std::nullopt, {}, "N"},
              {"bias", AttrType::bool_, AttrValue{false}, {}, "a bias per expert"},
          },
      .check_attributes = check_grouped_attributes,
      .params = grouped_params,
      .gemm_operands = [](const Node&) { return std::vector<GemmOperand>{{0, TensorRole::input}, {2, TensorRole::weight}}; },
      .infer = infer_grouped,
      .infer_backward = infer_grouped_backward,
      .reference = reference_grouped,
      .backward_reference = backward_reference_grouped,
  });
  registry.add(OpDef{
      .name = "moe_unpermute",
      .summary = "expert outputs back to token order: the router-weighted sum of each token's k rows",
      .min_inputs = 3,
      .max_inputs = 3,
      .attrs = {},
      .infer = infer_unpermute,
      .infer_backward = infer_unpermute_backward,
      .reference = reference_unpermute,
      .backward_reference = backward_reference_unpermute,
  });
}

}  // namespace tec
