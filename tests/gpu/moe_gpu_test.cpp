// MoE plans on the GPU (TEC_GPU_TEST_ONLY=moe), against the CPU reference executor:
// - every kernel step (router, routing, permute with its quantize, unpermute) run on the CPU
//   from the GPU's arena before it gives the GPU's bytes exactly; the grouped GEMM steps (fc1
//   with the SwiGLU in its epilogue, or after it in a row kernel where a tile cannot pair gate
//   with up columns) are within kGemmBound of the CPU's, kFp8OutputBound after an FP8 quantize;
// - 100 replays of one CUDA graph with new routing every run, each output within kRunBound of
//   the CPU reference on the same inputs: the router's own routing (new tokens each run), and
//   routings given from outside: uniform, skewed, every token on one expert, experts left empty;
// - hostile routing data (an expert index out of range, m_splits that do not sum to the rows)
//   is reported whenever the results are read, until the next run; the next good run is fine;
// - training (every training recipe; a bias per expert) through the same four routings: the backward's kernel
//   steps bit for bit, the grouped dgrad and wgrad within bounds, 100 replays of one graph.
// And the other index data given from outside (TEC_GPU_TEST_ONLY=embedding): token ids, the
// embedding's rows exact, ids outside the table reported as hostile routing is; padding masks,
// attention within bf16's bound, masks that are not right-padded reported.
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "compiler.h"
#include "gpu_util.h"
#include "plan/plan.h"
#include "reference/executor.h"
#include "runtime/session.h"

namespace tec::gpu_test {

namespace {

// The GPU's grouped GEMM accumulates in another order than the reference's sequential sum, and
// its epilogue's SwiGLU reads fp32 sums rather than the reference's bf16 fc1 output; the FP8
// recipes then quantize the SwiGLU's output, where a value on a rounding boundary moves by one
// FP8 step. Measured well below these bounds.
constexpr double kGemmBound = 0.01;
// A GEMM step whose output is FP8 (fc1 with its SwiGLU, quantized for fc2) is compared after
// that quantize: GEMM differences far below 1e-2 move the values near a rounding boundary by
// one E4M3 step (up to 1/8 of the value), so a few percent of the elements differ by that much.
// Measured: up to 1.7e-2 on moe_tiny and moe_medium.
constexpr double kFp8OutputBound = 0.03;
// NVFP4's steps are coarser (E2M1: 4 -> 6 is half the value) and its operands reach the GEMM
// rounded to bf16 (its dequantized values have more bits), so more of the output flips a step.
constexpr double kFp4OutputBound = 0.15;
constexpr double kRunBound = 0.05;
constexpr double kFp4RunBound = 0.15;
double run_bound(RecipeKind recipe) { return recipe == RecipeKind::nvfp4 ? kFp4RunBound : kRunBound; }
// Replays per case: 100, as the issue asks; TEC_GPU_TEST_SMALL=1 takes 20 (a quick check on
// the device, where the 100 take the group past 9 minutes: each replay runs the CPU reference).
int replay_count() { return std::getenv("TEC_GPU_TEST_SMALL") ? 20 : 100; }

// `block_scales` false: te-compile --no-grouped-block-scales (fp8-block experts through a bf16 copy).
std::shared_ptr<const plan::Plan> compile_plan(const std::string& path, RecipeKind recipe, const std::string& arch, bool block_scales = true,
                                               Mode mode = Mode::infer) {
  CompileOptions options;
  options.frontend.mode = mode;
  options.grouped_block_scales = block_scales;
  options.model_path = path;
  options.frontend.recipe = recipe;
  options.archs = {arch};
  const CompileResult compiled = compile(options);
  if (!compiled.profiles.at(0).gpu.supported) throw std::runtime_error(path + ": no GPU code: " + compiled.profiles.at(0).gpu.reason);
  return std::make_shared<const plan::Plan>(plan::Plan::load(plan::serialize_plan(compiled.plan->manifest, compiled.plan->blobs), path));
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string write_model(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("tec_moe_gpu_" + name + ".json");
  std::ofstream(path) << text;
  return path.string();
}

// A layer with its routing given from outside: x [T, 256], each token's experts and weights.
std::string routed_layer(int64_t tokens, int64_t top_k, int64_t experts, bool bias = true) {
  return R"({"name": "routed", "inputs": [{"name": "x", "shape": [)" + std::to_string(tokens) + R"(, 256]},
    {"name": "experts", "shape": [)" + std::to_string(tokens) + ", " + std::to_string(top_k) + R"(], "dtype": "int32"},
    {"name": "weights", "shape": [)" + std::to_string(tokens) + ", " + std::to_string(top_k) + R"(], "dtype": "fp32"}],
    "ops": [{"name": "permute", "op": "moe_permute", "inputs": ["x", "experts"], "attrs": {"num_experts": )" + std::to_string(experts) + R"(}},
            {"name": "fc", "op": "grouped_linear", "inputs": ["permute", "permute.m_splits"],
             "attrs": {"num_gemms": )" + std::to_string(experts) + R"(, "in_features": 256, "out_features": 384, "bias": )" +
         (bias ? "true" : "false") + R"(}},
            {"name": "y", "op": "moe_unpermute", "inputs": ["fc", "permute.row_map", "weights"]}],
    "outputs": ["y", "permute.m_splits"]})";
}

// The worse of two errors, where NaN (a NaN or inf in the output) is the worst: std::max would
// keep the first and let a NaN output pass.
double worse(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += std::pow(static_cast<double>(got[i]) - want[i], 2);
    den += static_cast<double>(want[i]) * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
}

struct Bench {
  std::shared_ptr<const plan::Plan> plan;
  const plan::Profile& profile;
  cudaStream_t stream;
  runtime::Session gpu;
  reference::Session inputs;
  Bench(std::shared_ptr<const plan::Plan> p, size_t profile_index, cudaStream_t s)
      : plan(std::move(p)), profile(plan->profiles.at(profile_index)), stream(s), gpu(plan, profile), inputs(*plan, profile) {}

  void upload_inputs() {
    for (size_t i = 0; i < profile.buffers.size(); ++i)
      if (profile.buffers[i].region == "input")
        gpu.upload(static_cast<int>(i), inputs.arena().data() + profile.buffers[i].offset, static_cast<size_t>(profile.buffers[i].bytes),
                   stream);
  }
  // Runs on the inputs as set and reads the results twice: the errors each read gave ("" for none).
  std::pair<std::string, std::string> run_and_read_twice() {
    upload_inputs();
    gpu.run(stream);
    std::string messages[2];
    for (std::string& message : messages) try {
        (void)gpu.download_arena(stream);
      } catch (const Error& e) {
        message = e.message();
      }
    return {messages[0], messages[1]};
  }
  // One graph replay, poisoned first, against the CPU reference run from the same arena (inputs,
  // and the state as the GPU's runs left it): the error of output `name`, and m_splits as the
  // GPU made them.
  double replay_error(const std::string& name, std::vector<float>* m_splits = nullptr) { return replay_errors({name}, m_splits).at(0); }
  // The same for several tensors; one that ends in ".main_grad" is compared by its growth over
  // the run (what this step's wgrad added), not by the sum of every run's.
  std::vector<double> replay_errors(const std::vector<std::string>& names, std::vector<float>* m_splits = nullptr) {
    upload_inputs();
    gpu.poison(stream);
    reference::Session cpu(*plan, profile);
    cpu.set_arena(gpu.download_arena(stream));
    std::map<std::string, std::vector<float>> before;
    for (const std::string& name : names)
      if (name.ends_with(".main_grad")) before[name] = cpu.read(name).values;
    gpu.run(stream);
    reference::Session view(*plan, profile);
    view.set_arena(gpu.download_arena(stream));
    cpu.run();
    if (m_splits) *m_splits = view.read("permute.m_splits").values;
    std::vector<double> errors;
    for (const std::string& name : names) {
      std::vector<float> got = view.read(name).values, want = cpu.read(name).values;
      if (before.count(name))
        for (size_t i = 0; i < got.size(); ++i) got[i] -= before[name][i], want[i] -= before[name][i];
      errors.push_back(relative_error(got, want));
    }
    return errors;
  }
};

// Each step, eager, against the CPU from the GPU's arena before it.
int check_steps(Bench& b, const std::string& label) {
  int failures = 0, kernel_steps = 0, identical = 0, gemm_steps = 0;
  double worst_gemm = 0, worst_fp8_output = 0;
  b.upload_inputs();
  for (int run = 0; run < 2; ++run) {  // the second: delayed scaling casts with scales from a history
    b.gpu.poison(b.stream);
    std::vector<uint8_t> before = b.gpu.download_arena(b.stream);
    b.gpu.run_eager(b.stream, [&](int step) {
      CHECK_CUDA(cudaStreamSynchronize(b.stream));
      std::vector<uint8_t> after = b.gpu.download_arena(b.stream);
      if (run == 1 && step >= 0) {
        const plan::Step& st = b.profile.steps[static_cast<size_t>(step)];
        reference::Session cpu(*b.plan, b.profile);
        cpu.set_arena(before);
        cpu.run_step(static_cast<size_t>(step));
        if (st.kind == "kernel") {
          const bool same = step_outputs_equal(b.profile, st, cpu.arena().data(), after.data());
          ++kernel_steps;
          identical += same;
          if (!same) std::printf("  FAIL %s: kernel step '%s' differs from the CPU reference\n", label.c_str(), st.name.c_str());
        } else {
          reference::Session view(*b.plan, b.profile);
          view.set_arena(after);
          const std::string& out = st.ops.back().outputs.at(0);  // fc1's own output lives inside the step
          const double error = relative_error(view.read(out).values, cpu.read(out).values);
          const auto& quantizer = b.profile.tensors.at(out).proto.quantizer;
          const bool fp8_output = quantizer.has_value();
          const double bound = !fp8_output ? kGemmBound : quantizer->kind == QuantizerKind::nvfp4 ? kFp4OutputBound : kFp8OutputBound;
          (fp8_output ? worst_fp8_output : worst_gemm) = worse(fp8_output ? worst_fp8_output : worst_gemm, error);
          ++gemm_steps;
          if (!(error < bound)) {
            ++failures;
            std::printf("  FAIL %s: grouped GEMM step '%s' is %.4g from the CPU reference (bound %.2g)\n", label.c_str(), st.name.c_str(),
                        error, bound);
          }
        }
      }
      before = std::move(after);
    });
  }
  failures += kernel_steps - identical;
  std::printf("  %-40s kernel steps bit-identical: %d/%d; grouped GEMM steps %d, worst ||gpu-cpu||/||cpu|| %.2e (bound %.0e), "
              "with a quantized output %.2e (bound %.2g, NVFP4 %.2g)\n",
              label.c_str(), identical, kernel_steps, gemm_steps, worst_gemm, kGemmBound, worst_fp8_output, kFp8OutputBound,
              kFp4OutputBound);
  return failures;
}

// The router decides: new tokens every replay, so new routing every replay.
int router_case(const std::string& model, RecipeKind recipe, const std::string& arch, cudaStream_t stream, bool block_scales = true) {
  const auto plan = compile_plan(model, recipe, arch, block_scales);
  int failures = 0;
  for (const plan::Step& st : plan->profiles.at(0).steps)
    for (const std::string& f : st.fusions)
      if (f.starts_with("gpu: swiglu")) std::printf("  %s: %s\n", std::filesystem::path(model).filename().string().c_str(), f.c_str());
  for (size_t p = 0; p < plan->profiles.size(); ++p) {
    Bench b(plan, p, stream);
    const std::string label = std::filesystem::path(model).filename().string() + " " + std::string(to_string(recipe)) +
                              (block_scales ? "" : "+bf16-copy") + " T=" +
                              std::to_string(b.profile.dims.at("T"));
    b.inputs.randomize_inputs(17);
    failures += check_steps(b, label);
    double worst = 0;
    std::set<std::vector<float>> routings;
    const int replays = replay_count();
    for (int replay = 0; replay < replays; ++replay) {
      b.inputs.randomize_inputs(1000 + static_cast<uint64_t>(replay));
      std::vector<float> splits;
      worst = worse(worst, b.replay_error("y", &splits));
      routings.insert(splits);
    }
    const bool ok = worst < run_bound(recipe) && routings.size() > static_cast<size_t>(replays / 2);
    failures += ok ? 0 : 1;
    std::printf("  %-40s %d replays of one graph, %zu different m_splits: worst ||gpu-cpu||/||cpu|| %.2e (bound %.2g)%s\n",
                label.c_str(), replays, routings.size(), worst, run_bound(recipe), ok ? "" : "  FAIL");
  }
  return failures;
}

// The routed layer's inputs `experts` and `weights` by pattern: 0 uniform, 1 skewed (expert 3
// takes half and more), 2 every slot on expert 6, 3 the odd experts empty.
void set_routing(reference::Session& inputs, std::mt19937& rng, int pattern, int64_t tokens, int64_t top_k, int64_t experts) {
  std::vector<float> chosen(static_cast<size_t>(tokens * top_k)), weights(chosen.size());
  for (size_t s = 0; s < chosen.size(); ++s) {
    int e = static_cast<int>(rng() % experts);
    if (pattern == 1) e = rng() % 2 ? 3 : e;
    if (pattern == 2) e = 6;
    if (pattern == 3) e = static_cast<int>(rng() % (experts / 2)) * 2;
    chosen[s] = static_cast<float>(e);
    weights[s] = static_cast<float>(rng() % 1000) / 1000.0f;
  }
  inputs.set_input("experts", HostTensor{Shape{tokens, top_k}, chosen});
  inputs.set_input("weights", HostTensor{Shape{tokens, top_k}, weights});
}

// Hostile routing in the routed layer `b` (inference or training): an expert past the last.
// Reading the results says so; nothing crashes, and the next good run (`route_well`) reads
// fine, `name` within the run bound.
int hostile_expert_case(Bench& b, const std::string& label, RecipeKind recipe, const std::function<void()>& route_well,
                        const std::string& name) {
  const Shape shape = b.profile.tensors.at("experts").proto.shape;
  std::vector<float> chosen(static_cast<size_t>(shape.numel()), 1.0f);
  chosen[7] = static_cast<float>(b.profile.tensors.at("permute.m_splits").proto.shape[0]);
  b.inputs.set_input("experts", HostTensor{shape, chosen});
  b.upload_inputs();
  b.gpu.run(b.stream);
  std::string refused;
  try {
    (void)b.gpu.download_arena(b.stream);
  } catch (const Error& e) {
    refused = e.message();
  }
  // The status word holds until the next run starts (a second read of the bad results fails
  // too); a good run clears it.
  route_well();
  b.upload_inputs();
  b.gpu.run(b.stream);
  const double after = b.replay_error(name);
  // A train plan's permute.backward makes the routing again, so it names that step too.
  const bool ok = refused.find("an expert index outside [0, num_experts) (step 'permute'") != std::string::npos && after < run_bound(recipe);
  std::printf("  %-40s an expert index out of range: %s; the next run: %.2e%s\n", label.c_str(),
              refused.empty() ? "NOT REPORTED" : refused.c_str(), after, ok ? "" : "  FAIL");
  return ok ? 0 : 1;
}

// The routing is an input: uniform, skewed, all on one expert, half the experts empty.
int routed_case(RecipeKind recipe, const std::string& arch, cudaStream_t stream, bool block_scales = true) {
  const int64_t tokens = 300, top_k = 2, experts = 8;
  const auto plan = compile_plan(write_model("routed", routed_layer(tokens, top_k, experts)), recipe, arch, block_scales);
  Bench b(plan, 0, stream);
  const std::string label = "routed layer " + std::string(to_string(recipe)) + (block_scales ? "" : "+bf16-copy") + " T=300";
  std::mt19937 rng(5);
  auto route = [&](int pattern) { set_routing(b.inputs, rng, pattern, tokens, top_k, experts); };
  b.inputs.randomize_inputs(3);
  route(0);
  int failures = check_steps(b, label);
  double worst = 0;
  int one_expert_ok = 0;
  const int replays = replay_count();
  for (int replay = 0; replay < replays; ++replay) {
    const int pattern = replay % 4;
    route(pattern);
    std::vector<float> splits;
    worst = worse(worst, b.replay_error("y", &splits));
    if (pattern == 2) one_expert_ok += splits == std::vector<float>{0, 0, 0, 0, 0, 0, static_cast<float>(tokens * top_k), 0};
  }
  const bool ok = worst < run_bound(recipe) && one_expert_ok == replays / 4;
  failures += ok ? 0 : 1;
  std::printf("  %-40s %d replays (uniform, skewed, all on expert 6, odd experts empty): worst %.2e (bound %.2g), all-on-one "
              "m_splits right %d/%d%s\n",
              label.c_str(), replays, worst, run_bound(recipe), one_expert_ok, replays / 4, ok ? "" : "  FAIL");
  return failures + hostile_expert_case(b, label, recipe, [&] { route(0); }, "y");
}

// A training step through routing given from outside: each step against the CPU's (kernel
// steps bit for bit: the permute, unpermute and their backward; the grouped GEMMs, dgrad and
// wgrad within bounds), then 100 replays of one train graph with the four routing patterns in
// turn, y, dx, d(weights) and the growth of fc's main_grads (weight and bias: the bias gradient
// is column sums over each expert's rows) each within the run bound of the CPU
// reference run from the same arena; then an expert index out of range, reported as in
// inference, and a good run after it.
// `tokens` 304 (608 rows, a multiple of 16): the FP8 wgrad runs on wgmma over the columnwise
// copies, whose experts start inside 16-byte chunks and (fp8-block) inside scale blocks; 300
// (600 rows) keeps it on mma.sync.
int routed_train_case(RecipeKind recipe, const std::string& arch, cudaStream_t stream, int64_t tokens = 304) {
  const int64_t top_k = 2, experts = 8;
  const auto plan = compile_plan(write_model("routed_train", routed_layer(tokens, top_k, experts)), recipe, arch, true, Mode::train);
  Bench b(plan, 0, stream);
  const std::string label = "routed layer train " + std::string(to_string(recipe)) + " T=" + std::to_string(tokens);
  std::mt19937 rng(11);
  b.inputs.randomize_inputs(3);
  set_routing(b.inputs, rng, 0, tokens, top_k, experts);
  int failures = check_steps(b, label);
  const std::vector<std::string> names = {"y", "dx", "dweights", "fc.weight.main_grad", "fc.bias.main_grad"};
  std::vector<double> worst(names.size(), 0.0);
  const int replays = replay_count();
  for (int replay = 0; replay < replays; ++replay) {
    b.inputs.randomize_inputs(100 + static_cast<uint64_t>(replay));
    set_routing(b.inputs, rng, replay % 4, tokens, top_k, experts);
    const std::vector<double> errors = b.replay_errors(names);
    for (size_t i = 0; i < names.size(); ++i) worst[i] = worse(worst[i], errors[i]);
  }
  bool ok = true;
  std::string line;
  for (size_t i = 0; i < names.size(); ++i) {
    ok &= worst[i] < run_bound(recipe);
    line += " " + names[i] + " " + std::to_string(worst[i]).substr(0, 8);
  }
  failures += ok ? 0 : 1;
  std::printf("  %-40s %d replays (uniform, skewed, all on expert 6, odd experts empty), worst ||gpu-cpu||/||cpu||:%s (bound %.2g)%s\n",
              label.c_str(), replays, line.c_str(), run_bound(recipe), ok ? "" : "  FAIL");
  return failures + hostile_expert_case(b, label, recipe, [&] { set_routing(b.inputs, rng, 0, tokens, top_k, experts); }, "dx");
}

// m_splits given from outside that do not sum to the rows. in_features 8192 (bf16: 128 steps of
// K) makes the grouped GEMM split its last round along K, whose items are scheduled by the same
// check.
int hostile_splits_case(const std::string& arch, cudaStream_t stream, int in_features) {
  std::string model = R"({"name": "splits", "inputs": [{"name": "x", "shape": [256, IN]}, {"name": "splits", "shape": [4], "dtype": "int32"}],
    "ops": [{"name": "fc", "op": "grouped_linear", "inputs": ["x", "splits"], "attrs": {"num_gemms": 4, "in_features": IN, "out_features": 128}}],
    "outputs": ["fc"]})";
  for (size_t at; (at = model.find("IN")) != std::string::npos;) model.replace(at, 2, std::to_string(in_features));
  const auto plan = compile_plan(write_model("splits_" + std::to_string(in_features), model), RecipeKind::bf16, arch);
  Bench b(plan, 0, stream);
  b.inputs.randomize_inputs(1);
  int failures = 0;
  for (const auto& splits : std::vector<std::vector<float>>{{100, 100, 100, 100}, {-5, 100, 100, 61}, {0, 0, 256, 1}}) {
    b.inputs.set_input("splits", HostTensor{Shape{4}, splits});
    const auto [refused, again] = b.run_and_read_twice();
    const bool ok = refused == again && refused.find("m_splits negative or not summing to the rows (step 'fc')") != std::string::npos;
    failures += ok ? 0 : 1;
    std::printf("  hostile m_splits [%g, %g, %g, %g], K %d: %s%s\n", splits[0], splits[1], splits[2], splits[3], in_features,
                refused.empty() ? "NOT REPORTED" : "reported", ok ? "" : "  FAIL");
  }
  b.inputs.set_input("splits", HostTensor{Shape{4}, {64, 0, 150, 42}});
  b.upload_inputs();
  b.gpu.run(stream);  // clears the last bad run's status
  const double error = b.replay_error("fc");
  failures += error < kGemmBound ? 0 : 1;
  std::printf("  good m_splits after them, K %d: ||gpu-cpu||/||cpu|| %.2e%s\n", in_features, error, error < kGemmBound ? "" : "  FAIL");
  return failures;
}

// Token ids given from outside (an embedding lookup, then an rmsnorm and a linear): ids over
// the whole table, replayed against the CPU reference; then ids outside the table (past it,
// negative), each reported when results are read (twice alike), and a good run after them.
int token_ids_case(const std::string& arch, cudaStream_t stream) {
  const std::string model = R"({"name": "lm_head", "dtype": "bf16", "inputs": [{"name": "ids", "shape": [4, 64], "dtype": "int32"}],
    "ops": [{"name": "embed", "op": "embedding", "inputs": ["ids"], "attrs": {"num_embeddings": 1000, "embedding_dim": 256}},
            {"name": "norm", "op": "rmsnorm", "inputs": ["embed"], "attrs": {"hidden": 256}},
            {"name": "head", "op": "linear", "inputs": ["norm"], "attrs": {"in_features": 256, "out_features": 512, "bias": false}}],
    "outputs": ["embed", "head"]})";
  const auto plan = compile_plan(write_model("token_ids", model), RecipeKind::bf16, arch);
  Bench b(plan, 0, stream);
  b.inputs.randomize_inputs(1);
  std::mt19937 rng(5);
  auto ids_with = [&](float bad) {
    std::vector<float> ids(256);
    for (float& id : ids) id = static_cast<float>(rng() % 1000);
    if (bad != 0.0f) ids[77] = bad;
    b.inputs.set_input("ids", HostTensor{Shape{4, 64}, ids});
  };
  ids_with(0.0f);
  const double before = b.replay_error("embed");  // the rows as they are: 0 expected
  int failures = before == 0.0 ? 0 : 1;
  std::printf("  token ids over a 1000-row table: the embedding's rows ||gpu-cpu||/||cpu|| %.2e%s\n", before, before == 0.0 ? "" : "  FAIL");
  for (const float bad : {1000.0f, -3.0f}) {
    ids_with(bad);
    const auto [refused, again] = b.run_and_read_twice();
    const bool ok = refused == again && refused.find("a token id outside the embedding table's rows (its output rows are zeros) (step 'embed')") !=
                                            std::string::npos;
    failures += ok ? 0 : 1;
    std::printf("  hostile token id %g: %s%s\n", bad, refused.empty() ? "NOT REPORTED" : "reported", ok ? "" : "  FAIL");
  }
  ids_with(0.0f);
  b.upload_inputs();
  b.gpu.run(stream);  // clears the last bad run's status
  const double after = b.replay_error("head");
  failures += after < kGemmBound ? 0 : 1;
  std::printf("  good token ids after them: the head's ||gpu-cpu||/||cpu|| %.2e%s\n", after, after < kGemmBound ? "" : "  FAIL");
  return failures;
}

// A padding mask given from outside (transformers' attention_mask): right-padded rows of
// several lengths, attention within bf16's bound of the CPU reference; then rows that are not
// ones-then-zeros, reported; then a good run.
int padding_mask_case(const std::string& arch, cudaStream_t stream) {
  const std::string model = R"({"name": "padded", "dtype": "bf16", "inputs": [{"name": "x", "shape": [3, 64, 128]},
      {"name": "mask", "shape": [3, 64], "dtype": "int32"}],
    "ops": [{"name": "lengths", "op": "sequence_lengths", "inputs": ["mask"]},
            {"name": "att", "op": "attention", "inputs": ["x", "x", "x", "lengths"], "attrs": {"heads": 2, "head_dim": 64, "causal": true}}],
    "outputs": ["att"]})";
  const auto plan = compile_plan(write_model("padding_mask", model), RecipeKind::bf16, arch);
  Bench b(plan, 0, stream);
  b.inputs.randomize_inputs(2);
  auto mask_of = [&](std::vector<int> lengths, int hole) {
    std::vector<float> mask(3 * 64, 0.0f);
    for (int r = 0; r < 3; ++r)
      for (int j = 0; j < lengths[static_cast<size_t>(r)]; ++j) mask[static_cast<size_t>(r * 64 + j)] = 1.0f;
    if (hole >= 0) mask[static_cast<size_t>(64 + hole)] = 1.0f - mask[static_cast<size_t>(64 + hole)];
    b.inputs.set_input("mask", HostTensor{Shape{3, 64}, mask});
  };
  mask_of({64, 17, 1}, -1);
  const double error = b.replay_error("att");
  int failures = error < 0.02 ? 0 : 1;
  std::printf("  padding mask of lengths 64, 17, 1: attention ||gpu-cpu||/||cpu|| %.2e (bound 0.02)%s\n", error, error < 0.02 ? "" : "  FAIL");
  for (const int hole : {3, 40}) {  // a zero among the ones (left padding's kind), a one among the zeros
    mask_of({64, 17, 1}, hole);
    const auto [refused, again] = b.run_and_read_twice();
    const bool ok = refused == again && refused.find("a padding mask row that is not ones then zeros") != std::string::npos;
    failures += ok ? 0 : 1;
    std::printf("  padding mask with a hole at %d: %s%s\n", hole, refused.empty() ? "NOT REPORTED" : "reported", ok ? "" : "  FAIL");
  }
  mask_of({30, 64, 5}, -1);
  b.upload_inputs();
  b.gpu.run(stream);  // clears the last bad run's status
  const double after = b.replay_error("att");
  failures += after < 0.02 ? 0 : 1;
  std::printf("  a good padding mask after them: %.2e%s\n", after, after < 0.02 ? "" : "  FAIL");
  return failures;
}

}  // namespace

int embedding_test(const std::string& arch) {
  std::printf("token ids and padding masks given from outside:\n");
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  const int failures = token_ids_case(arch, stream) + padding_mask_case(arch, stream);
  CHECK_CUDA(cudaStreamDestroy(stream));
  return failures;
}

int moe_test(const std::string& arch) {
  std::printf("MoE plans (router, permute, grouped GEMM, unpermute) against the CPU reference:\n");
  if (arch != "sm_90") {
    std::printf("  SKIPPED: tec's grouped GEMM is a Hopper (sm_90) kernel; this GPU is %s\n", arch.c_str());
    return 0;
  }
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  int failures = 0;
  const std::string tiny = std::string(TEC_SOURCE_DIR) + "/examples/moe_tiny.json";
  const std::string medium = std::string(TEC_SOURCE_DIR) + "/tests/gpu/moe_medium.json";
  // Experts of ffn 64: no 256-column tile pairs gate with up columns, so the SwiGLU runs after
  // the grouped GEMM (bf16: the FP8 fc2 would need K % 128).
  std::string narrow = read_text(tiny);
  const std::string dims = R"("F2": 256, "F": 128)";
  narrow.replace(narrow.find(dims), dims.size(), R"("F2": 128, "F": 64)");
  // Experts of ffn 8192: fc2's K is 64 steps or more, so its grouped GEMM splits a short last
  // round along K (4 items per tile at T = 64), and partial sums meet in the owner's epilogue.
  std::string long_k = read_text(tiny);
  long_k.replace(long_k.find(dims), dims.size(), R"("F2": 16384, "F": 8192)");
  const std::string long_k_model = write_model("long_k_experts", long_k);
  const char* only_recipe = std::getenv("TEC_GPU_TEST_RECIPE");  // e.g. mxfp8: that recipe's cases alone
  const bool train_only = std::getenv("TEC_GPU_TEST_MOE_TRAIN_ONLY") != nullptr;  // the routed training cases alone
  if (!only_recipe && !train_only) failures += router_case(write_model("narrow_experts", narrow), RecipeKind::bf16, arch, stream);
  for (RecipeKind recipe : {RecipeKind::bf16, RecipeKind::fp8_current, RecipeKind::fp8_delayed, RecipeKind::fp8_block, RecipeKind::mxfp8,
                            RecipeKind::nvfp4}) {
    if ((only_recipe && to_string(recipe) != only_recipe) || train_only) continue;
    failures += router_case(tiny, recipe, arch, stream);
    failures += router_case(medium, recipe, arch, stream);
    failures += router_case(long_k_model, recipe, arch, stream);
    failures += routed_case(recipe, arch, stream);
    if (recipe == RecipeKind::fp8_block) {  // and through a bf16 copy of the weights (--no-grouped-block-scales)
      failures += router_case(tiny, recipe, arch, stream, false);
      failures += router_case(medium, recipe, arch, stream, false);
      failures += routed_case(recipe, arch, stream, false);
    }
  }
  for (RecipeKind recipe : {RecipeKind::bf16, RecipeKind::fp8_current, RecipeKind::fp8_delayed, RecipeKind::fp8_block,
                            RecipeKind::mxfp8, RecipeKind::nvfp4})  // every training recipe
    if (!only_recipe || to_string(recipe) == only_recipe) {
      failures += routed_train_case(recipe, arch, stream);
      if (recipe == RecipeKind::fp8_block) failures += routed_train_case(recipe, arch, stream, 300);  // and its mma.sync wgrad
    }
  if ((!only_recipe || std::string(only_recipe) == "bf16") && !train_only)
    for (int in_features : {256, 8192}) failures += hostile_splits_case(arch, stream, in_features);
  CHECK_CUDA(cudaStreamDestroy(stream));
  return failures;
}

}  // namespace tec::gpu_test
