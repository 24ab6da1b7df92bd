// Whole plans on the GPU, for every example under every recipe (and tests/gpu/general_ops.json,
// the general ops as row kernels, and general_any_shape.json, the general path's kernels; fp16
// GEMMs are the onnxruntime cross-check's, onnx_gpu):
// - each kernel step, run on the CPU from the GPU's arena before it, matches the GPU's
//   output bytes exactly (data, scale_inv, amax): the quantize kernels are bit-identical;
// - the final output is within the recipe's bound of the fp64 model (tests/fp64_model.h),
//   measured on the MLP branch (y - x), on sampled rows for large T;
// - outputs are poisoned (0xFF) before every run, and no poison survives;
// - 100 graph replays give bit-identical outputs, and the graph with every launch in order
//   (no early launch, runtime/session.cpp) gives those bytes too;
// - creating and destroying 100 sessions leaves device memory where it started.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>

#include "compiler.h"
#include "fp64_model.h"
#include "gpu_util.h"
#include "plan/plan.h"
#include "reference/executor.h"
#include "runtime/session.h"

namespace tec::gpu_test {

namespace {
int g_early_launches = 0;  // across every case: at least one on Hopper

using namespace tec::test::fp64;

std::vector<uint8_t> output_bytes(const runtime::Session& s, cudaStream_t stream) { return tensor_bytes(s, s.profile().outputs, stream); }

struct Case {
  std::string model;
  RecipeKind recipe;
  std::vector<int64_t> tokens;  // the T profiles
  // The device layout this case must put weights in, so that it checks the kernel reading
  // them against the reference: small_m_tiles (kernels/small_m_layout.h) for every FP8 weight,
  // all read by the small-M GEMM alone; mid_m_tiles (kernels/mid_m_layout.h) for mlp.json's
  // fc1 weight, read by the mid-M GEMM (fc2's N is too small for it).
  std::string expect_layout;
};

double bound_of(RecipeKind r) { return r == RecipeKind::bf16 ? 0.01 : r == RecipeKind::nvfp4 ? 0.30 : 0.08; }

int run_case(const Case& c, const std::string& arch) {
  CompileOptions options;
  options.model_path = std::string(TEC_SOURCE_DIR) + (c.model.starts_with("tests/") ? "/" : "/examples/") + c.model;
  options.frontend.recipe = c.recipe;
  options.frontend.dim_overrides["T"] = c.tokens;
  options.archs = {arch};
  options.mid_m_gemm = c.expect_layout == "mid_m_tiles";  // experimental, so asked for
  const CompileResult compiled = compile(options);
  auto plan = std::make_shared<const plan::Plan>(
      plan::Plan::load(plan::serialize_plan(compiled.plan->manifest, compiled.plan->blobs), c.model));
  int failures = 0;
  if (!c.expect_layout.empty()) {
    int tiled = 0, fp8_weights = 0;
    for (const plan::Buffer& b : plan->profiles[0].buffers) {
      tiled += b.device_layout == c.expect_layout;
      fp8_weights += b.region == "constants" && b.role == BufferRole::data && is_float8(b.dtype);
    }
    const int expected = c.expect_layout == "small_m_tiles" ? fp8_weights : 1;
    const bool ok = tiled == expected && tiled > 0;
    failures += ok ? 0 : 1;
    std::printf("  %s %s: %d of %d FP8 weights in the %s device layout (expected %d)%s\n", c.model.c_str(),
                std::string(to_string(c.recipe)).c_str(), tiled, fp8_weights, c.expect_layout.c_str(), expected, ok ? "" : "  FAIL");
  }
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  for (size_t pi = 0; pi < plan->profiles.size(); ++pi) {
    const plan::Profile& profile = plan->profiles[pi];
    const int64_t tokens = profile.dims.at("T");
    char label[128];
    std::snprintf(label, sizeof label, "%s %s T=%lld", c.model.c_str(), std::string(to_string(c.recipe)).c_str(),
                  static_cast<long long>(tokens));
    runtime::Session gpu(plan, profile);
    reference::Session inputs(*plan, profile);
    inputs.randomize_inputs(7);
    auto upload_inputs = [&](runtime::Session& to) {
      for (size_t i = 0; i < profile.buffers.size(); ++i)
        if (profile.buffers[i].region == "input")
          to.upload(static_cast<int>(i), inputs.arena().data() + profile.buffers[i].offset,
                    static_cast<size_t>(profile.buffers[i].bytes), stream);
    };
    upload_inputs(gpu);

    // Kernel steps, eager, each against the CPU from the same arena. The second run, so
    // that delayed scaling casts with scales from a real history.
    constexpr int kEagerRuns = 2;
    for (int run = 0; run < kEagerRuns; ++run) {
      gpu.poison(stream);
      std::vector<uint8_t> before = gpu.download_arena(stream);
      int kernel_steps = 0, bit_identical = 0;
      gpu.run_eager(stream, [&](int step) {
        CHECK_CUDA(cudaStreamSynchronize(stream));
        std::vector<uint8_t> after = gpu.download_arena(stream);
        if (run == 1 && step >= 0 && profile.steps[static_cast<size_t>(step)].kind == "kernel") {
          reference::Session cpu(*plan, profile);
          cpu.set_arena(before);
          cpu.run_step(static_cast<size_t>(step));
          const bool same = step_outputs_equal(profile, profile.steps[static_cast<size_t>(step)], cpu.arena().data(), after.data());
          ++kernel_steps;
          bit_identical += same ? 1 : 0;
          if (!same) std::printf("  FAIL %s: kernel step '%s' differs from the CPU reference\n", label, profile.steps[static_cast<size_t>(step)].name.c_str());
        }
        before = std::move(after);
      });
      if (run == 1) {
        failures += kernel_steps - bit_identical;
        std::printf("  %-36s kernel steps bit-identical: %d/%d\n", label, bit_identical, kernel_steps);
      }
    }

    // The final output against the fp64 model, on up to 64 sampled rows (a graph of general ops,
    // which has none, against the CPU reference's run).
    gpu.poison(stream);
    gpu.run(stream);
    CHECK_CUDA(cudaStreamSynchronize(stream));
    reference::Session view(*plan, profile);
    view.set_arena(gpu.download_arena(stream));
    const HostTensor x = view.read("x"), y = view.read("y");
    bool poisoned = false;
    for (float v : y.values) poisoned |= std::isnan(v);
    double num = 0, den = 0;
    std::string against;
    if (c.model.starts_with("tests/")) {
      reference::Session cpu(*plan, profile);
      cpu.set_arena(inputs.arena());
      // Delayed scaling: as many runs as the GPU made (the eager ones and this one), so that
      // both cast with scales from the same history.
      for (int run = 0; run < (c.recipe == RecipeKind::fp8_delayed ? kEagerRuns + 1 : 1); ++run) cpu.run();
      const HostTensor want = cpu.read("y");
      for (size_t i = 0; i < want.values.size(); ++i) {
        num += std::pow(static_cast<double>(y.values[i]) - want.values[i], 2);
        den += static_cast<double>(want.values[i]) * want.values[i];
      }
      against = "||gpu-reference||/||reference||";
    } else {
      Model m = weights_of(compiled.profiles[pi].graph);
      m.hidden = x.shape.cols();
      std::vector<int64_t> rows;
      const int64_t step = std::max<int64_t>(1, tokens / 64);
      for (int64_t r = 0; r < tokens; r += step) rows.push_back(r);
      m.rows = static_cast<int64_t>(rows.size());
      Matrix xs;
      for (int64_t r : rows) xs.insert(xs.end(), x.values.begin() + r * m.hidden, x.values.begin() + (r + 1) * m.hidden);
      const Matrix ref = c.model == "swiglu_mlp.json" ? swiglu_branch(m, xs) : mlp_branch(m, xs);
      for (size_t i = 0; i < rows.size(); ++i)
        for (int64_t j = 0; j < m.hidden; ++j) {
          const size_t at = static_cast<size_t>(rows[i] * m.hidden + j), k = i * static_cast<size_t>(m.hidden) + static_cast<size_t>(j);
          num += std::pow(static_cast<double>(y.values[at]) - xs[k] - ref[k], 2);
          den += ref[k] * ref[k];
        }
      against = "||branch-fp64||/||fp64|| (" + std::to_string(rows.size()) + " rows)";
    }
    const double error = std::sqrt(num / den);
    const bool within = std::isfinite(error) && error < bound_of(c.recipe) && den > 0 && !poisoned;
    failures += within ? 0 : 1;
    std::printf("  %-36s %s = %.4f (bound %.2f)%s%s\n", label, against.c_str(), error, bound_of(c.recipe),
                poisoned ? " POISON SURVIVED" : "", within ? "" : "  FAIL");

    // 100 replays, each poisoned first, all equal to the first.
    const std::vector<uint8_t> first = output_bytes(gpu, stream);
    int differing = 0;
    for (int i = 0; i < 100; ++i) {
      gpu.poison(stream);
      gpu.run(stream);
      differing += output_bytes(gpu, stream) != first ? 1 : 0;
    }
    failures += differing ? 1 : 0;
    std::printf("  %-36s 100 replays bit-identical: %s\n", label, differing ? "NO" : "yes");

    // Kernels launched before the previous one ends wait for it in-kernel; a missing wait
    // would race. A fresh session's first graph run gives the same bytes with every launch in
    // order (fresh both: delayed scaling's state moves with every run).
    g_early_launches += gpu.early_launch_count();
    if (gpu.early_launch_count() > 0) {
      auto first_run = [&](bool in_order) {
        if (in_order) setenv("TEC_DISABLE_EARLY_LAUNCH", "1", 1);
        std::unique_ptr<runtime::Session> s;
        try {
          s = std::make_unique<runtime::Session>(plan, profile);
        } catch (...) {
          unsetenv("TEC_DISABLE_EARLY_LAUNCH");
          throw;
        }
        unsetenv("TEC_DISABLE_EARLY_LAUNCH");
        if ((s->early_launch_count() == 0) != in_order)
          throw std::runtime_error("TEC_DISABLE_EARLY_LAUNCH=1 did not turn early launch off");
        upload_inputs(*s);
        s->poison(stream);
        s->run(stream);
        return output_bytes(*s, stream);
      };
      const bool same = first_run(false) == first_run(true);
      failures += same ? 0 : 1;
      std::printf("  %-36s %d early launches; outputs as with none: %s\n", label, gpu.early_launch_count(), same ? "yes" : "NO  FAIL");
    }
  }
  CHECK_CUDA(cudaStreamDestroy(stream));
  return failures;
}

}  // namespace

std::vector<uint8_t> tensor_bytes(const runtime::Session& s, const std::vector<std::string>& names, cudaStream_t stream) {
  std::vector<uint8_t> out;
  for (const auto& name : names)
    for (const auto& [role, index] : s.profile().tensors.at(name).buffers) {
      const plan::Buffer& b = s.profile().buffers[static_cast<size_t>(index)];
      const size_t at = out.size();
      out.resize(at + static_cast<size_t>(b.bytes));
      s.download(index, out.data() + at, static_cast<size_t>(b.bytes), stream);
    }
  return out;
}

bool step_outputs_equal(const plan::Profile& profile, const plan::Step& step, const uint8_t* cpu, const uint8_t* gpu) {
  bool same = true;
  for (const auto& op : step.ops)
    for (const auto& name : op.outputs) {
      const plan::Tensor& t = profile.tensors.at(name);
      for (const auto& [role, index] : t.buffers) {
        const plan::Buffer& b = profile.buffers[static_cast<size_t>(index)];
        same &= std::memcmp(cpu + b.offset, gpu + b.offset, static_cast<size_t>(b.bytes)) == 0;
      }
      if (t.state.count("amax_history")) {  // the amax the step staged for the delayed update
        const plan::Buffer& h = profile.buffers[static_cast<size_t>(t.state.at("amax_history"))];
        same &= std::memcmp(cpu + h.offset, gpu + h.offset, 4) == 0;
      }
    }
  return same;
}

int plans_test(const std::string& arch) {
  int failures = 0;
  const std::vector<RecipeKind> recipes = {RecipeKind::bf16, RecipeKind::fp8_current, RecipeKind::fp8_delayed,
                                           RecipeKind::fp8_block, RecipeKind::mxfp8, RecipeKind::nvfp4};
  std::vector<Case> cases;
  for (RecipeKind r : recipes) cases.push_back({"mlp_tiny.json", r, {32, 128}});
  for (RecipeKind r : recipes) cases.push_back({"swiglu_mlp.json", r, {32, 128}});
  // 5 tokens: tec's small-M GEMM with a partial 8-token tile (its rows past M read as zero).
  // Alone in their plans, those profiles leave the weights to the small-M GEMM, which then
  // reads them tiled; with T=32 next to T=128 (cuBLASLt) above, it reads them row-major.
  for (RecipeKind r : {RecipeKind::fp8_current, RecipeKind::fp8_delayed}) cases.push_back({"mlp_tiny.json", r, {5}, "small_m_tiles"});
  // The general ops (l2norm, dropout, transpose, unary, binary with broadcasting, reduce_mean,
  // cast, fp16 tensors) as row kernels: what ONNX models of unusual spelling become.
  for (RecipeKind r : {RecipeKind::bf16, RecipeKind::fp8_current, RecipeKind::fp8_delayed})
    cases.push_back({"tests/gpu/general_ops.json", r, {32, 96}});
  // The general path's kernels (kernels/general.cu): batched matmul, softmax on a middle axis,
  // compare and where, reductions over other axes than the last, slices (a negative step),
  // concat, expand; each kernel step bit for bit as the CPU reference.
  for (RecipeKind r : {RecipeKind::bf16, RecipeKind::fp8_current})
    cases.push_back({"tests/gpu/general_any_shape.json", r, {32, 96}});
  // SiLU and SwiGLU over [-100, 100]: the fast path's recomputed elements (kernels/row.cu) in
  // every output it takes (bf16, both FP8 passes, delayed scaling's cast, NVFP4's amax pass).
  for (RecipeKind r : {RecipeKind::bf16, RecipeKind::fp8_current, RecipeKind::fp8_delayed, RecipeKind::nvfp4})
    cases.push_back({"tests/gpu/silu_fast_path.json", r, {32, 1024}});
  if (!std::getenv("TEC_GPU_TEST_SMALL")) {
    for (RecipeKind r : recipes) cases.push_back({"mlp.json", r, {16, 2048}});
    cases.push_back({"mlp.json", RecipeKind::fp8_current, {16}, "small_m_tiles"});
    // The mid-M GEMM (Hopper only): one consumer warpgroup at 64 tokens, two at 100 (the last
    // 28 rows of the second not stored) and 128.
    if (arch == "sm_90") cases.push_back({"mlp.json", RecipeKind::fp8_current, {64, 100, 128}, "mid_m_tiles"});
  }
  std::printf("plans on the GPU (every example, every recipe):\n");
  for (const Case& c : cases) {
    try {
      failures += run_case(c, arch);
    } catch (const std::exception& e) {
      std::printf("  FAIL %s %s: %s\n", c.model.c_str(), std::string(to_string(c.recipe)).c_str(), e.what());
      ++failures;
    }
  }
  if (std::stoi(arch.substr(3)) >= 90 && g_early_launches == 0) {  // Hopper on: the layernorm's passes at least
    std::printf("  FAIL no launch started early on %s\n", arch.c_str());
    ++failures;
  }
  return failures;
}

int session_leak_test() {
  CompileOptions options;
  options.model_path = std::string(TEC_SOURCE_DIR) + "/examples/mlp_tiny.json";
  options.frontend.recipe = RecipeKind::fp8_delayed;
  const CompileResult compiled = compile(options);
  auto plan = std::make_shared<const plan::Plan>(
      plan::Plan::load(plan::serialize_plan(compiled.plan->manifest, compiled.plan->blobs), "mlp_tiny"));
  { runtime::Session warm(plan, plan->profiles[0]); }  // cuBLASLt and module state that lives for the process
  size_t free_before = 0, free_after = 0, total = 0;
  CHECK_CUDA(cudaDeviceSynchronize());
  CHECK_CUDA(cudaMemGetInfo(&free_before, &total));
  for (int i = 0; i < 100; ++i) {
    runtime::Session s(plan, plan->profiles[static_cast<size_t>(i) % plan->profiles.size()]);
    s.run(nullptr);
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  CHECK_CUDA(cudaMemGetInfo(&free_after, &total));
  const bool ok = free_before == free_after;
  std::printf("100 sessions created and destroyed: device free memory %zu -> %zu bytes%s\n", free_before, free_after,
              ok ? "" : "  FAIL (leak)");
  return ok ? 0 : 1;
}

}  // namespace tec::gpu_test

namespace tec::gpu_test {

// --tune's record: a tuned algorithm is used on the GPU and cuBLASLt it was tuned on, and
// anywhere else the session warns once and asks the heuristic; both give correct outputs.
int tuning_test() {
  CompileOptions options;
  options.model_path = std::string(TEC_SOURCE_DIR) + "/examples/mlp_tiny.json";
  options.frontend.recipe = RecipeKind::fp8_delayed;
  options.frontend.dim_overrides["T"] = {128};  // at T <= 32 the GEMMs are tec's kernel, not cuBLASLt's
  CompileResult compiled = compile(options);
  auto plan = std::make_shared<const plan::Plan>(
      plan::Plan::load(plan::serialize_plan(compiled.plan->manifest, compiled.plan->blobs), "mlp_tiny"));
  runtime::Session tuner(plan, plan->profiles[0]);
  const auto tuned = tuner.tune_gemms(8, 10);
  int failures = tuned.size() == 2 ? 0 : 1;
  auto with_gpu = [&](const std::string& gpu) {
    nlohmann::json manifest = compiled.plan->manifest;
    for (const auto& t : tuned) {
      std::string hex;
      for (uint8_t b : t.algo) {
        char two[3];
        std::snprintf(two, sizeof two, "%02x", b);
        hex += two;
      }
      manifest["profiles"][0]["gpu"]["launches"][static_cast<size_t>(t.launch)]["gemm"]["algo"] = {
          {"tuned", hex}, {"cublaslt", runtime::cublaslt_version()}, {"gpu", gpu}};
    }
    return std::make_shared<const plan::Plan>(plan::Plan::load(plan::serialize_plan(manifest, compiled.plan->blobs), "tuned"));
  };
  for (const std::string& gpu : {tuner.device_name(), std::string("Some Other GPU")}) {
    auto p = with_gpu(gpu);
    runtime::Session s(p, p->profiles[0]);
    const bool expect_warning = gpu != tuner.device_name();
    const bool warned = !s.tuning_warning().empty();
    reference::Session inputs(*p, p->profiles[0]);
    inputs.randomize_inputs(3);
    for (size_t i = 0; i < p->profiles[0].buffers.size(); ++i)
      if (p->profiles[0].buffers[i].region == "input")
        s.upload(static_cast<int>(i), inputs.arena().data() + p->profiles[0].buffers[i].offset,
                 static_cast<size_t>(p->profiles[0].buffers[i].bytes), nullptr);
    s.poison(nullptr);
    s.run(nullptr);
    CHECK_CUDA(cudaDeviceSynchronize());
    reference::Session view(*p, p->profiles[0]);
    view.set_arena(s.download_arena(nullptr));
    inputs.run();
    const HostTensor got = view.read("y"), want = inputs.read("y");
    double num = 0, den = 0;
    for (size_t i = 0; i < want.values.size(); ++i) {
      num += std::pow(double(got.values[i]) - want.values[i], 2);
      den += double(want.values[i]) * want.values[i];
    }
    const double rel = std::sqrt(num / den);
    const bool ok = warned == expect_warning && rel < 0.05;
    failures += ok ? 0 : 1;
    std::printf("tuned plan, recorded GPU '%s': %s, |y-ref|/|ref| = %.2e%s\n", gpu.c_str(),
                warned ? ("warned: " + s.tuning_warning()).c_str() : "tuned algorithms used", rel, ok ? "" : "  FAIL");
  }
  return failures;
}

}  // namespace tec::gpu_test
