// include/tec/runtime.h over runtime::Session: every exception becomes a Status.
#include "tec/runtime.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "ir/runtime_scalars.h"
#include "core/hash.h"
#include "reference/executor.h"
#include "runtime/session.h"

namespace tec {

namespace {

// A failure's Status. Copying its message can itself run out of memory; then the Status keeps
// its code with an empty message, because nothing may throw across the API.
Status failure(ErrorKind kind, const char* prefix, const char* text) noexcept {
  Status s;
  s.code = exit_code(kind);
  try {
    s.message = std::string(prefix) + text;
  } catch (...) {
  }
  return s;
}

// `what` names the call for an out-of-memory message, the only error without its own context.
template <typename F>
auto guarded(const char* what, F&& f) noexcept -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    return failure(e.kind(), "", e.what());
  } catch (const std::bad_alloc&) {
    return failure(ErrorKind::device, "out of host memory in ", what);
  } catch (const std::exception& e) {
    return failure(ErrorKind::internal, "", e.what());
  }
}

const plan::Profile& pick(const plan::Plan& p, const std::map<std::string, int64_t>& dims) {
  return p.profile(dims.empty() ? p.profiles.at(0).dims : dims);
}

std::vector<TensorView> views(const plan::Profile& p, const std::vector<std::string>& names) {
  std::vector<TensorView> out;
  for (const auto& name : names) {
    const plan::Tensor& t = p.tensors.at(name);
    const plan::Buffer& b = p.buffers.at(static_cast<size_t>(t.buffers.at(BufferRole::data)));
    out.push_back({name, std::string(to_string(b.dtype)), t.proto.shape.dims, nullptr, static_cast<size_t>(b.bytes)});
  }
  return out;
}

}  // namespace

Result<Plan> Plan::load_file(const std::string& path) {
  return guarded("Plan::load_file", [&]() -> Result<Plan> {
    Plan p;
    p.plan_ = std::make_shared<const plan::Plan>(plan::Plan::load_file(path));
    return p;
  });
}

Result<Plan> Plan::load_memory(const void* data, size_t size, const std::string& name) {
  return guarded("Plan::load_memory", [&]() -> Result<Plan> {
    TEC_USAGE_CHECK(data != nullptr || size == 0, (ErrorContext{"plan", "", "", name})) << "no plan bytes";
    Plan p;
    p.plan_ = std::make_shared<const plan::Plan>(plan::Plan::load(std::span(static_cast<const uint8_t*>(data), size), name));
    return p;
  });
}

std::vector<std::map<std::string, int64_t>> Plan::profiles() const {
  std::vector<std::map<std::string, int64_t>> out;
  if (plan_)
    for (const auto& p : plan_->profiles) out.push_back(p.dims);
  return out;
}

Result<std::vector<TensorView>> Plan::inputs(const std::map<std::string, int64_t>& dims) const {
  return guarded("Plan::inputs", [&]() -> Result<std::vector<TensorView>> {
    TEC_USAGE_CHECK(plan_ != nullptr, {}) << "no plan loaded";
    const plan::Profile& p = pick(*plan_, dims);
    return views(p, p.inputs);
  });
}

Result<std::vector<TensorView>> Plan::outputs(const std::map<std::string, int64_t>& dims) const {
  return guarded("Plan::outputs", [&]() -> Result<std::vector<TensorView>> {
    TEC_USAGE_CHECK(plan_ != nullptr, {}) << "no plan loaded";
    const plan::Profile& p = pick(*plan_, dims);
    return views(p, p.outputs);
  });
}

Result<Preflight> Plan::check(int device) const {
  return guarded("Plan::check", [&]() -> Result<Preflight> {
    TEC_USAGE_CHECK(plan_ != nullptr, {}) << "no plan loaded";
    return runtime::preflight(*plan_, device);
  });
}

struct Session::Impl {
  std::shared_ptr<const plan::Plan> plan;  // keeps the plan alive for the backends' references
  const plan::Profile* profile = nullptr;
  std::unique_ptr<runtime::Session> gpu;
  std::unique_ptr<reference::Session> cpu;

  void* address(int buffer) { return gpu ? gpu->address(buffer) : cpu->buffer_bytes(buffer).data(); }
  // Whole-buffer copies between the host and the backend's memory (synchronous).
  void read(int buffer, void* host) {
    const size_t bytes = static_cast<size_t>(profile->buffers.at(static_cast<size_t>(buffer)).bytes);
    if (gpu) gpu->download(buffer, host, bytes, nullptr);
    else std::memcpy(host, cpu->buffer_bytes(buffer).data(), bytes);
  }
  void write(int buffer, const void* host) {
    const size_t bytes = static_cast<size_t>(profile->buffers.at(static_cast<size_t>(buffer)).bytes);
    if (gpu) gpu->upload(buffer, host, bytes, nullptr);
    else std::memcpy(cpu->buffer_bytes(buffer).data(), host, bytes);
  }
  // Everything a session keeps across runs: delayed scaling's amax histories and scales, and
  // a train plan's masters, main_grad, optimizer moments and step, and runtime scalars.
  std::vector<int> state_buffers() const {
    std::vector<int> out;
    for (size_t i = 0; i < profile->buffers.size(); ++i)
      if (profile->buffers[i].region == "state") out.push_back(static_cast<int>(i));
    return out;
  }
};

Result<Session> Session::create(const Plan& plan, const std::map<std::string, int64_t>& dims, Backend backend) {
  return guarded("Session::create", [&]() -> Result<Session> {
    TEC_USAGE_CHECK(plan.plan_ != nullptr, {}) << "no plan loaded";
    auto impl = std::make_shared<Impl>();
    impl->plan = plan.plan_;
    impl->profile = &pick(*plan.plan_, dims);
    // One Session is one rank; a tensor-parallel plan's ranks need their communicator.
    TEC_USAGE_CHECK(plan.plan_->tp_size == 1, (ErrorContext{"runtime", "", "", plan.plan_->name}))
        << "the plan is tensor parallel over " << plan.plan_->tp_size
        << " ranks: create each rank's session with Session::create_rank and the group's NCCL communicator "
           "(te-run --backend cpu runs every rank on the CPU reference)";
    if (backend == Backend::gpu) impl->gpu = std::make_unique<runtime::Session>(plan.plan_, *impl->profile);
    else impl->cpu = std::make_unique<reference::Session>(*plan.plan_, *impl->profile);
    Session s;
    s.impl_ = std::move(impl);
    return s;
  });
}

Result<Session> Session::create_rank(const Plan& plan, ncclComm* comm, int rank, const std::map<std::string, int64_t>& dims) {
  return guarded("Session::create_rank", [&]() -> Result<Session> {
    TEC_USAGE_CHECK(plan.plan_ != nullptr, {}) << "no plan loaded";
    TEC_USAGE_CHECK(comm != nullptr, {}) << "no NCCL communicator";
    TEC_USAGE_CHECK(rank >= 0 && rank < plan.plan_->tp_size, (ErrorContext{"runtime", "", "", plan.plan_->name}))
        << "rank " << rank << " is not one of the plan's " << plan.plan_->tp_size << " ranks";
    auto impl = std::make_shared<Impl>();
    impl->plan = plan.plan_;
    impl->profile = &pick(*plan.plan_, dims);
    impl->gpu = std::make_unique<runtime::Session>(plan.plan_, *impl->profile, runtime::Communicator{comm, rank});
    Session s;
    s.impl_ = std::move(impl);
    return s;
  });
}

Backend Session::backend() const { return impl_ && impl_->cpu ? Backend::cpu : Backend::gpu; }

Status Session::run(cudaStream_t stream) {
  return guarded("Session::run", [&] {
    TEC_USAGE_CHECK(impl_ != nullptr, {}) << "no session";
    if (impl_->gpu) impl_->gpu->run(stream);
    else impl_->cpu->run();
    return Status{};
  });
}

Status Session::run_eager(cudaStream_t stream) {
  return guarded("Session::run_eager", [&] {
    TEC_USAGE_CHECK(impl_ != nullptr, {}) << "no session";
    if (impl_->gpu) impl_->gpu->run_eager(stream);
    else impl_->cpu->run();
    return Status{};
  });
}

namespace {

// The state format: "TECSTATE", u32 version, u32 count, then per buffer u32 name length, the
// name, u64 size, the bytes; then a checksum64 of everything before it.
constexpr char kStateMagic[8] = {'T', 'E', 'C', 'S', 'T', 'A', 'T', 'E'};
constexpr uint32_t kStateVersion = 2;  // 2: the four-lane checksum64

template <typename T>
void put(std::vector<uint8_t>& out, T value) {
  const auto* p = reinterpret_cast<const uint8_t*>(&value);
  out.insert(out.end(), p, p + sizeof value);
}

}  // namespace

// The view of `name` if it is one of the profile's inputs (or outputs).
Result<TensorView> Session::view(bool input, const std::string& name) const {
  return guarded("Session::input/output", [&]() -> Result<TensorView> {
    TEC_USAGE_CHECK(impl_ != nullptr, {}) << "no session";
    const plan::Profile& p = *impl_->profile;
    const auto& list = input ? p.inputs : p.outputs;
    TEC_USAGE_CHECK(std::find(list.begin(), list.end(), name) != list.end(), (ErrorContext{"runtime", name, "", ""}))
        << "the plan has no " << (input ? "input" : "output") << " '" << name << "'";
    TensorView v = views(p, {name}).at(0);
    v.data = impl_->address(p.tensors.at(name).buffers.at(BufferRole::data));
    return v;
  });
}

Result<TensorView> Session::input(const std::string& name) const { return view(true, name); }
Result<TensorView> Session::output(const std::string& name) const { return view(false, name); }

Result<std::vector<uint8_t>> Session::state() const {
  return guarded("Session::state", [&]() -> Result<std::vector<uint8_t>> {
    TEC_USAGE_CHECK(impl_ != nullptr, {}) << "no session";
    std::vector<uint8_t> out(kStateMagic, kStateMagic + 8);
    const std::vector<int> buffers = impl_->state_buffers();
    put<uint32_t>(out, kStateVersion);
    put<uint32_t>(out, static_cast<uint32_t>(buffers.size()));
    for (int index : buffers) {
      const plan::Buffer& b = impl_->profile->buffers[static_cast<size_t>(index)];
      put<uint32_t>(out, static_cast<uint32_t>(b.name.size()));
      out.insert(out.end(), b.name.begin(), b.name.end());
      put<uint64_t>(out, static_cast<uint64_t>(b.bytes));
      const size_t at = out.size();
      out.resize(at + static_cast<size_t>(b.bytes));
      impl_->read(index, out.data() + at);
    }
    put<uint64_t>(out, checksum64(out));
    return out;
  });
}

Status Session::set_state(const std::vector<uint8_t>& bytes) {
  return guarded("Session::set_state", [&] {
    TEC_USAGE_CHECK(impl_ != nullptr, {}) << "no session";
    const ErrorContext ctx{"runtime", "", "", "state"};
    // Every field is checked before anything is written: a bad state changes nothing.
    size_t at = 0;
    auto take = [&](size_t n) {
      TEC_USER_CHECK(n <= bytes.size() - 8 - at, ctx) << "truncated state (" << bytes.size() << " bytes)";
      const uint8_t* p = bytes.data() + at;
      at += n;
      return p;
    };
    auto get = [&]<typename T>(T) {
      T v;
      std::memcpy(&v, take(sizeof v), sizeof v);
      return v;
    };
    TEC_USER_CHECK(bytes.size() >= 8 + 8 + 8 && std::memcmp(bytes.data(), kStateMagic, 8) == 0, ctx)
        << "not a tec session state (no TECSTATE header)";
    take(8);
    const uint32_t version = get(uint32_t{});
    TEC_USER_CHECK(version == kStateVersion, ctx)
        << "state format version " << version << " is not supported; this build reads version " << kStateVersion;
    uint64_t sum = 0;
    std::memcpy(&sum, bytes.data() + bytes.size() - 8, 8);
    TEC_USER_CHECK(sum == checksum64(std::span(bytes.data(), bytes.size() - 8)), ctx) << "state checksum mismatch: the bytes are corrupted";
    const std::vector<int> buffers = impl_->state_buffers();
    const uint32_t count = get(uint32_t{});
    TEC_USER_CHECK(count == buffers.size(), ctx) << "the state has " << count << " buffers, this session's profile " << buffers.size();
    std::vector<std::pair<int, const uint8_t*>> writes;
    for (int index : buffers) {
      const plan::Buffer& b = impl_->profile->buffers[static_cast<size_t>(index)];
      const uint32_t length = get(uint32_t{});
      const std::string name(reinterpret_cast<const char*>(take(length)), length);
      TEC_USER_CHECK(name == b.name, ctx) << "state buffer '" << name << "' where this profile has '" << b.name << "'";
      TEC_USER_CHECK(get(uint64_t{}) == static_cast<uint64_t>(b.bytes), ctx) << "state buffer '" << name << "' has the wrong size";
      writes.emplace_back(index, take(static_cast<size_t>(b.bytes)));
    }
    TEC_USER_CHECK(at == bytes.size() - 8, ctx) << "trailing bytes after the state";
    // Runtime scalars are state too: one outside its range would make every later step NaN.
    const auto& scalars = impl_->profile->runtime_scalars;
    for (const auto& [index, data] : writes) {
      const plan::Buffer& b = impl_->profile->buffers[static_cast<size_t>(index)];
      if (b.bytes != 4 || std::find(scalars.begin(), scalars.end(), b.tensor) == scalars.end()) continue;
      float value;
      std::memcpy(&value, data, 4);
      if (const auto error = runtime_scalar_error(b.tensor, value)) throw Error(ErrorKind::invalid_input, ctx, *error);
    }
    for (const auto& [index, data] : writes) impl_->write(index, data);
    // Restored masters: the next run remakes the weights' copies from them.
    if (impl_->cpu) impl_->cpu->remake_weight_workspace();
    else impl_->gpu->remake_weight_workspace(nullptr);
    return Status{};
  });
}

Status Session::set_scalar(const std::string& name, double value) {
  return guarded("Session::set_scalar", [&] {
    TEC_USAGE_CHECK(impl_ != nullptr, {}) << "no session";
    const plan::Profile& p = *impl_->profile;
    const ErrorContext ctx{"runtime", name, "", "runtime scalar"};
    TEC_USAGE_CHECK(std::find(p.runtime_scalars.begin(), p.runtime_scalars.end(), name) != p.runtime_scalars.end(), ctx)
        << "the plan has no runtime scalar '" << name << "'"
        << (p.runtime_scalars.empty() ? std::string(" (it is no train plan)") : "; it has: " + [&] {
             std::string all;
             for (const auto& n : p.runtime_scalars) all += (all.empty() ? "" : ", ") + n;
             return all;
           }());
    const auto f = static_cast<float>(value);
    TEC_USAGE_CHECK(std::isfinite(f), ctx) << "runtime scalar '" << name << "' must be a finite float, got " << value;
    if (const auto error = runtime_scalar_error(name, f)) throw Error(ErrorKind::usage, ctx, *error);
    if (impl_->gpu) impl_->gpu->set_scalar(name, f, nullptr);
    else impl_->cpu->set_scalar(name, f);
    return Status{};
  });
}

Result<TensorView> Session::state_tensor(const std::string& name) const {
  return guarded("Session::state_tensor", [&]() -> Result<TensorView> {
    TEC_USAGE_CHECK(impl_ != nullptr, {}) << "no session";
    const plan::Profile& p = *impl_->profile;
    auto it = p.tensors.find(name);
    TEC_USAGE_CHECK(it != p.tensors.end() && it->second.kind == "state", (ErrorContext{"runtime", name, "", ""}))
        << "the plan has no state tensor '" << name << "' (train plans name theirs <weight>.master, <weight>.main_grad, "
           "<weight>.exp_avg, <weight>.exp_avg_sq, optimizer.step and the runtime scalars)";
    TensorView v = views(p, {name}).at(0);
    v.data = impl_->address(it->second.buffers.at(BufferRole::data));
    return v;
  });
}

Result<std::vector<TensorView>> Plan::state(const std::map<std::string, int64_t>& dims) const {
  return guarded("Plan::state", [&]() -> Result<std::vector<TensorView>> {
    TEC_USAGE_CHECK(plan_ != nullptr, {}) << "no plan loaded";
    const plan::Profile& p = pick(*plan_, dims);
    std::vector<std::string> names;
    for (const auto& [name, t] : p.tensors)
      if (t.kind == "state") names.push_back(name);
    return views(p, names);
  });
}

}  // namespace tec
