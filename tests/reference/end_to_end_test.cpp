// End to end on the CPU: te-compile's pipeline writes a plan, the reference executor runs it,
// and the output is compared with an fp64 computation of the same math written here, from
// the same inputs and (bf16-rounded) weights. The error is measured on the MLP branch
// (y - x): the residual would otherwise hide a broken branch.
#include <doctest/doctest.h>

#include <cmath>

#include "compiler.h"
#include "passes/memory_plan.h"
#include "core/random.h"
#include "plan/plan.h"
#include "reference/convert.h"
#include "reference/executor.h"
#include "fp64_model.h"
#include "test_util.h"

namespace tec {

namespace {

using namespace test::fp64;

struct Case {
  const char* model;
  RecipeKind recipe;
  double bound;  // ||(y - x) - branch_ref|| / ||branch_ref||
};

}  // namespace

TEST_CASE("end to end on the CPU reference: every example under every recipe is within its stated bound") {
  // Bounds on the branch's relative error, measured here at 0.004-0.005 (bf16: rounding of
  // activations, ~2^-9 per value), 0.054-0.068 (FP8 E4M3 operands, 3 mantissa bits) and
  // 0.21-0.25 (NVFP4, E2M1 operands with 1 mantissa bit). Delayed scaling is measured on its
  // second run, once its scales come from a real amax history.
  const std::vector<Case> cases = {
      {"mlp_tiny.json", RecipeKind::bf16, 0.01},        {"mlp_tiny.json", RecipeKind::fp8_current, 0.08},
      {"mlp_tiny.json", RecipeKind::fp8_delayed, 0.08}, {"mlp_tiny.json", RecipeKind::fp8_block, 0.08},
      {"mlp_tiny.json", RecipeKind::mxfp8, 0.08},       {"mlp_tiny.json", RecipeKind::nvfp4, 0.30},
      {"swiglu_mlp.json", RecipeKind::bf16, 0.01},      {"swiglu_mlp.json", RecipeKind::fp8_current, 0.08},
      {"swiglu_mlp.json", RecipeKind::fp8_delayed, 0.08}, {"swiglu_mlp.json", RecipeKind::fp8_block, 0.08},
      {"swiglu_mlp.json", RecipeKind::mxfp8, 0.08},     {"swiglu_mlp.json", RecipeKind::nvfp4, 0.30},
  };
  for (const Case& c : cases) {
    CAPTURE(c.model);
    CAPTURE(to_string(c.recipe));
    CompileOptions options;
    options.model_path = test::source_dir() + "/examples/" + c.model;
    options.frontend.recipe = c.recipe;
    const CompileResult compiled = compile(options);
    REQUIRE(compiled.plan.has_value());
    const auto bytes = plan::serialize_plan(compiled.plan->manifest, compiled.plan->blobs);
    const plan::Plan p = plan::Plan::load(bytes, c.model);
    for (size_t profile = 0; profile < p.profiles.size(); ++profile) {
      CAPTURE(profile);
      reference::Session session(p, p.profiles[profile]);
      session.randomize_inputs(7);
      session.run();
      session.run();
      const HostTensor x = session.read("x");
      const HostTensor y = session.read("y");
      Model m = weights_of(compiled.profiles[profile].graph);
      m.rows = x.shape.rows();
      m.hidden = x.shape.cols();
      const Matrix xd(x.values.begin(), x.values.end());
      const Matrix ref = std::string(c.model) == "mlp_tiny.json" ? mlp_branch(m, xd) : swiglu_branch(m, xd);
      double num = 0, den = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        num += std::pow(static_cast<double>(y.values[i]) - xd[i] - ref[i], 2);
        den += ref[i] * ref[i];
      }
      const double error = std::sqrt(num / den);
      MESSAGE(std::string(c.model) << " " << to_string(c.recipe) << " T=" << m.rows << ": ||out-ref||/||ref|| = " << error);
      CHECK(error < c.bound);
      CHECK(den > 0);
    }
  }
}

TEST_CASE("determinism: compiling twice gives byte-identical plans") {
  CompileOptions options;
  options.model_path = test::source_dir() + "/examples/swiglu_mlp.json";
  options.frontend.recipe = RecipeKind::fp8_delayed;
  const auto a = compile(options), b = compile(options);
  CHECK(plan::serialize_plan(a.plan->manifest, a.plan->blobs) == plan::serialize_plan(b.plan->manifest, b.plan->blobs));
}

}  // namespace tec

namespace tec {

// Fusion keeps values in fp32 registers where the unfused plan rounds them to bf16 (or
// quantizes them) between steps, so the two differ by rounding only. A wrongly wired fused
// step would differ by O(1).
TEST_CASE("fusion property: on 60 random graphs, fused and unfused plans agree within rounding") {
  std::mt19937 rng(99);
  int fused_steps_seen = 0;
  for (int i = 0; i < 60; ++i) {
    const std::string text = test::random_graph(rng);
    const RecipeKind recipe = i % 2 ? RecipeKind::fp8_current : RecipeKind::bf16;
    CAPTURE(text);
    CAPTURE(to_string(recipe));
    std::vector<std::map<std::string, HostTensor>> outputs;
    for (bool fuse : {true, false}) {
      std::vector<Graph> graphs = test::compile_text(text, test::with_recipe(recipe));
      CompiledProfile p{std::move(graphs.at(0)), {}, {}, {}};
      p.schedule = schedule(p.graph, fusion(p.graph, {.enabled = fuse}));
      p.memory = memory_plan(p.graph, p.schedule);
      if (fuse) fused_steps_seen += static_cast<int>(p.graph.nodes.size() - p.schedule.steps.size());
      const PlanParts parts = build_plan({p}, GpuCode{.archs = {"sm_90"}}, BuildRecord{"test", {}, "0000000000000000"}, /*cache_dir=*/"");
      const plan::Plan loaded = plan::Plan::load(plan::serialize_plan(parts.manifest, parts.blobs), "random");
      reference::Session session(loaded, loaded.profiles[0]);
      session.randomize_inputs(5);
      session.run();
      std::map<std::string, HostTensor> out;
      for (const auto& name : loaded.profiles[0].outputs) out[name] = session.read(name);
      outputs.push_back(std::move(out));
    }
    for (const auto& [name, fused] : outputs[0]) {
      const HostTensor& unfused = outputs[1].at(name);
      double num = 0, den = 0;
      for (size_t k = 0; k < fused.values.size(); ++k) {
        num += std::pow(static_cast<double>(fused.values[k]) - unfused.values[k], 2);
        den += std::pow(static_cast<double>(unfused.values[k]), 2);
      }
      CAPTURE(name);
      CHECK(std::sqrt(num / std::max(den, 1e-30)) < (recipe == RecipeKind::bf16 ? 0.02 : 0.1));
    }
  }
  CHECK(fused_steps_seen >= 10);  // fusion did happen in these graphs (15 with this seed)
}

}  // namespace tec
