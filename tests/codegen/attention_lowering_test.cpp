// The GPU lowering of the attention half of a layer, on a machine with no GPU: rope becomes a row
// kernel whose angles are the reference's bit for bit, attention one cuDNN SDPA launch whose
// every field the plan reader checks. tests/gpu/attention_gpu.sh runs them on the GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "compiler.h"
#include "plan/file.h"
#include "plan/plan.h"
#include "tec_math.h"
#include "test_util.h"

namespace tec {

namespace {

CompileResult compiled(const std::string& model, RecipeKind recipe, const std::string& mode = "infer") {
  CompileOptions options;
  options.model_path = model;
  options.frontend.recipe = recipe;
  options.frontend.dim_overrides["T"] = {128};
  if (mode == "train") options.frontend.mode = Mode::train;
  options.archs = {"sm_90"};
  options.cache_dir = (std::filesystem::temp_directory_path() / ("tec_attention_lowering_" + std::to_string(::getpid()))).string();
  return compile(options);
}

const std::string& llama_small() {
  static const std::string path = test::source_dir() + "/examples/llama_layer_small.json";
  return path;
}

// A one-attention graph with head dims `d`.
std::string attention_graph(int64_t d) {
  const auto path = std::filesystem::temp_directory_path() / ("tec_attention_d" + std::to_string(d) + ".json");
  std::ofstream(path) << R"({"name": "attention_d", "dtype": "bf16", "dims": {"B": 2, "T": [128], "W": )" << 4 * d
                      << R"(}, "inputs": [{"name": "q", "shape": ["B", "T", "W"]}, {"name": "k", "shape": ["B", "T", "W"]},
                            {"name": "v", "shape": ["B", "T", "W"]}],
      "ops": [{"name": "o", "op": "attention", "inputs": ["q", "k", "v"], "attrs": {"heads": 4, "head_dim": )"
                      << d << R"(}}], "outputs": ["o"]})";
  return path.string();
}

}  // namespace

TEST_CASE("rope's angles: tec_sincos is sin and cos to 2e-16, so the float table is the C library's but for rare last-bit ties") {
  int64_t differing = 0, total = 0;
  double worst = 0;
  for (int64_t position : {0, 1, 7, 100, 2047, 8191, 65535, 524287})
    for (int i = 0; i < 64; ++i) {
      const double angle = static_cast<double>(position) * std::pow(500000.0, -2.0 * i / 128.0);
      double s = 0, c = 0;
      tec_sincos(angle, &s, &c);
      worst = std::max({worst, std::fabs(s - std::sin(angle)), std::fabs(c - std::cos(angle))});
      differing += (static_cast<float>(s) != static_cast<float>(std::sin(angle))) + (static_cast<float>(c) != static_cast<float>(std::cos(angle)));
      total += 2;
    }
  CHECK(worst < 2e-16 * 524288);  // the reduction's error grows with the angle: ~1 ulp of the angle
  CHECK(differing * 1000 < total);
}

TEST_CASE("a Llama layer lowers to GPU code: the rope row kernels and one cuDNN attention launch, GQA, causal") {
  const CompileResult r = compiled(llama_small(), RecipeKind::fp8_current);
  const plan::Plan p = plan::Plan::load(plan::serialize_plan(r.plan->manifest, r.plan->blobs), "llama_layer_small.teplan");
  const plan::Profile& profile = p.profiles.at(0);
  REQUIRE_MESSAGE(profile.gpu_supported, profile.gpu_reason);
  int attention = 0, rope = 0;
  for (const plan::Launch& l : profile.launches) {
    if (l.kind == "attention") {
      ++attention;
      const plan::Attention& a = l.attention;
      CHECK(a.batch == 2);
      CHECK(a.seq_q == 128);
      CHECK(a.seq_kv == 128);
      CHECK(a.heads == 8);
      CHECK(a.kv_heads == 2);
      CHECK(a.head_dim == 64);
      CHECK(a.causal);
      CHECK_FALSE(a.sbhd);
      CHECK(a.scale == doctest::Approx(0.125));
      CHECK(a.dtype == DType::bf16);  // the FP8 recipe quantizes the linears' inputs, never attention's
      CHECK(a.stats < 0);             // inference: no log-sum-exp kept
      CHECK(profile.buffers.at(static_cast<size_t>(a.q)).tensor == "q_rope");
      CHECK(profile.buffers.at(static_cast<size_t>(a.k)).tensor == "k_rope");
      CHECK(profile.buffers.at(static_cast<size_t>(a.v)).tensor == "v");
    }
    if (l.kind == "kernel") {
      const auto& defines = p.modules.at(static_cast<size_t>(l.module)).defines;
      if (std::find(defines.begin(), defines.end(), "TEC_PRODUCER=21") == defines.end()) continue;
      ++rope;
      CHECK(std::find(defines.begin(), defines.end(), "TEC_ROPE_INNER=128LL") != defines.end());  // the position runs along T
      // The frequencies as hex literals, which parse back to the reference's doubles exactly.
      const auto frequencies = std::find_if(defines.begin(), defines.end(), [](const std::string& d) { return d.starts_with("TEC_ROPE_INV_FREQUENCY="); });
      REQUIRE(frequencies != defines.end());
      std::string list = frequencies->substr(std::string("TEC_ROPE_INV_FREQUENCY=").size()) + ",";
      int i = 0;
      for (size_t at = 0, comma; (comma = list.find(',', at)) != std::string::npos; at = comma + 1, ++i)
        CHECK(std::strtod(list.substr(at, comma - at).c_str(), nullptr) == std::pow(10000.0, -2.0 * i / 64.0));
      CHECK(i == 32);
    }
  }
  CHECK(attention == 1);
  CHECK(rope == 2);
  // The plan says why attention is not FP8 under an FP8 recipe.
  bool said = false;
  for (const plan::Step& step : profile.steps)
    for (const std::string& f : step.fusions)
      said |= f.find("gpu: attention 'attn' runs in bf16 through cuDNN's SDPA under fp8-current: cuDNN's FP8 attention is not used "
                     "(cuDNN 9.19's FP8 SDPA gave o divided by the softmax's row sum on the H100; docs/status.md, Ops); a row kernel "
                     "quantizes its output for the next linear") == 0;
  CHECK(said);
}

TEST_CASE("attention the GPU cannot run says why in the plan: head dims cuDNN does not take") {
  const CompileResult odd = compiled(attention_graph(12), RecipeKind::bf16);
  CHECK_FALSE(odd.profiles.at(0).gpu.supported);
  CHECK(odd.profiles.at(0).gpu.reason.find("head dims 12 and 12; cuDNN's SDPA needs multiples of 8") != std::string::npos);
  CHECK(compiled(attention_graph(64), RecipeKind::bf16).profiles.at(0).gpu.supported);
}

TEST_CASE("a train plan's attention: the forward saves o and the log-sum-exp, cuDNN's backward reads them and writes dq, dk, dv") {
  for (RecipeKind recipe : {RecipeKind::bf16, RecipeKind::fp8_current}) {
    CAPTURE(recipe);
    const CompileResult train = compiled(llama_small(), recipe, "train");
    REQUIRE_MESSAGE(train.profiles.at(0).gpu.supported, train.profiles.at(0).gpu.reason);
    const plan::Plan p = plan::Plan::load(plan::serialize_plan(train.plan->manifest, train.plan->blobs), "train.teplan");
    const plan::Profile& profile = p.profiles.at(0);
    std::vector<plan::Attention> launches;
    for (const plan::Launch& l : profile.launches)
      if (l.kind == "attention") launches.push_back(l.attention);
    REQUIRE(launches.size() == 2);
    const plan::Attention &forward = launches[0], &backward = launches[1];
    auto tensor = [&](int buffer) { return buffer < 0 ? std::string("(none)") : profile.buffers.at(static_cast<size_t>(buffer)).tensor; };
    CHECK_FALSE(forward.backward);
    CHECK(backward.backward);
    CHECK(tensor(forward.o) == "attn.o");  // the saved copy; a row kernel makes the output from it
    CHECK(tensor(forward.stats) == "attn.softmax_lse");
    CHECK(backward.o == forward.o);
    CHECK(backward.stats == forward.stats);
    CHECK(backward.q == forward.q);
    CHECK(backward.k == forward.k);
    CHECK(backward.v == forward.v);
    CHECK(backward.heads == forward.heads);
    CHECK(backward.kv_heads == forward.kv_heads);
    CHECK(backward.causal == forward.causal);
    CHECK(backward.scale == forward.scale);
    for (int buffer : {backward.d_o, backward.dq, backward.dk, backward.dv}) CHECK(buffer >= 0);
  }
}

TEST_CASE("a train plan refuses a mask input that asks for its gradient: attention gives none") {
  const auto path = std::filesystem::temp_directory_path() / "tec_attention_mask_grad.json";
  std::ofstream(path) << R"({"name": "mask_grad", "dtype": "bf16", "dims": {"B": 2, "T": [128], "W": 256},
      "inputs": [{"name": "q", "shape": ["B", "T", "W"]}, {"name": "k", "shape": ["B", "T", "W"]}, {"name": "v", "shape": ["B", "T", "W"]},
                 {"name": "mask", "shape": ["T", "T"]}],
      "ops": [{"name": "o", "op": "attention", "inputs": ["q", "k", "v", "mask"], "attrs": {"heads": 4, "head_dim": 64, "mask": "additive"}}],
      "outputs": ["o"]})";
  const Error e = test::error_of([&] { (void)compiled(path.string(), RecipeKind::bf16, "train"); });
  CHECK(e.kind() == ErrorKind::invalid_input);
  CHECK(e.message().find("input 'mask' asks for its gradient, but op 'attention' gives none for its input 3") != std::string::npos);
}

TEST_CASE("hostile attention launches are rejected at load: sizes past their buffers, heads that do not divide, bad masks") {
  const CompileResult r = compiled(llama_small(), RecipeKind::bf16);
  auto error_of = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json m = r.plan->manifest;
    for (auto& l : m["profiles"][0]["gpu"]["launches"])
      if (l["kind"] == "attention") edit(l["attention"]);
    const Error e = test::error_of([&] { (void)plan::Plan::load(plan::serialize_plan(m, r.plan->blobs), "hostile.teplan"); });
    CHECK(e.kind() == ErrorKind::invalid_input);
    return e.message();
  };
  CHECK(error_of([](auto& a) { a["seq_q"] = 1 << 20; }).find("attention's q needs") != std::string::npos);
  CHECK(error_of([](auto& a) { a["v_head_dim"] = 4096; }).find("attention's v needs") != std::string::npos);
  CHECK(error_of([](auto& a) { a["kv_heads"] = 3; }).find("kv_heads 3 does not divide heads 8") != std::string::npos);
  CHECK(error_of([](auto& a) { a["kv_heads"] = 16; }).find("expected an integer in [1, 8]") != std::string::npos);
  CHECK(error_of([](auto& a) { a["layout"] = "bhsd"; }).find("expected bshd or sbhd") != std::string::npos);
  CHECK(error_of([](auto& a) { a["dtype"] = "fp32"; }).find("attention runs in bf16 or fp16") != std::string::npos);
  CHECK(error_of([](auto& a) { a["scale"] = -1.0; }).find("positive and finite") != std::string::npos);
  CHECK(error_of([](auto& a) { a["causal"] = "yes"; }).find("expected a boolean") != std::string::npos);
  CHECK(error_of([](auto& a) { a["q"] = nullptr; }).find("attention needs buffer 'q'") != std::string::npos);
  CHECK(error_of([](auto& a) {
          a["bias"] = a["q"];
          a["bias_dims"] = {2, 8, 128, 128};
        }).find("attention's bias needs") != std::string::npos);
  CHECK(error_of([](auto& a) {
          a["bias"] = a["q"];
          a["bias_dims"] = {2, 3, 128, 128};
        }).find("expected [2 or 1, 8 or 1, 128, 128]") != std::string::npos);
  CHECK(error_of([](auto& a) {
          a["bias"] = a["q"];
          a["bias_dims"] = {1, 1, 128, 128};
          a["seq_lens"] = a["v"];
        }).find("not both") != std::string::npos);
  // A backward launch needs the forward's o and stats, d_o, and room for each gradient.
  CHECK(error_of([](auto& a) {
          a["backward"] = true;
          a["d_o"] = a["o"], a["dq"] = a["q"], a["dk"] = a["k"], a["dv"] = a["v"];
        }).find("attention needs buffer 'stats'") != std::string::npos);
  CHECK(error_of([](auto& a) {
          a["backward"] = true;
          a["stats"] = a["o"], a["d_o"] = a["o"], a["dq"] = a["q"], a["dk"] = a["k"];
        }).find("missing field 'dv'") != std::string::npos);
  CHECK(error_of([](auto& a) {
          a["backward"] = true;
          a["stats"] = a["o"], a["d_o"] = a["o"], a["dq"] = a["k"], a["dk"] = a["k"], a["dv"] = a["v"];
        }).find("attention's dq needs") != std::string::npos);
}

}  // namespace tec
