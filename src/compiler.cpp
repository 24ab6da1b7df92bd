#include "compiler.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <regex>
#include <set>

#include "core/file_io.h"
#include "frontend/onnx/onnx_model.h"
#include "ir/runtime_scalars.h"
#include "passes/passes.h"
#include "plan/file.h"
#include "plan/format.h"

namespace tec {

namespace {

// The names of the steps whose launches run kernel module `module`, in the first profile with any.
std::vector<std::string> steps_launching(const std::vector<CompiledProfile>& profiles, int module) {
  for (const CompiledProfile& p : profiles) {
    std::vector<std::string> steps;
    for (const codegen::Launch& l : p.gpu.launches)
      if (l.module == module) {
        const std::string name = l.step < 0 ? "(run-level)" : p.schedule.steps.at(static_cast<size_t>(l.step)).name;
        if (std::find(steps.begin(), steps.end(), name) == steps.end()) steps.push_back(name);
      }
    if (!steps.empty()) return steps;
  }
  return {};
}

class PassRunner {
 public:
  PassRunner(CompileResult& result, const ProgressCallback& progress) : result_(result), progress_(progress) {}

  // Runs `body` as one pipeline step, timed.
  template <typename F>
  void step(const std::string& name, F&& body) {
    ++step_;
    if (progress_) progress_(step_, static_cast<int>(kPassNames.size()), name);
    const auto start = std::chrono::steady_clock::now();
    body();
    const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
    result_.timings.push_back({name, elapsed.count()});
  }
  // A graph pass, over every profile.
  void graph_pass(const std::string& name, Graph (*pass)(Graph)) {
    step(name, [&] {
      for (CompiledProfile& p : result_.profiles) p.graph = pass(std::move(p.graph));
    });
  }

 private:
  CompileResult& result_;
  const ProgressCallback& progress_;
  int step_ = 0;
};

// --freeze: the weights each expression names (whole names) keep their values in train mode;
// an expression that names no weight is a usage error, as a misspelt flag would be.
void freeze_weights(std::vector<CompiledProfile>& profiles, const std::vector<std::string>& expressions) {
  for (const std::string& text : expressions) {
    std::regex expression;
    try {
      expression = std::regex(text, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw Error(ErrorKind::usage, ErrorContext{"frontend", "", "", "--freeze"}, "--freeze '" + text + "' is no regular expression: " + e.what());
    }
    size_t frozen = 0;
    for (CompiledProfile& p : profiles)
      for (Value& v : p.graph.values)
        if (v.kind == ValueKind::weight && std::regex_match(v.name, expression)) v.frozen = true, ++frozen;
    if (frozen == 0)
      throw Error(ErrorKind::usage, ErrorContext{"frontend", "", "", "--freeze"},
                  "--freeze '" + text + "' names no weight of the model (te-compile --dump-after frontend lists them)");
  }
}

// Every profile shares one constants blob: a weight's shape may not depend on a dim whose
// profile list has several sizes (issue 51: --profiles F=256,512 ended in an internal error).
void check_weights_agree(const std::vector<CompiledProfile>& profiles) {
  const Graph& first = profiles.at(0).graph;
  for (size_t p = 1; p < profiles.size(); ++p) {
    const Graph& g = profiles[p].graph;
    for (const Value& w : first.values) {
      if (w.kind != ValueKind::weight) continue;
      const auto id = g.find_value(w.name);
      if (!id || g.value(*id).proto.shape == w.proto.shape) continue;
      // The dims that explain the difference: those whose two sizes are the two shapes' sizes
      // along some axis (F: 256 and 512), else every dim that differs.
      const Shape& a = w.proto.shape;
      const Shape& b = g.value(*id).proto.shape;
      std::string differ, all;
      for (const auto& [dim, size] : first.dims) {
        if (!g.dims.count(dim) || g.dims.at(dim) == size) continue;
        const std::string text = dim + " (" + std::to_string(size) + " and " + std::to_string(g.dims.at(dim)) + ")";
        all += (all.empty() ? "" : ", ") + text;
        for (size_t axis = 0; axis < std::min(a.dims.size(), b.dims.size()); ++axis)
          if (a.dims[axis] == size && b.dims[axis] == g.dims.at(dim)) {
            differ += (differ.empty() ? "" : ", ") + text;
            break;
          }
      }
      if (differ.empty()) differ = all;
      TEC_USER_ERROR((ErrorContext{"frontend", w.name, "", w.source}))
          << "weight '" << w.name << "' has shape " << w.proto.shape.str() << " in the first profile and "
          << g.value(*id).proto.shape.str() << " in profile " << p << "; one plan holds one copy of each weight, so a weight's "
          << "dims must take one size (profile lists are for token dims); it follows " << differ;
    }
  }
}

}  // namespace

bool is_onnx_path(const std::string& path) {
  if (path.size() < 5) return false;
  std::string suffix = path.substr(path.size() - 5);
  for (char& c : suffix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return suffix == ".onnx";
}

CompileResult compile(const CompileOptions& options, const ProgressCallback& progress) {
  if (options.frontend.mode == Mode::train && options.train.optimizer == TrainOptions::Optimizer::adamw) {
    const TrainOptions& t = options.train;
    for (const auto& [name, value] : {std::pair{"optimizer.lr", t.lr}, std::pair{"optimizer.beta1", t.beta1},
                                      std::pair{"optimizer.beta2", t.beta2}, std::pair{"optimizer.eps", t.eps},
                                      std::pair{"optimizer.weight_decay", t.weight_decay}})
      if (const auto error = runtime_scalar_error(name, value)) throw Error(ErrorKind::usage, ErrorContext{"train options"}, *error);
  }
  CompileResult result;
  PassRunner run(result, progress);
  auto stop_after = [&options](const std::string& pass) { return options.dump_after == pass; };
  auto each = [&result](auto&& f) {
    for (CompiledProfile& p : result.profiles) f(p);
  };

  run.step("frontend", [&] {
    std::vector<Graph> graphs;
    if (is_onnx_path(options.model_path)) {
      TEC_UNSUPPORTED_CHECK(options.frontend.tp_size <= 1, (ErrorContext{"onnx", "", "", options.model_path}))
          << "--tp " << options.frontend.tp_size
          << ": an ONNX model marks no linear column- or row-parallel; tensor-parallel plans come from JSON graphs";
      OnnxImport imported = load_onnx_graphs(options.model_path, options.frontend);
      graphs = std::move(imported.graphs);
      result.onnx_nodes = std::move(imported.nodes);
    } else {
      graphs = load_json_graphs(options.model_path, options.frontend);
    }
    for (Graph& g : graphs) result.profiles.push_back({std::move(g), {}, {}});
    check_weights_agree(result.profiles);
    freeze_weights(result.profiles, options.frontend.frozen);
  });
  if (stop_after("frontend")) return result;
  run.graph_pass("tensor_parallel", tensor_parallel);
  if (stop_after("tensor_parallel")) return result;
  run.graph_pass("apply_recipe", apply_recipe);
  if (stop_after("apply_recipe")) return result;
  run.graph_pass("meta", meta);
  if (stop_after("meta")) return result;
  run.graph_pass("attention_in_16_bits", attention_in_16_bits);
  if (stop_after("attention_in_16_bits")) return result;
  run.graph_pass("usage", usage);
  if (stop_after("usage")) return result;
  run.step("autodiff", [&] { each([&](CompiledProfile& p) { p.graph = autodiff(std::move(p.graph), options.train); }); });
  if (stop_after("autodiff")) return result;
  run.step("fusion", [&] {
    each([&](CompiledProfile& p) { p.schedule = fusion(p.graph, {.enabled = !options.disabled.count("fusion")}); });
  });
  if (stop_after("fusion")) return result;
  run.step("schedule", [&] { each([](CompiledProfile& p) { p.schedule = schedule(p.graph, std::move(p.schedule)); }); });
  if (stop_after("schedule")) return result;
  codegen::ModuleTable modules;
  codegen::WeightLayouts layouts;
  const codegen::LoweringTarget target{options.archs, options.mid_m_gemm, options.grouped_block_scales, options.overlap_min_rows};
  run.step("lower", [&] {
    // Which weights only tec's own GEMM kernels read, in any profile, is known after lowering
    // them all: a scratch lowering first (cheap: no code is compiled here), then the real one.
    std::vector<codegen::GpuLowering> scratch;
    codegen::ModuleTable scratch_modules;
    for (const CompiledProfile& p : result.profiles) {
      Schedule copy = p.schedule;
      scratch.push_back(codegen::lower_for_gpu(p.graph, copy, scratch_modules, target));
    }
    layouts = codegen::weight_device_layouts(scratch);
    for (size_t i = 0; i < result.profiles.size(); ++i) {
      CompiledProfile& p = result.profiles[i];
      p.gpu = codegen::lower_for_gpu(p.graph, p.schedule, modules, target, &layouts);
      // A profile the scratch lowering refused leaves no weight in tec's own layouts, which the
      // real lowering would name as its reason; the scratch's reason is the real one.
      if (!p.gpu.supported && !scratch[i].supported) p.gpu = std::move(scratch[i]);
    }
  });
  if (stop_after("lower")) {
    result.code.modules = modules.requests();  // what the launches ask NVRTC for, not compiled
    return result;
  }
  run.step("memory_plan", [&] {
    each([&](CompiledProfile& p) {
      p.memory = memory_plan(p.graph, p.schedule);
      for (PlannedBuffer& b : p.memory.buffers)
        if (const auto it = layouts.find(b.name); b.region == Region::constants && it != layouts.end()) b.device_layout = it->second;
    });
  });
  if (stop_after("memory_plan")) return result;
  run.step("codegen", [&] {
    bool gpu = true;
    for (const CompiledProfile& p : result.profiles) gpu = gpu && p.gpu.supported;
    result.code.archs = options.archs;
    result.code.nvrtc_version = codegen::nvrtc_version();
    if (!gpu) return;  // the plan says why; nothing to compile
    result.code.modules = modules.requests();
    std::vector<codegen::KernelRequest> requests;
    for (const auto& arch : options.archs)
      for (codegen::KernelRequest r : modules.requests()) {
        r.arch = arch;
        requests.push_back(std::move(r));
      }
    const auto compiled = codegen::KernelCompiler(options.cache_dir).compile(requests);
    result.code.cubins.assign(modules.requests().size(), {});
    for (size_t a = 0; a < options.archs.size(); ++a)
      for (size_t m = 0; m < modules.requests().size(); ++m) {
        const auto& c = compiled[a * modules.requests().size() + m];
        result.code.cubins[m].push_back(c.cubin);
        result.codegen.cache_hits += c.cache_hit ? 1 : 0;
        result.codegen.compile_milliseconds += c.milliseconds;
        if (!c.spills.empty()) result.codegen.spilling.push_back({modules.requests()[m].source, options.archs[a],
                                                                  steps_launching(result.profiles, static_cast<int>(m)), c.spills});
      }
    result.codegen.modules = static_cast<int>(requests.size());
  });
  if (stop_after("codegen")) return result;
  run.step("plan", [&] {
    BuildRecord record = options.record;
    const bool onnx_model = is_onnx_path(options.model_path);
    const ReadLimits limits{onnx_model ? onnx::kMaxModelBytes : kMaxGraphJsonBytes, !onnx_model};
    record.model_checksum =
        hex64(checksum64(read_file(options.model_path, limits, onnx_model ? "ONNX model" : "graph file", ErrorContext{"plan"})));
    result.plan = build_plan(result.profiles, result.code, record, options.cache_dir);
  });
  return result;
}

}  // namespace tec
