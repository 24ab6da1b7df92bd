#include "ir/recipe.h"

#include <array>
#include <utility>

#include "core/error.h"

namespace tec {

namespace {
constexpr std::array<std::pair<RecipeKind, std::string_view>, 7> kRecipeNames{{
    {RecipeKind::bf16, "bf16"},
    {RecipeKind::fp8_current, "fp8-current"},
    {RecipeKind::fp8_delayed, "fp8-delayed"},
    {RecipeKind::fp8_block, "fp8-block"},
    {RecipeKind::mxfp8, "mxfp8"},
    {RecipeKind::nvfp4, "nvfp4"},
    {RecipeKind::fp8_static, "fp8-static"},
}};
constexpr std::array<std::pair<TensorRole, std::string_view>, 3> kRoleNames{{
    {TensorRole::input, "input"},
    {TensorRole::weight, "weight"},
    {TensorRole::grad_output, "grad_output"},
}};
}  // namespace

std::string_view to_string(RecipeKind kind) {
  for (auto [k, name] : kRecipeNames)
    if (k == kind) return name;
  return "?";
}

std::string_view to_string(Fp8Format format) { return format == Fp8Format::e4m3 ? "e4m3" : "hybrid"; }

std::string_view to_string(TensorRole role) {
  for (auto [r, name] : kRoleNames)
    if (r == role) return name;
  return "?";
}

std::optional<RecipeKind> parse_recipe_kind(std::string_view name) {
  for (auto [k, n] : kRecipeNames)
    if (n == name) return k;
  return std::nullopt;
}

std::optional<TensorRole> parse_tensor_role(std::string_view name) {
  for (auto [r, n] : kRoleNames)
    if (n == name) return r;
  return std::nullopt;
}

std::string recipe_kind_names() {
  std::string out;
  for (auto [k, name] : kRecipeNames) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

Recipe Recipe::defaults(RecipeKind kind) {
  Recipe r;
  r.kind = kind;
  // Delayed and current default to HYBRID; block and MXFP8 to E4M3 (LAYOUTS.md §1.3).
  r.format = (kind == RecipeKind::fp8_current || kind == RecipeKind::fp8_delayed) ? Fp8Format::hybrid
                                                                                 : Fp8Format::e4m3;
  // Block scaling uses power-of-2 scales by default; current scaling does not (§1.6, §3).
  r.power_2_scales = kind == RecipeKind::fp8_block;
  return r;
}

std::optional<Quantizer> Recipe::quantizer_for(TensorRole role) const {
  const bool gradient = role == TensorRole::grad_output;
  const DType fp8 = (format == Fp8Format::hybrid && gradient) ? DType::fp8_e5m2 : DType::fp8_e4m3;
  switch (kind) {
    case RecipeKind::bf16: return std::nullopt;
    case RecipeKind::fp8_current: return Quantizer::fp8_current(fp8, power_2_scales, amax_epsilon);
    case RecipeKind::fp8_delayed: return Quantizer::fp8_delayed(fp8, amax_history_len, margin, amax_algo);
    case RecipeKind::mxfp8: return Quantizer::mxfp8(fp8);
    // Weights use 128x128 tiles, activations and gradients 1x128 (LAYOUTS.md §3).
    case RecipeKind::fp8_block:
      return Quantizer::fp8_block(fp8, role == TensorRole::weight ? 2 : 1, power_2_scales, amax_epsilon);
    // Weights use 16x16 tiles (LAYOUTS.md §4.3). RHT and stochastic rounding are not modelled.
    case RecipeKind::nvfp4: return Quantizer::nvfp4(role == TensorRole::weight);
    case RecipeKind::fp8_static: return std::nullopt;  // per tensor, from the model (apply_recipe)
  }
  TEC_INTERNAL_ERROR({}) << "unknown recipe kind";
}

}  // namespace tec
