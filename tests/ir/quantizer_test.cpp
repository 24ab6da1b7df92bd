// Quantizer is a value object: equal configurations compare and hash equal (one kernel per
// configuration), and any differing field makes them differ.
#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "ir/recipe.h"
#include "ir/tensor_proto.h"
#include "test_util.h"

namespace tec {

TEST_CASE("equal quantizer configurations compare and hash equal") {
  const auto a = Quantizer::fp8_delayed(DType::fp8_e4m3, 1024, 0, AmaxAlgo::max);
  const auto b = Quantizer::fp8_delayed(DType::fp8_e4m3, 1024, 0, AmaxAlgo::max);
  CHECK(a == b);
  CHECK(a.hash() == b.hash());
  std::unordered_set<Quantizer> set{a, b, Quantizer::mxfp8(DType::fp8_e4m3), Quantizer::mxfp8(DType::fp8_e4m3)};
  CHECK(set.size() == 2);
}

TEST_CASE("every field takes part in equality and hash") {
  const auto base = Quantizer::fp8_delayed(DType::fp8_e4m3, 1024, 0, AmaxAlgo::max);
  std::vector<Quantizer> variants;
  auto vary = [&](auto change) {
    Quantizer q = base;
    change(q);
    variants.push_back(q);
  };
  vary([](Quantizer& q) { q.kind = QuantizerKind::fp8_current; });
  vary([](Quantizer& q) { q.dtype = DType::fp8_e5m2; });
  vary([](Quantizer& q) { q.block_rows = 1; });
  vary([](Quantizer& q) { q.block_cols = 128; });
  vary([](Quantizer& q) { q.amax_epsilon = 1e-6f; });
  vary([](Quantizer& q) { q.force_pow2_scales = true; });
  vary([](Quantizer& q) { q.amax_history_len = 16; });
  vary([](Quantizer& q) { q.margin = 1; });
  vary([](Quantizer& q) { q.amax_algo = AmaxAlgo::most_recent; });
  std::unordered_set<size_t> hashes{base.hash()};
  for (const auto& v : variants) {
    CAPTURE(v.str());
    CHECK_FALSE(v == base);
    hashes.insert(v.hash());
  }
  CHECK(hashes.size() == variants.size() + 1);
}

TEST_CASE("only delayed scaling declares state: scale [1] = 1 and amax_history [L] = 0") {
  const auto state = Quantizer::fp8_delayed(DType::fp8_e4m3, 16).state_buffers();
  REQUIRE(state.size() == 2);
  CHECK(state[0].name == "scale");
  CHECK(state[0].shape == Shape{1});
  CHECK(state[0].initial_value == 1.0f);
  CHECK(state[1].name == "amax_history");
  CHECK(state[1].shape == Shape{16});
  CHECK(state[1].initial_value == 0.0f);
  CHECK(Quantizer::fp8_current(DType::fp8_e4m3).state_buffers().empty());
  CHECK(Quantizer::mxfp8(DType::fp8_e4m3).state_buffers().empty());
  CHECK(Quantizer::nvfp4().state_buffers().empty());
}

TEST_CASE("a grouped delayed tensor keeps a scale per member and a history column per member ([L, members], TE's layout)") {
  TensorProto experts = TensorProto::dense(Shape{8, 256, 128}, DType::fp8_e4m3).with_quantizer(Quantizer::fp8_delayed(DType::fp8_e4m3, 16));
  CHECK(experts.state_buffers()[0].shape == Shape{1});  // not grouped: one tensor
  experts.group_members = 8;
  const auto state = experts.state_buffers();
  REQUIRE(state.size() == 2);
  CHECK(state[0].shape == Shape{8});
  CHECK(state[0].initial_value == 1.0f);
  CHECK(state[1].shape == Shape({16, 8}));
  CHECK(TensorProto::dense(Shape{4, 4}, DType::bf16).state_buffers().empty());
}

TEST_CASE("recipes pick TE's quantizer per role") {
  const auto delayed = Recipe::defaults(RecipeKind::fp8_delayed);
  CHECK(delayed.quantizer_for(TensorRole::input)->dtype == DType::fp8_e4m3);
  CHECK(delayed.quantizer_for(TensorRole::grad_output)->dtype == DType::fp8_e5m2);  // HYBRID
  CHECK(delayed.quantizer_for(TensorRole::input)->amax_history_len == 1024);
  const auto block = Recipe::defaults(RecipeKind::fp8_block);
  CHECK(block.quantizer_for(TensorRole::weight)->block_rows == 128);
  CHECK(block.quantizer_for(TensorRole::input)->block_rows == 1);
  CHECK(block.quantizer_for(TensorRole::input)->force_pow2_scales);
  CHECK(block.quantizer_for(TensorRole::grad_output)->dtype == DType::fp8_e4m3);  // E4M3 by default
  CHECK(Recipe::defaults(RecipeKind::nvfp4).quantizer_for(TensorRole::weight)->block_rows == 16);
  CHECK(Recipe::defaults(RecipeKind::mxfp8).quantizer_for(TensorRole::input)->block_cols == 32);
  CHECK_FALSE(Recipe::defaults(RecipeKind::bf16).quantizer_for(TensorRole::input).has_value());
}

TEST_CASE("quantizer factories reject bad fields") {
  CHECK(test::error_of([] { (void)Quantizer::fp8_current(DType::bf16); }).message().find("fp8_e4m3 or fp8_e5m2") !=
        std::string::npos);
  CHECK(test::error_of([] { (void)Quantizer::fp8_delayed(DType::fp8_e4m3, 0); }).message().find("amax_history_len") !=
        std::string::npos);
  CHECK(test::error_of([] { (void)Quantizer::fp8_block(DType::fp8_e4m3, 3); }).message().find("must be 1") !=
        std::string::npos);
  for (float bad : {0.0f, -1.0f, NAN, INFINITY})
    CHECK(test::error_of([bad] { (void)Quantizer::fp8_static(DType::fp8_e4m3, bad); }).message().find("positive finite") !=
          std::string::npos);
  CHECK(test::error_of([] { (void)Quantizer::fp8_static_weight(DType::fp8_e4m3, 2, 0); }).message().find("per row {1, 0}") !=
        std::string::npos);
}

TEST_CASE("fp8_static quantizers: the scale is part of the value, and JSON round-trips it exactly") {
  const Quantizer a = Quantizer::fp8_static(DType::fp8_e4m3, 0.0123f), b = Quantizer::fp8_static(DType::fp8_e4m3, 0.0124f);
  CHECK_FALSE(a == b);
  CHECK(a.hash() != b.hash());
  CHECK(Recipe::defaults(RecipeKind::fp8_static).quantizer_for(TensorRole::input) == std::nullopt);  // the model's, per node
  for (const Quantizer& q : {a, Quantizer::fp8_static_weight(DType::fp8_e4m3, 0, 0), Quantizer::fp8_static_weight(DType::fp8_e4m3, 1, 0),
                             Quantizer::fp8_static_weight(DType::fp8_e4m3, 1, 128)})
    CHECK(quantizer_from_json(quantizer_to_json(q)) == q);
  nlohmann::json j = quantizer_to_json(a);
  j["static_scale_inv"] = -1.0;
  CHECK(test::error_of([&] { (void)quantizer_from_json(j); }).message().find("static_scale_inv must be a number >= 0") != std::string::npos);
  j = quantizer_to_json(Quantizer::fp8_current(DType::fp8_e4m3));
  j["static_scale_inv"] = 0.5;  // a field the kind does not have
  CHECK(test::error_of([&] { (void)quantizer_from_json(j); }).message().find("inconsistent") != std::string::npos);
  j = quantizer_to_json(a);
  j.erase("static_scale_inv");
  CHECK(test::error_of([&] { (void)quantizer_from_json(j); }).message().find("static_scale_inv") != std::string::npos);
}

}  // namespace tec
