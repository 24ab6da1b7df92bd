// tec's embedding API: load a plan once, create a Session per thread or stream, run it.
// Nothing throws across this header: every call returns a Status or a Result, whose code is
// the CLIs' exit code for the same failure (3 invalid plan, 4 unsupported, 6 I/O, 7 device:
// no CUDA device, out of memory, a failed CUDA or cuBLASLt call; 70 internal).
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

namespace tec {

namespace plan {
struct Plan;
}
namespace runtime {
class Session;
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

// One tensor's data buffer: on the device for a Session, described only for a Plan.
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

 private:
  friend class Session;
  std::shared_ptr<const plan::Plan> plan_;
};

// One arena, its CUDA graph and its cuBLASLt state, on the current device. Sessions of one
// plan on one device share the uploaded constants. Not for concurrent use: one per thread.
class Session {
 public:
  static Result<Session> create(const Plan& plan, const std::map<std::string, int64_t>& dims = {});
  // One cudaGraphLaunch on `stream`; results are ready when the stream is.
  Status run(cudaStream_t stream);
  // Launch by launch (debugging, per-step timing).
  Status run_eager(cudaStream_t stream);
  // Device views of an input (to fill) and an output (to read).
  Result<TensorView> input(const std::string& name) const;
  Result<TensorView> output(const std::string& name) const;

 private:
  std::shared_ptr<runtime::Session> session_;
};

}  // namespace tec
