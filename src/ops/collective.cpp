// The tensor-parallel collectives (ARCHITECTURE.md §4, §14): all_gather, reduce_scatter and
// all_reduce over the plan's ranks, along dim 0 (the tokens, as TE's sequence parallelism
// splits them). The compiler inserts them where TE does (passes/tensor_parallel.cpp); a model
// never names them. Their reference runs every rank at once (OpDef::collective): sums in
// fp32 in rank order, rounded once when stored.
#include "ops/common.h"

namespace tec {

namespace {

int64_t ranks(const Attributes& attrs) { return attrs.get_int("tp_size", 1); }

void check_collective_attributes(const Attributes& attrs, const ErrorContext& ctx) {
  TEC_USER_CHECK(ranks(attrs) >= 2 && ranks(attrs) <= 1024, ctx) << "tp_size must be in [2, 1024], got " << ranks(attrs);
}

InferResult infer_all_gather(const InferContext& ctx) {
  require_rank_at_least(ctx, 0, 1);
  const TensorProto& x = ctx.inputs[0];
  Shape out = x.shape;
  out.dims[0] = checked_mul(out.dims[0], ranks(ctx.node.attrs));
  return InferResult{{TensorProto::dense(out, x.dtype)}, {}, {}};
}

InferResult infer_reduce_scatter(const InferContext& ctx) {
  require_rank_at_least(ctx, 0, 1);
  const TensorProto& x = ctx.inputs[0];
  TEC_USER_CHECK(x.shape[0] % ranks(ctx.node.attrs) == 0, ctx.error)
      << "reduce_scatter needs the leading dim " << x.shape[0] << " divisible by tp_size " << ranks(ctx.node.attrs);
  Shape out = x.shape;
  out.dims[0] /= ranks(ctx.node.attrs);
  return InferResult{{TensorProto::dense(out, x.dtype)}, {}, {}};
}

InferResult infer_all_reduce(const InferContext& ctx) {
  const TensorProto& x = ctx.inputs[0];
  return InferResult{{TensorProto::dense(x.shape, x.dtype)}, {}, {}};
}

BackwardResult collective_backward(const BackwardContext& ctx) {
  BackwardResult result;
  result.grad_inputs = grads_like_inputs(ctx);
  return result;
}

// The sum over the ranks, element by element, in rank order.
std::vector<float> rank_sum(const std::vector<HostTensor>& per_rank) {
  std::vector<float> sum = per_rank.at(0).values;
  for (size_t r = 1; r < per_rank.size(); ++r) {
    TEC_INTERNAL_CHECK(per_rank[r].values.size() == sum.size(), {}) << "ranks disagree on a collective's size";
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += per_rank[r].values[i];
  }
  return sum;
}

// Rank order along dim 0: rank r's rows follow rank r-1's.
std::vector<HostTensor> gather(const std::vector<HostTensor>& per_rank) {
  HostTensor all{per_rank.at(0).shape, {}};
  all.shape.dims[0] = 0;
  for (const HostTensor& t : per_rank) {
    all.values.insert(all.values.end(), t.values.begin(), t.values.end());
    all.shape.dims[0] += t.shape[0];
  }
  return std::vector<HostTensor>(per_rank.size(), all);
}

std::vector<HostTensor> scatter_sum(const std::vector<HostTensor>& per_rank) {
  const std::vector<float> sum = rank_sum(per_rank);
  const size_t n = per_rank.size(), part = sum.size() / n;
  std::vector<HostTensor> out;
  for (size_t r = 0; r < n; ++r) {
    HostTensor t{per_rank[0].shape, std::vector<float>(sum.begin() + static_cast<std::ptrdiff_t>(r * part),
                                                       sum.begin() + static_cast<std::ptrdiff_t>((r + 1) * part))};
    t.shape.dims[0] /= static_cast<int64_t>(n);
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<HostTensor> sum_everywhere(const std::vector<HostTensor>& per_rank) {
  return std::vector<HostTensor>(per_rank.size(), HostTensor{per_rank.at(0).shape, rank_sum(per_rank)});
}

// all_reduce with reduce_in "backward": the forward hands each rank its own value, so the
// backward's sum is over the ranks' partial input gradients (Megatron's
// copy_to_tensor_model_parallel_region; TE's column-parallel dgrad all-reduce).
bool reduces_in_backward(const Attributes& attrs) { return attrs.get_string("reduce_in", "forward") == "backward"; }

const AttrSpec kTpSizeAttr{"tp_size", AttrType::int_, std::nullopt, {}, "ranks in the tensor-parallel group"};

}  // namespace

void register_collective_ops(OpRegistry& registry) {
  registry.add(OpDef{
      .name = "all_gather",
      .summary = "every rank's tensor, concatenated along dim 0 in rank order (NCCL all-gather)",
      .attrs = {kTpSizeAttr},
      .check_attributes = check_collective_attributes,
      .infer = infer_all_gather,
      .infer_backward = collective_backward,
      .collective = [](const Attributes&, bool backward, const std::vector<HostTensor>& per_rank) {
        return backward ? scatter_sum(per_rank) : gather(per_rank);
      },
      .compiler_only = true,
  });
  registry.add(OpDef{
      .name = "reduce_scatter",
      .summary = "the sum over the ranks, split along dim 0: rank r keeps part r (NCCL reduce-scatter)",
      .attrs = {kTpSizeAttr},
      .check_attributes = check_collective_attributes,
      .infer = infer_reduce_scatter,
      .infer_backward = collective_backward,
      .collective = [](const Attributes&, bool backward, const std::vector<HostTensor>& per_rank) {
        return backward ? gather(per_rank) : scatter_sum(per_rank);
      },
      .compiler_only = true,
  });
  registry.add(OpDef{
      .name = "all_reduce",
      .summary = "the sum over the ranks, on every rank (NCCL all-reduce); reduce_in backward: identity forward, summed gradient",
      .attrs = {kTpSizeAttr,
                {"reduce_in", AttrType::string_, AttrValue{std::string("forward")}, {"forward", "backward"},
                 "forward: y = the sum, the gradient handed on; backward: y = x, the gradient summed"}},
      .check_attributes = check_collective_attributes,
      .infer = infer_all_reduce,
      .infer_backward = collective_backward,
      .collective = [](const Attributes& attrs, bool backward, const std::vector<HostTensor>& per_rank) {
        return backward == reduces_in_backward(attrs) ? sum_everywhere(per_rank) : per_rank;
      },
      .compiler_only = true,
  });
}

}  // namespace tec
