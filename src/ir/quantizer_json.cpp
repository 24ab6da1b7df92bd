// Quantizer <-> JSON, shared by the graph dumps and the plan manifest.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_text.h"
#include "ir/quantizer.h"

namespace tec {

nlohmann::json quantizer_to_json(const Quantizer& q) {
  nlohmann::json j{{"kind", to_string(q.kind)},
                        {"dtype", to_string(q.dtype)},
                        {"block", {q.block_rows, q.block_cols}},
                        {"amax_epsilon", q.amax_epsilon},
                        {"force_pow2_scales", q.force_pow2_scales},
                        {"amax_history_len", q.amax_history_len},
                        {"margin", q.margin},
                        {"amax_algo", to_string(q.amax_algo)},
                        {"str", q.str()}};
  if (q.kind == QuantizerKind::fp8_static) j["static_scale_inv"] = q.static_scale_inv;
  return j;
}

Quantizer quantizer_from_json(const nlohmann::json& j) {
  TEC_USER_CHECK(j.is_object(), {}) << "quantizer must be an object";
  auto get_string = [&](const char* key) {
    TEC_USER_CHECK(j.contains(key) && j[key].is_string(), {}) << "quantizer." << key << " must be a string";
    return j[key].get<std::string>();
  };
  auto get_int = [&](const char* key, int lo, int hi) {
    TEC_USER_CHECK(j.contains(key) && j[key].is_number_integer() && j[key].get<int64_t>() >= lo && j[key].get<int64_t>() <= hi, {})
        << "quantizer." << key << " must be an integer in [" << lo << ", " << hi << "]";
    return static_cast<int>(j[key].get<int64_t>());
  };
  const std::string kind = get_string("kind");
  const auto dtype = parse_dtype(get_string("dtype"));
  TEC_USER_CHECK(dtype.has_value(), {}) << "quantizer.dtype is unknown";
  TEC_USER_CHECK(j.contains("block") && j["block"].is_array() && j["block"].size() == 2 && j["block"][0].is_number_integer() &&
                     j["block"][1].is_number_integer(),
                 {})
      << "quantizer.block must be [rows, cols]";
  const int64_t rows = j["block"][0].get<int64_t>();
  TEC_USER_CHECK(j.contains("force_pow2_scales") && j["force_pow2_scales"].is_boolean(), {}) << "quantizer.force_pow2_scales must be a bool";
  TEC_USER_CHECK(j.contains("amax_epsilon") && j["amax_epsilon"].is_number() && j["amax_epsilon"].get<double>() >= 0, {})
      << "quantizer.amax_epsilon must be a number >= 0";
  const bool pow2 = j["force_pow2_scales"].get<bool>();
  const float eps = j["amax_epsilon"].get<float>();
  Quantizer q;
  if (kind == "fp8_current") {
    q = Quantizer::fp8_current(*dtype, pow2, eps);
  } else if (kind == "fp8_delayed") {
    const std::string algo = get_string("amax_algo");
    TEC_USER_CHECK(algo == "max" || algo == "most_recent", {}) << "quantizer.amax_algo must be max or most_recent";
    q = Quantizer::fp8_delayed(*dtype, get_int("amax_history_len", 1, 65536), get_int("margin", 0, 64),
                               algo == "max" ? AmaxAlgo::max : AmaxAlgo::most_recent);
  } else if (kind == "mxfp8") {
    q = Quantizer::mxfp8(*dtype);
  } else if (kind == "fp8_block") {
    TEC_USER_CHECK(rows == 1 || rows == 128, {}) << "quantizer.block rows must be 1 or 128";
    q = Quantizer::fp8_block(*dtype, rows == 1 ? 1 : 2, pow2, eps);
  } else if (kind == "nvfp4") {
    TEC_USER_CHECK(rows == 1 || rows == 16, {}) << "quantizer.block rows must be 1 or 16";
    q = Quantizer::nvfp4(rows == 16);
  } else if (kind == "fp8_static") {
    TEC_USER_CHECK(j.contains("static_scale_inv") && j["static_scale_inv"].is_number() && j["static_scale_inv"].get<double>() >= 0, {})
        << "quantizer.static_scale_inv must be a number >= 0";
    const float scale_inv = j["static_scale_inv"].get<float>();
    const int64_t cols = j["block"][1].get<int64_t>();
    TEC_USER_CHECK(rows >= 0 && rows <= 1 && cols >= 0 && cols <= (1 << 20), {}) << "quantizer.block is out of range";
    q = scale_inv > 0.0f ? Quantizer::fp8_static(*dtype, scale_inv)
                         : Quantizer::fp8_static_weight(*dtype, static_cast<int>(rows), static_cast<int>(cols));
  } else {
    TEC_USER_ERROR({}) << "quantizer.kind '" << kind << "' is unknown";
  }
  // Every field must be the one quantizer_to_json writes for q, and there must be no others.
  // Compared field by field: plan loading must not destroy a json object, whose destructor
  // allocates (nlohmann/json#4653) and so could terminate under memory pressure.
  auto is = [&](const char* key, const auto& value) {
    const auto it = j.find(key);
    return it != j.end() && *it == value;
  };
  const bool is_static = q.kind == QuantizerKind::fp8_static;
  const bool consistent = j.size() == (is_static ? 10u : 9u) && (!is_static || is("static_scale_inv", q.static_scale_inv)) &&
                          is("kind", to_string(q.kind)) && is("dtype", to_string(q.dtype)) &&
                          j["block"][0] == q.block_rows && j["block"][1] == q.block_cols &&
                          is("amax_epsilon", q.amax_epsilon) && is("force_pow2_scales", q.force_pow2_scales) &&
                          is("amax_history_len", q.amax_history_len) && is("margin", q.margin) &&
                          is("amax_algo", to_string(q.amax_algo)) && is("str", q.str());
  TEC_USER_CHECK(consistent, {}) << "quantizer fields are inconsistent: " << json_excerpt(j);
  return q;
}

}  // namespace tec
