// embedding: the rows of a table picked by token ids, y[..., :] = weight[ids[...], :] (torch's
// nn.Embedding, ONNX's Gather of a constant table along axis 0 at run-time indices). The ids
// are int32 (the ONNX frontend narrows a model's INT64 token ids: tables hold far fewer than
// 2^31 rows), held by the CPU reference as exact floats, so the table is capped at 2^24 rows.
// An id outside [0, rows) is hostile input: the reference stops with an error naming the
// node; the GPU kernel (kernels/row.cu producer 23) writes zeros for that row and sets the
// session's status bit, which the runtime reports when results are read.
#include <algorithm>
#include <cmath>

#include "ops/common.h"

namespace tec {

namespace {

constexpr int64_t kMaxTableRows = int64_t{1} << 24;  // ids exact in float

struct EmbeddingConfig {
  int64_t rows, dim;
  explicit EmbeddingConfig(const Attributes& a) : rows(a.get_int("num_embeddings", 0)), dim(a.get_int("embedding_dim", 0)) {}
};

void check_embedding_attributes(const Attributes& attrs, const ErrorContext& ctx) {
  const EmbeddingConfig c(attrs);
  TEC_USER_CHECK(c.rows >= 1 && c.rows <= kMaxTableRows, ctx)
      << "num_embeddings must be in [1, " << kMaxTableRows << "] (token ids are exact in float below 2^24), got " << c.rows;
  TEC_USER_CHECK(c.dim >= 1 && c.dim <= kMaxDim, ctx) << "embedding_dim must be in [1, " << kMaxDim << "], got " << c.dim;
}

DType table_dtype(const Attributes& attrs) { return *parse_dtype(attrs.get_string("dtype", "bf16")); }

std::vector<ParamSpec> embedding_params(const Attributes& attrs, DType) {
  const EmbeddingConfig c(attrs);
  return {ParamSpec{.suffix = "weight", .shape = Shape{c.rows, c.dim}, .dtype = table_dtype(attrs), .init_mean = 0.0f, .init_stddev = 1.0f}};
}

InferResult infer_embedding(const InferContext& ctx) {
  const EmbeddingConfig c(ctx.node.attrs);
  const TensorProto& ids = ctx.inputs.at(0);
  const std::string& name = ctx.graph.value(ctx.node.inputs.at(0)).name;
  TEC_USER_CHECK(ids.dtype == DType::int32 && !ids.is_quantized(), ctx.error)
      << "input '" << name << "' (the token ids) must be int32, got " << to_string(ids.dtype);
  TEC_USER_CHECK(ids.shape.rank() >= 1, ctx.error) << "input '" << name << "' (the token ids) is a scalar; give at least one dim";
  std::vector<int64_t> out = ids.shape.dims;
  out.push_back(c.dim);
  return InferResult{{TensorProto::dense(Shape(out), table_dtype(ctx.node.attrs))}, {}, {}};
}

// in: ids, weight.
std::vector<HostTensor> reference_embedding(const Attributes& attrs, const std::vector<HostTensor>& in) {
  const EmbeddingConfig c(attrs);
  const HostTensor &ids = in.at(0), &weight = in.at(1);
  std::vector<int64_t> dims = ids.shape.dims;
  dims.push_back(c.dim);
  HostTensor out{Shape(dims), std::vector<float>(ids.values.size() * static_cast<size_t>(c.dim))};
  for (size_t t = 0; t < ids.values.size(); ++t) {
    const float id = ids.values[t];
    TEC_USER_CHECK(id >= 0.0f && id < static_cast<float>(c.rows), {})
        << "token id " << id << " at position " << t << " is outside the embedding table's rows [0, " << c.rows << ")";
    const auto row = static_cast<size_t>(id) * static_cast<size_t>(c.dim);
    std::copy_n(&weight.values[row], c.dim, &out.values[t * static_cast<size_t>(c.dim)]);
  }
  return {std::move(out)};
}

// Token ids given from outside, each inside the table, named with its index where not.
void check_token_ids(const Attributes& attrs, const std::string& input, const std::string& node, const HostTensor& ids) {
  const int64_t rows = EmbeddingConfig(attrs).rows;
  for (size_t i = 0; i < ids.values.size(); ++i) {
    const float id = ids.values[i];
    if (id >= 0.0f && id < static_cast<float>(rows)) continue;
    throw Error(ErrorKind::invalid_input, ErrorContext{"te-run", input, "", "--input " + input},
                "input '" + input + "' holds token id " + value_text(id) + " at [" + index_text(ids.shape, i) +
                    "], outside the table of embedding '" + node + "' (" + std::to_string(rows) + " rows: ids must be in [0, " +
                    std::to_string(rows) + "))");
  }
}

// The table's gradient: each row the sum, in token order, of the output gradients of the tokens
// that picked it (a general-path scatter_add, deterministic).
std::vector<ValueId> gradient_embedding(GradientBuilder& b) {
  if (!b.proto(b.input(1)).requires_grad) return {-1, -1};
  Attributes attrs;
  attrs.values["shape"] = b.proto(b.input(1)).shape.dims;
  return {-1, b.emit("scatter_add", {b.grad_output(), b.input(0)}, std::move(attrs), "dweight")};
}

}  // namespace

void register_embedding_ops(OpRegistry& registry) {
  registry.add(OpDef{
      .name = "embedding",
      .summary = "y[..., :] = weight[ids[...], :]: the table's rows picked by int32 token ids (torch nn.Embedding)",
      .attrs = {{"num_embeddings", AttrType::int_, std::nullopt, {}, "the table's rows (the vocabulary)"},
                {"embedding_dim", AttrType::int_, std::nullopt, {}, "the table's columns (hidden)"},
                {"dtype", AttrType::string_, AttrValue{std::string("bf16")}, {"fp32", "fp16", "bf16"}, "the table's and output's dtype"}},
      .check_attributes = check_embedding_attributes,
      .params = embedding_params,
      .infer = infer_embedding,
      .gradient = gradient_embedding,
      .reference = reference_embedding,
      .index_input = IndexInput{.check = check_token_ids,
                                .draw = [](const Attributes& a, double uniform) {  // over the whole table
                                  const int64_t rows = EmbeddingConfig(a).rows;
                                  return static_cast<float>(std::min(rows - 1, static_cast<int64_t>(uniform * static_cast<double>(rows))));
                                }},
  });
}

}  // namespace tec
