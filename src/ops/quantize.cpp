// quantize and dequantize: explicit casts between high precision and a quantized format.
// The compiler also inserts quantize nodes where a GEMM operand cannot be quantized by its
// producer (passes/apply_recipe.cpp). Both have straight-through gradients.
#include "ops/common.h"

namespace tec {

namespace {

InferResult infer_quantize(const InferContext& ctx) {
  require_high_precision(ctx, 0);
  if (const double scale = ctx.node.attrs.get_float("static_scale", 0.0); scale != 0.0) {
    const Quantizer q = with_context(ctx.error, [&] { return Quantizer::fp8_static(DType::fp8_e4m3, static_cast<float>(scale)); });
    return InferResult{{ctx.inputs[0].with_quantizer(q)}, {}, {}};
  }
  const auto role = parse_tensor_role(ctx.node.attrs.get_string("role", "input"));
  const std::string recipe_name = ctx.node.attrs.get_string("recipe", "");
  Recipe recipe = ctx.graph.recipe;
  if (!recipe_name.empty()) recipe = Recipe::defaults(*parse_recipe_kind(recipe_name));
  std::optional<Quantizer> q = recipe.quantizer_for(*role);
  TEC_USER_CHECK(q.has_value(), ctx.error)
      << "quantize under the bf16 recipe has no format to quantize to; set attrs.recipe or pass --recipe";
  return InferResult{{ctx.inputs[0].with_quantizer(q)}, {}, {}};
}

InferResult infer_dequantize(const InferContext& ctx) {
  const TensorProto& x = ctx.inputs[0];
  TEC_USER_CHECK(x.is_quantized(), ctx.error)
      << "dequantize needs a quantized input, '" << ctx.graph.value(ctx.node.inputs[0]).name << "' is "
      << to_string(x.dtype);
  const DType out = *parse_dtype(ctx.node.attrs.get_string("dtype", "bf16"));
  return InferResult{{TensorProto::dense(x.shape, out)}, {}, {}};
}

std::vector<std::string> recipe_choices() {
  return {"", "fp8-current", "fp8-delayed", "fp8-block", "mxfp8", "nvfp4"};
}

}  // namespace

void register_quantize_ops(OpRegistry& registry) {
  registry.add(OpDef{
      .name = "quantize",
      .summary = "cast to the recipe's quantized format for a tensor role",
      .attrs = {{"role", AttrType::string_, AttrValue{std::string("input")}, {"input", "weight", "grad_output"},
                 "which of the recipe's quantizers to use"},
                {"recipe", AttrType::string_, AttrValue{std::string("")}, recipe_choices(),
                 "a recipe for this cast only; empty: the graph's recipe"},
                {"static_scale", AttrType::float_, AttrValue{0.0}, {},
                 "FP8 E4M3 with this fixed scale (fp8-static: code = x / static_scale); 0: the recipe's quantizer"}},
      .infer = infer_quantize,
      .infer_backward = passthrough_backward,
      .reference = identity_reference,
      .gradient_passes_through = true,
  });
  registry.add(OpDef{
      .name = "dequantize",
      .summary = "cast a quantized tensor back to high precision",
      .attrs = {{"dtype", AttrType::string_, AttrValue{std::string("bf16")}, {"bf16", "fp16", "fp32"}, "output dtype"}},
      .infer = infer_dequantize,
      .infer_backward = passthrough_backward,
      .reference = identity_reference,
      .gradient_passes_through = true,
  });
}

}  // namespace tec
