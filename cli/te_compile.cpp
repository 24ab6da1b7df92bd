// te-compile: turns an ONNX model or a JSON graph into a plan. Thin: it parses the command line, calls the
// compiler and prints progress, summaries and errors (ARCHITECTURE.md §9).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <set>
#include <nlohmann/json.hpp>

#include "compiler.h"
#include "ir/grouped_tensor.h"
#include "runtime/session.h"
#include "passes/memory_plan.h"
#include "core/file_io.h"
#include "plan/dot.h"
#include "plan/file.h"
#include "plan/format.h"
#include "cli_common.h"
#include "tec/version.h"
#include "passes/passes.h"

namespace {

using tec::ErrorKind;

const char* kFooter = R"(
Examples:
  te-compile examples/mlp_tiny.json -o mlp_tiny.teplan --recipe fp8-delayed   # write a plan
  te-compile examples/onnx/gpt_mlp.onnx -o g.teplan --recipe fp8-current --report r.json  # an ONNX model;
                                                     # r.json says what each ONNX node became, and
                                                     # which op keeps a plan off the GPU, if one does
  te-compile calibrated_qdq.onnx -o q.teplan             # FP8 Q/DQ pairs: recipe fp8-static, the model's scales
  te-compile model.onnx --shape batch=4 --shape seq=128 -o m.teplan  # ONNX symbolic dims by name
  te-compile --onnx-ops                                  # the ONNX ops tec reads, and their limits
  te-compile examples/mlp.json --dump-after meta --mode train   # fake fwd/bwd: saved tensors, aliases
  te-compile examples/mlp_tiny.json --mode train --optimizer adamw --lr 3e-3 -o train.teplan
                                                     # one training step: forward, backward, AdamW
                                                     # (te-run train.teplan runs it on the GPU,
                                                     # --backend cpu on the CPU reference)
  te-compile examples/mlp.json --recipe mxfp8 --shape T=2048     # sizes of every buffer for one shape
  te-compile examples/mlp.json -o mlp.teplan --shape T=16 --tune  # on a GPU: store the fastest GEMM algorithms
  te-compile examples/mlp_tp.json --tp 2 -o mlp_tp2.teplan        # tensor parallel: one plan, every rank's
                                                     # weight shards (te-run --backend cpu runs all ranks)

Plans carry GPU code (NVRTC cubins, one per --arch) and run on any machine with that GPU; no
GPU is needed to compile. Kernels are cached by source, options and NVRTC version; the
pre-quantized constants (16 MiB and up) by weight source (seed, or file path, size and
modification time), layout and te-compile binary (--cache-dir). Entries carry a checksum: a
damaged one is rebuilt. The folder may be deleted at any time.

Exit codes:
  0 success            2 usage error          3 invalid model
  4 unsupported        5 compile failure      6 I/O error (naming the path)
  7 device or memory error (--tune without a GPU; a model whose constants do not fit this machine's memory)
  70 internal error (a tec bug)

Train plans (--mode train) run on the GPU as one CUDA graph and on the CPU reference executor
under every recipe (mxfp8 and nvfp4 through bf16 GEMMs on dequantized copies, so slower than
bf16; shapes the GPU kernels do not take leave a plan without GPU code, and te-run --backend
gpu says why, exit code 4). See docs/training.md and docs/status.md.)";

std::string human_bytes(int64_t bytes) {
  char buf[64];
  if (bytes >= (int64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  else if (bytes >= (int64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  else if (bytes >= 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024);
  else
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  return buf;
}

std::string profile_name(const tec::Graph& g) {
  std::string out;
  for (const auto& [dim, size] : g.dims) out += (out.empty() ? "" : " ") + dim + "=" + std::to_string(size);
  return out.empty() ? "(no dims)" : out;
}

void print_summary(std::FILE* out, const tec::Graph& g) {
  const tec::MetaSummary s = tec::summarize(g);
  int64_t quantized = 0;
  for (const auto& v : g.values) quantized += v.proto.is_quantized();
  std::fprintf(out,
               "  %-14s %zu nodes, %zu values (%lld quantized), %lld buffers, %s in all: weights %s, saved %s "
               "(+%s aliased, not copied), state %s\n",
               profile_name(g).c_str(), g.nodes.size(), g.values.size(), static_cast<long long>(quantized),
               static_cast<long long>(s.buffers), human_bytes(s.total_bytes).c_str(), human_bytes(s.weight_bytes).c_str(),
               human_bytes(s.saved_bytes).c_str(), human_bytes(s.aliased_bytes).c_str(),
               human_bytes(s.state_bytes).c_str());
}

// "T=2048" -> {"T", {2048}}; "T=16,128" -> {"T", {16, 128}}.
std::pair<std::string, std::vector<int64_t>> parse_dim_assignment(const std::string& text, const char* option) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw tec::Error(ErrorKind::usage, {}, std::string(option) + " expects DIM=SIZE[,SIZE...], got '" + text + "'");
  std::vector<int64_t> sizes;
  size_t pos = eq + 1;
  while (pos <= text.size()) {
    const auto comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno == ERANGE)
      throw tec::Error(ErrorKind::usage, {}, std::string(option) + ": '" + item + "' is not an integer size");
    sizes.push_back(v);
    pos = comma + 1;
  }
  return {text.substr(0, eq), sizes};
}

int parse_arch(const std::string& arch) {
  int sm = 0;
  if (arch.rfind("sm_", 0) == 0) sm = std::atoi(arch.c_str() + 3);
  if (sm < 70 || sm > 200)
    throw tec::Error(ErrorKind::usage, {}, "--arch expects sm_NN, e.g. sm_90, got '" + arch + "'");
  return sm;
}

void print_plan_summary(std::FILE* out, const tec::CompiledProfile& p) {
  const auto& m = p.memory;
  std::fprintf(out, "  %-14s %zu steps, arena %s (scratch peak %s vs %s if nothing shared)\n", profile_name(p.graph).c_str(),
               p.schedule.steps.size(), human_bytes(m.arena_bytes).c_str(), human_bytes(m.scratch_peak_bytes).c_str(),
               human_bytes(m.scratch_naive_bytes).c_str());
  if (p.graph.train) {
    const tec::TrainMemory t = tec::train_memory(p.graph, m);
    std::fprintf(out,
                 "  %-14s train step: optimizer %s, wgrad %s; saved for backward %s (%s made to be saved, %s the forward's "
                 "own tensors: aliased, not copied), state %s, weight workspace %s\n",
                 "", p.graph.train->optimizer.c_str(), p.graph.train->wgrad.c_str(), human_bytes(t.saved_bytes).c_str(),
                 human_bytes(t.saved_new_bytes).c_str(), human_bytes(t.bytes_saved_by_aliasing).c_str(),
                 human_bytes(t.state_bytes).c_str(), human_bytes(t.workspace_bytes).c_str());
    if (t.recomputed_bytes > 0)
      std::fprintf(out, "  %-14s --recompute: saved %s instead of %s (%s recomputed in the backward)\n", "",
                   human_bytes(t.saved_bytes).c_str(), human_bytes(t.saved_bytes + t.recomputed_bytes).c_str(),
                   human_bytes(t.recomputed_bytes).c_str());
  }
  for (size_t i = 0; i < p.schedule.steps.size(); ++i) {
    const auto& s = p.schedule.steps[i];
    std::fprintf(out, "    step %zu %-6s %s\n", i, std::string(to_string(s.kind)).c_str(), s.name.c_str());
    for (const auto& f : s.fusions) std::fprintf(out, "           - %s\n", f.c_str());
  }
}

// --tune: times each GEMM's candidate algorithms on this machine's GPU and records the winner
// in the manifest (ARCHITECTURE.md §6).
void tune_plan(tec::PlanParts& parts, bool quiet) {
  auto plan = std::make_shared<const tec::plan::Plan>(
      tec::plan::Plan::load(tec::plan::serialize_plan(parts.manifest, parts.blobs), "the plan being tuned"));
  for (size_t p = 0; p < plan->profiles.size(); ++p) {
    tec::runtime::Session session(plan, plan->profiles[p]);
    for (const auto& t : session.tune_gemms(32, 20)) {
      std::string hex;
      for (uint8_t b : t.algo) {
        static const char* digits = "0123456789abcdef";
        hex += digits[b >> 4];
        hex += digits[b & 15];
      }
      auto& launch = parts.manifest["profiles"][p]["gpu"]["launches"][static_cast<size_t>(t.launch)];
      launch["gemm"]["algo"] = {{"tuned", hex},
                                {"cublaslt", tec::runtime::cublaslt_version()},
                                {"gpu", session.device_name()},
                                {"us", t.microseconds},
                                {"heuristic_us", t.heuristic_microseconds}};
      if (!quiet)
        std::fprintf(stderr, "tune: profile %zu step %-12s %8.1f us (heuristic's first choice %8.1f us) on %s\n", p,
                     plan->profiles[p].steps.at(static_cast<size_t>(plan->profiles[p].launches[static_cast<size_t>(t.launch)].step)).name.c_str(),
                     t.microseconds, t.heuristic_microseconds, session.device_name().c_str());
    }
  }
}

nlohmann::json dump_after_pass(const tec::CompileResult& result, const std::string& pass) {
  nlohmann::json profiles = nlohmann::json::array();
  if (pass == "plan") {  // the manifest exactly as the file stores it, blob index included
    const auto bytes = tec::plan::serialize_plan(result.plan->manifest, result.plan->blobs);
    return tec::plan::parse_plan_file(bytes, "plan").manifest;
  }
  for (const auto& p : result.profiles) {
    if (pass == "fusion" || pass == "schedule")
      profiles.push_back(tec::dump_schedule(p.graph, p.schedule));
    else if (pass == "memory_plan")
      profiles.push_back(tec::dump_memory_plan(p.memory));
    else
      profiles.push_back(tec::dump_graph(p.graph, pass));
  }
  return {{"after", pass}, {"profiles", profiles}};
}

// Grouped weights (an MoE layer's experts): per buffer role, each member's bytes and offset.
nlohmann::json grouped_of(const tec::Graph& g) {
  nlohmann::json out = nlohmann::json::array();
  for (const tec::Value& v : g.values) {
    if (!v.proto.is_grouped()) continue;
    nlohmann::json buffers = nlohmann::json::array();
    for (const auto& b : tec::GroupedTensor::uniform(v.proto).buffers(g.target))
      buffers.push_back({{"role", tec::to_string(b.spec.role)}, {"dtype", tec::to_string(b.spec.dtype)}, {"bytes", b.spec.bytes},
                         {"member_bytes", b.member_bytes}, {"offsets", b.offsets}});
    out.push_back({{"name", v.name}, {"members", v.proto.group_members}, {"shape", v.proto.shape.dims},
                   {"quantizer", v.proto.quantizer ? v.proto.quantizer->str() : std::string(tec::to_string(v.proto.dtype))},
                   {"buffers", buffers}});
  }
  return out;
}

nlohmann::json report_of(const tec::CompileResult& result, const std::string& model) {
  nlohmann::json profiles = nlohmann::json::array();
  for (const auto& p : result.profiles) {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& s : p.schedule.steps)
      steps.push_back({{"name", s.name}, {"kind", to_string(s.kind)}, {"phase", to_string(s.phase)}, {"fusions", s.fusions}});
    profiles.push_back({{"dims", p.graph.dims},
                        {"train", tec::dump_train_step(p.graph, p.memory)},
                        {"steps", steps},
                        {"arena_bytes", p.memory.arena_bytes},
                        {"scratch_peak_bytes", p.memory.scratch_peak_bytes},
                        {"scratch_naive_bytes", p.memory.scratch_naive_bytes},
                        {"constant_bytes", p.memory.constant_bytes},
                        {"grouped", grouped_of(p.graph)},
                        {"gpu", p.gpu.supported ? nlohmann::json{{"supported", true}}
                                                : nlohmann::json{{"supported", false}, {"reason", p.gpu.reason}, {"step", p.gpu.step},
                                                                 {"node", p.gpu.node}, {"op", p.gpu.op}}}});
  }
  nlohmann::json timings = nlohmann::json::object();
  for (const auto& t : result.timings) timings[t.pass] = t.milliseconds;
  nlohmann::json report{{"model", model}, {"profiles", profiles}, {"timings_ms", timings}};
  if (tec::is_onnx_path(model)) {
    // What each ONNX node became, and whether that runs on the GPU (the first profile's lowering
    // names the tec node that stops it).
    const auto& gpu = result.profiles.at(0).gpu;
    nlohmann::json nodes = nlohmann::json::array();
    for (const auto& n : result.onnx_nodes) {
      nlohmann::json entry{{"node", n.node}, {"op_type", n.op_type}, {"became", n.became}};
      if (!gpu.supported && gpu.node == n.node) entry["gpu"] = gpu.reason;
      nodes.push_back(std::move(entry));
    }
    report["onnx_nodes"] = nodes;
  }
  return report;
}

// The training step's flags (--mode train): the optimizer, the weight gradients, recompute,
// frozen weights and AdamW's settings.
struct TrainFlags {
  std::string optimizer = "none", wgrad = "accumulate";
  tec::TrainOptions train;
  std::vector<std::string> frozen;
  std::vector<CLI::Option*> adamw_settings;
};

void add_train_flags(CLI::App& app, TrainFlags& f) {
  app.add_option("--optimizer", f.optimizer, "train: none (weight gradients accumulate in fp32 main_grad for the caller) or "
                                           "adamw (AdamW updates the masters, then clears main_grad)")
      ->check(CLI::IsMember({"none", "adamw"}));
  app.add_option("--wgrad", f.wgrad, "train: accumulate (into main_grad, TE's wgrad with beta=1) or write (each step writes "
                                   "<weight>.grad in the model dtype, for callers with their own optimizer)")
      ->check(CLI::IsMember({"accumulate", "write"}));
  app.add_option("--freeze", f.frozen, "train: keep these weights as they are (no gradient, master or optimizer state): a regular "
                                     "expression over whole weight names, e.g. '.*rotary.*|val_2[07]' (repeatable). ONNX says "
                                     "nothing of which constants are parameters: every float constant of more than one element "
                                     "trains unless frozen (a rope table folded by the exporter is one to freeze)");
  app.add_flag("--recompute", f.train.recompute_activations,
               "train: recompute each activation function's output in the backward (from its input, saved anyway) "
               "instead of keeping its copy for the next linear's wgrad; the summary shows both saved figures");
  // Their ranges are the runtime scalars' (ir/runtime_scalars.h), checked by compile().
  f.adamw_settings.push_back(app.add_option("--lr", f.train.lr, "train, adamw: the learning rate the plan starts with (a runtime scalar), in [0, 1000]"));
  f.adamw_settings.push_back(app.add_option("--beta1", f.train.beta1, "train, adamw: first-moment decay, in [0, 1)"));
  f.adamw_settings.push_back(app.add_option("--beta2", f.train.beta2, "train, adamw: second-moment decay, in [0, 1)"));
  f.adamw_settings.push_back(app.add_option("--eps", f.train.eps, "train, adamw: added to sqrt(v), in (0, 1]"));
  f.adamw_settings.push_back(app.add_option("--weight-decay", f.train.weight_decay, "train, adamw: decoupled weight decay, in [0, 1]"));
}

void apply_train_flags(TrainFlags f, const std::string& mode, tec::CompileOptions& options) {
  f.train.optimizer = f.optimizer == "adamw" ? tec::TrainOptions::Optimizer::adamw : tec::TrainOptions::Optimizer::none;
  f.train.wgrad = f.wgrad == "write" ? tec::TrainOptions::WeightGrad::write : tec::TrainOptions::WeightGrad::accumulate;
  if (mode != "train" && (f.optimizer != "none" || f.wgrad != "accumulate" || f.train.recompute_activations || !f.frozen.empty()))
    throw tec::Error(ErrorKind::usage, {}, "--optimizer, --wgrad, --recompute and --freeze describe a training step; add --mode train");
  for (const CLI::Option* o : f.adamw_settings)
    if (o->count() > 0 && f.optimizer != "adamw")
      throw tec::Error(ErrorKind::usage, {}, o->get_name() + " is a setting of AdamW; add --mode train --optimizer adamw");
  options.frontend.frozen = f.frozen;
  options.train = f.train;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"te-compile: compile a TransformerEngine-style layer (ONNX model or JSON graph) into a tec plan.\n"
               "Runs the frontend, the passes tensor_parallel, apply_recipe, meta, usage, autodiff (--mode train), fusion,\n"
               "schedule and memory_plan, and writes a .teplan with every weight pre-quantized. Progress goes to stderr."};
  app.footer(kFooter);
  app.set_version_flag("--version", "te-compile " TEC_VERSION_STRING);
  std::string model, output, recipe, mode = "infer", dump_after, report, cache_dir, dot;
  std::vector<std::string> shapes, profiles, archs{"sm_90"}, disabled;
  bool tune = false, time_passes = false, quiet = false, onnx_ops = false, mid_m_gemm = false, grouped_block_scales = true;
  bool onnx_patterns = true;
  std::string tp_overlap = "auto";
  int64_t tp = 0;
  app.add_option("MODEL", model, "ONNX model (.onnx) or JSON graph (schemas/graph.schema.json)");
  app.add_flag("--onnx-ops", onnx_ops, "print the ONNX ops tec reads (op, opset, inputs that must be constant, limits) "
                                       "as JSON and exit");
  app.add_option("-o,--output", output, "plan file to write (.teplan), through a temporary file and a rename; "
                                        "'-' or /dev/stdout writes to stdout");
  app.add_option("--recipe", recipe, "bf16 | fp8-current | fp8-delayed | fp8-block | mxfp8 | nvfp4 | fp8-static (replaces the "
                                     "model's; an ONNX model's FP8 Q/DQ pairs choose fp8-static, which keeps their scales)");
  app.add_option("--shape", shapes, "fix a dim: DIM=SIZE, e.g. T=2048 (repeatable); selects one profile");
  app.add_option("--profiles", profiles, "replace a dim's profile list: DIM=S1,S2,..., e.g. T=16,128,2048");
  app.add_option("--mode", mode, "infer: forward only; train: one training step (weight workspace from fp32 masters, "
                                 "forward, backward; inputs x and dy, outputs y and dx)")
      ->check(CLI::IsMember({"infer", "train"}));
  TrainFlags train_flags;
  add_train_flags(app, train_flags);
  app.add_option("--tp", tp, "tensor parallel over N ranks: the tp_size of every linear the graph marks tp_mode column or "
                             "row (TE's parallel_mode); the plan holds every rank's shard of the full weights, collectives "
                             "where TE puts them (JSON graphs; te-run --tp N runs one rank per GPU over NCCL, --backend cpu every rank on the CPU reference)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--arch", archs, "target GPU arch, e.g. sm_90 (repeatable; layouts follow the first)");
  app.add_option("--dump-after", dump_after, "print JSON after this pass and stop: frontend | tensor_parallel | apply_recipe | meta | "
                                             "usage | autodiff | fusion | schedule | lower | memory_plan | codegen | plan")
      ->check(CLI::IsMember(tec::kPassNames));
  app.add_option("--disable-pass", disabled, "turn an optional pass off: fusion (one step per op)")
      ->check(CLI::IsMember(tec::kOptionalPasses));
  app.add_option("--report", report, "write a JSON report: per profile the steps, fusion decisions, arena, GPU support (without "
                                     "it: the step, node and op that has no GPU form, and why), and timings; for ONNX models "
                                     "also what every ONNX node became");
  app.add_flag("--onnx-patterns,!--no-onnx-patterns", onnx_patterns,
               "ONNX models: recognise the exporters' spellings of attention, norms, GELU, SiLU, rope and gated MLPs as tec's "
               "fused ops (the default). --no-onnx-patterns maps every node as it is onto the general path (linear for a "
               "MatMul by a constant, softmax, matmul, reduce, ... as general GPU kernels): slower, for checking a pattern "
               "against it or for a model a pattern misreads");
  app.add_option("--dot", dot, "write a Graphviz picture of the first profile's steps (fused groups as clusters)");
  app.add_flag("--tune", tune, "time the cuBLASLt heuristic's top 32 algorithms for every GEMM on this machine's GPU and store "
                               "the winner (with the cuBLASLt version and GPU name; elsewhere the runtime warns and uses "
                               "the heuristic)");
  app.add_flag("--mid-m-gemm", mid_m_gemm,
               "experimental: run per-tensor FP8 GEMMs of 33-128 tokens with N >= 16384 and a current-scaled FP8 output "
               "on tec's Hopper wgmma kernel instead of cuBLASLt (every --arch sm_90; the weight must have no other "
               "GPU reader in any profile). Correct on the H100, but not yet faster there inside the CUDA graph "
               "(bench/results/overview.md)");
  app.add_option("--tp-overlap", tp_overlap,
                 "tensor parallel: overlap the all-gather before a GEMM and the reduce-scatter after one with that GEMM's row "
                 "blocks on a second stream inside the CUDA graph: auto (the default: GEMMs of 4096 rows or more, where it "
                 "measured faster), on (every such GEMM) or off (every collective between the GEMMs)")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_flag("--grouped-block-scales,!--no-grouped-block-scales", grouped_block_scales,
               "fp8-block MoE experts (grouped_linear) are multiplied in FP8 on tec's grouped GEMM, each 128-deep step of K "
               "scaled by its blocks' scales (the default). --no-grouped-block-scales runs them through a bf16 copy of the "
               "weights made once per session instead, as before (slower, and the copy takes memory: bench/results/moe_layer.md)");
  app.add_option("--cache-dir", cache_dir, "cache folder for NVRTC kernels and pre-quantized constants (default $TEC_CACHE_DIR, else $XDG_CACHE_HOME/tec, "
                                           "else ~/.cache/tec); 'none' disables the cache");
  app.add_flag("--time-passes", time_passes, "print how long each pass took");
  app.add_flag("-q,--quiet", quiet, "no progress output");
  if (auto code = tec::cli::parse_command_line(app, argc, argv)) return *code;

  if (onnx_ops) {
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& c : tec::onnx_op_claims())
      ops.push_back({{"op", c.op},
                    {"since_opset", c.since_opset},
                    {"inputs", {c.min_inputs, c.max_inputs == tec::kVariadicInputs ? nlohmann::json() : nlohmann::json(c.max_inputs)}},
                    {"constant_inputs", c.constant_inputs},
                    {"limits", c.limits}});
    std::cout << nlohmann::json{{"opsets", {tec::onnx::kMinOpset, tec::onnx::kMaxOpset}}, {"ops", ops}}.dump(2) << "\n";
    return 0;
  }
  tec::remove_temporary_files_on_signals();
  if (model.empty()) {
    std::fprintf(stderr, "te-compile: MODEL is required\nRun with --help for more information.\n");
    return tec::exit_code(ErrorKind::usage);
  }
  return tec::cli::run_reporting_errors("te-compile", [&]() -> int {

    tec::CompileOptions options;
    options.model_path = model;
    options.disabled.insert(disabled.begin(), disabled.end());
    options.archs = archs;
    options.mid_m_gemm = mid_m_gemm;
    options.grouped_block_scales = grouped_block_scales;
    options.overlap_min_rows = tp_overlap == "off" ? -1 : tp_overlap == "on" ? 0 : tec::codegen::kOverlapMinRows;
    if (!cache_dir.empty()) options.cache_dir = cache_dir == "none" ? "" : cache_dir;
    options.frontend.mode = mode == "train" ? tec::Mode::train : tec::Mode::infer;
    options.frontend.tp_size = tp;
    options.frontend.onnx_patterns = onnx_patterns;
    apply_train_flags(train_flags, mode, options);
    options.frontend.target.sm = parse_arch(archs.at(0));
    for (const auto& a : archs) (void)parse_arch(a);
    if (!recipe.empty()) {
      auto kind = tec::parse_recipe_kind(recipe);
      if (!kind)
        throw tec::Error(ErrorKind::usage, {}, "unknown --recipe '" + recipe + "'; expected one of: " + tec::recipe_kind_names());
      options.frontend.recipe = *kind;
    }
    // Each dim once, by --shape or --profiles: a later one used to win silently.
    for (const auto& p : profiles) {
      auto [dim, sizes] = parse_dim_assignment(p, "--profiles");
      tec::cli::add_once(options.frontend.dim_overrides, dim, sizes, "--shape/--profiles");
    }
    for (const auto& s : shapes) {
      auto [dim, sizes] = parse_dim_assignment(s, "--shape");
      if (sizes.size() != 1) throw tec::Error(ErrorKind::usage, {}, "--shape takes one size per dim, use --profiles for lists");
      tec::cli::add_once(options.frontend.dim_overrides, dim, sizes, "--shape/--profiles");
    }
    // Without a file to write, stop before building the constants (quantizing every weight).
    const bool writes = !output.empty() || !dot.empty();
    options.dump_after = !dump_after.empty() ? dump_after : writes ? "" : "memory_plan";
    options.record.tool = "te-compile " TEC_VERSION_STRING;
    options.record.options = {{"recipe", recipe}, {"mode", mode},           {"arch", archs},
                              {"shape", shapes},  {"profiles", profiles}, {"disable_pass", disabled}};
    const tec::TrainOptions& train = options.train;
    if (mode == "train")
      options.record.options["train"] = {{"optimizer", train_flags.optimizer}, {"wgrad", train_flags.wgrad}, {"recompute", train.recompute_activations},
                                         {"lr", train.lr}, {"beta1", train.beta1},
                                         {"beta2", train.beta2}, {"eps", train.eps}, {"weight_decay", train.weight_decay}};
    if (mid_m_gemm) options.record.options["mid_m_gemm"] = true;
    if (tp > 0) options.record.options["tp"] = tp;
    if (!grouped_block_scales) options.record.options["grouped_block_scales"] = false;
    if (tp_overlap != "auto") options.record.options["tp_overlap"] = tp_overlap;
    if (!onnx_patterns) options.record.options["onnx_patterns"] = false;

    auto progress = [quiet](int step, int total, const std::string& pass) {
      if (!quiet) std::fprintf(stderr, "[%d/%d] %s\n", step, total, pass.c_str());
    };
    tec::CompileResult result = tec::compile(options, progress);

    const bool plan_to_stdout = output == "-" || output == "/dev/stdout";
    std::FILE* summary = (!dump_after.empty() || plan_to_stdout) ? stderr : stdout;
    if (!dump_after.empty()) std::cout << dump_after_pass(result, dump_after).dump(2) << "\n";
    if (result.plan && tune) {
      try {
        tune_plan(*result.plan, quiet);
      } catch (const tec::Error& e) {
        if (e.kind() != ErrorKind::device) throw;
        throw tec::Error(ErrorKind::device, {},
                         std::string("--tune times GEMMs on a GPU and found none usable (") + e.what() +
                             "); without --tune the runtime asks the cuBLASLt heuristic at load time");
      }
    }
    if (result.plan && !output.empty()) {
      const uint64_t bytes = tec::plan::write_plan_file(output, result.plan->manifest, result.plan->blobs);
      if (!quiet) std::fprintf(stderr, "wrote %s (%s)\n", output.c_str(), human_bytes(static_cast<int64_t>(bytes)).c_str());
    }
    if (!dot.empty() && result.plan) {
      const std::string text = tec::plan::plan_to_dot(result.plan->manifest, 0);
      tec::write_text_file(dot, text);
    }
    if (!report.empty()) {
      const std::string text = report_of(result, model).dump(2) + "\n";
      tec::write_text_file(report, text);
    }
    if (!quiet) {
      const auto& g0 = result.profiles.at(0).graph;
      std::fprintf(summary, "%s: %s, recipe %s, mode %s, sm_%d, %zu profile(s)%s\n", model.c_str(), g0.name.c_str(),
                   std::string(to_string(g0.recipe.kind)).c_str(), std::string(to_string(g0.mode)).c_str(), g0.target.sm,
                   result.profiles.size(),
                   g0.tp.size > 1 ? (", tensor parallel over " + std::to_string(g0.tp.size) + " ranks (one rank's program and buffers below)").c_str() : "");
      for (const auto& p : result.profiles) {
        print_summary(summary, p.graph);
        if (!p.schedule.steps.empty()) print_plan_summary(summary, p);
      }
      if (result.code.modules.empty() && result.plan)
        std::fprintf(summary, "GPU: no GPU code: %s\n", result.profiles.at(0).gpu.reason.c_str());
      else if (result.plan)
        std::fprintf(summary, "GPU: %d kernel module(s) for %s, %d from the cache (%s), %.0f ms in NVRTC\n",
                     result.codegen.modules, [&] { std::string a; for (const auto& x : result.code.archs) a += (a.empty() ? "" : ",") + x; return a; }().c_str(), result.codegen.cache_hits,
                     cache_dir.empty() ? tec::codegen::default_cache_dir().c_str() : cache_dir.c_str(),
                     result.codegen.compile_milliseconds);
      if (result.plan)
        std::fprintf(summary, "constants: %s%s, %s\n", human_bytes(result.profiles.at(0).memory.constant_bytes).c_str(),
                     g0.tp.size > 1 ? (" per rank, " + std::to_string(g0.tp.size) + " ranks' shards in the plan").c_str() : "",
                     result.plan->constants_from_cache ? "from the cache" : "generated and pre-quantized");
      if (dump_after.empty() && output.empty()) std::fprintf(summary, "no plan written (pass -o PLAN to write one)\n");
    }
    std::set<std::string> warned;  // profiles of other token counts compile the same kernel again
    for (const tec::SpillingKernel& k : result.codegen.spilling) {
      std::string steps;
      for (const auto& st : k.steps) steps += (steps.empty() ? "" : ", ") + st;
      const std::string warning = "te-compile: warning: kernel " + k.source + " for " + k.arch + " (step" + (k.steps.size() == 1 ? "" : "s") +
                                  " " + steps + ") spills registers to local memory; the plan is correct but that kernel is slower " +
                                  "than it should be (please report it):\n" + k.ptxas;
      if (warned.insert(warning).second) std::fputs(warning.c_str(), stderr);
    }
    if (time_passes)
      for (const auto& t : result.timings) std::fprintf(stderr, "  %-14s %8.2f ms\n", t.pass.c_str(), t.milliseconds);
    return 0;
  });
}
