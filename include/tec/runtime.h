// tec's embedding API: load a plan once, create a Session per thread or stream, run it.
// Nothing throws across this header: every call returns a Status or a Result, whose code is
// the CLIs' exit code for the same failure (3 invalid plan, 4 unsupported, 6 I/O, 7 device:
// no CUDA device, out of memory, a failed CUDA or cuBLASLt call; 8 device lost: a sticky CUDA
// error such as an illegal address, after which every session on that device refuses to run
// and only a new process can use the GPU; 70 internal).
//
// A plan carries GPU code: load only plans you trust. Its checksum guards integrity, not
// authenticity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

typedef struct CUstream_st* cudaStream_t;
struct ncclComm;  // nccl.h's ncclComm_t is a ncclComm*

namespace tec {

namespace plan {
struct Plan;
}

struct Status {
  int code = 0;  // 0: ok
  std::string message;
  bool ok() const { return code == 0; }
};

template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit on purpose
  Result(Status status) : value_(std::move(status)) {}  // NOLINT
  bool ok() const { return std::holds_alternative<T>(value_); }
  Status status() const { return ok() ? Status{} : std::get<Status>(value_); }
  T& value() { return std::get<T>(value_); }
  const T& value() const { return std::get<T>(value_); }

 private:
  std::variant<T, Status> value_;
};

// Where a Session runs: the plan's CUDA graph on the current GPU, or the CPU reference
// executor (the oracle: slow, bit-exact, no GPU needed).
enum class Backend { gpu, cpu };

// Plan::check's answer: can this GPU run the plan, and if not, why.
struct Preflight {
  bool ok = false;
  std::string reason;                   // empty when ok
  std::string device;                   // "NVIDIA H100 80GB HBM3"
  std::string arch;                     // the device's, "sm_90"
  std::vector<std::string> plan_archs;  // the plan's cubins
  std::string cublaslt_version;         // the loaded library's
  int64_t bytes_needed = 0;             // constants + one session's arena and GEMM workspace
  int64_t bytes_free = 0;
};

// One tensor's data buffer: for a Session, in its memory (device for gpu, host for cpu),
// in the tensor's dtype (bf16 as 2-byte words, ...); described only for a Plan.
struct TensorView {
  std::string name;
  std::string dtype;  // "bf16", "fp32", "fp8_e4m3", ...
  std::vector<int64_t> shape;
  void* data = nullptr;
  size_t bytes = 0;
};

// Immutable once loaded; copies share it, and so may any number of threads.
class Plan {
 public:
  static Result<Plan> load_file(const std::string& path);
  static Result<Plan> load_memory(const void* data, size_t size, const std::string& name = "memory");

  // The shape profiles, e.g. {{"T", 16}, {"H", 4096}}; sessions pick one.
  std::vector<std::map<std::string, int64_t>> profiles() const;
  // Inputs and outputs of a profile (the first when `dims` is empty).
  Result<std::vector<TensorView>> inputs(const std::map<std::string, int64_t>& dims = {}) const;
  Result<std::vector<TensorView>> outputs(const std::map<std::string, int64_t>& dims = {}) const;
  // State tensors of a profile: delayed scaling's, and a train plan's masters, main_grad,
  // optimizer moments and runtime scalars.
  Result<std::vector<TensorView>> state(const std::map<std::string, int64_t>& dims = {}) const;
  // Before any allocation or upload: whether CUDA device `device` can run the plan (a GPU
  // code path, a cubin for its arch, enough free memory), with what it found.
  Result<Preflight> check(int device = 0) const;

 private:
  friend class Session;
  std::shared_ptr<const plan::Plan> plan_;
};

// One arena and what runs on it: on the GPU (current device) its CUDA graph and cuBLASLt
// state, sessions of one plan on one device sharing the uploaded constants; on the CPU the
// reference executor. Not for concurrent use: one per thread. Copies share the session.
class Session {
 public:
  static Result<Session> create(const Plan& plan, const std::map<std::string, int64_t>& dims = {},
                                Backend backend = Backend::gpu);
  // A tensor-parallel plan (te-compile --tp N) runs as N sessions, one per rank, each on its
  // own GPU (the current device): rank `rank` of the caller's NCCL communicator `comm` of N
  // ranks, made from an ncclUniqueId the service distributes, as with NCCL itself (one process
  // per GPU, or one thread per GPU; any number of nodes). Its views are the rank's part of
  // each input and output (te-run --inspect prints the layouts); its run enqueues the
  // collectives on `comm` inside its CUDA graph, so every rank must run the same number of
  // times. NCCL is loaded at run time ($TEC_NCCL_LIBRARY, else libnccl.so.2). A rank whose
  // peers never run waits in its stream: the caller bounds that with ncclCommGetAsyncError and
  // ncclCommAbort, as for any NCCL work.
  static Result<Session> create_rank(const Plan& plan, ncclComm* comm, int rank, const std::map<std::string, int64_t>& dims = {});
  // GPU: one cudaGraphLaunch on `stream`; results are ready when the stream is. CPU: runs
  // on the calling thread and returns when done (`stream` is ignored).
  Status run(cudaStream_t stream = nullptr);
  // GPU: launch by launch (debugging, per-step timing). CPU: the same as run.
  Status run_eager(cudaStream_t stream = nullptr);
  // Views of an input (to fill) and an output (to read), in the backend's memory.
  Result<TensorView> input(const std::string& name) const;
  Result<TensorView> output(const std::string& name) const;
  // Delayed-scaling state (every amax history and scale) as bytes, e.g. to checkpoint it;
  // set_state restores it into a session of the same plan and profile, on either backend.
  // Without delayed scaling the state holds no buffers (only its header). On the GPU both copy synchronously on
  // the default stream: call them when the session's stream has finished its runs.
  // Train plans: all their state too (masters, main_grad, moments, step, runtime scalars), so
  // a restored session continues bit-identically.
  Result<std::vector<uint8_t>> state() const;
  Status set_state(const std::vector<uint8_t>& bytes);
  // Train plans (te-compile --mode train; on the GPU under bf16, fp8-current, fp8-delayed, fp8-block):
  // a runtime scalar the step reads, e.g. "optimizer.lr", or "first_microbatch" (0: reuse
  // the weights' copies the previous run made, TE's is_first_microbatch=False), or
  // "forward_only" (1: only the forward, e.g. to compute the loss whose gradient the next
  // run takes as dy; no state changes). Finite only.
  Status set_scalar(const std::string& name, double value);
  // One state tensor in the backend's memory, to read or write between runs: a master
  // "<weight>.master", "<weight>.main_grad" (zero it after reading it, with --optimizer none),
  // AdamW's "<weight>.exp_avg" and "<weight>.exp_avg_sq", "optimizer.step".
  Result<TensorView> state_tensor(const std::string& name) const;
  Backend backend() const;

 private:
  struct Impl;
  Result<TensorView> view(bool input, const std::string& name) const;
  std::shared_ptr<Impl> impl_;
};

}  // namespace tec
