// Train plans on the CPU reference executor (ARCHITECTURE.md §12): gradients against fp64,
// saved-tensor accounting, gradient accumulation, AdamW with checkpoint and restore, and
// hostile train plans.
//
// The fp64 oracle: tests/fp64_train.h.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "compiler.h"
#include "core/hash.h"
#include "fp64_train.h"
#include "plan/file.h"
#include "reference/executor.h"
#include "tec/runtime.h"
#include "tec_math.h"
#include "test_util.h"

namespace tec {

namespace {

using namespace test::fp64;

std::string temp_file(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("tec-train-test-" + std::to_string(::getpid()) + "-" + name);
  std::ofstream(path) << text;
  return path.string();
}

CompileResult compile_train(const std::string& path, RecipeKind recipe, int64_t tokens, TrainOptions train = {},
                            const std::string& dump_after = "") {
  CompileOptions o;
  o.model_path = path;
  o.frontend.mode = Mode::train;
  o.frontend.recipe = recipe;
  o.frontend.dim_overrides["T"] = {tokens};
  o.train = train;
  o.cache_dir = "";
  o.dump_after = dump_after;
  return compile(o);
}

std::shared_ptr<const plan::Plan> train_plan(const std::string& path, RecipeKind recipe, int64_t tokens, TrainOptions train = {}) {
  const CompileResult r = compile_train(path, recipe, tokens, train);
  return std::make_shared<const plan::Plan>(plan::Plan::load(plan::serialize_plan(r.plan->manifest, r.plan->blobs), path));
}

// One step (or `steps`) of the train plan on the CPU reference, then every gradient against fp64.
std::vector<GradientCheck> check_gradients(const std::string& path, RecipeKind recipe, int64_t tokens, int samples, int steps = 1) {
  const auto plan = train_plan(path, recipe, tokens);
  reference::Session s(*plan, plan->profiles.at(0));
  s.randomize_inputs(7);
  Tensors before;
  for (int i = 0; i < steps; ++i) {
    // The last step's gradients: main_grad accumulates, so subtract what it held before.
    if (i == steps - 1)
      for (const auto& [name, t] : plan->profiles[0].tensors)
        if (name.ends_with(".main_grad")) before[name] = as_double(s.read(name));
    s.run();
  }
  return gradient_checks(path, tokens, samples, [&](const std::string& name) { return s.read(name); }, before);
}

// A graph's gradients at T = 8 under bf16, each within 1.5e-2 of fp64 central differences
// (bf16 storage of x, y, dy and dx: ~2^-8 each).
void check_bf16_gradients(const std::string& file_name, const std::string& graph) {
  const std::string path = temp_file(file_name, graph);
  for (const GradientCheck& check : check_gradients(path, RecipeKind::bf16, 8, 256)) {
    CAPTURE(check.name);
    CHECK(check.error < 1.5e-2);
  }
  std::filesystem::remove(path);
}

std::string one_op_graph(const std::string& op, const std::string& attrs, int64_t k, const std::string& extra_input = "") {
  std::string inputs = R"([{"name": "x", "shape": ["T", )" + std::to_string(k) + "]}";
  std::string op_inputs = R"(["x"])";
  if (!extra_input.empty()) {
    inputs += R"(, {"name": ")" + extra_input + R"(", "shape": ["T", )" + std::to_string(k) + "]}";
    op_inputs = R"(["x", ")" + extra_input + R"("])";
  }
  return R"({"name": "one_op", "dims": {"T": [16]}, "dtype": "bf16", "weights": {"init": "random", "seed": 5},
             "inputs": )" + inputs + R"(],
             "ops": [{"name": "op", "op": ")" + op + R"(", "inputs": )" + op_inputs + R"(, "attrs": )" + attrs + R"(}],
             "outputs": ["op"]})";
}

}  // namespace

TEST_CASE("every op's backward on the CPU reference matches fp64 central differences (bf16)") {
  struct Case {
    std::string op, attrs;
    int64_t k = 64;
    std::string extra_input;
    double bound = 1.5e-2;  // bf16 storage of x, y, dy and dx: ~2^-8 each
  };
  const std::vector<Case> cases = {
      {"linear", R"({"in_features": 64, "out_features": 32})"},
      {"linear", R"({"in_features": 64, "out_features": 32, "bias": false})"},
      {"layernorm", R"({"hidden": 64})"},
      {"layernorm", R"({"hidden": 64, "zero_centered_gamma": true})"},
      {"rmsnorm", R"({"hidden": 64, "eps": 1e-6})"},
      {"gelu", R"({"approximate": "tanh"})"},
      {"gelu", R"({"approximate": "none"})"},
      {"relu", "{}"},
      {"silu", "{}"},
      {"swiglu", "{}"},
      {"geglu", "{}"},
      {"add", "{}", 64, "x2"},
      {"bias", R"({"features": 64})"},
      {"scale", R"({"scale": 0.37})"},
      {"l2norm", "{}"},
      {"dropout", R"({"p": 0.25, "seed": 3})"},
      {"identity", "{}"},
      {"reshape", R"({"shape": [-1, 32]})"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.op);
    CAPTURE(c.attrs);
    const std::string path = temp_file(c.op + ".json", one_op_graph(c.op, c.attrs, c.k, c.extra_input));
    for (const GradientCheck& check : check_gradients(path, RecipeKind::bf16, 16, 256)) {
      CAPTURE(check.name);
      CHECK(check.error < c.bound);
    }
    std::filesystem::remove(path);
  }
}

TEST_CASE("rope's backward matches fp64 central differences, both styles and layouts, between two linears (bf16)") {
  // The projections give rope's input a gradient and make its output feed a GEMM, as in a layer.
  for (const std::string attrs : {R"({"heads": 4, "head_dim": 16})", R"({"heads": 4, "head_dim": 16, "style": "interleaved", "rotary_dim": 8})",
                                  R"({"heads": 2, "head_dim": 32, "layout": "sbhd", "theta": 500000})"}) {
    CAPTURE(attrs);
    const std::string graph = R"({"name": "rope", "dims": {"T": [8]}, "dtype": "bf16", "weights": {"init": "random", "seed": 5},
        "inputs": [{"name": "x", "shape": [2, "T", 64]}],
        "ops": [{"name": "q", "op": "linear", "inputs": ["x"], "attrs": {"in_features": 64, "out_features": 64, "bias": false}},
                {"name": "rot", "op": "rope", "inputs": ["q"], "attrs": )" + attrs + R"(},
                {"name": "o", "op": "linear", "inputs": ["rot"], "attrs": {"in_features": 64, "out_features": 64, "bias": false}}],
        "outputs": ["o"]})";
    check_bf16_gradients("rope.json", graph);
  }
}

TEST_CASE("attention's backward matches fp64 central differences: MHA, GQA and MQA, causal or not, both layouts (bf16)") {
  for (const std::string attrs : {R"({"heads": 4, "head_dim": 16})", R"({"heads": 4, "kv_heads": 2, "head_dim": 16, "causal": true})",
                                  R"({"heads": 4, "kv_heads": 1, "head_dim": 16, "causal": true, "layout": "sbhd", "scale": 0.3})"}) {
    CAPTURE(attrs);
    const int64_t kv_width = 16 * nlohmann::json::parse(attrs).value("kv_heads", 4);
    const std::string kv = std::to_string(kv_width);
    const std::string graph = R"({"name": "attention", "dims": {"T": [8]}, "dtype": "bf16", "weights": {"init": "random", "seed": 5},
        "inputs": [{"name": "x", "shape": [2, "T", 64]}],
        "ops": [{"name": "q", "op": "linear", "inputs": ["x"], "attrs": {"in_features": 64, "out_features": 64, "bias": false}},
                {"name": "k", "op": "linear", "inputs": ["x"], "attrs": {"in_features": 64, "out_features": )" + kv + R"(, "bias": false}},
                {"name": "v", "op": "linear", "inputs": ["x"], "attrs": {"in_features": 64, "out_features": )" + kv + R"(, "bias": false}},
                {"name": "att", "op": "attention", "inputs": ["q", "k", "v"], "attrs": )" + attrs + R"(},
                {"name": "o", "op": "linear", "inputs": ["att"], "attrs": {"in_features": 64, "out_features": 64, "bias": false}}],
        "outputs": ["o"]})";
    check_bf16_gradients("attention.json", graph);
  }
}

TEST_CASE("cross-attention's backward matches fp64: 8 queries over 12 keys, v heads wider than q's, causal or not (bf16)") {
  for (const std::string causal : {"false", "true"}) {
    CAPTURE(causal);
    check_bf16_gradients("cross_attention.json", R"({"name": "cross", "dims": {"T": [8]}, "dtype": "bf16", "weights": {"init": "random", "seed": 5},
        "inputs": [{"name": "x", "shape": [2, "T", 64]}, {"name": "memory", "shape": [2, 12, 32]}],
        "ops": [{"name": "q", "op": "linear", "inputs": ["x"], "attrs": {"in_features": 64, "out_features": 64, "bias": false}},
                {"name": "k", "op": "linear", "inputs": ["memory"], "attrs": {"in_features": 32, "out_features": 32, "bias": false}},
                {"name": "v", "op": "linear", "inputs": ["memory"], "attrs": {"in_features": 32, "out_features": 48, "bias": false}},
                {"name": "att", "op": "attention", "inputs": ["q", "k", "v"],
                 "attrs": {"heads": 4, "kv_heads": 2, "head_dim": 16, "v_head_dim": 24, "causal": )" + causal + R"(}},
                {"name": "o", "op": "linear", "inputs": ["att"], "attrs": {"in_features": 96, "out_features": 64, "bias": false}}],
        "outputs": ["o"]})");
  }
}

TEST_CASE("attention with a padding mask: gradients match fp64, and padded rows and keys neither give nor take any") {
  for (const bool causal : {false, true}) {
    CAPTURE(causal);
    const std::string graph = R"({"name": "padded", "dims": {"T": [8]}, "dtype": "bf16", "weights": {"init": "random", "seed": 5},
        "inputs": [{"name": "x", "shape": [3, "T", 64]}, {"name": "lens", "shape": [3], "dtype": "int32"}],
        "ops": [{"name": "q", "op": "linear", "inputs": ["x"], "attrs": {"in_features": 64, "out_features": 64, "bias": false}},
                {"name": "att", "op": "attention", "inputs": ["q", "x", "x", "lens"],
                 "attrs": {"heads": 4, "head_dim": 16, "causal": )" + std::string(causal ? "true" : "false") + R"(}}],
        "outputs": ["att"]})";
    const std::string path = temp_file("padded.json", graph);
    const auto plan = train_plan(path, RecipeKind::bf16, 8);
    reference::Session s(*plan, plan->profiles.at(0));
    s.randomize_inputs(7);
    s.set_input("lens", HostTensor{Shape{3}, {5, 8, 0}});  // padded, full, empty
    s.run();
    for (const GradientCheck& check : gradient_checks(path, 8, 256, [&](const std::string& name) { return s.read(name); }, {})) {
      CAPTURE(check.name);
      CHECK(check.error < 1.5e-2);
    }
    // Rows past a sequence's length: zero output, zero gradient into x through k and v's keys
    // past it too (x feeds q, k and v; q's rows past the length get none either).
    const HostTensor out = s.read("att"), dx = s.read("dx");
    for (int64_t b : {0, 2})
      for (int64_t t = b == 0 ? 5 : 0; t < 8; ++t)
        for (int64_t c = 0; c < 64; ++c) {
          CHECK(out.values[static_cast<size_t>((b * 8 + t) * 64 + c)] == 0.0f);
          CHECK(dx.values[static_cast<size_t>((b * 8 + t) * 64 + c)] == 0.0f);
        }
    std::filesystem::remove(path);
  }
}

TEST_CASE("the MoE layer's backward (router, permute, grouped linears, unpermute) matches fp64 central differences (bf16)") {
  // moe_tiny as it is (softmax router, normalised top-2), and with a sigmoid router, the raw
  // top-k weights and a bias per expert.
  std::string variant = test::read_text(test::source_dir() + "/examples/moe_tiny.json");
  for (const auto& [from, to] : {std::pair<std::string, std::string>{R"("score_function": "softmax", "normalize_topk": true)",
                                                                     R"("score_function": "sigmoid", "normalize_topk": false)"},
                                 {R"("out_features": "F2"})", R"("out_features": "F2", "bias": true})"}}) {
    REQUIRE(variant.find(from) != std::string::npos);
    variant.replace(variant.find(from), from.size(), to);
  }
  for (const std::string& path : {test::source_dir() + "/examples/moe_tiny.json", temp_file("moe_sigmoid.json", variant)}) {
    CAPTURE(path);
    const std::vector<GradientCheck> checks = check_gradients(path, RecipeKind::bf16, 16, 64);
    CHECK(checks.size() == (path.ends_with("moe_sigmoid.json") ? 6 : 5));  // x, norm, router, fc1, fc2 (and fc1's bias)
    for (const GradientCheck& check : checks) {
      CAPTURE(check.name);
      CHECK(check.error < 1.5e-2);
    }
  }
}

TEST_CASE("moe_tiny: every gradient within its recipe's bound of fp64, every recipe") {
  const std::string path = test::source_dir() + "/examples/moe_tiny.json";
  for (const RecipeBound& r : kRecipeBounds) {
    CAPTURE(to_string(r.recipe));
    for (const GradientCheck& check : check_gradients(path, r.recipe, 32, 24, r.steps)) {
      CAPTURE(check.name);
      CHECK(check.error < r.bound);
      MESSAGE("moe_tiny " << to_string(r.recipe) << " d" << check.name << " rel error " << check.error);
    }
  }
}

TEST_CASE("fp8-delayed MoE training: each expert's weight copy keeps its own scale and amax history column") {
  const auto plan = train_plan(test::source_dir() + "/examples/moe_tiny.json", RecipeKind::fp8_delayed, 32);
  reference::Session s(*plan, plan->profiles.at(0));
  s.randomize_inputs(3);
  s.run();
  for (const std::string name : {"fc1.weight", "fc2.weight"}) {
    CAPTURE(name);
    const plan::Tensor& copy = plan->profiles[0].tensors.at(name);
    const int64_t experts = copy.proto.group_members, len = copy.proto.quantizer->amax_history_len;
    REQUIRE(experts == 4);
    auto floats = [&](const char* state) {
      const std::span<uint8_t> bytes = s.buffer_bytes(copy.state.at(state));
      std::vector<float> out(bytes.size() / 4);
      std::memcpy(out.data(), bytes.data(), bytes.size());
      return out;
    };
    const std::vector<float> scale = floats("scale"), history = floats("amax_history");
    REQUIRE(scale.size() == static_cast<size_t>(experts));
    REQUIRE(history.size() == static_cast<size_t>(len * experts));
    // After the step each column's newest entry is its own expert's amax of the copy made from
    // the master, and the scale its E4M3 scale (margin 0): scale x amax = 448.
    const HostTensor master = s.read(name + ".master");
    const size_t member = master.values.size() / static_cast<size_t>(experts);
    std::set<float> distinct;
    for (int64_t e = 0; e < experts; ++e) {
      float amax = 0;
      for (size_t i = 0; i < member; ++i) amax = std::max(amax, std::abs(master.values[static_cast<size_t>(e) * member + i]));
      CHECK(history[static_cast<size_t>((len - 1) * experts + e)] == amax);
      CHECK(history[static_cast<size_t>(e)] == 0.0f);  // row 0, the staging slot, rolled into the history
      CHECK(scale[static_cast<size_t>(e)] == doctest::Approx(448.0 / amax).epsilon(1e-6));
      distinct.insert(scale[static_cast<size_t>(e)]);
    }
    CHECK(distinct.size() == static_cast<size_t>(experts));
  }
}

TEST_CASE("dropout draws a new mask every step, and its backward reads the step's own mask") {
  const std::string path = temp_file("dropout.json", one_op_graph("dropout", R"({"p": 0.5, "seed": 9})", 64));
  const auto plan = train_plan(path, RecipeKind::bf16, 16);
  reference::Session s(*plan, plan->profiles.at(0));
  s.randomize_inputs(2);
  s.run();
  const HostTensor first = s.read("op.mask");
  CHECK(s.scalar("dropout.step") == 1.0f);
  s.run();
  const HostTensor second = s.read("op.mask");
  CHECK(first.values != second.values);
  // dx = dy * mask / (1 - p), with this step's mask.
  const HostTensor dx = s.read("dx"), dy = s.read("dop");
  for (size_t i = 0; i < dx.values.size(); ++i) CHECK(dx.values[i] == reference::round_to_bf16(dy.values[i] * second.values[i] * 2.0f));
  std::filesystem::remove(path);
}

TEST_CASE("tensor-parallel linears keep their shape effects in the backward") {
  // The graph's x is the whole model's [64, 64]; under sequence parallelism a rank holds 32
  // tokens, all_gather makes them 64 ([T/tp, K] -> [T, K]) and reduce_scatter splits y again.
  // Each gradient has its tensor's shape on the rank (tensor_parallel_test.cpp runs them).
  const std::string text = R"({"name": "tp", "dims": {"T": [64]}, "dtype": "bf16",
    "inputs": [{"name": "x", "shape": [64, 64]}],
    "ops": [{"name": "up", "op": "linear", "inputs": ["x"],
             "attrs": {"in_features": 64, "out_features": 256, "tp_mode": "column", "tp_size": 2, "sequence_parallel": true}},
            {"name": "down", "op": "linear", "inputs": ["up"],
             "attrs": {"in_features": 256, "out_features": 64, "tp_mode": "row", "tp_size": 2, "sequence_parallel": true}}],
    "outputs": ["down"]})";
  const std::string path = temp_file("tp.json", text);
  const CompileResult r = compile_train(path, RecipeKind::fp8_current, 64, {}, "autodiff");
  const Graph& g = r.profiles.at(0).graph;
  CHECK(test::value_named(g, "ddown").proto.shape == Shape({32, 64}));  // the caller's dy: y is scattered
  CHECK(test::value_named(g, "dx").proto.shape == Shape({32, 64}));
  CHECK(test::value_named(g, "up.dweight").proto.shape == Shape({128, 64}));    // this rank's columns
  CHECK(test::value_named(g, "down.dweight").proto.shape == Shape({64, 128}));  // this rank's rows
  CHECK(test::value_named(g, "down.dinput").proto.shape == Shape({64, 128}));
  std::filesystem::remove(path);
}

TEST_CASE("quantize and dequantize pass the gradient straight through") {
  const std::string text = R"({"name": "qdq", "dims": {"T": [16]}, "dtype": "bf16",
    "inputs": [{"name": "x", "shape": ["T", 64]}],
    "ops": [{"name": "q", "op": "quantize", "inputs": ["x"], "attrs": {"recipe": "fp8-current"}},
            {"name": "dq", "op": "dequantize", "inputs": ["q"]}],
    "outputs": ["dq"]})";
  const std::string path = temp_file("qdq.json", text);
  const auto plan = train_plan(path, RecipeKind::bf16, 16);
  reference::Session s(*plan, plan->profiles.at(0));
  s.randomize_inputs(3);
  s.run();
  CHECK(s.read("dx").values == s.read("ddq").values);  // bit for bit
  std::filesystem::remove(path);
}

TEST_CASE("mlp_tiny and swiglu_mlp: every gradient within its recipe's bound of fp64, every recipe") {
  for (const std::string example : {"mlp_tiny.json", "swiglu_mlp.json"}) {
    const std::string path = test::source_dir() + "/examples/" + example;
    for (const RecipeBound& r : kRecipeBounds) {
      CAPTURE(example);
      CAPTURE(to_string(r.recipe));
      for (const GradientCheck& check : check_gradients(path, r.recipe, 32, example[0] == 'm' ? 48 : 24, r.steps)) {
        CAPTURE(check.name);
        CAPTURE(check.error);
        CHECK(check.error < r.bound);
        MESSAGE(example << " " << to_string(r.recipe) << " d" << check.name << " rel error " << check.error);
      }
    }
  }
}

TEST_CASE("llama_layer_tiny (rmsnorm, q/k/v, rope, GQA causal attention, projection, SwiGLU MLP): every gradient within its recipe's "
          "bound of fp64, every recipe") {
  const std::string path = test::source_dir() + "/examples/llama_layer_tiny.json";
  for (const RecipeBound& r : kRecipeBounds) {
    CAPTURE(to_string(r.recipe));
    for (const GradientCheck& check : check_gradients(path, r.recipe, 16, 96, r.steps)) {
      CAPTURE(check.name);
      CHECK(check.error < r.bound);
      MESSAGE("llama_layer_tiny " << to_string(r.recipe) << " d" << check.name << " rel error " << check.error);
    }
  }
}

// examples/mlp.json at full size: fp64_train.h's sampled fp64 backward of its formula. One step
// on the CPU reference; label `large` (ctest), not under the sanitizers.
TEST_CASE("mlp.json at T=128: sampled gradients within their recipe's bound of fp64" * doctest::skip(std::getenv("TEC_LARGE_TESTS") == nullptr)) {
  const std::string path = test::source_dir() + "/examples/mlp.json";
  const int64_t t = 128;
  for (const RecipeBound& r : kRecipeBounds) {
    if (r.recipe == RecipeKind::fp8_delayed) continue;  // its bound needs a scaling history: four steps at this size
    CAPTURE(to_string(r.recipe));
    const auto plan = train_plan(path, r.recipe, t);
    reference::Session s(*plan, plan->profiles.at(0));
    s.randomize_inputs(17);
    s.run();
    const auto errors = mlp_gradient_errors(t, [&](const std::string& name) { return s.read(name); });
    for (const auto& [name, error] : errors) {
      CAPTURE(name);
      CHECK(error < r.bound);
      MESSAGE("mlp.json T=128 " << to_string(r.recipe) << " d" << name << " rel error " << error);
    }
  }
}

TEST_CASE("saved tensors of mlp.json at T=2048 under fp8-current are exactly TE's save layout") {
  const CompileResult r = compile_train(test::source_dir() + "/examples/mlp.json", RecipeKind::fp8_current, 2048, {}, "memory_plan");
  const CompiledProfile& p = r.profiles.at(0);
  const TrainMemory m = train_memory(p.graph, p.memory);
  const int64_t t = 2048, h = 4096, f = 16384, scale = 4;  // one fp32 scale_inv per FP8 tensor
  const int64_t layernorm = t * h * 2 /* x, bf16 */ + h * 2 /* gamma's bf16 workspace */ + 2 * t * 4 /* mean, rsigma */;
  const int64_t fc1 = (t * h + scale) /* ln's FP8 columnwise copy */ + (f * h + scale) /* W1's FP8 columnwise copy */;
  const int64_t act = t * f * 2;  // gelu's input, fc1's bf16 output
  const int64_t fc2 = (t * f + scale) /* act's FP8 columnwise copy */ + (h * f + scale) /* W2's */;
  CHECK(m.saved_bytes == layernorm + fc1 + act + fc2);
  CHECK(m.saved_new_bytes == 2 * t * 4);  // only mean and rsigma are made to be saved
  CHECK(m.bytes_saved_by_aliasing == m.saved_bytes - 2 * t * 4);
  MESSAGE("mlp.json T=2048 fp8-current: saved " << m.saved_bytes << " bytes, " << m.bytes_saved_by_aliasing
                                                << " of them aliased (the forward's own tensors)");
  // The rowwise FP8 copy of ln's output is free after fc1's forward GEMM; its columnwise copy
  // lives until fc1's wgrad.
  int forward_end = 0;
  for (size_t i = 0; i < p.schedule.steps.size(); ++i)
    if (p.schedule.steps[i].phase == Phase::forward) forward_end = static_cast<int>(i);
  for (const PlannedBuffer& b : p.memory.buffers) {
    if (b.name == "ln.data") CHECK(b.last_step < forward_end);
    if (b.name == "ln.columnwise_data") CHECK(b.last_step > forward_end);
  }
}

TEST_CASE("--recompute: the activation's output is made again in the backward; the gradients do not change") {
  TrainOptions recompute;
  recompute.recompute_activations = true;
  for (const std::string example : {"mlp_tiny.json", "swiglu_mlp.json"})
    for (RecipeKind recipe : {RecipeKind::bf16, RecipeKind::fp8_current, RecipeKind::mxfp8}) {
      CAPTURE(example);
      CAPTURE(to_string(recipe));
      const std::string path = test::source_dir() + "/examples/" + example;
      const auto kept = train_plan(path, recipe, 32), remade = train_plan(path, recipe, 32, recompute);
      reference::Session a(*kept, kept->profiles[0]), b(*remade, remade->profiles[0]);
      a.randomize_inputs(4);
      b.randomize_inputs(4);
      a.run();
      b.run();
      // Current scaling and MXFP8 take the scale from the values, which are the same: bit for bit.
      CHECK(a.read("dx").values == b.read("dx").values);
      for (const auto& [name, t] : kept->profiles[0].tensors)
        if (name.ends_with(".main_grad")) CHECK(a.read(name).values == b.read(name).values);
      // Both figures: what is saved, and what recomputing saves.
      const CompileResult with = compile_train(path, recipe, 32, recompute, "memory_plan"),
                          without = compile_train(path, recipe, 32, {}, "memory_plan");
      const TrainMemory m = train_memory(with.profiles[0].graph, with.profiles[0].memory);
      const TrainMemory n = train_memory(without.profiles[0].graph, without.profiles[0].memory);
      CHECK(m.recomputed_bytes > 0);
      CHECK(m.saved_bytes + m.recomputed_bytes == n.saved_bytes);
    }
}

TEST_CASE("gradient accumulation: two microbatches equal one step on the concatenated batch") {
  const std::string path = test::source_dir() + "/examples/mlp_tiny.json";
  for (RecipeKind recipe : {RecipeKind::bf16, RecipeKind::fp8_current}) {
    CAPTURE(to_string(recipe));
    const auto half = train_plan(path, recipe, 32), whole = train_plan(path, recipe, 64);
    reference::Session a(*half, half->profiles[0]), b(*whole, whole->profiles[0]);
    b.randomize_inputs(11);
    const HostTensor x = b.read("x"), dy = b.read("dy");
    for (int m = 0; m < 2; ++m) {
      auto rows = [&](const HostTensor& t) {
        return HostTensor{Shape{32, 64}, std::vector<float>(t.values.begin() + m * 32 * 64, t.values.begin() + (m + 1) * 32 * 64)};
      };
      a.set_input("x", rows(x));
      a.set_input("dy", rows(dy));
      a.run();
    }
    b.run();
    for (const char* name : {"fc1.weight.main_grad", "fc2.weight.main_grad", "fc1.bias.main_grad", "ln.weight.main_grad"}) {
      CAPTURE(name);
      const auto ga = a.read(name).values, gb = b.read(name).values;
      double diff = 0, norm = 0;
      for (size_t i = 0; i < ga.size(); ++i) {
        diff += std::pow(double(ga[i]) - gb[i], 2);
        norm += double(gb[i]) * gb[i];
      }
      // bf16: the sums differ only in fp32 rounding order. FP8 current scaling: each
      // microbatch takes its own amax, as TE's does, so its codes differ from the big batch's.
      CHECK(std::sqrt(diff / norm) < (recipe == RecipeKind::bf16 ? 1e-5 : 0.1));
    }
  }
}

TEST_CASE("adamw: the plan updates masters like an fp64 AdamW, and a restored session continues bit-identically") {
  const std::string path = test::source_dir() + "/examples/mlp_tiny.json";
  TrainOptions adamw;
  adamw.optimizer = TrainOptions::Optimizer::adamw;
  adamw.lr = 0.01f;
  const std::string plan_path = temp_file("adamw.teplan", "");
  {
    const CompileResult r = compile_train(path, RecipeKind::fp8_current, 32, adamw);
    plan::write_plan_file(plan_path, r.plan->manifest, r.plan->blobs);
  }
  auto plan = Plan::load_file(plan_path);
  REQUIRE(plan.ok());
  auto session = Session::create(plan.value(), {}, Backend::cpu);
  REQUIRE(session.ok());
  Session& s = session.value();
  auto fill = [&](int step) {
    for (const char* name : {"x", "dy"}) {
      TensorView v = s.input(name).value();
      const auto values = random_weight(100 + static_cast<uint64_t>(step), name, static_cast<int64_t>(v.bytes / 2), 0, 1);
      auto* words = static_cast<uint16_t*>(v.data);
      for (size_t i = 0; i < values.size(); ++i) words[i] = reference::float_to_bf16(values[i]);
    }
  };
  auto master = [&](const char* name) {
    TensorView v = s.state_tensor(name).value();
    const auto* f = static_cast<const float*>(v.data);
    return std::vector<float>(f, f + v.bytes / 4);
  };
  // Step 1 by hand: AdamW from zero moments moves each weight by lr * (g / (|g| + eps) + wd * w).
  fill(0);
  const std::vector<float> w0 = master("fc2.weight.master");
  REQUIRE(s.run().ok());
  const std::vector<float> w1 = master("fc2.weight.master");
  CHECK(master("fc2.weight.main_grad") == std::vector<float>(w0.size(), 0.0f));  // cleared after the update
  const float step = master("optimizer.step")[0];
  CHECK(step == 1.0f);
  size_t moved = 0;
  for (size_t i = 0; i < w0.size(); ++i) moved += std::abs(std::abs(w1[i] - w0[i] * (1 - 0.01f * 0.01f)) - 0.01f) < 2e-4f;
  CHECK(moved > w0.size() * 9 / 10);  // |g| >> eps for nearly every entry: each moves by lr
  // Three more steps, a checkpoint, two more; then restore into a fresh session and replay.
  for (int i = 1; i < 4; ++i) {
    fill(i);
    REQUIRE(s.run().ok());
  }
  const std::vector<uint8_t> checkpoint = s.state().value();
  std::vector<std::vector<float>> later;
  for (int i = 4; i < 6; ++i) {
    fill(i);
    REQUIRE(s.run().ok());
    const TensorView y = s.output("y").value();
    later.emplace_back(static_cast<const float*>(y.data), static_cast<const float*>(y.data) + y.bytes / 4);
    later.push_back(master("fc1.weight.master"));
  }
  auto restored = Session::create(plan.value(), {}, Backend::cpu);
  Session& r = restored.value();
  REQUIRE(r.set_state(checkpoint).ok());
  std::swap(s, r);  // fill() and master() use `s`
  for (int i = 4; i < 6; ++i) {
    fill(i);
    REQUIRE(s.run().ok());
    const TensorView y = s.output("y").value();
    CHECK(std::vector<float>(static_cast<const float*>(y.data), static_cast<const float*>(y.data) + y.bytes / 4) == later[2 * (i - 4)]);
    CHECK(master("fc1.weight.master") == later[2 * (i - 4) + 1]);
  }
  // Runtime scalars: set between runs; a NaN is refused.
  CHECK(s.set_scalar("optimizer.lr", 1e-3).ok());
  const Status nan = s.set_scalar("optimizer.lr", std::nan(""));
  CHECK(nan.code == 2);
  CHECK(nan.message.find("must be a finite float") != std::string::npos);
  CHECK(s.set_scalar("no.such", 1).message.find("has no runtime scalar 'no.such'") != std::string::npos);
  // Issue 51: values that make every weight NaN are refused where they are set, by one table
  // (ir/runtime_scalars.h), whether through set_scalar or a restored state.
  const Status beta1 = s.set_scalar("optimizer.beta1", 1.0);
  CHECK(beta1.code == 2);
  CHECK(beta1.message.find("optimizer.beta1 (AdamW's first-moment decay) must be in [0, 1), got 1") != std::string::npos);
  CHECK(s.set_scalar("optimizer.step", -1).code == 2);
  CHECK(s.set_scalar("optimizer.eps", 0).code == 2);
  std::vector<uint8_t> crafted = s.state().value();
  const std::string name = "optimizer.beta1";
  const auto at = std::search(crafted.begin(), crafted.end(), name.begin(), name.end());
  REQUIRE(at != crafted.end());
  const float one = 1.0f;
  std::memcpy(&*(at + static_cast<long>(name.size() + 8)), &one, 4);  // the name, its u64 size, then the value
  const uint64_t sum = checksum64(std::span(crafted.data(), crafted.size() - 8));
  std::memcpy(crafted.data() + crafted.size() - 8, &sum, 8);
  const Status restored_bad = s.set_state(crafted);
  CHECK(restored_bad.code == 3);
  CHECK(restored_bad.message.find("optimizer.beta1") != std::string::npos);
  CHECK(s.run().ok());  // the refused state changed nothing
  std::filesystem::remove(plan_path);
}

TEST_CASE("first_microbatch = 0 reuses the weights' copies of the previous run") {
  const std::string path = test::source_dir() + "/examples/mlp_tiny.json";
  TrainOptions adamw;
  adamw.optimizer = TrainOptions::Optimizer::adamw;
  const auto plan = train_plan(path, RecipeKind::fp8_current, 32, adamw);
  reference::Session s(*plan, plan->profiles[0]);
  s.randomize_inputs(5);
  s.run();
  const HostTensor workspace = s.read("fc1.weight");  // made from the masters before the update
  s.run();                                             // first microbatch: remade from the updated masters
  CHECK(s.read("fc1.weight").values != workspace.values);
  const HostTensor remade = s.read("fc1.weight");
  float zero = 0;
  std::memcpy(s.buffer_bytes(plan->profiles[0].tensors.at("first_microbatch").buffers.at(BufferRole::data)).data(), &zero, 4);
  s.run();
  CHECK(s.read("fc1.weight").values == remade.values);
}

TEST_CASE("hostile train plans: clear errors from the reader and the executor") {
  const std::string path = test::source_dir() + "/examples/mlp_tiny.json";
  TrainOptions adamw;
  adamw.optimizer = TrainOptions::Optimizer::adamw;
  const CompileResult r = compile_train(path, RecipeKind::fp8_current, 32, adamw);
  auto load_error = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json m = r.plan->manifest;
    edit(m);
    const Error e = test::error_of([&] { (void)plan::Plan::load(plan::serialize_plan(m, r.plan->blobs), "hostile.teplan"); });
    return std::string(e.message());
  };
  auto op_named = [](nlohmann::json& m, const std::string& node) -> nlohmann::json& {
    for (auto& step : m["profiles"][0]["steps"])
      for (auto& op : step["ops"])
        if (op["node"] == node) return op;
    throw std::runtime_error("no op " + node);
  };
  // A saved tensor that no forward step writes: ln no longer writes its mean.
  CHECK(load_error([&](nlohmann::json& m) {
          auto& outs = op_named(m, "ln")["outputs"];
          outs.erase(1);
        }).find("reads 'ln.mean', which no earlier step writes") != std::string::npos);
  // A backward reading a freed buffer: act's input (fc1's output) dies after the forward.
  CHECK(load_error([&](nlohmann::json& m) {
          for (auto& b : m["profiles"][0]["buffers"])
            if (b["name"] == "fc1.data") b["lifetime"][1] = 9;
        }).find("reads 'fc1' in step") != std::string::npos);
  // A state buffer of the wrong size.
  CHECK(load_error([&](nlohmann::json& m) {
          for (auto& b : m["profiles"][0]["buffers"])
            if (b["name"] == "fc1.weight.main_grad.data") {
              b["bytes"] = 4;
              b["shape"] = {1};
            }
        }).find("does not match tensor 'fc1.weight.main_grad'") != std::string::npos);
  // A runtime scalar that starts at NaN.
  {
    auto blobs = r.plan->blobs;
    const nlohmann::json& m = r.plan->manifest;
    int64_t offset = -1;
    for (const auto& b : m["profiles"][0]["buffers"])
      if (b["name"] == "optimizer.lr.init") offset = b["offset"].get<int64_t>();
    REQUIRE(offset >= 0);
    const float nan = std::nanf("");
    for (auto& blob : blobs)
      if (blob.name == "constants") {
        std::vector<uint8_t> bytes(blob.bytes.span().begin(), blob.bytes.span().end());
        std::memcpy(bytes.data() + offset, &nan, 4);
        blob.bytes = Bytes(std::move(bytes));
      }
    const Error e = test::error_of([&] { (void)plan::Plan::load(plan::serialize_plan(m, blobs), "hostile.teplan"); });
    CHECK(std::string(e.message()).find("its starting value: optimizer.lr (the learning rate) must be in [0, 1000], got nan") != std::string::npos);
  }
  // A backward op whose forward is gone.
  CHECK(load_error([&](nlohmann::json& m) {
          op_named(m, "fc1.backward")["gradient_slots"] = {0, 1};
        }).find("names the input slot of each of its") != std::string::npos);
  nlohmann::json m = r.plan->manifest;
  op_named(m, "fc2.backward")["node"] = "fc9.backward";
  const plan::Plan p = plan::Plan::load(plan::serialize_plan(m, r.plan->blobs), "hostile.teplan");
  CHECK(test::error_of([&] { reference::Session s(p, p.profiles[0]); }).message().find("has no forward op 'fc9'") !=
        std::string::npos);
}

}  // namespace tec
