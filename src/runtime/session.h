// The GPU runtime (ARCHITECTURE.md §8): one Session per thread or stream owns an arena, its
// cuBLASLt descriptors and one CUDA graph of the profile's launches; sessions of one plan on
// one device share the uploaded constants and the loaded kernel modules. Errors are
// Error(device) naming the step and the failing call. The public, non-throwing API over
// this is include/tec/runtime.h.
#pragma once

#include <cuda_runtime.h>

#include <compare>
#include <functional>
#include <memory>
#include <string>

#include "plan/plan.h"
#include "runtime/attention.h"
#include "runtime/nccl.h"
#include "tec/runtime.h"

namespace tec::runtime {

// Throws Error(device) with CUDA's reason when there is no usable device, Error(device_lost)
// when an earlier sticky error made it unusable; returns the current device's "sm_NN".
std::string require_device();

// Throws for a failed CUDA call: Error(device) naming `call` and `step`, or for a sticky error
// (illegal address, launch failure, ...; the context is unusable until the process restarts)
// Error(device_lost), after recording it so that every later run on the device refuses with
// that reason. Everything in the runtime and te-run checks CUDA through this.
void check_cuda(cudaError_t e, const char* call, const std::string& step);

// Test hook (tests/embed/fault_test.cpp): every resource the runtime acquires from CUDA or
// cuBLASLt (device memory, modules, handles, descriptors, streams, graphs) is counted, and
// acquisition number k after this call fails as out of memory; k = 0 fails none. Returns how
// many were acquired since the previous call.
int64_t fail_device_acquisition_at(int64_t k);

struct DeviceShared;  // constants + modules of one plan on one device

class Session {
 public:
  // Allocates the arena (zeroed, delayed scales set to 1), uploads the constants unless
  // another session of `plan` on this device did, loads the modules, builds the cuBLASLt
  // descriptors, and captures the CUDA graph. Nothing is left allocated if it throws.
  // A tensor-parallel plan (tp_size > 1) needs `group`: a communicator of tp_size ranks on this
  // device, whose rank picks the constants (the rank's weight shards) the session uploads.
  Session(std::shared_ptr<const plan::Plan> plan, const plan::Profile& profile, Communicator group = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // One cudaGraphLaunch. A train plan's run skips the weight workspace steps when the runtime
  // scalar first_microbatch is 0 (unless restored state made them stale), and runs only them
  // and the forward when forward_only is 1: one CUDA graph per such selection, each captured
  // on its first use.
  void run(cudaStream_t stream);
  // Launch by launch, with the same selection; `after_step(step)` is called after each step's
  // last launch is enqueued (step -1: the delayed-scaling bookkeeping).
  void run_eager(cudaStream_t stream, const std::function<void(int step)>& after_step = {});

  // Train plans: writes runtime scalar `name` (a state tensor of shape [1]) and keeps the
  // host's copy that selects the steps of a run. The caller checked the name and the value.
  void set_scalar(const std::string& name, float value, cudaStream_t stream);
  // The next run remakes the weights' copies even if first_microbatch is 0 (after a restore);
  // re-reads the scalars, which the restore may have changed.
  void remake_weight_workspace(cudaStream_t stream);

  const plan::Plan& plan() const { return *plan_; }
  const plan::Profile& profile() const { return profile_; }
  // Device address of a profile buffer (arena or constants).
  void* address(int buffer) const;
  // The buffers attention launch `launch` reads and writes.
  AttentionPointers attention_pointers(size_t launch) const;
  void upload(int buffer, const void* host, size_t bytes, cudaStream_t stream);
  // Waits for the stream; throws Error(invalid_input) when the last run's kernels found hostile
  // run-time data (check_status).
  void download(int buffer, void* host, size_t bytes, cudaStream_t stream) const;
  // Plans whose kernels check run-time data (MoE routing: expert indices, m_splits, the row map)
  // keep a status word the run zeroes first: waits for the stream and throws
  // Error(invalid_input) naming what was out of range and the steps that found it.
  void check_status(cudaStream_t stream) const;
  // Waits for the stream's work. With collectives, up to `timeout_seconds`: a rank that never
  // runs its part gives Error(device) (and an aborted communicator) instead of a hang.
  void wait(cudaStream_t stream, double timeout_seconds = 300) const;
  int rank() const { return group_.rank; }
  // Every arena buffer at its offset (the host image the CPU reference runs from).
  std::vector<uint8_t> download_arena(cudaStream_t stream) const;
  // Fills scratch and output buffers with 0xFF (NaN in every float format), so that a
  // result never written cannot pass for one.
  void poison(cudaStream_t stream);
  int64_t arena_bytes() const { return static_cast<int64_t>(plan_->arena_bytes); }
  int64_t constant_bytes() const { return static_cast<int64_t>(plan_->constants.size()); }
  int launch_count() const;
  // Launches that start before the previous kernel ends (programmatic dependent launch).
  int early_launch_count() const;
  const std::string& device_name() const { return device_name_; }

  // te-compile --tune: for each GEMM launch, times the cuBLASLt heuristic's first
  // `candidates` algorithms on this session's buffers and returns the fastest.
  struct TunedGemm {
    int launch = 0;
    std::vector<uint8_t> algo;  // cublasLtMatmulAlgo_t
    double microseconds = 0, heuristic_microseconds = 0;
  };
  std::vector<TunedGemm> tune_gemms(int candidates, int iterations);
  // Why tuned algorithms were not used (empty when they were, or there were none).
  const std::string& tuning_warning() const { return tuning_warning_; }

 private:
  // Which launches a run makes (indices into the profile's launches), from the scalars.
  struct Selection {
    bool weight_workspace = true, forward_only = false;
    auto operator<=>(const Selection&) const = default;
  };
  Selection next_selection();
  cudaGraphExec_t graph_for(Selection selection);
  std::vector<size_t> launches_of(Selection selection) const;
  void enqueue(cudaStream_t stream, const std::vector<size_t>& launches, const std::function<void(int step)>& after_step);
  bool launches_early(const std::vector<size_t>& launches, size_t position, bool step_hooks) const;
  void enqueue_collective(const plan::Collective& collective, cudaStream_t stream, const std::string& where);
  struct Impl;
  std::shared_ptr<const plan::Plan> plan_;
  const plan::Profile& profile_;
  std::unique_ptr<Impl> impl_;
  std::string device_name_;
  std::string tuning_warning_;
  Communicator group_;
  const NcclLibrary* nccl_ = nullptr;  // loaded when the plan has collectives
};

// "13.1.0" style: the cuBLASLt that tuned algorithms belong to.
std::string cublaslt_version();

// Plan::check: device properties and free memory, nothing allocated for the plan.
tec::Preflight preflight(const plan::Plan& plan, int device);

}  // namespace tec::runtime
