// The meta and usage passes over whole graphs: saved-tensor aliasing, usage per recipe and
// mode, quantize placement, and the examples' shapes.
#include <doctest/doctest.h>

#include "test_util.h"

namespace tec {

namespace {
std::string example(const std::string& name) { return test::source_dir() + "/examples/" + name; }

bool any_columnwise_buffer(const Graph& g) {
  for (const Value& v : g.values)
    for (const auto& b : v.proto.buffers(g.target))
      if (b.role == BufferRole::columnwise_data || b.role == BufferRole::columnwise_scale_inv) return true;
  return false;
}
}  // namespace

TEST_CASE("alias dedup: in train mode the LayerNorm output saved by fc1 costs no extra buffer") {
  FrontendOptions train = test::with_recipe(RecipeKind::fp8_current, Mode::train);
  train.dim_overrides["T"] = {32};
  const Graph g = test::compile_file(example("mlp_tiny.json"), train).at(0);
  const Node& fc1 = test::node_named(g, "fc1");
  REQUIRE(fc1.saved.size() == 2);
  CHECK(fc1.saved[0].name == "input");
  CHECK(fc1.saved[0].aliases_input == 0);
  CHECK(g.value(fc1.inputs[0]).name == "ln");
  CHECK(fc1.saved[1].aliases_input == 1);  // the weight, for dgrad
  // The only new saved buffers are LayerNorm's per-row statistics: mean and rsigma, [T] fp32.
  const MetaSummary s = summarize(g);
  CHECK(s.saved_bytes == 2 * 32 * 4);
  CHECK(s.aliased_bytes > 0);
  // The alias is the columnwise copy the wgrad GEMM reads, a view of ln's own buffers.
  CHECK(fc1.saved[0].proto.usage == Usage{false, true});
  CHECK(test::value_named(g, "ln").proto.usage == Usage{true, true});
}

TEST_CASE("usage: bf16 makes no copies; FP8 per-tensor makes columnwise copies in train mode only") {
  FrontendOptions opts = test::with_recipe(RecipeKind::bf16, Mode::train);
  opts.dim_overrides["T"] = {32};
  const Graph bf16 = test::compile_file(example("mlp_tiny.json"), opts).at(0);
  for (const Value& v : bf16.values) CHECK_FALSE(v.proto.is_quantized());
  CHECK_FALSE(any_columnwise_buffer(bf16));

  opts.recipe = RecipeKind::fp8_current;
  const Graph train = test::compile_file(example("mlp_tiny.json"), opts).at(0);
  CHECK(any_columnwise_buffer(train));
  for (const char* name : {"ln", "act", "fc1.weight", "fc2.weight"}) {
    CAPTURE(name);
    const auto& p = test::value_named(train, name).proto;
    REQUIRE(p.is_quantized());
    CHECK(p.usage == Usage{true, true});
  }
  // The linear's backward reads dy in the gradient format, rowwise (dgrad) and columnwise
  // (wgrad), and dy itself (dbias); autodiff quantizes it once (E5M2 under HYBRID), both copies.
  const auto& reads = test::node_named(train, "fc2").backward->grad_reads;
  REQUIRE(reads.size() == 3);
  CHECK((reads[0].quantized && !reads[0].columnwise && reads[1].quantized && reads[1].columnwise && !reads[2].quantized));
  const Graph step = autodiff(train, {});
  const auto& dy = test::value_named(step, "dy.quantized").proto;
  CHECK(dy.quantizer->dtype == DType::fp8_e5m2);
  CHECK(dy.usage == Usage{true, true});

  opts.mode = Mode::infer;
  const Graph infer = test::compile_file(example("mlp_tiny.json"), opts).at(0);
  CHECK_FALSE(any_columnwise_buffer(infer));
  for (const Value& v : infer.values) {
    CHECK_FALSE(v.grad.has_value());
    if (v.proto.is_quantized()) CHECK(v.proto.usage == Usage{true, false});
  }
}

TEST_CASE("apply_recipe: producers write GEMM operands quantized; other readers get an explicit quantize") {
  // x feeds fc directly (a graph input) and the residual add: it must stay bf16 for the add.
  const std::string text = R"({
    "inputs": [{"name": "x", "shape": [32, 64]}],
    "ops": [{"name": "fc", "op": "linear", "inputs": ["x"], "attrs": {"in_features": 64, "out_features": 64}},
            {"name": "y", "op": "add", "inputs": ["fc", "x"]}],
    "outputs": ["y"]})";
  const Graph g = test::compile_text(text, test::with_recipe(RecipeKind::fp8_delayed)).at(0);
  REQUIRE(g.nodes.size() == 3);
  CHECK(g.nodes[0].op == "quantize");
  CHECK(g.nodes[0].name == "x.quantized");
  CHECK(g.value(g.nodes[1].inputs[0]).name == "x.quantized");
  CHECK_FALSE(test::value_named(g, "x").proto.is_quantized());
  const auto& xq = test::value_named(g, "x.quantized").proto;
  REQUIRE(xq.is_quantized());
  CHECK(xq.quantizer->kind == QuantizerKind::fp8_delayed);
  // Delayed scaling: each quantized tensor owns its scale and amax history.
  CHECK(summarize(g).state_bytes == 2 * (4 + 1024 * 4));  // x.quantized and fc.weight
}

TEST_CASE("examples: mlp.json meta under MXFP8 pads the scales per LAYOUTS.md") {
  FrontendOptions opts = test::with_recipe(RecipeKind::mxfp8);
  const auto graphs = test::compile_file(example("mlp.json"), opts);
  REQUIRE(graphs.size() == 4);  // T = 16, 128, 2048, 8192
  const Graph& t16 = graphs[0];
  CHECK(t16.dims.at("T") == 16);
  // ln: [16, 4096] -> E8M0 scales [roundup(16, 128), 4096 / 32] = [128, 128].
  const auto ln = test::value_named(t16, "ln").proto.buffers();
  REQUIRE(ln.size() == 2);
  CHECK(ln[1].role == BufferRole::scale_inv);
  CHECK(ln[1].shape == Shape{128, 128});
  CHECK(ln[1].dtype == DType::e8m0);
  // fc2.weight [4096, 16384]: scales [4096, 512].
  CHECK(test::value_named(t16, "fc2.weight").proto.buffers()[1].shape == Shape{4096, 512});
}

TEST_CASE("examples: every example compiles under every recipe in infer mode, and in train mode at T >= 32") {
  for (const char* file : {"mlp_tiny.json", "swiglu_mlp.json", "mlp.json"}) {
    for (auto recipe : {RecipeKind::bf16, RecipeKind::fp8_current, RecipeKind::fp8_delayed, RecipeKind::fp8_block,
                        RecipeKind::mxfp8, RecipeKind::nvfp4}) {
      for (auto mode : {Mode::infer, Mode::train}) {
        CAPTURE(file);
        CAPTURE(to_string(recipe));
        CAPTURE(to_string(mode));
        FrontendOptions opts = test::with_recipe(recipe, mode);
        if (std::string(file) == "mlp.json") opts.dim_overrides["T"] = {128};
        const auto graphs = test::compile_file(example(file), opts);
        CHECK_FALSE(graphs.empty());
        for (const Graph& g : graphs) CHECK(summarize(g).total_bytes > summarize(g).weight_bytes);
      }
    }
  }
}

TEST_CASE("MXFP8 in train mode at T=16 fails with the node and the rule, not a crash") {
  FrontendOptions opts = test::with_recipe(RecipeKind::mxfp8, Mode::train);
  opts.dim_overrides["T"] = {16};
  const Error e = test::error_of([&] { (void)test::compile_file(example("mlp_tiny.json"), opts); });
  CHECK(e.context().node == "ln");
  CHECK(e.message().find("columnwise quantization needs M divisible by 32, got M=16") != std::string::npos);
}

}  // namespace tec
