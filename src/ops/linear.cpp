// linear: y = x W^T (+ b), TE's BasicLinear, optionally tensor parallel. The GEMM reads x
// and W as quantized operands (TN on Hopper); the backward needs the columnwise copies of x
// (wgrad) and W (dgrad) (LAYOUTS.md §0).
#include <cmath>

#include "core/parallel.h"
#include "ops/common.h"
#include "tec_math.h"

namespace tec {

namespace {

struct LinearConfig {
  int64_t in_features, out_features, tp_size;
  std::string tp_mode;  // none, column, row
  bool bias, sequence_parallel;

  explicit LinearConfig(const Attributes& a)
      : in_features(a.get_int("in_features", 0)),
        out_features(a.get_int("out_features", 0)),
        tp_size(a.get_int("tp_size", 1)),
        tp_mode(a.get_string("tp_mode", "none")),
        bias(a.get_bool("bias", true)),
        sequence_parallel(a.get_bool("sequence_parallel", false)) {}
  // This rank's shard of the weight: column-parallel splits out_features, row-parallel in_features.
  int64_t local_in() const { return tp_mode == "row" ? in_features / tp_size : in_features; }
  int64_t local_out() const { return tp_mode == "column" ? out_features / tp_size : out_features; }
};

void check_linear_attributes(const Attributes& attrs, const ErrorContext& ctx) {
  const LinearConfig c(attrs);
  TEC_USER_CHECK(c.in_features >= 1 && c.out_features >= 1, ctx)
      << "in_features and out_features must be positive, got " << c.in_features << " and " << c.out_features;
  TEC_USER_CHECK(c.tp_size >= 1 && c.tp_size <= 1024, ctx) << "tp_size must be in [1, 1024], got " << c.tp_size;
  const double input_scale = attrs.get_float("input_scale", 0.0);
  TEC_USER_CHECK(std::isfinite(input_scale) && input_scale >= 0.0 && input_scale <= 3.4e38, ctx)
      << "input_scale must be a positive finite number (or 0 for none), got " << input_scale;
  if (c.tp_mode == "none") {
    TEC_USER_CHECK(c.tp_size == 1, ctx) << "tp_size=" << c.tp_size << " needs tp_mode 'column' or 'row'";
    TEC_USER_CHECK(!c.sequence_parallel, ctx) << "sequence_parallel needs tp_mode 'column' or 'row'";
  }
  if (c.tp_mode == "column")
    TEC_USER_CHECK(c.out_features % c.tp_size == 0, ctx)
        << "column-parallel linear needs out_features divisible by tp_size, got " << c.out_features << " and "
        << c.tp_size;
  if (c.tp_mode == "row")
    TEC_USER_CHECK(c.in_features % c.tp_size == 0, ctx)
        << "row-parallel linear needs in_features divisible by tp_size, got " << c.in_features << " and " << c.tp_size;
}

std::vector<ParamSpec> linear_params(const Attributes& attrs, DType dtype) {
  const LinearConfig c(attrs);
  const float stddev = 1.0f / std::sqrt(static_cast<float>(c.in_features));
  ParamSpec weight{"weight", Shape{c.local_out(), c.local_in()}, dtype, 0.0f, stddev};
  std::vector<ParamSpec> params;
  if (c.tp_size > 1) {
    weight.full = Shape{c.out_features, c.in_features};
    weight.shard_dim = c.tp_mode == "column" ? 0 : 1;
  }
  params.push_back(std::move(weight));
  if (c.bias) {
    ParamSpec bias{"bias", Shape{c.local_out()}, dtype, 0.0f, 0.02f};
    // A row-parallel bias is added once, after the reduction (tensor_parallel moves it there).
    if (c.tp_size > 1 && c.tp_mode == "column") bias.full = Shape{c.out_features};
    params.push_back(std::move(bias));
  }
  return params;
}

// cuBLASLt FP8 GEMMs need leading dimensions divisible by 16 (LAYOUTS.md §1.1).
void check_gemm_dim(const InferContext& ctx, const TensorProto& operand, const char* dim_name, int64_t dim) {
  if (!operand.is_quantized()) return;
  TEC_USER_CHECK(dim % 16 == 0, ctx.error)
      << to_string(operand.quantizer->kind) << " GEMM needs " << dim_name << " divisible by 16, got " << dim_name
      << "=" << dim;
}

InferResult infer_linear(const InferContext& ctx) {
  const LinearConfig c(ctx.node.attrs);
  require_rank_at_least(ctx, 0, 1);
  const TensorProto& x = ctx.inputs[0];
  const TensorProto& w = ctx.inputs[1];
  require_last_dim(ctx, 0, c.local_in(), c.tp_mode == "row" ? "in_features / tp_size" : "in_features");
  TEC_INTERNAL_CHECK(w.shape == Shape({c.local_out(), c.local_in()}), ctx.error) << "weight shape " << w.shape.str();

  // Sequence parallelism's gather and scatter are steps of their own, which tensor_parallel
  // inserts before this op is inferred.
  TEC_USER_CHECK(!c.sequence_parallel, ctx.error)
      << "sequence_parallel is still set: the tensor_parallel pass makes its gather and scatter steps of their own";
  TEC_USER_CHECK(!(c.tp_mode == "row" && c.tp_size > 1 && c.bias), ctx.error)
      << "a row-parallel linear adds no bias: the tensor_parallel pass adds it once, after the reduction";
  InferResult result;
  const Shape out = x.shape.with_last(c.local_out());
  check_gemm_dim(ctx, x, "K", c.local_in());
  check_gemm_dim(ctx, w, "N", c.local_out());
  // wgrad contracts over the tokens: the columnwise copy's leading dim is M.
  if (ctx.graph.mode == Mode::train) check_gemm_dim(ctx, x, "M (tokens, for the wgrad GEMM)", x.shape.rows());

  result.outputs.push_back(TensorProto::dense(out, x.dtype));
  result.saved.push_back(save_input(ctx, 0, "input"));
  result.saved.push_back(save_input(ctx, 1, "weight"));
  return result;
}

BackwardResult infer_linear_backward(const BackwardContext& ctx) {
  const LinearConfig c(ctx.node.attrs);
  BackwardResult result;
  result.grad_inputs = grads_like_inputs(ctx);
  // wgrad reads x^T (columnwise), dgrad reads W^T (columnwise).
  result.reads = {{0, Usage{false, true}}, {1, Usage{false, true}}};
  // dgrad reads dy in the gradient format rowwise, wgrad columnwise; dbias sums dy itself.
  result.grad_reads = {{0, true, false}, {0, true, true}};
  if (c.bias) result.grad_reads.push_back({0, false, false});
  return result;
}

// y = x W^T + b on the dequantized operands, accumulating in fp32 along K.
std::vector<HostTensor> reference_linear(const Attributes& attrs, const std::vector<HostTensor>& in) {
  const LinearConfig c(attrs);
  const HostTensor& x = in[0];
  const HostTensor& w = in[1];
  const int64_t m = x.shape.rows(), k = x.shape.cols(), n = w.shape[0];
  HostTensor y{x.shape.with_last(n), std::vector<float>(static_cast<size_t>(m * n))};
  // Rows split over threads; each element is still one sequential sum, so the result does
  // not depend on the thread count.
  parallel_for(m, [&](int64_t r) {
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      const float* xr = &x.values[static_cast<size_t>(r * k)];
      const float* wj = &w.values[static_cast<size_t>(j * k)];
      for (int64_t i = 0; i < k; ++i) acc += xr[i] * wj[i];
      if (c.bias) acc += in[2].values[static_cast<size_t>(j)];
      y.values[static_cast<size_t>(r * n + j)] = acc;
    }
  });
  return {std::move(y)};
}

// in: x (columnwise copy), W (columnwise copy), dy quantized rowwise, dy quantized
// columnwise, [dy]. dx = dy W, dW = dy^T x, db = the column sums of dy; every sum in fp32,
// the GEMMs' in index order, db's in the GPU column kernels' (tec_column_sum_order).
std::vector<HostTensor> backward_reference_linear(const Attributes& attrs, const std::vector<HostTensor>& in) {
  const LinearConfig c(attrs);
  const HostTensor& x = in[0];
  const HostTensor& w = in[1];
  const HostTensor& dy_rows = in[2];
  const HostTensor& dy_cols = in[3];
  const int64_t m = x.shape.rows(), k = x.shape.cols(), n = w.shape[0];
  // Transposed copies, so that every sum walks memory in order; each sum still runs over its
  // index from 0 up, as the comment above says.
  auto transposed = [](const std::vector<float>& v, int64_t rows, int64_t cols) {
    std::vector<float> t(v.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t col = 0; col < cols; ++col) t[static_cast<size_t>(col * rows + r)] = v[static_cast<size_t>(r * cols + col)];
    return t;
  };
  const std::vector<float> w_t = transposed(w.values, n, k), dy_t = transposed(dy_cols.values, m, n), x_t = transposed(x.values, m, k);
  HostTensor dx{x.shape, std::vector<float>(static_cast<size_t>(m * k))};
  parallel_for(m, [&](int64_t r) {
    const float* dy = &dy_rows.values[static_cast<size_t>(r * n)];
    for (int64_t i = 0; i < k; ++i) {
      const float* wi = &w_t[static_cast<size_t>(i * n)];
      float acc = 0.0f;
      for (int64_t j = 0; j < n; ++j) acc += dy[j] * wi[j];
      dx.values[static_cast<size_t>(r * k + i)] = acc;
    }
  });
  HostTensor dw{w.shape, std::vector<float>(static_cast<size_t>(n * k))};
  parallel_for(n, [&](int64_t j) {
    const float* dyj = &dy_t[static_cast<size_t>(j * m)];
    for (int64_t i = 0; i < k; ++i) {
      const float* xi = &x_t[static_cast<size_t>(i * m)];
      float acc = 0.0f;
      for (int64_t r = 0; r < m; ++r) acc += dyj[r] * xi[r];
      dw.values[static_cast<size_t>(j * k + i)] = acc;
    }
  });
  std::vector<HostTensor> grads{std::move(dx), std::move(dw)};
  if (c.bias) {
    const HostTensor& dy = in[4];
    HostTensor db{Shape{n}, std::vector<float>(static_cast<size_t>(n))};
    tec_column_sum_order(m, n, db.values.data(), [&](int64_t r, int64_t j) { return dy.values[static_cast<size_t>(r * n + j)]; });
    grads.push_back(std::move(db));
  }
  return grads;
}

}  // namespace

void register_linear_ops(OpRegistry& registry) {
  registry.add(OpDef{
      .name = "linear",
      .summary = "y = x W^T + b (TE BasicLinear), optionally column/row tensor parallel",
      .min_inputs = 1,
      .max_inputs = 1,
      .attrs =
          {
              {"in_features", AttrType::int_, std::nullopt, {}, "K, the input features (global)"},
              {"out_features", AttrType::int_, std::nullopt, {}, "N, the output features (global)"},
              {"bias", AttrType::bool_, AttrValue{true}, {}, "add a bias in the GEMM epilogue"},
              {"tp_mode", AttrType::string_, AttrValue{std::string("none")}, {"none", "column", "row"},
               "tensor-parallel split"},
              {"tp_size", AttrType::int_, AttrValue{int64_t{1}}, {}, "tensor-parallel ranks"},
              {"sequence_parallel", AttrType::bool_, AttrValue{false}, {},
               "shard the sequence dim outside the linear"},
              {"input_scale", AttrType::float_, AttrValue{0.0}, {},
               "recipe fp8-static: the model's scale for the input (ONNX QuantizeLinear's y_scale); 0: none"},
          },
      .check_attributes = check_linear_attributes,
      .params = linear_params,
      .gemm_operands = [](const Node&) { return std::vector<GemmOperand>{{0, TensorRole::input}, {1, TensorRole::weight}}; },
      .infer = infer_linear,
      .infer_backward = infer_linear_backward,
      .reference = reference_linear,
      .backward_reference = backward_reference_linear,
  });
}

}  // namespace tec
