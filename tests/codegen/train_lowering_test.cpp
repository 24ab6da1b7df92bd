// The GPU lowering of train plans, on a machine with no GPU (ARCHITECTURE.md §6, §12): which
// launches a training step becomes and what each backward GEMM reads and writes.
// tests/gpu/train_gpu_test.cpp runs these on the GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>

#include "codegen/kernel_sources.h"
#include "codegen/lower.h"
#include "compiler.h"
#include "passes/memory_plan.h"
#include "test_util.h"

namespace tec::codegen {

namespace {

CompileResult lowered_train(const std::string& model, RecipeKind recipe, TrainOptions train = {}, int64_t tokens = 32) {
  CompileOptions options;
  options.model_path = test::source_dir() + "/examples/" + model;
  options.frontend.mode = Mode::train;
  options.frontend.recipe = recipe;
  options.frontend.dim_overrides["T"] = {tokens};
  options.train = train;
  options.archs = {"sm_90"};
  options.cache_dir = (std::filesystem::temp_directory_path() / ("tec_train_lowering_" + std::to_string(::getpid()))).string();
  options.dump_after = "codegen";
  return compile(options);
}

// The launches of the step named `step`.
std::vector<const Launch*> launches_of(const CompiledProfile& p, const std::string& step) {
  int index = -1;
  for (size_t i = 0; i < p.schedule.steps.size(); ++i)
    if (p.schedule.steps[i].name == step) index = static_cast<int>(i);
  REQUIRE_MESSAGE(index >= 0, "no step " << step);
  std::vector<const Launch*> out;
  for (const Launch& l : p.gpu.launches)
    if (l.step == index) out.push_back(&l);
  return out;
}

// The GEMMs of a step: dgrad, then wgrad, for a linear's backward.
std::vector<const GemmLaunch*> gemms_of(const CompiledProfile& p, const std::string& step) {
  std::vector<const GemmLaunch*> out;
  for (const Launch* l : launches_of(p, step))
    if (l->kind == Launch::Kind::gemm) out.push_back(&l->gemm);
  return out;
}

std::string data(const std::string& value) { return value_buffer_name(value, BufferRole::data); }
std::string columnwise(const std::string& value) { return value_buffer_name(value, BufferRole::columnwise_data); }

}  // namespace

TEST_CASE("train plans of the examples lower to the GPU under every training recipe, with AdamW too") {
  for (const char* model : {"mlp_tiny.json", "swiglu_mlp.json"})
    for (RecipeKind recipe :
         {RecipeKind::bf16, RecipeKind::fp8_current, RecipeKind::fp8_delayed, RecipeKind::fp8_block, RecipeKind::mxfp8, RecipeKind::nvfp4})
      for (auto optimizer : {TrainOptions::Optimizer::none, TrainOptions::Optimizer::adamw}) {
        CAPTURE(model);
        CAPTURE(to_string(recipe));
        TrainOptions train;
        train.optimizer = optimizer;
        const CompileResult r = lowered_train(model, recipe, train);
        const CompiledProfile& p = r.profiles.at(0);
        CHECK_MESSAGE(p.gpu.supported, p.gpu.reason);
        for (const auto& per_arch : r.code.cubins) CHECK(std::string(per_arch.at(0).begin(), per_arch.at(0).begin() + 4) == "\x7f" "ELF");
      }
}

TEST_CASE("fp8 backward GEMMs read the columnwise copies, TN, with split accumulation; wgrad adds into main_grad with beta = 1") {
  const CompileResult r = lowered_train("mlp_tiny.json", RecipeKind::fp8_current);
  const CompiledProfile& p = r.profiles.at(0);
  REQUIRE(p.gpu.supported);
  const std::vector<const GemmLaunch*> gemms = gemms_of(p, "fc2.backward+fc2.weight.main_grad@1");
  REQUIRE(gemms.size() == 2);
  const GemmLaunch& dgrad = *gemms[0];  // dx [T, F] = dy [T, H] . W2 [H, F]
  CHECK(dgrad.m == 32);
  CHECK(dgrad.n == 256);
  CHECK(dgrad.k == 64);
  CHECK(dgrad.a.buffer == columnwise("fc2.weight"));
  CHECK(dgrad.a.type == DType::fp8_e4m3);
  CHECK(dgrad.b.buffer == data("dy.quantized"));
  CHECK(dgrad.b.type == DType::fp8_e5m2);  // HYBRID: the gradient in E5M2
  CHECK(dgrad.d == data("fc2.dinput"));
  CHECK_FALSE(dgrad.fast_accum);
  CHECK_FALSE(dgrad.a.transposed);
  const GemmLaunch& wgrad = *gemms[1];  // dW2 [H, F] = dy^T [H, T] . act [T, F]
  CHECK(wgrad.m == 64);
  CHECK(wgrad.n == 256);
  CHECK(wgrad.k == 32);
  CHECK(wgrad.a.buffer == columnwise("act"));
  CHECK(wgrad.b.buffer == columnwise("dy.quantized"));
  CHECK(wgrad.c == data("fc2.weight.main_grad"));
  CHECK(wgrad.d == wgrad.c);
  CHECK(wgrad.d_type == DType::fp32);
  CHECK_FALSE(wgrad.fast_accum);
  // dbias: the column sums of the unquantized dy, partials then their sum.
  int partials = 0, finishes = 0;
  for (const Launch* l : launches_of(p, "fc2.backward+fc2.weight.main_grad@1")) {
    partials += l->entry == "tec_column_partials";
    finishes += l->entry == "tec_column_finish";
  }
  CHECK(partials == 1);
  CHECK(finishes == 1);
}

TEST_CASE("bf16 backward GEMMs read dy, x and W in place, transposed by cuBLASLt") {
  const CompileResult r = lowered_train("mlp_tiny.json", RecipeKind::bf16);
  const CompiledProfile& p = r.profiles.at(0);
  REQUIRE(p.gpu.supported);
  const std::vector<const GemmLaunch*> gemms = gemms_of(p, "fc1.backward+fc1.weight.main_grad@1");
  REQUIRE(gemms.size() == 2);
  CHECK(gemms[0]->a.buffer == data("fc1.weight"));
  CHECK(gemms[0]->a.transposed);
  CHECK_FALSE(gemms[0]->b.transposed);
  CHECK(gemms[1]->a.buffer == data("ln"));
  CHECK(gemms[1]->a.transposed);
  CHECK(gemms[1]->b.transposed);
  CHECK(gemms[1]->d == data("fc1.weight.main_grad"));
}

TEST_CASE("every columnwise FP8 copy of a train plan is made by a transpose of its rowwise codes, in the step that quantizes it") {
  for (RecipeKind recipe : {RecipeKind::fp8_current, RecipeKind::fp8_delayed}) {
    CAPTURE(to_string(recipe));
    const CompileResult r = lowered_train("mlp_tiny.json", recipe);
    const CompiledProfile& p = r.profiles.at(0);
    REQUIRE(p.gpu.supported);
    int copies = 0;
    for (size_t s = 0; s < p.schedule.steps.size(); ++s)
      for (NodeId id : p.schedule.steps[s].nodes)
        for (ValueId out : p.graph.node(id).outputs) {
          const Value& v = p.graph.value(out);
          if (!v.proto.quantizer || !v.proto.usage.columnwise) continue;
          CAPTURE(v.name);
          ++copies;
          bool transposed = false;
          for (const Launch& l : p.gpu.launches)
            transposed |= l.step == static_cast<int>(s) && l.entry == "tec_transpose_u8" && l.args.size() == 2 &&
                          l.args[0].buffer == data(v.name) && l.args[1].buffer == columnwise(v.name);
          CHECK(transposed);
        }
    CHECK(copies == 6);  // W1, W2, ln, act, dy, act's gradient
  }
}

TEST_CASE("a norm's forward in a train plan hands its row kernel the buffers for mean and rsigma, on every path") {
  // fp8-block stages the norm's output in fp32 for its columnwise copy: that launch saves the
  // statistics too (a null slot there was an illegal address on the H100).
  for (RecipeKind recipe : {RecipeKind::bf16, RecipeKind::fp8_current, RecipeKind::fp8_block}) {
    CAPTURE(to_string(recipe));
    const CompileResult r = lowered_train("mlp_tiny.json", recipe, {}, 128);
    int saving = 0;
    for (const Launch* l : launches_of(r.profiles.at(0), "ln")) {
      if (l->kind != Launch::Kind::kernel) continue;
      const auto& defines = r.code.modules.at(static_cast<size_t>(l->module)).defines;
      if (std::find(defines.begin(), defines.end(), "TEC_SAVE_STATS=1") == defines.end()) continue;
      ++saving;
      REQUIRE(l->args.size() == 12);
      CHECK(l->args[10].buffer == data("ln.mean"));
      CHECK(l->args[11].buffer == data("ln.rsigma"));
    }
    CHECK(saving >= 1);  // current scaling: the amax pass and the cast pass both write them (the same values)
  }
}

TEST_CASE("AdamW is a one-thread launch advancing the step, then one launch over every parameter") {
  TrainOptions train;
  train.optimizer = TrainOptions::Optimizer::adamw;
  const CompileResult r = lowered_train("mlp_tiny.json", RecipeKind::fp8_current, train);
  const std::vector<const Launch*> launches = launches_of(r.profiles.at(0), "adamw");
  REQUIRE(launches.size() == 2);
  CHECK(launches[0]->entry == "tec_adamw_prepare");
  CHECK(launches[0]->args.size() == 7);
  CHECK(launches[0]->args[0].buffer == data("optimizer.step"));
  CHECK(launches[1]->entry == "tec_adamw");
  CHECK(launches[1]->args.size() == 1 + 4 * 6);  // the coefficients, then 6 parameters x 4 tensors
  CHECK(launches[1]->grid[1] == 6);
  CHECK(launches[1]->args[1].buffer == data("ln.weight.master"));
}

TEST_CASE("every kernel of a train plan that may launch before the previous one ends waits for it in-kernel") {
  TrainOptions train;
  train.optimizer = TrainOptions::Optimizer::adamw;
  for (RecipeKind recipe : {RecipeKind::bf16, RecipeKind::fp8_current, RecipeKind::fp8_delayed}) {
    const CompileResult r = lowered_train("swiglu_mlp.json", recipe, train);
    int early = 0;
    for (const Launch& l : r.profiles.at(0).gpu.launches) {
      if (l.kind != Launch::Kind::kernel || !l.early_launch) continue;
      CAPTURE(l.entry);
      ++early;
      std::string text;
      for (const KernelSource& source : kernel_sources())
        if (source.name == r.code.modules.at(static_cast<size_t>(l.module)).source) text = source.text;
      CHECK(text.find("tec_wait_for_previous_kernel();") != std::string::npos);
    }
    CHECK(early > 0);
  }
}

TEST_CASE("fp8-block backward GEMMs read the columnwise copies with their own block scales: 128x128 for W, 1x128 along T") {
  const CompileResult r = lowered_train("mlp_tiny.json", RecipeKind::fp8_block, {}, 128);
  const CompiledProfile& p = r.profiles.at(0);
  REQUIRE(p.gpu.supported);
  const std::vector<const GemmLaunch*> gemms = gemms_of(p, "fc2.backward+fc2.weight.main_grad@1");
  REQUIRE(gemms.size() == 2);
  CHECK(gemms[0]->a.buffer == columnwise("fc2.weight"));
  CHECK(gemms[0]->a.scale_inv == value_buffer_name("fc2.weight", BufferRole::columnwise_scale_inv));
  CHECK(gemms[0]->a.scale_mode == "blk128x128");
  CHECK(gemms[0]->b.scale_mode == "vec128");
  CHECK(gemms[1]->a.buffer == columnwise("act"));
  CHECK(gemms[1]->a.scale_inv == value_buffer_name("act", BufferRole::columnwise_scale_inv));
  CHECK(gemms[1]->a.scale_mode == "vec128");
  CHECK(gemms[1]->b.scale_mode == "vec128");
  // The weights' tiles, both directions in one kernel, straight from the fp32 master.
  const std::vector<const Launch*> workspace = launches_of(p, "fc1.weight.workspace");
  const auto tiles = std::find_if(workspace.begin(), workspace.end(), [](const Launch* l) { return l->entry == "tec_block_quantize_2d"; });
  REQUIRE(tiles != workspace.end());
  CHECK((*tiles)->args.at(0).buffer == data("fc1.weight.master"));
}

TEST_CASE("mxfp8 backward GEMMs multiply bf16 copies dequantized from W's and x's and dy's columnwise copies, made down the columns") {
  const CompileResult r = lowered_train("mlp_tiny.json", RecipeKind::mxfp8);
  const CompiledProfile& p = r.profiles.at(0);
  REQUIRE_MESSAGE(p.gpu.supported, p.gpu.reason);
  // The weight's columnwise copy: 32-row blocks down the columns of the fp32 master (its own
  // values, not the rowwise codes), E8M0 scales of their own.
  const std::vector<const Launch*> workspace = launches_of(p, "fc1.weight.workspace");
  const auto columns =
      std::find_if(workspace.begin(), workspace.end(), [](const Launch* l) { return l->entry == "tec_mxfp8_quantize_columns"; });
  REQUIRE(columns != workspace.end());
  CHECK((*columns)->args.at(0).buffer == data("fc1.weight.master"));
  CHECK((*columns)->args.at(1).buffer == columnwise("fc1.weight"));
  CHECK((*columns)->args.at(2).buffer == value_buffer_name("fc1.weight", BufferRole::columnwise_scale_inv));
  // Which copy each bf16 operand was dequantized from: the step's row kernel that wrote it.
  const std::string step = "fc2.backward+fc2.weight.main_grad@1";
  auto dequantized_from = [&](const std::string& operand) {
    for (const Launch* l : launches_of(p, step))
      if (l->kind == Launch::Kind::kernel && l->args.size() > 3 && l->args[3].buffer == operand) return l->args[0].buffer;
    return std::string("(no kernel of the step writes " + operand + ")");
  };
  const std::vector<const GemmLaunch*> gemms = gemms_of(p, step);
  REQUIRE(gemms.size() == 2);
  const GemmLaunch& dgrad = *gemms[0];  // dx = dy W: W's columnwise copy is [H, F] as W, read transposed
  CHECK(dgrad.a.type == DType::bf16);
  CHECK(dgrad.a.transposed);
  CHECK(dequantized_from(dgrad.a.buffer) == columnwise("fc2.weight"));
  CHECK(dgrad.b.type == DType::bf16);
  CHECK_FALSE(dgrad.b.transposed);
  CHECK(dequantized_from(dgrad.b.buffer) == data("dy.quantized"));
  const GemmLaunch& wgrad = *gemms[1];  // dW = dy^T x: both along T, from their columnwise copies
  CHECK(wgrad.a.transposed);
  CHECK(wgrad.b.transposed);
  CHECK(dequantized_from(wgrad.a.buffer) == columnwise("act"));
  CHECK(dequantized_from(wgrad.b.buffer) == columnwise("dy.quantized"));
  CHECK(wgrad.c == data("fc2.weight.main_grad"));
}

TEST_CASE("nvfp4 weights get their 16x16 tiles both ways in one kernel; its backward GEMMs multiply bf16 copies of the transposed copies") {
  const CompileResult r = lowered_train("mlp_tiny.json", RecipeKind::nvfp4);
  const CompiledProfile& p = r.profiles.at(0);
  REQUIRE_MESSAGE(p.gpu.supported, p.gpu.reason);
  auto defines = [&](const Launch* l) { return r.code.modules.at(static_cast<size_t>(l->module)).defines; };
  auto has = [](const std::vector<std::string>& d, const std::string& define) { return std::find(d.begin(), d.end(), define) != d.end(); };
  // The row kernel's amax pass alone (its 1x16 cast would be wrong for tiles), then both copies.
  const std::vector<const Launch*> workspace = launches_of(p, "fc1.weight.workspace");
  const auto tiles = std::find_if(workspace.begin(), workspace.end(), [](const Launch* l) { return l->entry == "tec_nvfp4_quantize_columns"; });
  REQUIRE(tiles != workspace.end());
  CHECK(has(defines(*tiles), "TEC_TWO_D=1"));
  CHECK((*tiles)->args.at(0).buffer == data("fc1.weight.master"));
  CHECK((*tiles)->args.at(2).buffer == columnwise("fc1.weight"));
  CHECK((*tiles)->args.at(5).buffer == data("fc1.weight"));
  int cast_passes = 0;
  for (const Launch* l : workspace)
    if (l->entry == "tec_row") cast_passes += has(defines(l), "TEC_PASS=2");
  CHECK(cast_passes == 0);
  // Activations: 1x16 rowwise by the row kernel, the columnwise copy by the new kernel, 1-D.
  const std::vector<const Launch*> act = launches_of(p, "act");
  const auto act_columns = std::find_if(act.begin(), act.end(), [](const Launch* l) { return l->entry == "tec_nvfp4_quantize_columns"; });
  REQUIRE(act_columns != act.end());
  CHECK(has(defines(*act_columns), "TEC_TWO_D=0"));
  // The copies hold x^T, dequantized as such: the GEMMs read them as they are, not transposed.
  const std::vector<const GemmLaunch*> gemms = gemms_of(p, "fc2.backward+fc2.weight.main_grad@1");
  REQUIRE(gemms.size() == 2);
  CHECK(gemms[0]->a.type == DType::bf16);
  CHECK_FALSE(gemms[0]->a.transposed);
  CHECK(gemms[0]->a.buffer != data("fc2.weight"));
  CHECK_FALSE(gemms[1]->a.transposed);
  CHECK_FALSE(gemms[1]->b.transposed);
}

}  // namespace tec::codegen
