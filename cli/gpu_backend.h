// te-run's GPU backend: benchmark a plan's CUDA graph against eager launches, profile its
// steps, and verify it against the CPU reference executor (ARCHITECTURE.md §9).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "run_io.h"

namespace tec::cli {

struct GpuRunOptions {
  std::map<std::string, int64_t> dims;
  std::vector<NamedTensor> inputs;  // --input files, checked (run_io.h)
  uint64_t seed = 0;
  int iterations = 100, warmup = 10;
  int rotate = 1;  // sessions timed in turn
  bool rotate_seeds = false;  // session i of --rotate gets random inputs of seed + i (new MoE routing every run)
  bool no_graph = false, verify_cpu = false, profile = false;
  int verify_steps = 3;  // train plans: training steps --verify-cpu checks, state carried over
  std::vector<std::pair<std::string, float>> scalars;  // train plans: runtime scalars (names checked) set before the runs
  std::string json_path, trace_path, save_dir;
  double collective_timeout = 300;  // tensor-parallel plans: seconds a rank waits for the others
};

// Returns the exit code: 0, or 1 when --verify-cpu finds a mismatch.
int run_gpu(std::shared_ptr<const plan::Plan> plan, const GpuRunOptions& options);
// The same for a tensor-parallel plan: one GPU per rank (cli/gpu_tp_backend.cpp).
int run_gpu_tensor_parallel(std::shared_ptr<const plan::Plan> plan, const GpuRunOptions& options);

}  // namespace tec::cli
