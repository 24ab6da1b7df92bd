// The MoE ops on the CPU reference: examples/moe_tiny.json under every recipe against an fp64
// MoE written here, the routing's invariants (m_splits, a stable row map), routings given from
// outside (every token on one expert, empty experts), and hostile routing data, each refused
// with the op and the value at fault.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "compiler.h"
#include "fp64_model.h"
#include "plan/plan.h"
#include "reference/executor.h"
#include "test_util.h"

namespace tec {

namespace {

using namespace test::fp64;

struct Compiled {
  CompileResult result;
  plan::Plan plan;
};

Compiled compile_model(const std::string& path, RecipeKind recipe) {
  CompileOptions options;
  options.model_path = path;
  options.frontend.recipe = recipe;
  CompileResult result = compile(options);
  REQUIRE(result.plan.has_value());
  plan::Plan p = plan::Plan::load(plan::serialize_plan(result.plan->manifest, result.plan->blobs), path);
  return {std::move(result), std::move(p)};
}

std::string write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("tec_moe_test_" + name + ".json");
  std::ofstream(path) << text;
  return path.string();
}

// The fp64 MoE branch of examples/moe_tiny.json for the routing tec chose: rmsnorm, the
// router's softmax weights of the chosen experts (normalized), each expert's SwiGLU MLP.
Matrix moe_branch(const Model& m, const Matrix& x, const std::vector<float>& chosen, int64_t experts, int64_t top_k) {
  const int64_t t = m.rows, h = m.hidden;
  const Matrix xn = norm(x, t, h, m.weights.at("norm.weight"), nullptr, 1e-5);
  const Matrix logits = linear(xn, t, h, m.weights.at("router.weight"), nullptr);
  const auto& w1 = m.weights.at("fc1.weight");
  const auto& w2 = m.weights.at("fc2.weight");
  const int64_t f2 = static_cast<int64_t>(w1.size()) / experts / h, f = f2 / 2;
  Matrix out(static_cast<size_t>(t * h), 0.0);
  parallel_for(t, [&](int64_t r) {
    double max = -INFINITY, sum = 0, chosen_sum = 0;
    for (int64_t e = 0; e < experts; ++e) max = std::max(max, logits[static_cast<size_t>(r * experts + e)]);
    std::vector<double> p(static_cast<size_t>(experts));
    for (int64_t e = 0; e < experts; ++e) sum += p[static_cast<size_t>(e)] = std::exp(logits[static_cast<size_t>(r * experts + e)] - max);
    for (int64_t j = 0; j < top_k; ++j) chosen_sum += p[static_cast<size_t>(chosen[static_cast<size_t>(r * top_k + j)])];
    for (int64_t j = 0; j < top_k; ++j) {
      const auto e = static_cast<int64_t>(chosen[static_cast<size_t>(r * top_k + j)]);
      const double weight = p[static_cast<size_t>(e)] / chosen_sum;
      std::vector<double> a(static_cast<size_t>(f));
      for (int64_t i = 0; i < f; ++i) {
        double gate = 0, up = 0;
        for (int64_t c = 0; c < h; ++c) {
          gate += xn[static_cast<size_t>(r * h + c)] * w1[static_cast<size_t>((e * f2 + i) * h + c)];
          up += xn[static_cast<size_t>(r * h + c)] * w1[static_cast<size_t>((e * f2 + f + i) * h + c)];
        }
        a[static_cast<size_t>(i)] = silu(gate) * up;
      }
      for (int64_t c = 0; c < h; ++c) {
        double acc = 0;
        for (int64_t i = 0; i < f; ++i) acc += a[static_cast<size_t>(i)] * w2[static_cast<size_t>((e * h + c) * f + i)];
        out[static_cast<size_t>(r * h + c)] += weight * acc;
      }
    }
  });
  return out;
}

double relative_error(const std::vector<double>& got, const Matrix& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += std::pow(got[i] - ref[i], 2);
    den += ref[i] * ref[i];
  }
  REQUIRE(den > 0);
  return std::sqrt(num / den);
}

// A layer that takes its routing from outside: x, the experts of each token and their weights.
std::string routed_layer(int64_t tokens, int64_t top_k, int64_t experts, const std::string& routing_dtype = "int32") {
  return R"({"name": "routed", "dims": {"T": )" + std::to_string(tokens) + R"(, "K": )" + std::to_string(top_k) + R"(, "E": )" +
         std::to_string(experts) + R"(},
    "inputs": [{"name": "x", "shape": ["T", 64]}, {"name": "experts", "shape": ["T", "K"], "dtype": ")" + routing_dtype + R"("},
               {"name": "weights", "shape": ["T", "K"], "dtype": "fp32"}],
    "ops": [{"name": "permute", "op": "moe_permute", "inputs": ["x", "experts"], "attrs": {"num_experts": "E"}},
            {"name": "fc", "op": "grouped_linear", "inputs": ["permute", "permute.m_splits"],
             "attrs": {"num_gemms": "E", "in_features": 64, "out_features": 32}},
            {"name": "y", "op": "moe_unpermute", "inputs": ["fc", "permute.row_map", "weights"]}],
    "outputs": ["y"]})";
}

// examples/moe_tiny.json with its routing and the norm's output as outputs too, so that they
// outlive the run (intermediates share scratch memory with later steps).
std::string moe_tiny_showing_routing() {
  nlohmann::json model = nlohmann::json::parse(test::read_text(test::source_dir() + "/examples/moe_tiny.json"));
  for (const char* name : {"norm", "router", "router.indices", "permute.m_splits", "permute.row_map"}) model["outputs"].push_back(name);
  return write_temp("moe_tiny", model.dump());
}

HostTensor tensor_of(Shape shape, std::vector<float> values) { return HostTensor{std::move(shape), std::move(values)}; }

}  // namespace

TEST_CASE("moe_tiny.json on the CPU reference: every recipe within its bound of an fp64 MoE with the same routing") {
  // Measured here: bf16 0.003-0.004, FP8 0.05-0.06, NVFP4 0.18-0.2; bounds as the dense MLPs'.
  const std::vector<std::pair<RecipeKind, double>> cases = {{RecipeKind::bf16, 0.01},       {RecipeKind::fp8_current, 0.08},
                                                            {RecipeKind::fp8_delayed, 0.08}, {RecipeKind::fp8_block, 0.08},
                                                            {RecipeKind::mxfp8, 0.08},       {RecipeKind::nvfp4, 0.30}};
  for (const auto& [recipe, bound] : cases) {
    CAPTURE(to_string(recipe));
    const Compiled c = compile_model(moe_tiny_showing_routing(), recipe);
    for (size_t profile = 0; profile < c.plan.profiles.size(); ++profile) {
      reference::Session session(c.plan, c.plan.profiles[profile]);
      session.randomize_inputs(11);
      session.run();
      session.run();  // delayed scaling: scales from a real amax history
      const HostTensor x = session.read("x"), y = session.read("y"), chosen = session.read("router.indices");
      const HostTensor splits = session.read("permute.m_splits"), row_map = session.read("permute.row_map");
      const int64_t experts = splits.shape.numel(), top_k = chosen.shape.cols(), tokens = x.shape.rows();
      // The routing's invariants: every slot counted once, the row map a permutation that keeps
      // each expert's rows in slot order.
      CHECK(std::accumulate(splits.values.begin(), splits.values.end(), 0.0f) == static_cast<float>(tokens * top_k));
      std::vector<float> sorted = row_map.values;
      std::sort(sorted.begin(), sorted.end());
      for (size_t i = 0; i < sorted.size(); ++i) REQUIRE(sorted[i] == static_cast<float>(i));
      std::vector<float> first_row(static_cast<size_t>(experts), 0.0f);
      for (int64_t e = 1; e < experts; ++e) first_row[static_cast<size_t>(e)] = first_row[static_cast<size_t>(e - 1)] + splits.values[static_cast<size_t>(e - 1)];
      for (int64_t s = 0; s < tokens * top_k; ++s) {
        const auto e = static_cast<size_t>(chosen.values[static_cast<size_t>(s)]);
        CHECK(row_map.values[static_cast<size_t>(s)] == first_row[e]);
        first_row[e] += 1.0f;
      }
      Model m = weights_of(c.result.profiles[profile].graph);
      m.rows = tokens;
      m.hidden = x.shape.cols();
      const Matrix xd(x.values.begin(), x.values.end());
      const Matrix ref = moe_branch(m, xd, chosen.values, experts, top_k);
      std::vector<double> branch(y.values.size());
      for (size_t i = 0; i < branch.size(); ++i) branch[i] = static_cast<double>(y.values[i]) - xd[i];
      const double error = relative_error(branch, ref);
      MESSAGE("moe_tiny " << to_string(recipe) << " T=" << tokens << ": ||out-ref||/||ref|| = " << error);
      CHECK(error < bound);
    }
  }
}

TEST_CASE("moe_tiny.json: the router's choice is the fp64 top-k wherever the scores are not within rounding of a tie") {
  const Compiled c = compile_model(moe_tiny_showing_routing(), RecipeKind::bf16);
  reference::Session session(c.plan, c.plan.profiles.back());
  session.randomize_inputs(3);
  session.run();
  const HostTensor norm_out = session.read("norm"), chosen = session.read("router.indices"), weights = session.read("router");
  Model m = weights_of(c.result.profiles.back().graph);
  const int64_t tokens = norm_out.shape.rows(), h = norm_out.shape.cols(), top_k = chosen.shape.cols();
  const Matrix logits = linear(Matrix(norm_out.values.begin(), norm_out.values.end()), tokens, h, m.weights.at("router.weight"), nullptr);
  const int64_t experts = static_cast<int64_t>(logits.size()) / tokens;
  int compared = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int64_t> order(static_cast<size_t>(experts));
    std::iota(order.begin(), order.end(), 0);
    auto logit = [&](int64_t e) { return logits[static_cast<size_t>(t * experts + e)]; };
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logit(a) > logit(b); });
    if (logit(order[static_cast<size_t>(top_k - 1)]) - logit(order[static_cast<size_t>(top_k)]) < 1e-4) continue;
    ++compared;
    double weight_sum = 0;
    for (int64_t j = 0; j < top_k; ++j) {
      CHECK(chosen.values[static_cast<size_t>(t * top_k + j)] == static_cast<float>(order[static_cast<size_t>(j)]));
      weight_sum += weights.values[static_cast<size_t>(t * top_k + j)];
    }
    CHECK(weight_sum == doctest::Approx(1.0).epsilon(1e-6));  // normalize_topk
  }
  CHECK(compared > tokens / 2);
}

TEST_CASE("routing from outside: every token on one expert, and the other experts empty") {
  const int64_t tokens = 24, experts = 4;
  const Compiled c = compile_model(write_temp("one_expert", routed_layer(tokens, 1, experts)), RecipeKind::bf16);
  reference::Session session(c.plan, c.plan.profiles[0]);
  session.randomize_inputs(5);
  session.set_input("experts", tensor_of(Shape{tokens, 1}, std::vector<float>(tokens, 2.0f)));
  session.set_input("weights", tensor_of(Shape{tokens, 1}, std::vector<float>(tokens, 1.0f)));
  session.run();
  CHECK(session.read("permute.m_splits").values == std::vector<float>{0, 0, static_cast<float>(tokens), 0});
  // With one expert and weight 1, y is that expert's linear of x, row for row.
  const HostTensor x = session.read("x"), y = session.read("y");
  Model m = weights_of(c.result.profiles[0].graph);
  const std::vector<double> w2(m.weights.at("fc.weight").begin() + 2 * 32 * 64, m.weights.at("fc.weight").begin() + 3 * 32 * 64);
  const Matrix ref = linear(Matrix(x.values.begin(), x.values.end()), tokens, 64, w2, nullptr);
  CHECK(relative_error(std::vector<double>(y.values.begin(), y.values.end()), ref) < 0.01);
}

TEST_CASE("hostile routing data is refused with the op and the value at fault, never read out of bounds") {
  const int64_t tokens = 8, top_k = 2, experts = 4;
  const Compiled c = compile_model(write_temp("hostile", routed_layer(tokens, top_k, experts)), RecipeKind::bf16);
  reference::Session session(c.plan, c.plan.profiles[0]);
  session.randomize_inputs(9);
  SUBCASE("an expert index past the last expert") {
    std::vector<float> chosen(tokens * top_k, 1.0f);
    chosen[5] = 4.0f;
    session.set_input("experts", tensor_of(Shape{tokens, top_k}, chosen));
    const Error e = test::error_of([&] { session.run(); });
    CHECK(e.context().op == "moe_permute");
    CHECK(e.message().find("token 2 is routed to expert 4 (slot 1), outside [0, 4)") != std::string::npos);
  }
  SUBCASE("a negative expert index") {
    std::vector<float> chosen(tokens * top_k, 0.0f);
    chosen[0] = -1.0f;
    session.set_input("experts", tensor_of(Shape{tokens, top_k}, chosen));
    CHECK(test::error_of([&] { session.run(); }).message().find("routed to expert -1") != std::string::npos);
  }
}

TEST_CASE("hostile m_splits given from outside are refused: negative, or not summing to the rows") {
  const std::string graph = R"({"name": "splits", "inputs": [{"name": "x", "shape": [16, 32]}, {"name": "splits", "shape": [3], "dtype": "int32"}],
    "ops": [{"name": "fc", "op": "grouped_linear", "inputs": ["x", "splits"], "attrs": {"num_gemms": 3, "in_features": 32, "out_features": 16}}],
    "outputs": ["fc"]})";
  const Compiled c = compile_model(write_temp("splits", graph), RecipeKind::fp8_current);
  reference::Session session(c.plan, c.plan.profiles[0]);
  session.randomize_inputs(1);
  const std::vector<std::pair<std::vector<float>, std::string>> cases = {
      {{8, 8, 1}, "m_splits[2] = 1"}, {{8, 9, -1}, "m_splits[1] = 9"}, {{20, -4, 0}, "m_splits[0] = 20"}, {{4, 4, 4}, "sum to 12"}};
  for (const auto& [splits, expected] : cases) {
    CAPTURE(expected);
    session.set_input("splits", tensor_of(Shape{3}, splits));
    const Error e = test::error_of([&] { session.run(); });
    CHECK(e.context().op == "grouped_linear");
    CHECK(e.message().find(expected) != std::string::npos);
  }
  session.set_input("splits", tensor_of(Shape{3}, {0, 16, 0}));
  session.run();  // empty experts are fine
}

TEST_CASE("MoE graphs that cannot work are refused at compile time, naming the node") {
  SUBCASE("float expert indices") {
    const Error e = test::error_of([] { (void)test::compile_text(routed_layer(8, 2, 4, "fp32")); });
    CHECK(e.message().find("must be int32, got fp32") != std::string::npos);
    CHECK(e.context().node == "permute");
  }
  SUBCASE("m_splits of the wrong length") {
    const std::string graph = R"({"name": "g", "inputs": [{"name": "x", "shape": [16, 32]}, {"name": "s", "shape": [4], "dtype": "int32"}],
      "ops": [{"name": "fc", "op": "grouped_linear", "inputs": ["x", "s"], "attrs": {"num_gemms": 3, "in_features": 32, "out_features": 16}}],
      "outputs": ["fc"]})";
    CHECK(test::error_of([&] { (void)test::compile_text(graph); }).message().find("has shape [4], expected [3]") != std::string::npos);
  }
  SUBCASE("top_k above the experts") {
    const std::string graph = R"({"name": "g", "inputs": [{"name": "x", "shape": [16, 32]}],
      "ops": [{"name": "r", "op": "moe_router", "inputs": ["x"], "attrs": {"in_features": 32, "num_experts": 2, "top_k": 3}}],
      "outputs": ["r"]})";
    CHECK(test::error_of([&] { (void)test::compile_text(graph); }).message().find("top_k must be in [1, num_experts = 2], got 3") !=
          std::string::npos);
  }
  SUBCASE("an extra output's name clashes with another value") {
    const std::string graph = R"({"name": "g", "inputs": [{"name": "x", "shape": [16, 32]}, {"name": "r.indices", "shape": [1]}],
      "ops": [{"name": "r", "op": "moe_router", "inputs": ["x"], "attrs": {"in_features": 32, "num_experts": 2, "top_k": 1}}],
      "outputs": ["r"]})";
    CHECK(test::error_of([&] { (void)test::compile_text(graph); }).message().find("'r.indices' is used twice") != std::string::npos);
  }
}

TEST_CASE("an MoE train plan lowers for the GPU under every training recipe") {
  // examples/moe_tiny.json, or with a bias per expert in fc1.
  auto lowered = [](RecipeKind recipe, bool bias = false) {
    std::string model = test::read_text(test::source_dir() + "/examples/moe_tiny.json");
    const std::string from = R"("out_features": "F2"})";
    REQUIRE(model.find(from) != std::string::npos);
    if (bias) model.replace(model.find(from), from.size(), R"("out_features": "F2", "bias": true})");
    CompileOptions o;
    o.model_path = write_temp("moe_train_lowering", model);
    o.frontend = test::with_recipe(recipe, Mode::train);
    o.archs = {"sm_90"};
    o.cache_dir = "";
    o.dump_after = "lower";
    return compile(o);
  };
  using Kernels = std::vector<std::string>;
  // The launches of step `step`, or of the step that fuses more nodes after it ("step+...").
  auto launches = [](const CompiledProfile& p, const std::string& step) {
    std::vector<const codegen::Launch*> found;
    for (const codegen::Launch& l : p.gpu.launches) {
      const std::string& name = l.step >= 0 ? p.schedule.steps.at(static_cast<size_t>(l.step)).name : "";
      if (name == step || name.starts_with(step + "+")) found.push_back(&l);
    }
    return found;
  };
  auto kernels = [&](const CompiledProfile& p, const std::string& step) {
    Kernels entries;
    for (const codegen::Launch* l : launches(p, step)) entries.push_back(l->entry);
    return entries;
  };
  // The defines of the step's first launch of `entry`.
  auto defines_of = [&](const CompileResult& r, const CompiledProfile& p, const std::string& step, const std::string& entry) {
    for (const codegen::Launch* l : launches(p, step))
      if (l->entry == entry) {
        const auto& d = r.code.modules.at(static_cast<size_t>(l->module)).defines;
        return std::set<std::string>(d.begin(), d.end());
      }
    return std::set<std::string>{};
  };
  for (RecipeKind recipe : {RecipeKind::bf16, RecipeKind::fp8_current, RecipeKind::fp8_delayed, RecipeKind::fp8_block}) {
    CAPTURE(to_string(recipe));
    const CompileResult r = lowered(recipe);
    for (const CompiledProfile& p : r.profiles) {
      CHECK(p.gpu.supported);
      // The weights change every step: the grouped GEMM reads them as made, row-major, with no
      // tiled copy: the forward W; the dgrad W^T, FP8 as W's columnwise copy, bf16 as W itself
      // multiplied transposed.
      CHECK(kernels(p, "fc1") == Kernels{"tec_grouped_gemm"});
      CHECK(defines_of(r, p, "fc1", "tec_grouped_gemm").count("TEC_W_ROW_MAJOR=1") == 1);
      const std::set<std::string> dgrad = defines_of(r, p, "fc1.backward", "tec_grouped_gemm");
      CHECK(dgrad.count("TEC_W_ROW_MAJOR=1") == 1);
      CHECK(dgrad.count(recipe == RecipeKind::bf16 ? "TEC_W_TRANSPOSED=1" : "TEC_W_TRANSPOSED=0") == 1);
      // wgrad into main_grad: by wgmma where in_features % 256 == 0, or under fp8-block where
      // % 128 == 0 (its 128 x 128 tiles); so fc2's in_features of 128 takes mma.sync under the
      // other recipes.
      CHECK(kernels(p, "fc1.backward") == Kernels{"tec_grouped_gemm", "tec_grouped_wgrad_sm90"});
      CHECK(kernels(p, "fc2.backward") ==
            Kernels{"tec_grouped_gemm", recipe == RecipeKind::fp8_block ? "tec_grouped_wgrad_sm90" : "tec_grouped_wgrad"});
      // d(weights), then d(y) scattered back by a row kernel (which may quantize it in two passes).
      const Kernels unpermute = kernels(p, "unpermute.backward");
      CHECK(Kernels(unpermute.begin(), unpermute.begin() + 3) == Kernels{"tec_moe_unpermute_weights_grad", "tec_moe_invert_row_map", "tec_row"});
      CHECK(kernels(p, "permute.backward") == Kernels{"tec_moe_route", "tec_row"});
      CHECK(kernels(p, "router.backward") == Kernels{"tec_moe_router_backward", "tec_moe_router_weight_grad"});
    }
  }
  // The bias gradient per expert: column sums over each expert's rows, after the GEMMs.
  for (RecipeKind recipe : {RecipeKind::bf16, RecipeKind::fp8_block}) {
    CAPTURE(to_string(recipe));
    for (const CompiledProfile& p : lowered(recipe, true).profiles) {
      CHECK(p.gpu.supported);
      CHECK(kernels(p, "fc1.backward") == Kernels{"tec_grouped_gemm", "tec_grouped_wgrad_sm90", "tec_column_partials", "tec_column_finish"});
    }
  }
  // The step's first launch of `entry`, and how many of its row kernels dequantize in each mode.
  auto first_launch = [&](const CompiledProfile& p, const std::string& step, const std::string& entry) -> const codegen::Launch* {
    for (const codegen::Launch* l : launches(p, step))
      if (l->entry == entry) return l;
    return nullptr;
  };
  auto dequantize_modes = [&](const CompileResult& r, const CompiledProfile& p, const std::string& step) {
    std::map<std::string, int> modes;
    for (const codegen::Launch* l : launches(p, step))
      if (l->entry == "tec_row")
        for (const std::string& d : r.code.modules.at(static_cast<size_t>(l->module)).defines)
          if (d.starts_with("TEC_DQ=")) ++modes[d];
    return modes;
  };
  // mxfp8: the experts' weights quantized as one tensor (members of 128 rows), the columnwise
  // copy down the columns from the master; the backward's bf16 kernels on copies dequantized
  // from W's, x's and dy's columnwise copies (TEC_DQ=8) and dy's rowwise one (2).
  const CompileResult mx = lowered(RecipeKind::mxfp8);
  for (const CompiledProfile& p : mx.profiles) {
    REQUIRE_MESSAGE(p.gpu.supported, p.gpu.reason);
    const codegen::Launch* columns = first_launch(p, "fc1.weight.workspace", "tec_mxfp8_quantize_columns");
    REQUIRE(columns != nullptr);
    CHECK(columns->args.at(0).buffer == value_buffer_name("fc1.weight.master", BufferRole::data));
    CHECK(kernels(p, "fc1.backward") == Kernels{"tec_row", "tec_row", "tec_grouped_gemm", "tec_row", "tec_row", "tec_grouped_wgrad_sm90"});
    const std::set<std::string> dgrad = defines_of(mx, p, "fc1.backward", "tec_grouped_gemm");
    CHECK(dgrad.count("TEC_BF16=1") == 1);
    CHECK(dgrad.count("TEC_W_TRANSPOSED=1") == 1);
    CHECK(dequantize_modes(mx, p, "fc1.backward") == std::map<std::string, int>{{"TEC_DQ=2", 1}, {"TEC_DQ=8", 3}});
  }
  // nvfp4: each expert's 16x16 tiles from its own amax (grid z), both copies; the dgrad reads
  // W^T from the columnwise copy (each member transposed, so row-major, untransposed) and dy as
  // stored (5); the wgrad's x and dy are read back from their transposed copies in shape (9).
  const CompileResult nv = lowered(RecipeKind::nvfp4);
  for (const CompiledProfile& p : nv.profiles) {
    REQUIRE_MESSAGE(p.gpu.supported, p.gpu.reason);
    const codegen::Launch* tiles = first_launch(p, "fc1.weight.workspace", "tec_nvfp4_quantize_columns");
    REQUIRE(tiles != nullptr);
    CHECK(tiles->grid[2] == 4);  // moe_tiny's experts
    const std::set<std::string> dgrad = defines_of(nv, p, "fc1.backward", "tec_grouped_gemm");
    CHECK(dgrad.count("TEC_BF16=1") == 1);
    CHECK(dgrad.count("TEC_W_TRANSPOSED=0") == 1);
    CHECK(dequantize_modes(nv, p, "fc1.backward") == std::map<std::string, int>{{"TEC_DQ=5", 2}, {"TEC_DQ=9", 2}});
  }
}

}  // namespace tec
