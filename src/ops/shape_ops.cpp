// reshape and identity: views that move no data.
#include "ops/common.h"
#include "ops/gradient.h"

namespace tec {

namespace {

InferResult infer_reshape(const InferContext& ctx) {
  const TensorProto& x = ctx.inputs[0];
  std::vector<int64_t> dims = ctx.node.attrs.get_ints("shape");
  TEC_USER_CHECK(!dims.empty() || x.shape.numel() == 1, ctx.error)
      << "reshape to a scalar (an empty 'shape') needs one element, got " << x.shape.str();
  int64_t known = 1;
  int inferred = -1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      TEC_USER_CHECK(inferred < 0, ctx.error) << "reshape 'shape' may hold one -1, got two";
      inferred = static_cast<int>(i);
      continue;
    }
    TEC_USER_CHECK(dims[i] >= 1 && dims[i] <= kMaxDim, ctx.error)
        << "reshape dim " << i << " must be -1 or in [1, " << kMaxDim << "], got " << dims[i];
    known = checked_mul(known, dims[i]);
  }
  const int64_t numel = x.shape.numel();
  if (inferred >= 0) {
    TEC_USER_CHECK(numel % known == 0, ctx.error)
        << "cannot reshape " << x.shape.str() << " (" << numel << " elements) with -1 into a multiple of " << known;
    dims[static_cast<size_t>(inferred)] = numel / known;
  }
  Shape out(dims);
  TEC_USER_CHECK(out.numel() == numel, ctx.error)
      << "cannot reshape " << x.shape.str() << " (" << numel << " elements) into " << out.str();
  // Block scales run along the last dim; keeping it keeps every scale valid.
  if (x.is_quantized())
    TEC_USER_CHECK(out.cols() == x.shape.cols(), ctx.error)
        << "a quantized tensor can only be reshaped with its last dim unchanged (" << x.shape.cols() << "), got "
        << out.str();
  return InferResult{{x.with_shape(out)}, {}, {}};
}

}  // namespace

void register_shape_ops(OpRegistry& registry) {
  registry.add(OpDef{
      .name = "reshape",
      .summary = "view with a new shape (one dim may be -1)",
      .attrs = {{"shape", AttrType::ints, std::nullopt, {}, "the new shape; dims may name graph dims (empty: a scalar)"}},
      .infer = infer_reshape,
      // The gradient: dy viewed in the input's shape (a view again, no kernel).
      .gradient = [](GradientBuilder& b) { return std::vector<ValueId>{reshaped(b, b.grad_output(), b.proto(b.input(0)).shape, "dinput")}; },
      // Values are unchanged; the executor gives the output its planned shape.
      .reference = identity_reference,
      .view = true,
  });
  registry.add(OpDef{
      .name = "identity",
      .summary = "y = x",
      .infer = [](const InferContext& ctx) { return InferResult{{ctx.inputs[0]}, {}, {}}; },
      .infer_backward = passthrough_backward,
      .reference = identity_reference,
      .view = true,
      .gradient_passes_through = true,
  });
}

}  // namespace tec
