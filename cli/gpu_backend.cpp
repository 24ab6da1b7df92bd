#include "gpu_backend.h"
#include "gpu_common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/npy.h"
#include "plan/file.h"
#include "reference/executor.h"
#include "runtime/session.h"

namespace tec::cli {

namespace {

using json = nlohmann::json;

// Per-launch timing with events around each replay (graph) or each full eager sequence;
// run i uses sessions[i % size], so with several sessions no run reads the inputs that the
// run before it left in L2.
std::vector<double> time_runs(const std::vector<runtime::Session*>& sessions, cudaStream_t stream, int warmup, int iterations,
                              bool graph) {
  cudaEvent_t start, stop;
  TEC_CLI_CUDA(cudaEventCreate(&start));
  TEC_CLI_CUDA(cudaEventCreate(&stop));
  auto once = [&](int i) {
    runtime::Session& session = *sessions[static_cast<size_t>(i) % sessions.size()];
    graph ? session.run(stream) : session.run_eager(stream);
  };
  for (int i = 0; i < warmup; ++i) once(i);
  std::vector<double> us;
  for (int i = 0; i < iterations; ++i) {
    TEC_CLI_CUDA(cudaEventRecord(start, stream));
    once(i);
    TEC_CLI_CUDA(cudaEventRecord(stop, stream));
    TEC_CLI_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    TEC_CLI_CUDA(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(ms * 1000.0);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return us;
}

// Kernel steps are tec's row and general kernels, the reference's float operations, bit for
// bit; a step with a library's launch (cuDNN's attention, a cuBLASLt GEMM: sums in their own
// order) is held to the bound instead.
bool runs_library_kernel(const plan::Profile& profile, size_t step) {
  return std::any_of(profile.launches.begin(), profile.launches.end(), [&](const plan::Launch& l) {
    return l.step == static_cast<int>(step) && (l.kind == "attention" || l.kind == "gemm");
  });
}

bool is_weight_gradient(const std::string& name) { return name.ends_with(".main_grad") || name.ends_with(".grad"); }

// A weight gradient that is 0 in exact math (a key projection's bias: softmax does not see a
// shift shared by all keys) is rounding noise on both sides, and its relative error means
// nothing: one a tenth of the step's median gradient or less is held to the bound times that
// median instead. The median of the weight gradients' rms among `compared`.
double median_gradient_size(const std::vector<std::string>& compared, const std::vector<Compare>& compares) {
  std::vector<double> sizes;
  for (size_t i = 0; i < compared.size(); ++i)
    if (is_weight_gradient(compared[i])) sizes.push_back(compares[i].want_rms);
  std::sort(sizes.begin(), sizes.end());
  return sizes.empty() ? 0.0 : sizes[sizes.size() / 2];
}
// Prints and records one verified run's comparisons (`compared` and `compares` in step);
// whether every one is within its bound.
bool judge_run(int run, const std::vector<std::string>& compared, const std::vector<Compare>& compares, const plan::Profile& profile,
               const std::string& recipe, double bound, json& outputs) {
  const double gradient_scale = median_gradient_size(compared, compares);
  bool all = true;
  for (size_t i = 0; i < compared.size(); ++i) {
    const std::string& name = compared[i];
    const Compare& c = compares[i];
    const double limit = profile.tensors.at(name).kind == "state" ? train_state_bound(recipe, profile) : bound;
    const bool zero = is_weight_gradient(name) && c.want_rms < 0.1 * gradient_scale;
    const bool ok = c.finite && (c.rel <= limit || (zero && c.error_rms <= limit * gradient_scale));
    all &= ok;
    std::printf("  %-4d %-28s %14.3e %14.3e  %s (bound %.2g%s)\n", run, name.c_str(), c.rel, c.max_abs, ok ? "ok" : "FAIL", limit,
                zero ? ", a gradient near 0: rms error against the gradients' median rms" : "");
    outputs.push_back({{"run", run},     {"name", name}, {"rel_error", c.rel}, {"max_abs_error", c.max_abs},
                       {"bound", limit}, {"ok", ok},     {"zero_gradient", zero}});
  }
  return all;
}

}  // namespace

int run_gpu(std::shared_ptr<const plan::Plan> plan, const GpuRunOptions& o) {
  const plan::Profile& profile =
      plan->profile(o.dims.empty() && plan->profiles.size() > 1 ? plan->profiles[0].dims : o.dims);
  runtime::require_device();
  cudaStream_t stream;
  TEC_CLI_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  runtime::Session session(plan, profile);
  std::printf("te-run: GPU (%s), plan %s, recipe %s, profile %s, %d launches in one CUDA graph (%d start before the previous "
              "kernel ends)\n",
              session.device_name().c_str(), plan->name.c_str(), plan->recipe.c_str(), profile_name(profile.dims).c_str(),
              session.launch_count(), session.early_launch_count());

  // Inputs come from the reference session, so that both backends read the same bytes.
  reference::Session ref(*plan, profile);
  ref.randomize_inputs(o.seed);
  for (const auto& [name, values] : o.inputs) ref.set_input(name, values);
  auto upload_inputs = [&](runtime::Session& to) {
    for (size_t i = 0; i < profile.buffers.size(); ++i) {
      const plan::Buffer& b = profile.buffers[i];
      if (b.region == "input")
        to.upload(static_cast<int>(i), ref.arena().data() + b.offset, static_cast<size_t>(b.bytes), stream);
    }
  };
  upload_inputs(session);
  for (const auto& [name, value] : o.scalars) {  // te-run checked the names
    session.set_scalar(name, value, stream);
    ref.set_scalar(name, value);
  }
  const std::vector<uint8_t> initial_arena = session.download_arena(stream);  // inputs set, state fresh
  json report{{"plan", plan->name},
              {"recipe", plan->recipe},
              {"profile", profile.dims},
              {"device", session.device_name()},
              {"launches", session.launch_count()},
              {"early_launches", session.early_launch_count()},
              {"arena_bytes", session.arena_bytes()},
              {"constant_bytes", session.constant_bytes()}};
  int exit_code = 0;

  // A train plan is verified over several steps, its state (masters, main_grad, moments)
  // carrying over on both sides; an inference plan over one run.
  const int verify_runs = profile.train ? o.verify_steps : 1;
  if (o.verify_cpu) {
    // 1. The whole graph from fresh state, against the reference running on its own.
    const double bound = output_bound(plan->recipe, profile);
    std::printf("\nverify against the CPU reference (same inputs, seed %llu%s):\n", static_cast<unsigned long long>(o.seed),
                verify_runs > 1 ? (", " + std::to_string(verify_runs) + " training steps, state carried over").c_str() : "");
    std::printf("  %-4s %-28s %14s %14s  %s\n", "run", "tensor", "|out-ref|/|ref|", "max |out-ref|", "verdict");
    json outputs = json::array();
    std::vector<std::string> compared = profile.outputs;
    for (const auto& [name, t] : profile.tensors)  // a step's lasting results: masters, main_grad, moments
      if (t.kind == "state" && t.proto.shape.numel() > 1) compared.push_back(name);
    for (int run = 0; run < verify_runs; ++run) {
      session.poison(stream);
      session.run(stream);
      TEC_CLI_CUDA(cudaStreamSynchronize(stream));
      reference::Session gpu_view(*plan, profile);
      gpu_view.set_arena(session.download_arena(stream));
      ref.run();
      std::vector<Compare> compares;
      for (const auto& name : compared) compares.push_back(compare(gpu_view.read(name), ref.read(name)));
      if (!judge_run(run, compared, compares, profile, plan->recipe, bound, outputs)) exit_code = 1;
    }
    // Replays: the outputs byte for byte the same each time from the same state, poisoned
    // before each (inference plans; a train plan's masters move on with every run).
    int replays = 0;
    bool identical = true;
    if (!profile.train) {
      std::vector<uint8_t> state;
      state_bytes(profile, session, state, false, stream);
      session.poison(stream);
      session.run(stream);
      const std::vector<uint8_t> want = output_bytes(profile, session, stream);
      for (replays = 0; replays < 100; ++replays) {
        state_bytes(profile, session, state, true, stream);
        session.poison(stream);
        session.run(stream);
        identical = identical && output_bytes(profile, session, stream) == want;
      }
      if (!identical) exit_code = 1;
      std::printf("  %d replays, outputs poisoned before each: %s\n", replays, identical ? "bit-identical" : "DIFFER (FAIL)");
    }
    // 2. Step by step: each step run on the CPU from the GPU's arena before it, and its
    // outputs compared byte for byte (kernel steps must match bit for bit).
    for (size_t i = 0; i < profile.buffers.size(); ++i) {  // fresh state and the same inputs again
      const plan::Buffer& b = profile.buffers[i];
      if (b.region != "constants" && b.bytes > 0)
        session.upload(static_cast<int>(i), initial_arena.data() + b.offset, static_cast<size_t>(b.bytes), stream);
    }
    session.remake_weight_workspace(stream);  // the restored workspace holds no copies yet, whatever first_microbatch says
    json steps = json::array();
    for (int run = 0; run < verify_runs; ++run) {
      session.poison(stream);
      std::vector<uint8_t> before = session.download_arena(stream);
      std::vector<std::vector<uint8_t>> before_step(profile.steps.size()), after_step(profile.steps.size());
      session.run_eager(stream, [&](int step) {
        TEC_CLI_CUDA(cudaStreamSynchronize(stream));
        std::vector<uint8_t> now = session.download_arena(stream);
        if (step >= 0) {
          before_step[static_cast<size_t>(step)] = before;
          after_step[static_cast<size_t>(step)] = now;
        }
        before = std::move(now);
      });
      if (verify_runs > 1) std::printf("\n  training step %d of %d, each step from the GPU's arena before it:", run + 1, verify_runs);
      std::printf("\n  %-4s %-26s %-7s %-16s %s\n", "step", "name", "kind", "tensor", "result");
      for (size_t s = 0; s < profile.steps.size(); ++s) {
        const plan::Step& step = profile.steps[s];
        if (before_step[s].empty()) continue;  // not in this run (a skipped weight workspace)
        const bool library_kernel = runs_library_kernel(profile, s);
        reference::Session cpu(*plan, profile);
        cpu.set_arena(before_step[s]);
        cpu.run_step(s);
        reference::Session gpu(*plan, profile);
        gpu.set_arena(after_step[s]);
        for (const auto& op : step.ops)
          for (const auto& name : op.outputs) {
            const plan::Tensor& t = profile.tensors.at(name);
            if (t.buffers.empty()) continue;
            int64_t differing = 0, total = 0;
            auto count = [&](int index, int64_t limit) {
              const plan::Buffer& b = profile.buffers[static_cast<size_t>(index)];
              const int64_t n = std::min(b.bytes, limit);
              for (int64_t k = 0; k < n; ++k)
                differing += cpu.arena()[static_cast<size_t>(b.offset + k)] != after_step[s][static_cast<size_t>(b.offset + k)];
              total += n;
            };
            for (const auto& [role, index] : t.buffers) count(index, INT64_MAX);
            if (t.state.count("amax_history")) count(t.state.at("amax_history"), 4);  // the staged amax
            const HostTensor got = gpu.read(name), want = cpu.read(name);
            const Compare c = compare(got, want);
            const bool bitwise = differing == 0;
            const bool must_match = step.kind == "kernel" && !library_kernel;
            const bool ok = must_match ? bitwise : (c.finite && c.rel <= bound);
            if (!ok) exit_code = 1;
            char line[160];
            std::snprintf(line, sizeof line, "%s (%lld of %lld bytes differ, rel %.2e)%s",
                          bitwise ? "bit-identical" : must_match ? "MISMATCH" : ok ? "within bound" : "OUT OF BOUND",
                          static_cast<long long>(differing), static_cast<long long>(total), c.rel, t.proto.quantizer ? ", quantized" : "");
            std::printf("  %-4zu %-26s %-7s %-16s %s\n", s, step.name.c_str(), step.kind.c_str(), name.c_str(), line);
            if (!ok && !got.values.empty()) {  // where to start looking
              std::printf("       worst at element %zu: gpu %.6g, reference %.6g; the first elements (gpu/reference):", c.worst,
                          got.values[c.worst], want.values[c.worst]);
              for (size_t e = 0; e < std::min<size_t>(4, got.values.size()); ++e) std::printf(" %.6g/%.6g", got.values[e], want.values[e]);
              std::printf("\n");
            }
            steps.push_back({{"run", run},
                             {"step", step.name},
                             {"kind", step.kind},
                             {"tensor", name},
                             {"quantized", t.proto.quantizer.has_value()},
                             {"bytes_differing", differing},
                             {"bytes", total},
                             {"bit_identical", bitwise},
                             {"rel_error", c.rel},
                             {"ok", ok}});
          }
      }
    }
    report["verify"] = {{"outputs", outputs}, {"replays", replays}, {"replays_identical", identical}, {"steps", steps}, {"ok", exit_code == 0}};
    std::printf("verify: %s\n", exit_code == 0 ? "PASS" : "FAIL");
    upload_inputs(session);
  }

  // Benchmark: graph replays against eager launches, each run timed with events.
  // From the linear ops rather than the launches: a GEMM may run in cuBLASLt or in tec's own kernel.
  double flops = 0;
  for (const auto& step : profile.steps)
    for (const auto& op : step.ops)
      if (op.op == "linear" && op.inputs.size() >= 2) {
        const Shape& x = profile.tensors.at(op.inputs[0]).proto.shape;
        const Shape& w = profile.tensors.at(op.inputs[1]).proto.shape;
        // A backward op is one GEMM of the forward's size per gradient of x and W it makes.
        const auto gemms = op.backward ? std::count_if(op.gradient_slots.begin(), op.gradient_slots.end(), [](int s) { return s < 2; }) : 1;
        flops += 2.0 * static_cast<double>(gemms) * static_cast<double>(x.rows()) * static_cast<double>(x.cols()) * static_cast<double>(w[0]);
      } else if (op.op == "grouped_linear" && op.inputs.size() >= 3) {
        // Every row goes through one expert's [N, K] weight, whatever the routing.
        const Shape& x = profile.tensors.at(op.inputs[0]).proto.shape;
        const Shape& w = profile.tensors.at(op.inputs[2]).proto.shape;
        flops += 2.0 * static_cast<double>(x.rows()) * static_cast<double>(x.cols()) * static_cast<double>(w[1]);
      }
  double io_bytes = static_cast<double>(session.constant_bytes());
  for (const auto& b : profile.buffers)
    if (b.region == "input" || b.region == "output") io_bytes += static_cast<double>(b.bytes);
  std::vector<std::unique_ptr<runtime::Session>> rotated;
  std::vector<runtime::Session*> timed{&session};
  for (int r = 1; r < o.rotate; ++r) {
    rotated.push_back(std::make_unique<runtime::Session>(plan, profile));
    if (o.rotate_seeds) {
      reference::Session other(*plan, profile);
      other.randomize_inputs(o.seed + static_cast<uint64_t>(r));
      for (const auto& [name, values] : o.inputs) other.set_input(name, values);
      for (size_t i = 0; i < profile.buffers.size(); ++i)
        if (profile.buffers[i].region == "input")
          rotated.back()->upload(static_cast<int>(i), other.arena().data() + profile.buffers[i].offset,
                                 static_cast<size_t>(profile.buffers[i].bytes), stream);
    } else {
      upload_inputs(*rotated.back());
    }
    timed.push_back(rotated.back().get());
  }
  const Stats eager = stats_of(time_runs(timed, stream, o.warmup, o.iterations, false));
  Stats graph;
  if (!o.no_graph) graph = stats_of(time_runs(timed, stream, o.warmup, o.iterations, true));
  // Timed runs read no results, so hostile run-time data (an index out of range) is reported here.
  for (const runtime::Session* s : timed) s->check_status(stream);
  const Stats& best = o.no_graph ? eager : graph;
  std::printf("\nlatency over %d runs after %d warm-up (us)%s:\n", o.iterations, o.warmup,
              o.rotate > 1 ? (", " + std::to_string(o.rotate) + " sessions in turn").c_str() : "");
  std::printf("  %-8s %10s %10s %10s %10s %10s\n", "", "p50", "p90", "p99", "mean", "min");
  if (!o.no_graph)
    std::printf("  %-8s %10.1f %10.1f %10.1f %10.1f %10.1f\n", "graph", graph.p50, graph.p90, graph.p99, graph.mean, graph.min);
  std::printf("  %-8s %10.1f %10.1f %10.1f %10.1f %10.1f\n", "eager", eager.p50, eager.p90, eager.p99, eager.mean, eager.min);
  const double tflops = flops / (best.p50 * 1e-6) / 1e12;
  const double gbps = io_bytes / (best.p50 * 1e-6) / 1e9;
  std::printf("throughput at p50: %.1f TFLOP/s (%.3g GFLOP), %.0f GB/s of weights + I/O (%.3g MB)%s\n", tflops, flops / 1e9,
              gbps, io_bytes / 1e6, o.no_graph ? "" : "");
  if (!o.no_graph) std::printf("graph vs eager at p50: %.2fx\n", eager.p50 / graph.p50);
  std::map<std::string, double> region_mib;
  for (const auto& b : profile.buffers) region_mib[b.region] += static_cast<double>(b.bytes) / 1048576.0;
  std::printf("memory: arena %.2f MiB per session, constants %.2f MiB shared per device\n",
              static_cast<double>(session.arena_bytes()) / 1048576.0, static_cast<double>(session.constant_bytes()) / 1048576.0);
  if (profile.train)
    std::printf("  train plan: state %.2f MiB (masters, main_grad, moments), weight workspace %.2f MiB; saved tensors: te-compile's "
                "summary\n",
                region_mib["state"], region_mib["workspace"]);
  report["region_mib"] = region_mib;
  report["iterations"] = o.iterations;
  report["warmup"] = o.warmup;
  report["rotate"] = o.rotate;
  report["rotate_seeds"] = o.rotate_seeds;
  report["eager"] = stats_json(eager);
  if (!o.no_graph) report["graph"] = stats_json(graph);
  report["flops"] = flops;
  report["tflops"] = tflops;
  report["io_bytes"] = io_bytes;
  report["gbps"] = gbps;

  if (o.profile || !o.trace_path.empty()) {
    // Per step, eager, with an event after each step; the median over the iterations.
    std::vector<StepTimes> runs;
    for (int it = 0; it < std::max(1, o.iterations); ++it) runs.push_back(time_steps_eager(session, stream));
    report_step_times(profile, runs, o.profile, "per step (eager, median us)", o.trace_path, report);
  }

  if (!o.save_dir.empty()) {
    session.poison(stream);
    session.run(stream);
    TEC_CLI_CUDA(cudaStreamSynchronize(stream));
    reference::Session view(*plan, profile);
    view.set_arena(session.download_arena(stream));
    std::vector<NamedTensor> outputs;
    for (const auto& name : profile.outputs) outputs.emplace_back(name, view.read(name));
    save_outputs(o.save_dir, outputs);
  }
  if (!o.json_path.empty()) {
    const std::string text = report.dump(2) + "\n";
    tec::write_text_file(o.json_path, text);
    std::printf("wrote %s\n", o.json_path.c_str());
  }
  cudaStreamDestroy(stream);
  return exit_code;
}

}  // namespace tec::cli
