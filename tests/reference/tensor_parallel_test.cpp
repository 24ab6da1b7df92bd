// Tensor parallelism on the CPU reference (issue 24): te-compile --tp N plans run with every
// rank in one process (reference::RankGroup), against the same model's one-rank plan and an
// fp64 computation, with the same whole inputs and the same full weights.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "compiler.h"
#include "fp64_model.h"
#include "plan/plan.h"
#include "reference/executor.h"
#include "test_util.h"

namespace tec {

namespace {

using namespace test::fp64;
using json = nlohmann::json;

struct Compiled {
  CompileResult result;
  plan::Plan plan;
};

// `example` with its two linears marked column- and row-parallel, written to a temp file.
std::string tensor_parallel_copy(const std::string& example, const std::string& first, const std::string& second, bool sequence_parallel,
                                 const std::string& tag) {
  json doc = json::parse(test::read_text(test::source_dir() + "/examples/" + example));
  doc.erase("$schema");
  for (json& op : doc["ops"]) {
    if (op["name"] != first && op["name"] != second) continue;
    op["attrs"]["tp_mode"] = op["name"] == first ? "column" : "row";
    op["attrs"]["tp_size"] = 2;
    op["attrs"]["sequence_parallel"] = sequence_parallel;
  }
  const auto path = std::filesystem::temp_directory_path() / ("tec_tp_test_" + tag + ".json");
  std::ofstream(path) << doc.dump(1);
  return path.string();
}

Compiled compile_with(const std::string& path, RecipeKind recipe, int64_t tp, Mode mode = Mode::infer, bool fusion = true) {
  CompileOptions options;
  options.model_path = path;
  options.frontend.recipe = recipe;
  options.frontend.tp_size = tp;
  options.frontend.mode = mode;
  options.frontend.dim_overrides["T"] = {64};
  if (!fusion) options.disabled.insert("fusion");
  CompileResult result = compile(options);
  REQUIRE(result.plan.has_value());
  plan::Plan p = plan::Plan::load(plan::serialize_plan(result.plan->manifest, result.plan->blobs), path);
  return {std::move(result), std::move(p)};
}

double relative_error(const std::vector<float>& got, const Matrix& ref, const std::vector<float>& minus) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += std::pow(static_cast<double>(got[i]) - minus[i] - ref[i], 2);
    den += ref[i] * ref[i];
  }
  REQUIRE(den > 0);
  return std::sqrt(num / den);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Columns [first, first + count) of a [rows, cols] matrix.
std::vector<float> columns(const HostTensor& t, int64_t first, int64_t count) {
  std::vector<float> out;
  const int64_t cols = t.shape.cols();
  for (int64_t r = 0; r < t.shape.rows(); ++r)
    for (int64_t c = first; c < first + count; ++c) out.push_back(t.values[static_cast<size_t>(r * cols + c)]);
  return out;
}

}  // namespace

TEST_CASE("a TP=2 plan's output is its one-rank plan's within the recipe's bound of fp64, with and without sequence parallelism") {
  // The same bounds as end_to_end_test's (measured there: bf16 0.004-0.005, FP8 0.054-0.068,
  // NVFP4 0.21-0.25). The row-parallel GEMM's partial sums are rounded to bf16 before the
  // reduction, and each rank quantizes its own columns of the activation (its own amax), so
  // the two plans differ, each within the bound.
  struct Case {
    const char* example;
    const char* first;
    const char* second;
    RecipeKind recipe;
    double bound;
  };
  const std::vector<Case> cases = {
      {"mlp_tiny.json", "fc1", "fc2", RecipeKind::bf16, 0.01},        {"mlp_tiny.json", "fc1", "fc2", RecipeKind::fp8_current, 0.08},
      {"mlp_tiny.json", "fc1", "fc2", RecipeKind::fp8_delayed, 0.08}, {"mlp_tiny.json", "fc1", "fc2", RecipeKind::fp8_block, 0.08},
      {"mlp_tiny.json", "fc1", "fc2", RecipeKind::nvfp4, 0.30},       {"swiglu_mlp.json", "gate_up", "down", RecipeKind::bf16, 0.01},
      {"swiglu_mlp.json", "gate_up", "down", RecipeKind::fp8_current, 0.08},
      {"swiglu_mlp.json", "gate_up", "down", RecipeKind::mxfp8, 0.08},
  };
  for (const Case& c : cases)
    for (bool sequence_parallel : {true, false}) {
      CAPTURE(c.example);
      CAPTURE(to_string(c.recipe));
      CAPTURE(sequence_parallel);
      const std::string path = tensor_parallel_copy(c.example, c.first, c.second, sequence_parallel, "bound");
      const Compiled one = compile_with(path, c.recipe, 1);
      const Compiled two = compile_with(path, c.recipe, 2);
      CHECK(two.plan.tp_size == 2);
      reference::RankGroup group(two.plan, two.plan.profiles.at(0));
      reference::Session single(one.plan, one.plan.profiles.at(0));
      group.randomize_inputs(5);
      single.randomize_inputs(5);
      CHECK(same_bits(group.read("x").values, single.read("x").values));  // the same whole input
      for (int run = 0; run < 2; ++run) {  // delayed scaling: the second run's scales come from a history
        group.run();
        single.run();
      }
      const HostTensor x = single.read("x"), y1 = single.read("y"), y2 = group.read("y");
      REQUIRE(y2.shape == y1.shape);
      Model m = weights_of(one.result.profiles.at(0).graph);
      m.rows = x.shape.rows();
      m.hidden = x.shape.cols();
      const Matrix xd(x.values.begin(), x.values.end());
      const Matrix ref = std::string(c.example) == "mlp_tiny.json" ? mlp_branch(m, xd) : swiglu_branch(m, xd);
      const double e1 = relative_error(y1.values, ref, x.values), e2 = relative_error(y2.values, ref, x.values);
      const std::string line = std::string(c.example) + " " + std::string(to_string(c.recipe)) + (sequence_parallel ? " SP" : "") +
                               ": TP=1 " + std::to_string(e1) + ", TP=2 " + std::to_string(e2);
      MESSAGE(line);
      CHECK(e1 < c.bound);
      CHECK(e2 < c.bound);
      std::filesystem::remove(path);
    }
}

TEST_CASE("a column-parallel GEMM's output is the one-rank GEMM's columns, bit for bit (bf16: K is not split)") {
  for (bool sequence_parallel : {true, false}) {
    CAPTURE(sequence_parallel);
    // swiglu_mlp: each rank's gate_up shard holds its slice of the gate half and of the up half,
    // so rank r's gate_up output is columns [r F/2, (r+1) F/2) and [F + r F/2, F + (r+1) F/2).
    const std::string path = tensor_parallel_copy("swiglu_mlp.json", "gate_up", "down", sequence_parallel, "columns");
    const Compiled one = compile_with(path, RecipeKind::bf16, 1, Mode::infer, false);
    const Compiled two = compile_with(path, RecipeKind::bf16, 2, Mode::infer, false);
    reference::RankGroup group(two.plan, two.plan.profiles.at(0));
    reference::Session single(one.plan, one.plan.profiles.at(0));
    group.randomize_inputs(9);
    single.randomize_inputs(9);
    // The intermediates, read right after the step that writes them (later steps reuse scratch).
    auto read_after = [](const plan::Profile& p, const std::string& tensor, size_t step, auto read) {
      for (const auto& op : p.steps[step].ops)
        for (const auto& out : op.outputs)
          if (out == tensor) read();
    };
    HostTensor whole, act;
    for (size_t s : single.begin_run()) {
      single.run_step(s);
      read_after(one.plan.profiles[0], "gate_up", s, [&] { whole = single.read("gate_up"); });
      read_after(one.plan.profiles[0], "act", s, [&] { act = single.read("act"); });
    }
    single.end_run();
    std::vector<HostTensor> parts(2), acts(2);
    group.run([&](size_t s) {
      for (int64_t r = 0; r < 2; ++r) {
        read_after(two.plan.profiles[0], "gate_up", s, [&] { parts[static_cast<size_t>(r)] = group.rank(r).read("gate_up"); });
        read_after(two.plan.profiles[0], "act", s, [&] { acts[static_cast<size_t>(r)] = group.rank(r).read("act"); });
      }
    });
    const int64_t f = act.shape.cols(), half = f / 2;
    for (int64_t r = 0; r < 2; ++r) {
      CAPTURE(r);
      const HostTensor& part = parts[static_cast<size_t>(r)];
      REQUIRE(part.shape == Shape({whole.shape.rows(), f}));
      const std::vector<float> gate = columns(whole, r * half, half), up = columns(whole, f + r * half, half);
      // Row by row: the rank's gate columns, then its up columns.
      std::vector<float> interleaved;
      for (int64_t row = 0; row < whole.shape.rows(); ++row) {
        interleaved.insert(interleaved.end(), gate.begin() + row * half, gate.begin() + (row + 1) * half);
        interleaved.insert(interleaved.end(), up.begin() + row * half, up.begin() + (row + 1) * half);
      }
      CHECK(same_bits(part.values, interleaved));
      CHECK(same_bits(acts[static_cast<size_t>(r)].values, columns(act, r * half, half)));
    }
    std::filesystem::remove(path);
  }
}

TEST_CASE("a sequence-parallel plan splits x and y over the tokens and gathers the quantized input as one tensor") {
  const Compiled two = compile_with(test::source_dir() + "/examples/mlp_tp.json", RecipeKind::fp8_current, 0);
  const plan::Profile& p = two.plan.profiles.at(0);
  CHECK(two.plan.tp_size == 2);
  CHECK(p.tp_layouts.at("x") == TpLayout::sequence);
  CHECK(p.tp_layouts.at("y") == TpLayout::sequence);
  CHECK(p.tensors.at("x").proto.shape == Shape({32, 64}));  // T=64 over 2 ranks
  std::vector<std::string> kinds;
  for (const auto& s : p.steps) kinds.push_back(s.kind + ":" + s.ops.at(0).op);
  CHECK(std::count(kinds.begin(), kinds.end(), "collective:all_gather") == 1);
  CHECK(std::count(kinds.begin(), kinds.end(), "collective:reduce_scatter") == 1);
  // fc1 reads the gathered input quantized: the gather quantizes, with the group's amax.
  const plan::Tensor& gathered = p.tensors.at("fc1.gathered");
  REQUIRE(gathered.proto.quantizer.has_value());
  CHECK(gathered.proto.shape == Shape({64, 64}));
  // Every rank holds the same quantized bytes, read right after the gather (later steps reuse
  // its scratch): the whole gathered tensor quantized once, with the group's amax.
  reference::RankGroup group(two.plan, p);
  group.randomize_inputs(3);
  const int data = gathered.buffers.at(BufferRole::data);
  bool compared = false;
  group.run([&](size_t s) {
    if (p.steps[s].ops.at(0).op != "all_gather") return;
    const auto first = group.rank(0).buffer_bytes(data), second = group.rank(1).buffer_bytes(data);
    CHECK(std::equal(first.begin(), first.end(), second.begin(), second.end()));
    compared = true;
  });
  CHECK(compared);
  bool noted = false;
  for (const auto& s : p.steps)
    for (const auto& f : s.fusions) noted = noted || f.find("quantize of 'fc1.gathered' fused into all_gather") != std::string::npos;
  CHECK(noted);
  // A one-rank Session cannot run the collectives alone, and says what can.
  reference::Session alone(two.plan, p, 1);
  alone.randomize_inputs(3);
  const Error e = test::error_of([&] { alone.run(); });
  CHECK(e.message().find("RankGroup") != std::string::npos);
}

TEST_CASE("every rank's constants are its shard of the one-rank plan's weights") {
  // bf16: no quantization, so the shards are byte ranges of the whole weight's values.
  const std::string path = tensor_parallel_copy("mlp_tiny.json", "fc1", "fc2", true, "shards");
  const Compiled one = compile_with(path, RecipeKind::bf16, 1);
  const Compiled two = compile_with(path, RecipeKind::bf16, 2);
  reference::RankGroup group(two.plan, two.plan.profiles.at(0));
  reference::Session single(one.plan, one.plan.profiles.at(0));
  const HostTensor fc1 = single.read("fc1.weight"), fc2 = single.read("fc2.weight");  // [F, H], [H, F]
  const int64_t f = fc1.shape[0], h = fc1.shape[1];
  for (int64_t r = 0; r < 2; ++r) {
    CAPTURE(r);
    const HostTensor rows = group.rank(r).read("fc1.weight"), cols = group.rank(r).read("fc2.weight");
    CHECK(rows.shape == Shape({f / 2, h}));
    CHECK(same_bits(rows.values, std::vector<float>(fc1.values.begin() + r * f / 2 * h, fc1.values.begin() + (r + 1) * f / 2 * h)));
    CHECK(cols.shape == Shape({h, f / 2}));
    CHECK(same_bits(cols.values, columns(fc2, r * f / 2, f / 2)));
    // The row-parallel bias is whole on every rank, added once after the reduction.
    CHECK(same_bits(group.rank(r).read("fc2.bias").values, single.read("fc2.bias").values));
  }
  CHECK(two.plan.constants_of(1).size() == two.plan.constants.size());
  CHECK(two.plan.constants_of(1) != two.plan.constants);
  std::filesystem::remove(path);
}

TEST_CASE("a TP=2 training step (bf16): dx within 1% of the one-rank step's, the weight gradients its shards bit for bit") {
  for (bool sequence_parallel : {true, false}) {
    CAPTURE(sequence_parallel);
    const std::string path = tensor_parallel_copy("mlp_tiny.json", "fc1", "fc2", sequence_parallel, "train");
    const Compiled one = compile_with(path, RecipeKind::bf16, 1, Mode::train);
    const Compiled two = compile_with(path, RecipeKind::bf16, 2, Mode::train);
    const plan::Profile& p = two.plan.profiles.at(0);
    CHECK(p.tp_layouts.at("dy") == p.tp_layouts.at("y"));
    CHECK(p.tp_layouts.at("dx") == p.tp_layouts.at("x"));
    reference::RankGroup group(two.plan, p);
    reference::Session single(one.plan, one.plan.profiles.at(0));
    group.randomize_inputs(11);
    single.randomize_inputs(11);
    group.run();
    single.run();
    auto error = [](const std::vector<float>& got, const std::vector<float>& want) {
      double num = 0, den = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        num += std::pow(static_cast<double>(got.at(i)) - want[i], 2);
        den += static_cast<double>(want[i]) * want[i];
      }
      return std::sqrt(num / den);
    };
    // dx sums the gradient through the residual and through fc1 (an all_reduce of the ranks'
    // partial dgrads without sequence parallelism, a reduce_scatter with it).
    const double dx = error(group.read("dx").values, single.read("dx").values);
    MESSAGE("dx: TP=2 vs TP=1 " << dx);
    CHECK(dx < 0.01);
    const HostTensor g1 = single.read("fc1.weight.main_grad"), g2 = single.read("fc2.weight.main_grad");
    const int64_t f = g1.shape[0], h = g1.shape[1];
    for (int64_t r = 0; r < 2; ++r) {
      const HostTensor rows = group.rank(r).read("fc1.weight.main_grad"), cols = group.rank(r).read("fc2.weight.main_grad");
      // Bit for bit: neither wgrad GEMM's contraction (over the tokens) is split, and both read
      // the one-rank step's operands (dy gathered whole, the activation's columns).
      CHECK(same_bits(rows.values, std::vector<float>(g1.values.begin() + r * f / 2 * h, g1.values.begin() + (r + 1) * f / 2 * h)));
      CHECK(same_bits(cols.values, columns(g2, r * f / 2, f / 2)));
    }
    std::filesystem::remove(path);
  }
}

}  // namespace tec
