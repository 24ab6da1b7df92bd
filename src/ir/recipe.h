// Recipes: which quantizer each tensor role gets, following TE's recipes (LAYOUTS.md §1.3,
// §1.5, §2, §3, §4.3).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "ir/quantizer.h"

namespace tec {

// fp8_static: the scales an explicitly quantized model fixes (ONNX Q/DQ pairs); apply_recipe
// takes them from each linear's input_scale and each weight's static scales.
enum class RecipeKind : uint8_t { bf16, fp8_current, fp8_delayed, fp8_block, mxfp8, nvfp4, fp8_static };

// HYBRID: E4M3 for forward tensors, E5M2 for gradients (LAYOUTS.md §1.3).
enum class Fp8Format : uint8_t { e4m3, hybrid };

// The role a tensor plays at a GEMM; the recipe picks its quantizer from it.
enum class TensorRole : uint8_t { input, weight, grad_output };

std::string_view to_string(RecipeKind kind);   // "fp8-current"
std::string_view to_string(Fp8Format format);
std::string_view to_string(TensorRole role);
std::optional<RecipeKind> parse_recipe_kind(std::string_view name);
std::optional<TensorRole> parse_tensor_role(std::string_view name);
std::string recipe_kind_names();  // for error messages and --help

struct Recipe {
  RecipeKind kind = RecipeKind::bf16;
  Fp8Format format = Fp8Format::hybrid;
  int amax_history_len = 1024;      // delayed
  int margin = 0;                   // delayed
  AmaxAlgo amax_algo = AmaxAlgo::max;  // delayed
  bool power_2_scales = false;      // current (default off) and block (default on)
  float amax_epsilon = 0.0f;        // current and block

  // TE's defaults for a recipe kind (LAYOUTS.md §1.3, §1.5, §3).
  static Recipe defaults(RecipeKind kind);
  // nullopt: the tensor stays in high precision (bf16 recipe), or its quantizer is the
  // model's own (fp8_static).
  std::optional<Quantizer> quantizer_for(TensorRole role) const;
  bool operator==(const Recipe&) const = default;
};

}  // namespace tec
