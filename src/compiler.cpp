#include "compiler.h"

#include <chrono>

#include "passes/passes.h"

namespace tec {

namespace {

// Runs one pass over every profile's graph, timing it.
class PassRunner {
 public:
  PassRunner(CompileResult& result, const ProgressCallback& progress) : result_(result), progress_(progress) {}

  void run(const std::string& name, Graph (*pass)(Graph)) {
    step(name, [&] {
      for (Graph& g : result_.graphs) g = pass(std::move(g));
    });
  }

  template <typename F>
  void step(const std::string& name, F&& body) {
    ++step_;
    if (progress_) progress_(step_, static_cast<int>(kPassNames.size()), name);
    const auto start = std::chrono::steady_clock::now();
    body();
    const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
    result_.timings.push_back({name, elapsed.count()});
  }

 private:
  CompileResult& result_;
  const ProgressCallback& progress_;
  int step_ = 0;
};

}  // namespace

CompileResult compile_graphs(const CompileOptions& options, const ProgressCallback& progress) {
  CompileResult result;
  PassRunner runner(result, progress);
  auto stop_after = [&options](const std::string& pass) { return options.dump_after == pass; };

  runner.step("frontend", [&] { result.graphs = load_json_graphs(options.model_path, options.frontend); });
  if (stop_after("frontend")) return result;
  runner.run("apply_recipe", apply_recipe);
  if (stop_after("apply_recipe")) return result;
  runner.run("meta", meta);
  if (stop_after("meta")) return result;
  runner.run("usage", usage);
  return result;
}

}  // namespace tec
