// include/tec/runtime.h over runtime::Session: every exception becomes a Status.
#include "tec/runtime.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/session.h"

namespace tec {

namespace {

template <typename F>
auto guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    return Status{exit_code(e.kind()), e.what()};
  } catch (const std::bad_alloc&) {
    return Status{exit_code(ErrorKind::device), "out of host memory"};
  } catch (const std::exception& e) {
    return Status{exit_code(ErrorKind::internal), e.what()};
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
  return guarded([&]() -> Result<Plan> {
    Plan p;
    p.plan_ = std::make_shared<const plan::Plan>(plan::Plan::load_file(path));
    return p;
  });
}

Result<Plan> Plan::load_memory(const void* data, size_t size, const std::string& name) {
  return guarded([&]() -> Result<Plan> {
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
  return guarded([&]() -> Result<std::vector<TensorView>> {
    TEC_USAGE_CHECK(plan_ != nullptr, {}) << "no plan loaded";
    const plan::Profile& p = pick(*plan_, dims);
    return views(p, p.inputs);
  });
}

Result<std::vector<TensorView>> Plan::outputs(const std::map<std::string, int64_t>& dims) const {
  return guarded([&]() -> Result<std::vector<TensorView>> {
    TEC_USAGE_CHECK(plan_ != nullptr, {}) << "no plan loaded";
    const plan::Profile& p = pick(*plan_, dims);
    return views(p, p.outputs);
  });
}

Result<Session> Session::create(const Plan& plan, const std::map<std::string, int64_t>& dims) {
  return guarded([&]() -> Result<Session> {
    TEC_USAGE_CHECK(plan.plan_ != nullptr, {}) << "no plan loaded";
    Session s;
    s.session_ = std::make_shared<runtime::Session>(plan.plan_, pick(*plan.plan_, dims));
    return s;
  });
}

Status Session::run(cudaStream_t stream) {
  return guarded([&] {
    TEC_USAGE_CHECK(session_ != nullptr, {}) << "no session";
    session_->run(stream);
    return Status{};
  });
}

Status Session::run_eager(cudaStream_t stream) {
  return guarded([&] {
    TEC_USAGE_CHECK(session_ != nullptr, {}) << "no session";
    session_->run_eager(stream);
    return Status{};
  });
}

namespace {

// The device view of `name` if it is one of `names` (the profile's inputs or outputs).
Result<TensorView> device_view(const runtime::Session* session, const std::vector<std::string> plan::Profile::*names,
                               const std::string& name, const char* what) {
  return guarded([&]() -> Result<TensorView> {
    TEC_USAGE_CHECK(session != nullptr, {}) << "no session";
    const plan::Profile& p = session->profile();
    const auto& list = p.*names;
    TEC_USAGE_CHECK(std::find(list.begin(), list.end(), name) != list.end(), (ErrorContext{"runtime", name, "", ""}))
        << "the plan has no " << what << " '" << name << "'";
    TensorView v = views(p, {name}).at(0);
    v.data = session->address(p.tensors.at(name).buffers.at(BufferRole::data));
    return v;
  });
}

}  // namespace

Result<TensorView> Session::input(const std::string& name) const {
  return device_view(session_.get(), &plan::Profile::inputs, name, "input");
}

Result<TensorView> Session::output(const std::string& name) const {
  return device_view(session_.get(), &plan::Profile::outputs, name, "output");
}

}  // namespace tec
