// The tensor_parallel pass (issue 24): what each rank's program holds, where the collectives
// go, the shapes per rank, the errors for graphs a rank cannot compute on its slice, and the
// plan format of every rank's constants.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include <unistd.h>

#include "codegen/lower.h"
#include "compiler.h"
#include "plan/file.h"
#include "plan/format.h"
#include "plan/plan.h"
#include "reference/executor.h"
#include "test_util.h"

namespace tec {

namespace {

// An MLP x -> fc1 (column) -> gelu -> fc2 (row), H=256, F=512, over `tp` ranks; the input has
// the whole model's shape [64, 256].
std::string tp_mlp(int tp, bool sequence_parallel, const std::string& between = R"({"name": "act", "op": "gelu", "inputs": ["fc1"]})",
                   const std::string& x_shape = "[64, 256]") {
  const std::string sp = sequence_parallel ? "true" : "false";
  return R"({"inputs": [{"name": "x", "shape": )" + x_shape + R"(}], "ops": [
    {"name": "fc1", "op": "linear", "inputs": ["x"], "attrs": {"in_features": 256, "out_features": 512, "tp_mode": "column", "tp_size": )" +
         std::to_string(tp) + R"(, "sequence_parallel": )" + sp + R"(}},
    )" + between + R"(,
    {"name": "fc2", "op": "linear", "inputs": ["act"], "attrs": {"in_features": 512, "out_features": 256, "tp_mode": "row", "tp_size": )" +
         std::to_string(tp) + R"(, "sequence_parallel": )" + sp + R"(}}], "outputs": ["fc2"]})";
}

std::string compile_error(const std::string& text, FrontendOptions options = {}) {
  const Error e = test::error_of([&] { (void)test::compile_text(text, options); });
  return e.message();
}

}  // namespace

TEST_CASE("tensor_parallel: each rank's shapes, for tp=2 and tp=4, with and without sequence parallelism") {
  struct Case {
    int tp;
    bool sp;
    Shape x, fc1_weight, fc1, fc2_weight, fc2;
  };
  const std::vector<Case> cases = {
      {2, false, {64, 256}, {256, 256}, {64, 256}, {256, 256}, {64, 256}},
      {4, false, {64, 256}, {128, 256}, {64, 128}, {256, 128}, {64, 256}},
      {2, true, {32, 256}, {256, 256}, {64, 256}, {256, 256}, {32, 256}},  // x and y: this rank's tokens
      {4, true, {16, 256}, {128, 256}, {64, 128}, {256, 128}, {16, 256}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.tp);
    CAPTURE(c.sp);
    for (auto recipe : {RecipeKind::bf16, RecipeKind::fp8_current}) {
      const Graph g = test::compile_text(tp_mlp(c.tp, c.sp), test::with_recipe(recipe)).at(0);
      CHECK(g.tp.size == c.tp);
      CHECK(test::value_named(g, "x").proto.shape == c.x);
      CHECK(test::value_named(g, "fc1.weight").proto.shape == c.fc1_weight);
      CHECK(test::value_named(g, "fc1").proto.shape == c.fc1);
      CHECK(test::value_named(g, "fc2.weight").proto.shape == c.fc2_weight);
      CHECK(test::value_named(g, "fc2.bias").proto.shape == Shape({256}));  // whole, added after the reduction
      CHECK(test::value_named(g, "fc2.partial").proto.shape == Shape({64, 256}));
      CHECK(test::value_named(g, "fc2").proto.shape == c.fc2);
      CHECK(test::node_named(g, "fc2").attrs.get_bool("bias", true) == false);
      CHECK(test::node_named(g, "fc2.add_bias").op == "bias");
      CHECK(g.tp.layouts.at("x") == (c.sp ? TpLayout::sequence : TpLayout::replicated));
      CHECK(g.tp.layouts.at("fc2") == (c.sp ? TpLayout::sequence : TpLayout::replicated));
      if (c.sp) {
        CHECK(test::node_named(g, "fc1.all_gather").attrs.get_int("tp_size", 0) == c.tp);
        CHECK(test::value_named(g, "fc1.gathered").proto.shape == Shape({64, 256}));
        CHECK(test::node_named(g, "fc2.reduce_scatter").op == "reduce_scatter");
      } else {
        CHECK(!g.find_value("fc1.gathered"));
        CHECK(test::node_named(g, "fc2.all_reduce").op == "all_reduce");
      }
      // The weights' sources are the whole tensors; each rank's constants its slice.
      const auto& shard = *test::value_named(g, "fc2.weight").weight->shard;
      CHECK(shard.full == Shape({256, 512}));
      CHECK(shard.dim == 1);
      CHECK(shard.parts == c.tp);
    }
  }
}

TEST_CASE("tensor_parallel: one rank leaves the graph as it is") {
  const Graph g = test::compile_text(tp_mlp(1, true)).at(0);
  CHECK(g.tp.size == 1);
  CHECK(test::value_named(g, "x").proto.shape == Shape({64, 256}));
  CHECK(!g.find_value("fc2.partial"));
  CHECK(test::node_named(g, "fc2").attrs.get_bool("bias", false));
}

TEST_CASE("te-compile --tp N sets the group size of the marked linears; an unmarked graph is refused") {
  FrontendOptions tp4;
  tp4.tp_size = 4;
  const Graph g = test::compile_text(tp_mlp(2, false), tp4).at(0);
  CHECK(g.tp.size == 4);
  CHECK(test::value_named(g, "fc1.weight").proto.shape == Shape({128, 256}));
  const std::string plain = R"({"inputs": [{"name": "x", "shape": [64, 256]}], "ops": [
    {"name": "fc1", "op": "linear", "inputs": ["x"], "attrs": {"in_features": 256, "out_features": 512}}], "outputs": ["fc1"]})";
  CHECK(compile_error(plain, tp4).find("marks none") != std::string::npos);
}

TEST_CASE("tensor_parallel refuses what a rank cannot compute on its slice, naming the node") {
  // A norm over features split by the column-parallel linear.
  std::string e = compile_error(tp_mlp(2, true, R"({"name": "act", "op": "rmsnorm", "inputs": ["fc1"], "attrs": {"hidden": 256}})"));
  CHECK(e.find("op 'rmsnorm' reads 'fc1', split over its features") != std::string::npos);
  // Tokens that do not divide over the ranks.
  e = compile_error(tp_mlp(4, true, R"({"name": "act", "op": "gelu", "inputs": ["fc1"]})", "[30, 256]"));
  CHECK(e.find("its 30 tokens do not divide") != std::string::npos);
  // A row-parallel linear on a whole (replicated) input.
  e = compile_error(R"({"inputs": [{"name": "x", "shape": [64, 256]}], "ops": [
    {"name": "fc", "op": "linear", "inputs": ["x"], "attrs": {"in_features": 256, "out_features": 64, "tp_mode": "row", "tp_size": 2}}],
    "outputs": ["fc"]})");
  CHECK(e.find("a row-parallel linear reads its input split over the features") != std::string::npos);
  // Two group sizes, and sequence parallelism on one linear only.
  std::string text = tp_mlp(2, false);
  text.replace(text.rfind("\"tp_size\": 2"), 12, "\"tp_size\": 4");
  CHECK(compile_error(text).find("differs from linear 'fc1''s 2") != std::string::npos);
  text = tp_mlp(2, false);
  text.replace(text.rfind("\"sequence_parallel\": false"), 26, "\"sequence_parallel\": true");
  CHECK(compile_error(text).find("sequence_parallel differs") != std::string::npos);
  // A gated activation whose halves do not split evenly over the ranks.
  text = R"({"inputs": [{"name": "x", "shape": [64, 256]}], "ops": [
    {"name": "gu", "op": "linear", "inputs": ["x"], "attrs": {"in_features": 256, "out_features": 100, "tp_mode": "column", "tp_size": 4}},
    {"name": "act", "op": "swiglu", "inputs": ["gu"]}],
    "outputs": ["act"]})";
  const Error gated = test::error_of([&] { (void)test::compile_text(text); });
  CHECK(gated.context().node == "gu");
  CHECK(gated.message().find("must divide by 8") != std::string::npos);
  // A mean over the tokens mixes them: not on a sequence-parallel slice.
  e = compile_error(R"({"inputs": [{"name": "x", "shape": [64, 256]}], "ops": [
    {"name": "mean", "op": "reduce", "inputs": ["x"], "attrs": {"fn": "mean", "axes": [0]}},
    {"name": "fc1", "op": "linear", "inputs": ["mean"], "attrs": {"in_features": 256, "out_features": 512, "tp_mode": "column", "tp_size": 2, "sequence_parallel": true}},
    {"name": "fc2", "op": "linear", "inputs": ["fc1"], "attrs": {"in_features": 512, "out_features": 256, "tp_mode": "row", "tp_size": 2, "sequence_parallel": true}}],
    "outputs": ["fc2"]})");
  CHECK(e.find("op 'reduce' mixes tokens") != std::string::npos);
}

TEST_CASE("a TP plan: every rank's constants in one file, its layouts and collective steps; damage is caught") {
  const auto path = (std::filesystem::temp_directory_path() / "tec_tp_unit.json").string();
  std::ofstream(path) << tp_mlp(2, true);
  CompileOptions options;
  options.model_path = path;
  options.frontend.recipe = RecipeKind::fp8_current;
  const CompileResult r = compile(options);
  REQUIRE(r.plan.has_value());
  CHECK(r.plan->manifest["tp_size"] == 2);
  const auto bytes = plan::serialize_plan(r.plan->manifest, r.plan->blobs);
  const plan::Plan p = plan::Plan::load(bytes, "tp.teplan");
  CHECK(p.tp_size == 2);
  CHECK(p.other_rank_constants.size() == 1);
  CHECK(p.profiles.at(0).tp_layouts.at("x") == TpLayout::sequence);

  auto load_error = [&](const std::function<void(nlohmann::json&, std::vector<plan::Blob>&)>& edit) {
    nlohmann::json m = r.plan->manifest;
    std::vector<plan::Blob> blobs = r.plan->blobs;
    edit(m, blobs);
    return test::error_of([&] { (void)plan::Plan::load(plan::serialize_plan(m, blobs), "hostile.teplan"); }).message();
  };
  auto drop_rank1 = [](nlohmann::json&, std::vector<plan::Blob>& blobs) {
    std::erase_if(blobs, [](const plan::Blob& b) { return b.name == "constants.rank1"; });
  };
  CHECK(load_error(drop_rank1).find("needs blob 'constants.rank1'") != std::string::npos);
  CHECK(load_error([](nlohmann::json&, std::vector<plan::Blob>& blobs) {
          for (auto& b : blobs)
            if (b.name == "constants.rank1") b.bytes = b.bytes.first(b.bytes.size() - 256);
        }).find("every rank's constants have") != std::string::npos);
  CHECK(load_error([](nlohmann::json& m, std::vector<plan::Blob>&) { m["tp_size"] = 1; }).find("collective step") != std::string::npos);
  {
    // Blobs that overlap (the index written by hand): rank 2's constants the bytes of rank 1's.
    // The reader refuses rather than copy one region for many ranks: blobs lie one after
    // another, as the writer lays them out.
    const auto good = plan::serialize_plan(r.plan->manifest, r.plan->blobs);
    plan::FileHeader h;
    std::memcpy(&h, good.data(), sizeof h);
    nlohmann::json m = nlohmann::json::parse(good.begin() + static_cast<long>(h.manifest_offset),
                                             good.begin() + static_cast<long>(h.manifest_offset + h.manifest_size));
    m["tp_size"] = 3;
    const nlohmann::json blobs = m["blobs"];
    for (nlohmann::json b : blobs)
      if (b["name"] == "constants.rank1") {
        b["name"] = "constants.rank2";
        m["blobs"].push_back(b);
      }
    const auto bad = plan::assemble_plan(m.dump(), std::span(good.data() + h.blobs_offset, h.blobs_size));
    const Error e = test::error_of([&] { (void)plan::Plan::load(bad, "hostile.teplan"); });
    CHECK(e.message().find("blob 'constants.rank2'") != std::string::npos);
    CHECK(e.message().find("has its next blob") != std::string::npos);
  }
  CHECK(load_error([](nlohmann::json& m, std::vector<plan::Blob>&) { m["profiles"][0]["tp_layouts"]["x"] = "diagonal"; })
            .find("expected replicated, sequence or feature") != std::string::npos);
  CHECK(load_error([](nlohmann::json& m, std::vector<plan::Blob>&) { m["profiles"][0]["tp_layouts"]["fc1.weight"] = "sequence"; })
            .find("no input or output") != std::string::npos);
  // A collective whose group is not the plan's: caught before a run.
  nlohmann::json m = r.plan->manifest;
  for (auto& s : m["profiles"][0]["steps"])
    if (s["kind"] == "collective") s["ops"][0]["attrs"]["tp_size"] = 4;
  const plan::Plan wrong = plan::Plan::load(plan::serialize_plan(m, r.plan->blobs), "hostile.teplan");
  const Error e = test::error_of([&] { reference::RankGroup group(wrong, wrong.profiles.at(0)); });
  CHECK(e.message().find("is not the plan's 2") != std::string::npos);
  std::filesystem::remove(path);
}

namespace {

CompileResult lowered_tp(const std::string& graph, RecipeKind recipe, Mode mode = Mode::infer, bool overlap = true) {
  const auto path = (std::filesystem::temp_directory_path() / ("tec_tp_lowering_" + std::to_string(::getpid()) + ".json")).string();
  std::ofstream(path) << graph;
  CompileOptions options;
  options.model_path = path;
  options.frontend.recipe = recipe;
  options.frontend.mode = mode;
  options.archs = {"sm_90"};
  options.overlap_min_rows = overlap ? 0 : -1;  // --tp-overlap on / off
  options.cache_dir = (std::filesystem::temp_directory_path() / ("tec_tp_lowering_cache_" + std::to_string(::getpid()))).string();
  CompileResult r = compile(options);
  std::filesystem::remove(path);
  return r;
}

// "op reduce count dtype" of every collective launch of a step, in order; "copy" for a copy.
std::vector<std::string> collectives_of(const CompiledProfile& p, const std::string& step) {
  std::vector<std::string> out;
  for (const codegen::Launch& l : p.gpu.launches) {
    if (l.kind != codegen::Launch::Kind::collective || p.schedule.steps.at(static_cast<size_t>(l.step)).name != step) continue;
    const codegen::CollectiveLaunch& c = l.collective;
    out.push_back(c.op + " " + c.reduce + " " + std::to_string(c.count) + " " + std::string(to_string(c.dtype)) +
                  (c.send == c.recv && c.op != "ring_exchange" ? " in place" : "") +
                  (c.op == "reduce" ? " to rank " + std::to_string(c.root) : "") +
                  (c.op == "ring_exchange" ? " from +" + std::to_string(c.send_offset) + (c.send == c.recv ? " into +" : " into another buffer +") +
                                                 std::to_string(c.recv_offset)
                                           : "") +
                  (l.stream == 1 ? " on the side stream" : ""));
  }
  return out;
}

}  // namespace

TEST_CASE("TP plans lower to NCCL launches where TE communicates; an FP8 all-gather moves FP8 codes") {
  SUBCASE("fp8-current, sequence parallel, --tp-overlap off: the group's amax, then each rank's rows quantized and gathered as bytes") {
    const CompileResult r = lowered_tp(tp_mlp(2, true), RecipeKind::fp8_current, Mode::infer, /*overlap=*/false);
    const CompiledProfile& p = r.profiles.at(0);
    REQUIRE_MESSAGE(p.gpu.supported, p.gpu.reason);
    // x is [64, 256] whole, so [32, 256] per rank: 8192 elements each.
    CHECK(collectives_of(p, "fc1.all_gather") ==
          std::vector<std::string>{"all_reduce max 1 fp32 in place", "all_gather sum 8192 fp8_e4m3"});
    CHECK(collectives_of(p, "fc2.reduce_scatter") == std::vector<std::string>{"reduce_scatter sum 8192 bf16"});
    CHECK(std::none_of(p.gpu.launches.begin(), p.gpu.launches.end(), [](const codegen::Launch& l) { return l.stream != 0; }));
    // The plan file carries them, and the reader takes them.
    const plan::Plan loaded = plan::Plan::load(plan::serialize_plan(r.plan->manifest, r.plan->blobs), "tp.teplan");
    const auto& launches = loaded.profiles.at(0).launches;
    CHECK(std::count_if(launches.begin(), launches.end(), [](const plan::Launch& l) { return l.kind == "collective"; }) == 3);
  }
  SUBCASE("--tp-overlap on: the gather beside fc1's own rows; fc2's reduce-scatter a ring, the peer's block sent while the own block computes") {
    const CompileResult r = lowered_tp(tp_mlp(2, true), RecipeKind::fp8_current);
    const CompiledProfile& p = r.profiles.at(0);
    REQUIRE_MESSAGE(p.gpu.supported, p.gpu.reason);
    CHECK(collectives_of(p, "fc1.all_gather") ==
          std::vector<std::string>{"all_reduce max 1 fp32 in place", "all_gather sum 8192 fp8_e4m3 on the side stream"});
    // The partial sums' block 1 holds the peer's block (sent), block 0 what the peer sent back.
    CHECK(collectives_of(p, "fc2.reduce_scatter") ==
          std::vector<std::string>{"ring_exchange sum 8192 bf16 from +8192 into +0 on the side stream"});
    // The launches in order, kinds and row blocks: fc1's block of this rank's rows reads the
    // rank's own codes while they are gathered, the peer's block reads the gathered tensor.
    std::vector<std::string> order;
    const codegen::Launch* gather = nullptr;
    for (const codegen::Launch& l : p.gpu.launches) {
      if (l.kind == codegen::Launch::Kind::collective && l.collective.op == "all_gather") gather = &l;
      if (l.kind == codegen::Launch::Kind::fork || l.kind == codegen::Launch::Kind::join) order.push_back(std::string(codegen::to_string(l.kind)));
      if (l.kind == codegen::Launch::Kind::collective && l.stream == 1) order.push_back(l.collective.op);
      if (l.kind == codegen::Launch::Kind::kernel && l.entry == "tec_accumulate") order.push_back("accumulate");
      if (l.kind != codegen::Launch::Kind::gemm) continue;
      const codegen::GemmLaunch& g = l.gemm;
      order.push_back("gemm m=" + std::to_string(g.m) + (g.b.buffer == (gather ? gather->collective.send : "") ? " own rows" : "") +
                      " x+" + std::to_string(g.x_rows.fixed) + "/" + std::to_string(g.x_rows.per_rank) + "s" + std::to_string(g.x_rows.shift) +
                      " d+" + std::to_string(g.d_rows.fixed) + "/" + std::to_string(g.d_rows.per_rank) + "s" + std::to_string(g.d_rows.shift));
    }
    // fc2: the peer's rows (shift 1) into block 1 of the partial sums, sent while the own rows
    // (shift 0) compute into the output, which then adds what the peer sent.
    CHECK(order == std::vector<std::string>{"fork", "all_gather", "gemm m=32 own rows x+0/0s0 d+0/32s0", "join",
                                            "gemm m=32 x+0/32s1 d+0/32s1",
                                            "gemm m=32 x+0/32s1 d+32/0s0", "fork", "ring_exchange", "gemm m=32 x+0/32s0 d+0/0s0", "join",
                                            "accumulate"});
  }
  SUBCASE("--tp-overlap on, four ranks: fc2's ring runs three exchanges, its blocks in the order rank - 1, - 2, - 3, own") {
    const CompileResult r = lowered_tp(tp_mlp(4, true), RecipeKind::bf16);
    const CompiledProfile& p = r.profiles.at(0);
    REQUIRE_MESSAGE(p.gpu.supported, p.gpu.reason);
    // [64, 256] partial sums, blocks of 16 rows = 4096 elements: block 0 receives, blocks 1 and 2
    // take turns for the running sums in flight.
    CHECK(collectives_of(p, "fc2.reduce_scatter") == std::vector<std::string>{"ring_exchange sum 4096 bf16 from +4096 into +0 on the side stream",
                                                                                "ring_exchange sum 4096 bf16 from +8192 into +0 on the side stream",
                                                                                "ring_exchange sum 4096 bf16 from +4096 into +0 on the side stream"});
    std::vector<std::string> order;
    std::string partial;  // the first block's D: the partial sums
    for (const codegen::Launch& l : p.gpu.launches) {
      const std::string& step = p.schedule.steps.at(static_cast<size_t>(l.step)).name;
      if (partial.empty() && step == "fc2" && l.kind == codegen::Launch::Kind::gemm) partial = l.gemm.d;
      if (partial.empty()) continue;
      if (l.kind == codegen::Launch::Kind::fork || l.kind == codegen::Launch::Kind::join) order.push_back(std::string(codegen::to_string(l.kind)));
      if (l.kind == codegen::Launch::Kind::collective) order.push_back(l.collective.op);
      if (l.kind == codegen::Launch::Kind::kernel && l.entry == "tec_accumulate") order.push_back("accumulate");
      if (l.kind == codegen::Launch::Kind::gemm)
        order.push_back("gemm x block s" + std::to_string(l.gemm.x_rows.shift) + " -> " +
                        (l.gemm.d == partial ? "partial+" + std::to_string(l.gemm.d_rows.fixed) : "the output"));
    }
    // x rows (rank + shift) % 4: rank - 1, - 2, - 3, then its own, straight into the output.
    CHECK(order == std::vector<std::string>{"gemm x block s3 -> partial+16", "fork", "ring_exchange",
                                            "gemm x block s2 -> partial+32", "join", "accumulate", "fork", "ring_exchange",
                                            "gemm x block s1 -> partial+16", "join", "accumulate", "fork", "ring_exchange",
                                            "gemm x block s0 -> the output", "join", "accumulate"});
  }
  SUBCASE("fc2's bias and the residual after the reduce-scatter: one row kernel, or with the ring its last sum") {
    std::string graph = tp_mlp(2, true);
    graph.replace(graph.find(R"(}}], "outputs": ["fc2"]})"), std::string::npos,
                  R"(}}, {"name": "y", "op": "add", "inputs": ["fc2", "x"]}], "outputs": ["y"]})");
    auto launches_of_step = [](const CompiledProfile& p, const std::string& step) {
      std::vector<const codegen::Launch*> out;
      for (const codegen::Launch& l : p.gpu.launches)
        if (l.step >= 0 && p.schedule.steps.at(static_cast<size_t>(l.step)).name == step) out.push_back(&l);
      return out;
    };
    auto defines_of = [](const CompileResult& r, const codegen::Launch& l) { return r.code.modules.at(static_cast<size_t>(l.module)).defines; };
    auto has = [](const std::vector<std::string>& defines, const std::string& d) { return std::find(defines.begin(), defines.end(), d) != defines.end(); };
    for (const bool overlap : {false, true}) {
      CAPTURE(overlap);
      const CompileResult r = lowered_tp(graph, RecipeKind::bf16, Mode::infer, overlap);
      const CompiledProfile& p = r.profiles.at(0);
      REQUIRE_MESSAGE(p.gpu.supported, p.gpu.reason);
      const auto step = std::find_if(p.schedule.steps.begin(), p.schedule.steps.end(), [](const Step& s) { return s.name == "fc2.add_bias+y"; });
      REQUIRE(step != p.schedule.steps.end());
      CHECK(step->fusions.at(0) == "residual add fused into fc2.add_bias (one row kernel: the bias, then the residual)");
      const auto launches = launches_of_step(p, "fc2.add_bias+y");
      REQUIRE(launches.size() == 1);
      const codegen::Launch& l = *launches[0];
      if (!overlap) {  // after ncclReduceScatter: the row kernel, bias in slot 1, residual in slot 2
        CHECK(l.entry == "tec_row");
        CHECK(has(defines_of(r, l), "TEC_PRODUCER=7"));
        CHECK(has(defines_of(r, l), "TEC_RESIDUAL=1"));
        CHECK(l.args.at(2).buffer == "x.data");
        continue;
      }
      // The ring's last sum: the output = this rank's own block + what the peer sent + bias + x.
      CHECK(l.entry == "tec_accumulate");
      const auto defines = defines_of(r, l);
      CHECK((has(defines, "TEC_BIAS=1") && has(defines, "TEC_RESIDUAL=1") && has(defines, "TEC_COLS=256LL")));
      REQUIRE(l.args.size() == 5);
      CHECK(l.args[0].buffer == "y.data");
      CHECK(l.args[1].buffer == "fc2.reduced.data");
      CHECK(l.args[4].buffer == "x.data");
      CHECK(step->fusions.back().find("added by fc2.reduce_scatter's last ring sum") != std::string::npos);
      // Nothing else adds into the output: the reduce-scatter step's launches end in the exchange's join.
      CHECK(launches_of_step(p, "fc2.reduce_scatter").back()->kind == codegen::Launch::Kind::join);
    }
  }
  SUBCASE("fp8-delayed: the local amax record maxed over the group, the codes gathered") {
    const CompileResult r = lowered_tp(tp_mlp(2, true), RecipeKind::fp8_delayed);
    REQUIRE_MESSAGE(r.profiles.at(0).gpu.supported, r.profiles.at(0).gpu.reason);
    // fc1 writes its FP8 output and that output's amax itself (the delayed recipe's GEMM
    // epilogue), which row blocks cannot split: its gather is not overlapped.
    CHECK(collectives_of(r.profiles.at(0), "fc1.all_gather") ==
          std::vector<std::string>{"all_reduce max 1 fp32 in place", "all_gather sum 8192 fp8_e4m3"});
  }
  SUBCASE("fp8-block: block scales do not concatenate by rank, so bf16 is gathered and quantized after") {
    const CompileResult r = lowered_tp(tp_mlp(2, true), RecipeKind::fp8_block);
    REQUIRE_MESSAGE(r.profiles.at(0).gpu.supported, r.profiles.at(0).gpu.reason);
    CHECK(collectives_of(r.profiles.at(0), "fc1.all_gather") == std::vector<std::string>{"all_gather sum 8192 bf16"});
  }
  SUBCASE("bf16 without sequence parallelism: the row linear's all-reduce, whole tokens") {
    const CompileResult r = lowered_tp(tp_mlp(2, false), RecipeKind::bf16);
    REQUIRE_MESSAGE(r.profiles.at(0).gpu.supported, r.profiles.at(0).gpu.reason);
    CHECK(collectives_of(r.profiles.at(0), "fc2.all_reduce") == std::vector<std::string>{"all_reduce sum 16384 bf16"});
  }
  SUBCASE("a bf16 training step: the dgrad all-reduce sums in the backward and copies in the forward") {
    const CompileResult r = lowered_tp(tp_mlp(2, false), RecipeKind::bf16, Mode::train);
    const CompiledProfile& p = r.profiles.at(0);
    REQUIRE_MESSAGE(p.gpu.supported, p.gpu.reason);
    std::vector<std::string> all;
    for (const Step& s : p.schedule.steps)
      for (const std::string& c : collectives_of(p, s.name)) all.push_back(std::string(to_string(s.phase)) + ": " + c);
    CHECK(std::count(all.begin(), all.end(), "forward: copy sum 16384 bf16") == 1);
    CHECK(std::count(all.begin(), all.end(), "forward: all_reduce sum 16384 bf16") == 1);
    CHECK(std::count(all.begin(), all.end(), "backward: all_reduce sum 16384 bf16") == 1);  // dx of fc1's input
  }
}

TEST_CASE("the plan reader checks every collective launch against its buffers and the group") {
  const CompileResult r = lowered_tp(tp_mlp(2, true), RecipeKind::fp8_current);
  REQUIRE(r.plan.has_value());
  auto load_error = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json m = r.plan->manifest;
    for (auto& l : m["profiles"][0]["gpu"]["launches"])
      if (l["kind"] == "collective" && l["collective"]["op"] == "all_gather") {
        edit(l["collective"]);
        break;
      }
    return test::error_of([&] { (void)plan::Plan::load(plan::serialize_plan(m, r.plan->blobs), "hostile.teplan"); }).message();
  };
  CHECK(load_error([](nlohmann::json& c) { c["count"] = 8193; }).find("writes 16386 bytes of a 16384-byte one") != std::string::npos);
  CHECK(load_error([](nlohmann::json& c) { c["count"] = int64_t{1} << 50; }).find("expected an integer in") != std::string::npos);
  CHECK(load_error([](nlohmann::json& c) { c["op"] = "broadcast"; }).find("expected all_gather, reduce_scatter") != std::string::npos);
  CHECK(load_error([](nlohmann::json& c) { c["op"] = "reduce_scatter"; }).find("never summed") != std::string::npos);
  CHECK(load_error([](nlohmann::json& c) { c["recv"] = c["send"]; c["count"] = 1; }).find("only an all_reduce works in place") != std::string::npos);
  CHECK(load_error([](nlohmann::json& c) { c["recv"] = 9999; }).find("a buffer index below") != std::string::npos);

  // The overlap's launches: side-stream work between a fork and a join, row blocks inside
  // their buffers for every rank, a reduction's root one of the ranks.
  auto launches_error = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json m = r.plan->manifest;
    edit(m["profiles"][0]["gpu"]["launches"]);
    return test::error_of([&] { (void)plan::Plan::load(plan::serialize_plan(m, r.plan->blobs), "hostile.teplan"); }).message();
  };
  auto erase_kind = [](nlohmann::json& launches, const std::string& kind) {
    for (size_t i = launches.size(); i-- > 0;)
      if (launches[i]["kind"] == kind) launches.erase(i);
  };
  CHECK(launches_error([&](nlohmann::json& l) { erase_kind(l, "join"); }).find("a fork without a join") != std::string::npos);
  CHECK(launches_error([&](nlohmann::json& l) { erase_kind(l, "fork"); }).find("side-stream work before any fork") != std::string::npos);
  CHECK(launches_error([](nlohmann::json& l) {
          for (auto& x : l)
            if (x["kind"] == "gemm") x["stream"] = 1;
        }).find("only collectives run on the side stream") != std::string::npos);
  CHECK(launches_error([](nlohmann::json& l) {
          for (auto& x : l)
            if (x["kind"] == "gemm" && x["gemm"].contains("x_rows")) x["gemm"]["x_rows"]["per_rank"] = 64;
        }).find("GEMM operand b needs 96x") != std::string::npos);
  CHECK(launches_error([](nlohmann::json& l) {
          for (auto& x : l)
            if (x["kind"] == "collective" && x["collective"]["op"] == "ring_exchange") {
              x["collective"]["op"] = "reduce";
              x["collective"]["root"] = 2;
            }
        }).find("expected an integer in [0, 1]") != std::string::npos);
  CHECK(launches_error([](nlohmann::json& l) {
          for (auto& x : l)
            if (x["kind"] == "collective" && x["collective"]["op"] == "ring_exchange") x["collective"]["send_offset"] = 8193;
        }).find("reads 32770 bytes") != std::string::npos);
  // A ring exchange within one buffer: the part received into must not be the part sent.
  CHECK(launches_error([](nlohmann::json& l) {
          for (auto& x : l)
            if (x["kind"] == "collective" && x["collective"]["op"] == "ring_exchange") x["collective"]["recv_offset"] = 4096;
        }).find("only an all_reduce works in place (and a ring_exchange") != std::string::npos);
  CHECK(launches_error([](nlohmann::json& l) {
          for (auto& x : l)
            if (x["kind"] == "collective" && x["collective"]["op"] == "ring_exchange") x["collective"]["recv_offset"] = 8193;
        }).find("writes 32770 bytes") != std::string::npos);
  CHECK(launches_error([](nlohmann::json& l) {
          for (auto& x : l)
            if (x["kind"] == "collective" && x["collective"]["op"] == "all_gather") x["collective"]["recv_offset"] = 1;
        }).find("only a ring_exchange receives at an offset") != std::string::npos);
}

TEST_CASE("--tp on an ONNX model is refused: ONNX marks no linear parallel") {
  CompileOptions options;
  options.model_path = test::source_dir() + "/examples/onnx/gpt_mlp.onnx";
  options.frontend.tp_size = 2;
  const Error e = test::error_of([&] { (void)compile(options); });
  CHECK(e.kind() == ErrorKind::unsupported);
  CHECK(e.message().find("tensor-parallel plans come from JSON graphs") != std::string::npos);
}

}  // namespace tec
