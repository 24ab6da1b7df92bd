// te-run: loads a plan and runs it on the CPU reference executor, or inspects it. Thin:
// parsing, then calls into tec_plan and tec_reference (ARCHITECTURE.md §9).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/file_io.h"
#include "core/file_io.h"
#include "ir/runtime_scalars.h"
#include "plan/dot.h"
#include "plan/file.h"
#include "plan/plan.h"
#include "reference/executor.h"
#include "cli_common.h"
#include "gpu_backend.h"
#include "run_io.h"
#include "tec/version.h"

namespace {

using tec::ErrorKind;

const char* kFooter = R"(
Examples:
  te-run mlp.teplan --verify-cpu                          # GPU vs the CPU reference, step by step, then a benchmark
  te-run mlp.teplan --iterations 500 --json report.json   # latency p50/p90/p99, TFLOP/s, graph vs eager
  te-run mlp.teplan --profile --trace trace.json          # per-step times; a Chrome trace for Perfetto
  te-run mlp.teplan --backend cpu --save-outputs out/     # run on the CPU reference, save y.npy
  te-run mlp.teplan --backend cpu --input x=x.npy --shape T=128
  te-run mlp_tp2.teplan --backend cpu --input x=x.npy     # every rank of a te-compile --tp 2 plan, whole x in
  te-run mlp_tp2.teplan --tp 2 --verify-cpu               # one rank per GPU over NCCL, checked against the
                                                          # CPU reference running both ranks
  te-run train.teplan --backend cpu --iterations 3 --input dy=dy.npy  # three training steps (te-compile --mode train)
  te-run train.teplan --verify-cpu --verify-steps 5       # five training steps on the GPU, each kernel step
                                                          # checked bit for bit, state carried over
  te-run mlp.teplan --inspect                             # buffers, steps, launches, GEMMs and fusions
  TEC_DISABLE_EARLY_LAUNCH=1 te-run mlp.teplan            # every kernel launched after the previous one
                                                          # ends (default on Hopper: early launch, docs/cli.md)

Libraries loaded only by plans that need them:
  NCCL (tensor-parallel plans)  $TEC_NCCL_LIBRARY, else libnccl.so.2 by the loader's search
  cuDNN 9 (attention)           $TEC_CUDNN_LIBRARY, else libcudnn.so.9 (e.g. PyTorch's nvidia-cudnn-cu13
                                wheel: its lib/ on LD_LIBRARY_PATH, or TEC_CUDNN_LIBRARY=.../libcudnn.so.9);
                                TEC_CUDNN_AUTOTUNE=1 times cuDNN's candidate plans at session creation

Exit codes:
  0 success            1 --verify-cpu found a mismatch     2 usage error      3 invalid plan or input
  4 unsupported (e.g. a plan with no GPU code)             6 I/O error
  7 device error (no CUDA device, out of device or host memory, a failed CUDA, cuBLASLt, NCCL or cuDNN call, a missing library)
  8 device lost (a kernel faulted, e.g. an illegal address: the GPU is unusable until restart)
  70 internal error)";

std::string profile_name(const std::map<std::string, int64_t>& dims) {
  std::string out;
  for (const auto& [dim, size] : dims) out += (out.empty() ? "" : " ") + dim + "=" + std::to_string(size);
  return out.empty() ? "(no dims)" : out;
}

void print_stats(const std::string& name, const tec::HostTensor& t) {
  double sum = 0, sum_sq = 0;
  float lo = INFINITY, hi = -INFINITY;
  int64_t nan = 0;
  for (float v : t.values) {
    if (std::isnan(v)) {
      ++nan;
      continue;
    }
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(t.values.size() - static_cast<size_t>(nan));
  const double mean = n > 0 ? sum / n : 0;
  std::printf("  %-12s %-16s min %10.4g  max %10.4g  mean %10.4g  std %10.4g  nan %lld\n", name.c_str(), t.shape.str().c_str(),
              lo, hi, mean, n > 0 ? std::sqrt(std::max(0.0, sum_sq / n - mean * mean)) : 0.0, static_cast<long long>(nan));
}

// A split GEMM's rows: ", x rows +R, D rows +R" (R: a fixed row or "the rank's block").
std::string row_block(const tec::plan::Gemm& g) {
  auto rows = [](const tec::plan::RowOffset& o) {
    if (o.per_rank == 0) return "+" + std::to_string(o.fixed);
    return std::string(o.shift == 0 ? "this rank's" : "rank (r+" + std::to_string(o.shift) + ")'s") + " block of " +
           std::to_string(o.per_rank);
  };
  std::string out;
  if (g.x_rows.fixed || g.x_rows.per_rank) out += ", x rows " + rows(g.x_rows);
  if (g.d_rows.fixed || g.d_rows.per_rank) out += ", D rows " + rows(g.d_rows);
  return out;
}

void inspect(const tec::plan::Plan& plan) {
  std::printf("plan %s: recipe %s, mode %s, target sm_%d, arena %lld B, constants %zu B%s, %zu profile(s)\n", plan.name.c_str(),
              plan.recipe.c_str(), plan.mode.c_str(), plan.target.sm, static_cast<long long>(plan.arena_bytes), plan.constants.size(),
              plan.tp_size > 1 ? (" per rank, tensor parallel over " + std::to_string(plan.tp_size) + " ranks").c_str() : "",
              plan.profiles.size());
  const auto& build = plan.manifest.at("build");
  std::printf("built by %s, model checksum %s, options %s\n", build.value("tool", "?").c_str(),
              build.value("model_checksum", "?").c_str(), build.at("options").dump().c_str());
  for (const auto& p : plan.profiles) {
    std::printf("\nprofile %s: arena %lld B (scratch peak %lld B, %lld B if nothing shared)\n", profile_name(p.dims).c_str(),
                static_cast<long long>(p.arena_bytes), static_cast<long long>(p.scratch_peak_bytes),
                static_cast<long long>(p.scratch_naive_bytes));
    std::printf("\n  %-40s %-10s %12s %10s  %-10s %-16s %s\n", "buffer", "region", "offset", "bytes", "dtype", "shape", "lifetime");
    for (const auto& b : p.buffers)
      std::printf("  %-40s %-10s %12lld %10lld  %-10s %-16s [%d, %d]%s\n", b.name.c_str(), b.region.c_str(),
                  static_cast<long long>(b.offset), static_cast<long long>(b.bytes), std::string(tec::to_string(b.dtype)).c_str(),
                  b.shape.str().c_str(), b.first_step, b.last_step,
                  b.device_layout.empty() ? "" : ("  device layout " + b.device_layout).c_str());
    if (!p.tp_layouts.empty()) {
      std::printf("\n  over the ranks:");
      for (const auto& [name, layout] : p.tp_layouts) std::printf(" %s %s;", name.c_str(), std::string(tec::to_string(layout)).c_str());
      std::printf(" (sequence: split along dim 0; feature: along the last dim)\n");
    }
    std::printf("\n  %-4s %-10s %-24s %-28s %s\n", "step", "kind", "name", "ops", "deps");
    for (size_t i = 0; i < p.steps.size(); ++i) {
      const auto& s = p.steps[i];
      std::string ops, deps;
      for (const auto& op : s.ops) ops += (ops.empty() ? "" : "+") + op.op;
      for (int d : s.deps) deps += (deps.empty() ? "" : ",") + std::to_string(d);
      std::printf("  %-4zu %-10s %-24s %-28s %s\n", i, s.kind.c_str(), s.name.c_str(), ops.c_str(), deps.c_str());
    }
    std::printf("\n  GEMMs (y[M,N] = x[M,K] w[N,K]^T):\n");
    for (const auto& s : p.steps)
      for (const auto& op : s.ops) {
        if (op.op != "linear") continue;
        const auto& x = p.tensors.at(op.inputs[0]).proto;
        const auto& w = p.tensors.at(op.inputs[1]).proto;
        std::printf("  %-12s M=%-7lld N=%-7lld K=%-7lld x %s, w %s\n", op.node.c_str(), static_cast<long long>(x.shape.rows()),
                    static_cast<long long>(w.shape[0]), static_cast<long long>(x.shape.cols()),
                    x.quantizer ? x.quantizer->str().c_str() : std::string(tec::to_string(x.dtype)).c_str(),
                    w.quantizer ? w.quantizer->str().c_str() : std::string(tec::to_string(w.dtype)).c_str());
      }
    if (!p.gpu_supported) {
      std::printf("\n  GPU: no GPU code: %s\n", p.gpu_reason.c_str());
    } else {
      std::printf("\n  GPU launches (one CUDA graph):\n");
      for (const auto& l : p.launches) {
        const std::string step = l.step < 0 ? "(run)" : p.steps[static_cast<size_t>(l.step)].name;
        if (l.kind == "gemm")
          std::printf("  %-24s gemm    m=%lld n=%lld k=%lld%s A %s/%s B %s/%s -> %s, epilogue %s%s%s, algo %s%s\n", step.c_str(),
                      static_cast<long long>(l.gemm.m), static_cast<long long>(l.gemm.n), static_cast<long long>(l.gemm.k),
                      l.gemm.batch > 1 ? (" x " + std::to_string(l.gemm.batch) + " batched").c_str() : "",
                      std::string(tec::to_string(l.gemm.a.type)).c_str(), l.gemm.a.scale_mode.c_str(),
                      std::string(tec::to_string(l.gemm.b.type)).c_str(), l.gemm.b.scale_mode.c_str(),
                      std::string(tec::to_string(l.gemm.d_type)).c_str(), l.gemm.epilogue.c_str(), l.gemm.c >= 0 ? ", C" : "",
                      l.gemm.fast_accum ? ", fast accumulation" : "", l.gemm.algo_source.c_str(), row_block(l.gemm).c_str());
        else if (l.kind == "memset")
          std::printf("  %-24s memset  %s\n", step.c_str(), p.buffers[static_cast<size_t>(l.buffer)].name.c_str());
        else if (l.kind == "collective")
          std::printf("  %-24s nccl    %s%s%s %lld %s per rank: %s%s -> %s%s\n", step.c_str(), l.stream ? "[side stream] " : "",
                      l.collective.op.c_str(), l.collective.op == "copy" || l.collective.op == "all_gather" || l.collective.op == "ring_exchange" ? "" : (" (" + l.collective.reduce + ")").c_str(),
                      static_cast<long long>(l.collective.count), std::string(tec::to_string(l.collective.dtype)).c_str(),
                      p.buffers[static_cast<size_t>(l.collective.send)].name.c_str(),
                      l.collective.send_offset ? (" + " + std::to_string(l.collective.send_offset)).c_str() : "",
                      (p.buffers[static_cast<size_t>(l.collective.recv)].name +
                       (l.collective.recv_offset ? " + " + std::to_string(l.collective.recv_offset) : ""))
                          .c_str(),
                      l.collective.op == "reduce"          ? (" on rank " + std::to_string(l.collective.root)).c_str()
                      : l.collective.op == "ring_exchange" ? " (to the next rank, from the previous)"
                                                           : "");
        else if (l.kind == "attention") {
          const tec::plan::Attention& a = l.attention;
          std::printf("  %-24s cudnn   SDPA%s %s B=%lld S=%lld S_kv=%lld heads %lld/%lld dims %lld/%lld %s%s scale %.4g%s%s%s\n", step.c_str(), a.backward ? " backward" : "",
                      std::string(tec::to_string(a.dtype)).c_str(), static_cast<long long>(a.batch), static_cast<long long>(a.seq_q),
                      static_cast<long long>(a.seq_kv), static_cast<long long>(a.heads), static_cast<long long>(a.kv_heads),
                      static_cast<long long>(a.head_dim), static_cast<long long>(a.v_head_dim), a.sbhd ? "sbhd" : "bshd",
                      a.causal ? " causal" : "", a.scale, a.seq_lens >= 0 ? ", padding mask" : "", a.bias >= 0 ? ", additive mask" : "",
                      a.backward ? ", from the saved o and log-sum-exp" : a.stats >= 0 ? ", log-sum-exp saved" : "");
        } else if (l.kind == "fork" || l.kind == "join")
          std::printf("  %-24s %-7s %s\n", step.c_str(), l.kind.c_str(),
                      l.kind == "fork" ? "the side stream waits for the work so far" : "the run's stream waits for the side stream");
        else
        {
          std::string maps;
          for (const auto& m : l.tensor_maps)
            maps += ", TMA map over '" + p.buffers.at(static_cast<size_t>(m.buffer)).name + "' (" + std::to_string(m.rows) + " x " +
                    std::to_string(m.row_bytes) + " B, boxes of " + std::to_string(m.box_rows) + " rows)";
          std::printf("  %-24s %-7s module %d %s grid %s%lld x %lld threads%s%s%s%s\n", step.c_str(), l.kind == "kernel" ? "kernel" : "state",
                      l.module, l.entry.c_str(), l.persistent ? "at most " : "", static_cast<long long>(l.grid[0]),
                      static_cast<long long>(l.block[0]),
                      l.shared_bytes ? (", " + std::to_string(l.shared_bytes) + " B dynamic shared memory").c_str() : "",
                      l.early_launch ? ", early launch" : "", l.persistent ? ", persistent (as many blocks as the GPU holds)" : "", maps.c_str());
        }
      }
    }
    std::printf("\n  fusions:\n");
    for (const auto& s : p.steps)
      for (const auto& f : s.fusions) std::printf("  %-24s %s\n", s.name.c_str(), f.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"te-run: run a tec plan. The CPU backend runs the reference executor (the oracle of every GPU\n"
               "test); --inspect prints what the plan holds."};
  app.footer(kFooter);
  app.set_version_flag("--version", "te-run " TEC_VERSION_STRING);
  std::string plan_path, backend = "gpu", save_dir, dot, seed_text = "0";
  std::vector<std::string> inputs, shapes;
  int iterations = 0, warmup = 10, rotate = 1;
  bool do_inspect = false, no_graph = false, rotate_seeds = false, verify_cpu = false, profile_steps = false;
  std::string json_path, trace_path;
  app.add_option("PLAN", plan_path, ".teplan file from te-compile")->required();
  app.add_option("--backend", backend, "gpu (default: the plan's CUDA graph) or cpu (the reference executor)")
      ->check(CLI::IsMember({"gpu", "cpu"}));
  app.add_option("--input", inputs,
                 "an input from .npy: NAME=FILE (repeatable); others are seeded random N(0,1). The file's shape must be the "
                 "input's; float16/32/64 files are rounded to the input's dtype, int32 inputs (routing) take int32/int64 files");
  app.add_option("--save-outputs", save_dir,
                 "write every output as DIR/NAME.npy (float32); characters a file name cannot hold (/, a leading '.') are "
                 "written %XX");
  app.add_option("--seed", seed_text, "seed for random inputs, a whole number in [0, 2^63) (default 0)");
  app.add_option("--shape", shapes, "pick the profile: DIM=SIZE (repeatable); needed when the plan has several");
  app.add_option("--iterations", iterations,
                 "runs: timed GPU runs (default 100), or CPU runs (default 1); delayed scaling state carries over")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", warmup, "untimed GPU runs before timing (default 10)")->check(CLI::Range(0, 1000000));
  app.add_option("--rotate", rotate,
                 "GPU: time N sessions in turn (each its own arena and copy of the inputs, constants shared), so "
                 "that no timed run reads inputs left in L2 by the previous one (default 1)")
      ->check(CLI::Range(1, 64));
  app.add_flag("--rotate-seeds", rotate_seeds,
               "GPU, with --rotate N: session i gets random inputs from --seed + i (--input files stay), so that runs in turn "
               "see different data, e.g. a new MoE routing every run");
  app.add_flag("--no-graph", no_graph, "GPU: time eager launches only, no CUDA graph replay");
  app.add_flag("--verify-cpu", verify_cpu,
               "GPU: run the same inputs on the CPU reference; per output |out-ref|/|ref| and max error, per step "
               "whether its outputs match bit for bit (exit 1 on a mismatch)");
  int verify_steps = 3;
  std::vector<std::string> scalars;
  app.add_option("--scalar", scalars,
                 "train plans: set a runtime scalar before the runs, NAME=VALUE (repeatable), e.g. first_microbatch=0 (every run "
                 "after the first reuses the weights' copies) or optimizer.lr=1e-4");
  app.add_option("--verify-steps", verify_steps,
                 "GPU, train plans: training steps --verify-cpu runs on both backends, state carried over (default 3)")
      ->check(CLI::Range(1, 100));
  int tp = 0;
  double collective_timeout = 300;
  app.add_option("--tp", tp,
                 "GPU: run a tensor-parallel plan (te-compile --tp N) with one rank per GPU, N threads in this process; must "
                 "be the plan's N (the default for such a plan)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--collective-timeout", collective_timeout,
                 "GPU, tensor-parallel plans: seconds a rank waits for the others (communicator setup, a run) before it "
                 "aborts with an error instead of hanging (default 300)")
      ->check(CLI::Range(0.1, 86400.0));
  app.add_flag("--profile", profile_steps, "GPU: per-step time table (eager, events after each step)");
  app.add_option("--json", json_path, "GPU: write the report (latency, throughput, verification) as JSON");
  app.add_option("--trace", trace_path, "GPU: write a Chrome trace of the steps (chrome://tracing, Perfetto)");
  app.add_flag("--inspect", do_inspect, "print the plan's buffers, steps, GEMMs and fusions, and exit");
  app.add_option("--dot", dot, "write a Graphviz picture of the steps of the first profile (or --shape's), and exit");
  if (auto code = tec::cli::parse_command_line(app, argc, argv)) return *code;
  tec::remove_temporary_files_on_signals();
  return tec::cli::run_reporting_errors("te-run", [&]() -> int {
    using tec::cli::add_once;
    using tec::cli::split_assignment;
    const auto seed = static_cast<uint64_t>(tec::cli::parse_integer(seed_text, "--seed", 0, INT64_MAX));
    std::map<std::string, int64_t> dims;
    for (const auto& s : shapes) {
      auto [dim, value] = split_assignment(s, "--shape");
      add_once(dims, dim, tec::cli::parse_integer(value, "--shape " + dim, 1, tec::kMaxDim), "--shape");
    }
    std::map<std::string, std::string> input_files;
    for (const auto& in : inputs) {
      auto [name, file] = split_assignment(in, "--input");
      add_once(input_files, name, file, "--input");
    }
    if (!save_dir.empty()) tec::create_output_folder(save_dir, "--save-outputs");  // before a long run, not after
    auto shared_plan = std::make_shared<const tec::plan::Plan>(tec::plan::Plan::load_file(plan_path));
    const tec::plan::Plan& plan = *shared_plan;
    std::map<std::string, float> scalar_values;
    for (const auto& text : scalars) {
      auto [name, value] = split_assignment(text, "--scalar");
      char* end = nullptr;
      const float v = std::strtof(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !std::isfinite(v))
        throw tec::Error(ErrorKind::usage, {}, "--scalar " + text + ": not a finite number");
      const auto& known = plan.profiles.at(0).runtime_scalars;  // every profile of a plan has the same
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        std::string list;
        for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
        throw tec::Error(ErrorKind::usage, {}, "--scalar " + text + ": the plan has no runtime scalar '" + name + "'" +
                                                   (known.empty() ? " (it is no train plan)" : "; it has: " + list));
      }
      if (const auto error = tec::runtime_scalar_error(name, v)) throw tec::Error(ErrorKind::usage, {}, "--scalar " + text + ": " + *error);
      add_once(scalar_values, name, v, "--scalar");
    }
    const std::vector<std::pair<std::string, float>> runtime_scalars(scalar_values.begin(), scalar_values.end());
    if (do_inspect) inspect(plan);
    if (!dot.empty()) {
      const size_t index = dims.empty() ? 0 : static_cast<size_t>(&plan.profile(dims) - plan.profiles.data());
      const std::string text = tec::plan::plan_to_dot(plan.manifest, index);
      tec::write_text_file(dot, text);
      std::fprintf(stderr, "wrote %s\n", dot.c_str());
    }
    if (do_inspect || !dot.empty()) return 0;
    const tec::plan::Profile& profile = plan.profile(dims.empty() && plan.profiles.size() > 1 ? plan.profiles[0].dims : dims);
    const std::vector<tec::cli::NamedTensor> input_values =
        tec::cli::read_inputs(plan, profile, std::vector<std::pair<std::string, std::string>>(input_files.begin(), input_files.end()));
    if (backend == "gpu") {
      tec::cli::GpuRunOptions o;
      o.dims = profile.dims;
      o.inputs = input_values;
      o.seed = seed;
      o.iterations = iterations ? iterations : 100;
      o.warmup = warmup;
      o.rotate = rotate;
      o.rotate_seeds = rotate_seeds;
      o.no_graph = no_graph;
      o.verify_cpu = verify_cpu;
      o.verify_steps = verify_steps;
      o.scalars = runtime_scalars;
      o.profile = profile_steps;
      o.json_path = json_path;
      o.trace_path = trace_path;
      o.save_dir = save_dir;
      o.collective_timeout = collective_timeout;
      if (tp != 0 && tp != plan.tp_size)
        throw tec::Error(ErrorKind::usage, {},
                         "--tp " + std::to_string(tp) + ": the plan is compiled for " + std::to_string(plan.tp_size) +
                             " rank(s); te-compile --tp " + std::to_string(tp) + " makes a plan for " + std::to_string(tp));
      return plan.tp_size > 1 ? tec::cli::run_gpu_tensor_parallel(shared_plan, o) : tec::cli::run_gpu(shared_plan, o);
    }
    if (verify_cpu || profile_steps || no_graph || rotate != 1 || rotate_seeds || !json_path.empty() || !trace_path.empty())
      throw tec::Error(ErrorKind::usage, {}, "--verify-cpu, --profile, --rotate, --rotate-seeds, --no-graph, --json and --trace are GPU options");
    if (iterations == 0) iterations = 1;
    std::printf("te-run: CPU reference executor, plan %s, profile %s%s\n", plan.name.c_str(), profile_name(profile.dims).c_str(),
                dims.empty() && plan.profiles.size() > 1 ? " (the first; pick another with --shape)" : "");
    // Every rank of a tensor-parallel plan, in this process; inputs and outputs are whole
    // tensors (the one-rank plan's), split and joined by the plan's layouts.
    if (plan.tp_size > 1)
      std::printf("tensor parallel: %lld ranks in one process, collectives as sums and copies; inputs and outputs whole\n",
                  static_cast<long long>(plan.tp_size));
    tec::reference::RankGroup group(plan, profile);
    group.randomize_inputs(seed);
    for (const auto& [name, values] : input_values) group.set_input(name, values);
    for (const auto& [name, value] : runtime_scalars)
      for (int64_t r = 0; r < group.size(); ++r) group.rank(r).set_scalar(name, value);
    for (int i = 0; i < iterations; ++i) group.run();
    std::printf("outputs after %d run(s):\n", iterations);
    std::vector<tec::cli::NamedTensor> saved;
    auto report = [&](const std::string& name, const tec::HostTensor& out) {
      print_stats(name, out);
      if (!save_dir.empty()) saved.emplace_back(name, out);
    };
    // Each rank's own tensors (a weight gradient's shard), named <tensor>.rank<r>.
    auto per_rank = [&](const std::string& name, bool save) {
      for (int64_t r = 0; r < group.size(); ++r) {
        const std::string label = group.size() > 1 ? name + ".rank" + std::to_string(r) : name;
        if (save) report(label, group.rank(r).read(name));
        else print_stats(label, group.rank(r).read(name));
      }
    };
    for (const auto& name : profile.outputs) {
      if (plan.tp_size == 1 || profile.tp_layouts.count(name)) report(name, group.read(name));
      else per_rank(name, true);
    }
    if (profile.train) {
      // A training step's state: the gradients it accumulated (or AdamW's step, which clears them).
      std::printf("train plan (optimizer %s, wgrad %s), state after %d step(s):\n", profile.optimizer.c_str(), profile.wgrad.c_str(),
                  iterations);
      for (const auto& [name, t] : profile.tensors)
        if (t.kind == "state" && (name.ends_with(".main_grad") || name == "optimizer.step")) per_rank(name, false);
    }
    if (!save_dir.empty()) tec::cli::save_outputs(save_dir, saved);
    return 0;
  });
}
