// The GPU lowering of MoE layers, on a machine with no GPU: where an expert's SwiGLU runs (in the
// grouped GEMM's epilogue, or in a row kernel after it), what the GEMM writes, and which
// launches follow it. tests/gpu/moe_gpu_test.cpp runs both paths on the GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "codegen/lower.h"
#include "compiler.h"
#include "test_util.h"

namespace tec::codegen {

namespace {

// examples/moe_tiny.json with the experts' ffn F (fc1's out_features 2F).
std::string moe_tiny_with_ffn(int64_t ffn) {
  std::string text = test::read_text(test::source_dir() + "/examples/moe_tiny.json");
  const std::string dims = R"("F2": 256, "F": 128)";
  REQUIRE(text.find(dims) != std::string::npos);
  text.replace(text.find(dims), dims.size(), R"("F2": )" + std::to_string(2 * ffn) + R"(, "F": )" + std::to_string(ffn));
  const auto path = std::filesystem::temp_directory_path() / ("tec_moe_lowering_" + std::to_string(ffn) + ".json");
  std::ofstream(path) << text;
  return path.string();
}

CompileResult lowered(const std::string& model, RecipeKind recipe, bool grouped_block_scales = true) {
  CompileOptions options;
  options.grouped_block_scales = grouped_block_scales;
  options.model_path = model;
  options.frontend.recipe = recipe;
  options.frontend.dim_overrides["T"] = {64};
  options.archs = {"sm_90"};
  options.cache_dir = (std::filesystem::temp_directory_path() / ("tec_moe_lowering_" + std::to_string(::getpid()))).string();
  options.dump_after = "lower";
  return compile(options);
}

// A step of the profile and, in order, the GPU launches that run it.
struct LoweredStep {
  const Step& step;
  std::vector<const Launch*> launches;
};

LoweredStep lowered_step(const CompiledProfile& p, const std::string& name) {
  const auto step = std::find_if(p.schedule.steps.begin(), p.schedule.steps.end(), [&](const Step& s) { return s.name == name; });
  if (step == p.schedule.steps.end()) FAIL("no step " << name);
  LoweredStep out{*step, {}};
  for (const Launch& l : p.gpu.launches)
    if (l.step == step - p.schedule.steps.begin()) out.launches.push_back(&l);
  return out;
}

}  // namespace

TEST_CASE("an expert's SwiGLU joins fc1's grouped GEMM step: in the epilogue when a 256-column tile pairs gate with up columns") {
  for (RecipeKind recipe : {RecipeKind::bf16, RecipeKind::fp8_current, RecipeKind::fp8_delayed}) {
    CAPTURE(to_string(recipe));
    const CompileResult r = lowered(test::source_dir() + "/examples/moe_tiny.json", recipe);
    const CompiledProfile& p = r.profiles.at(0);
    REQUIRE(p.gpu.supported);
    const auto [step, launches] = lowered_step(p, "fc1+act");
    CHECK(step.kind == StepKind::gemm);
    CHECK(std::any_of(step.fusions.begin(), step.fusions.end(),
                      [](const std::string& f) { return f.starts_with("gpu: swiglu 'act' in the grouped GEMM's epilogue"); }));
    std::vector<std::string> entries;
    for (const Launch* l : launches) entries.push_back(l->kind == Launch::Kind::memset ? "memset" : l->entry);
    if (recipe == RecipeKind::bf16) {
      // The bf16 SwiGLU output is written by the GEMM itself, [rows, F].
      CHECK(entries == std::vector<std::string>{"tec_grouped_gemm"});
      CHECK(launches[0]->args.at(6).buffer == value_buffer_name("act", BufferRole::data));
    } else if (recipe == RecipeKind::fp8_current) {
      // Staged in bf16 with the amax from the epilogue (one float, zeroed first): the cast pass alone.
      CHECK(entries == std::vector<std::string>{"memset", "tec_grouped_gemm", "tec_row"});
      CHECK(launches[1]->args.at(8).buffer == launches[0]->buffer);
    } else {
      // Delayed scaling's row kernel casts the staged values with the history's scale.
      CHECK(entries == std::vector<std::string>{"tec_grouped_gemm", "tec_row"});
      CHECK(launches[0]->args.at(8).kind == LaunchArg::Kind::none);
    }
  }
}

TEST_CASE("where no tile can pair gate with up columns (out_features / 2 % 128 != 0), a row kernel runs the SwiGLU after the GEMM") {
  const CompileResult r = lowered(moe_tiny_with_ffn(64), RecipeKind::bf16);
  const CompiledProfile& p = r.profiles.at(0);
  REQUIRE(p.gpu.supported);
  const auto [step, launches] = lowered_step(p, "fc1+act");
  CHECK(std::any_of(step.fusions.begin(), step.fusions.end(), [](const std::string& f) {
    return f.find("by a row kernel after the grouped GEMM: out_features / 2 = 64 is no multiple of 128") != std::string::npos;
  }));
  REQUIRE(launches.size() == 2);
  CHECK(launches[0]->entry == "tec_grouped_gemm");
  CHECK(launches[1]->entry == "tec_row");
  // The GEMM's [rows, 2F] output goes to a workspace of the step, which the row kernel reads.
  CHECK(launches[0]->args.at(6).buffer == launches[1]->args.at(0).buffer);
  CHECK(launches[1]->args.at(3).buffer == value_buffer_name("act", BufferRole::data));
}

TEST_CASE("a grouped GEMM over K of 64 steps or more splits a short last round along K: partial sums, and counters zeroed before it") {
  // F = 8192: fc2's K is 8192 bytes of FP8, 64 steps; fc1's K (H = 256) is 2.
  const CompileResult r = lowered(moe_tiny_with_ffn(8192), RecipeKind::fp8_current);
  const CompiledProfile& p = r.profiles.at(0);
  REQUIRE(p.gpu.supported);
  for (const std::string name : {"fc1+act", "fc2"}) {
    CAPTURE(name);
    const auto [step, launches] = lowered_step(p, name);
    const auto gemm = std::find_if(launches.begin(), launches.end(), [](const Launch* l) { return l->entry == "tec_grouped_gemm"; });
    REQUIRE(gemm != launches.end());
    const auto& defines = r.code.modules.at(static_cast<size_t>((*gemm)->module)).defines;
    const bool split = std::find(defines.begin(), defines.end(), "TEC_SPLIT_SLOTS=132") != defines.end();
    CHECK(split == (name == "fc2"));
    if (!split) {
      CHECK((*gemm)->args.size() == 9);
      continue;
    }
    REQUIRE((*gemm)->args.size() == 11);
    CHECK((*gemm)->args[9].buffer == workspace_buffer_name(step.name, "split_partials", BufferRole::data));
    CHECK((*gemm)->args[10].buffer == workspace_buffer_name(step.name, "split_counters", BufferRole::data));
    REQUIRE(gemm != launches.begin());
    CHECK((*(gemm - 1))->kind == Launch::Kind::memset);
    CHECK((*(gemm - 1))->buffer == (*gemm)->args[10].buffer);
    // 132 partial sums of a 128 x 256 tile (two consumers' 128 floats a thread).
    const auto partials = std::find_if(step.workspaces.begin(), step.workspaces.end(), [](const Workspace& w) { return w.name == "split_partials"; });
    REQUIRE(partials != step.workspaces.end());
    CHECK(partials->proto.shape == Shape{132, 128 * 256});
    // Up to 4 items per tile: tiles of 128 rows (rows / 128 + E per column tile) x 256 columns.
    const int64_t rows = 64 * 2, experts = 4, column_tiles = 256 / 256;
    CHECK((*gemm)->grid[0] == 4 * (rows / 128 + experts) * column_tiles);
  }
}

TEST_CASE("fp8-block experts run in FP8: the grouped GEMM reads the data and both operands' block scales") {
  const CompileResult r = lowered(test::source_dir() + "/examples/moe_tiny.json", RecipeKind::fp8_block);
  const CompiledProfile& p = r.profiles.at(0);
  REQUIRE(p.gpu.supported);
  for (const std::string name : {"fc1+act", "fc2"}) {
    CAPTURE(name);
    const auto [step, launches] = lowered_step(p, name);
    CHECK(std::any_of(step.fusions.begin(), step.fusions.end(),
                      [](const std::string& f) { return f == "gpu: fp8-block scales applied per 128-deep step of K in the grouped GEMM"; }));
    std::vector<std::string> entries;
    for (const Launch* l : launches) entries.push_back(l->kind == Launch::Kind::memset ? "memset" : l->entry);
    // No copy of anything before the GEMM. fc1's SwiGLU and its 1x128 quantize for fc2 then
    // run in a row kernel (block scales take 128-column tiles: no gated epilogue), after the
    // scale array's padding is zeroed; fc2 writes its bf16 output itself.
    CHECK(entries == (name == "fc2" ? std::vector<std::string>{"tec_grouped_gemm"}
                                    : std::vector<std::string>{"tec_grouped_gemm", "memset", "tec_row"}));
    const Launch& gemm = *launches.at(0);
    CHECK(gemm.entry == "tec_grouped_gemm");
    const std::string weight = name == "fc1+act" ? "fc1.weight" : "fc2.weight", tokens = name == "fc1+act" ? "permute" : "act";
    CHECK(gemm.args.at(0).buffer == value_buffer_name(weight, BufferRole::data));
    CHECK(gemm.args.at(1).buffer == value_buffer_name(weight, BufferRole::scale_inv));
    CHECK(gemm.args.at(2).buffer == value_buffer_name(tokens, BufferRole::data));
    CHECK(gemm.args.at(3).buffer == value_buffer_name(tokens, BufferRole::scale_inv));
    CHECK(std::none_of(launches.begin(), launches.end(), [](const Launch* l) { return l->constant_copy; }));
    CHECK(step.workspaces.size() == (name == "fc2" ? 0 : 1));  // fc1: the GEMM's bf16 output for the row kernel
  }
  const Step& fc1 = lowered_step(p, "fc1+act").step;
  CHECK(std::any_of(fc1.fusions.begin(), fc1.fusions.end(), [](const std::string& f) {
    return f.find("by a row kernel after the grouped GEMM: block scales take 128-column tiles") != std::string::npos;
  }));
}

TEST_CASE("mxfp8 and nvfp4 experts, and fp8-block's under --no-grouped-block-scales, are dequantized to bf16 and multiplied by the bf16 "
          "grouped GEMM") {
  for (RecipeKind recipe : {RecipeKind::fp8_block, RecipeKind::mxfp8, RecipeKind::nvfp4}) {
    CAPTURE(to_string(recipe));
    const CompileResult r = lowered(test::source_dir() + "/examples/moe_tiny.json", recipe, recipe != RecipeKind::fp8_block);
    const CompiledProfile& p = r.profiles.at(0);
    REQUIRE(p.gpu.supported);
    for (const std::string name : {"fc1+act", "fc2"}) {
      CAPTURE(name);
      const auto [step, launches] = lowered_step(p, name);
      CHECK(std::any_of(step.fusions.begin(), step.fusions.end(), [](const std::string& f) {
        return f.find("every expert's weight dequantized to bf16 in the GEMM's tiled layout (once per session), the tokens every run") !=
               std::string::npos;
      }));
      REQUIRE(launches.size() >= 3);
      // The weight (every expert, row-major in the plan) into the GEMM's tiled bf16 workspace,
      // the tokens into a bf16 workspace; the GEMM reads both.
      const std::string weight = name == "fc1+act" ? "fc1.weight" : "fc2.weight";
      CHECK(launches[0]->entry == "tec_row");
      CHECK(launches[0]->args.at(0).buffer == value_buffer_name(weight, BufferRole::data));
      CHECK(launches[0]->grid[0] == 4 * 256);  // experts x out_features rows (F2 = H = 256)
      CHECK(launches[1]->entry == "tec_row");
      CHECK(launches[2]->entry == "tec_grouped_gemm");
      CHECK(launches[2]->args.at(0).buffer == launches[0]->args.at(3).buffer);
      CHECK(launches[2]->args.at(2).buffer == launches[1]->args.at(3).buffer);
      CHECK(launches[2]->args.at(1).kind == LaunchArg::Kind::none);  // no scales: bf16 operands
      // The weight's copy is made from constants: once per session, kept in the workspace
      // region; the tokens change every run.
      CHECK(launches[0]->constant_copy);
      CHECK_FALSE(launches[1]->constant_copy);
      CHECK(std::count_if(step.workspaces.begin(), step.workspaces.end(), [](const Workspace& w) { return w.kept_across_runs; }) == 1);
    }
  }
}

TEST_CASE("a grouped GEMM the kernel cannot take names the real reason, not the weight layout it was then denied") {
  // F = 192: fc2 reads 192 bytes of FP8 per row, not a multiple of the kernel's 128-byte steps.
  const CompileResult r = lowered(moe_tiny_with_ffn(192), RecipeKind::fp8_current);
  const CompiledProfile& p = r.profiles.at(0);
  CHECK_FALSE(p.gpu.supported);
  CHECK(p.gpu.step == "fc2");
  CHECK(p.gpu.reason.find("in_features x 1 bytes % 128 == 0, got 256 and 192") != std::string::npos);
}

}  // namespace tec::codegen
