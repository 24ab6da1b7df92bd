// include/tec/tec_c.h over include/tec/runtime.h: handles own the C++ objects and the
// strings and shapes they hand out.
#include "tec/tec_c.h"

#include <cstring>
#include <deque>
#include <iterator>
#include <memory>
#include <new>
#include <string>

#include "tec/runtime.h"

struct tec_plan {
  tec::Plan plan;
  std::vector<std::map<std::string, int64_t>> profiles;
  std::vector<std::vector<tec::TensorView>> inputs, outputs;  // per profile
};

struct tec_session {
  tec::Session session;
  std::deque<tec::TensorView> views;  // handed out; a deque keeps their addresses
};

namespace {

thread_local std::string g_last_error;

// When even the message cannot be allocated, the error is left empty (the code still says it).
void set_last_error(const char* text) noexcept {
  try {
    g_last_error = text;
  } catch (...) {
    g_last_error.clear();
  }
}
tec_status fail(const tec::Status& s) noexcept {
  set_last_error(s.message.c_str());
  return static_cast<tec_status>(s.code);
}
tec_status usage(const char* what) noexcept {
  set_last_error(what);
  return TEC_ERROR_USAGE;
}
tec_status ok() noexcept {
  g_last_error.clear();
  return TEC_OK;
}

// Every entry point that allocates runs inside this: no exception may unwind into C.
template <typename F>
tec_status guard(F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    set_last_error("out of host memory");
    return TEC_ERROR_DEVICE;
  } catch (const std::exception& e) {
    set_last_error(e.what());
    return TEC_ERROR_INTERNAL;
  }
}

void fill(const tec::TensorView& v, tec_tensor* out) {
  out->name = v.name.c_str();
  out->dtype = v.dtype.c_str();
  out->rank = static_cast<int>(v.shape.size());
  out->shape = v.shape.data();
  out->data = v.data;
  out->bytes = v.bytes;
}

tec_status adopt(tec::Result<tec::Plan> loaded, tec_plan** out) {
  if (!loaded.ok()) return fail(loaded.status());
  auto p = std::make_unique<tec_plan>(tec_plan{std::move(loaded.value()), {}, {}, {}});
  p->profiles = p->plan.profiles();
  for (const auto& dims : p->profiles) {
    auto in = p->plan.inputs(dims);
    auto outs = p->plan.outputs(dims);
    if (!in.ok() || !outs.ok()) return fail(in.ok() ? outs.status() : in.status());
    p->inputs.push_back(std::move(in.value()));
    p->outputs.push_back(std::move(outs.value()));
  }
  *out = p.release();
  return ok();
}

bool valid_profile(const tec_plan* plan, int profile) {
  return plan && profile >= 0 && static_cast<size_t>(profile) < plan->profiles.size();
}

// The plan's inputs or outputs (`lists`) of one profile.
using TensorLists = std::vector<std::vector<tec::TensorView>> tec_plan::*;

tec_status count_of(TensorLists lists, const tec_plan* plan, int profile, int* count) {
  if (!valid_profile(plan, profile) || !count) return usage("null handle or no such profile");
  *count = static_cast<int>((plan->*lists)[static_cast<size_t>(profile)].size());
  return ok();
}

tec_status tensor_of(TensorLists lists, const tec_plan* plan, int profile, int index, tec_tensor* tensor) {
  if (!valid_profile(plan, profile) || !tensor) return usage("null handle or no such profile");
  const auto& list = (plan->*lists)[static_cast<size_t>(profile)];
  if (index < 0 || static_cast<size_t>(index) >= list.size()) return usage("tensor index out of range");
  fill(list[static_cast<size_t>(index)], tensor);
  return ok();
}

tec_status session_view(tec_session* s, const char* name, tec_tensor* tensor, bool input) {
  if (!s || !name || !tensor) return usage("null argument");
  return guard([&] {
    auto v = input ? s->session.input(name) : s->session.output(name);
    if (!v.ok()) return fail(v.status());
    s->views.push_back(std::move(v.value()));
    fill(s->views.back(), tensor);
    return ok();
  });
}

}  // namespace

extern "C" {

const char* tec_last_error(void) { return g_last_error.c_str(); }

tec_status tec_plan_load_file(const char* path, tec_plan** plan) {
  if (!path || !plan) return usage("null argument");
  return guard([&] { return adopt(tec::Plan::load_file(path), plan); });
}

tec_status tec_plan_load_memory(const void* data, size_t size, tec_plan** plan) {
  if (!plan) return usage("null argument");
  return guard([&] { return adopt(tec::Plan::load_memory(data, size), plan); });
}

void tec_plan_free(tec_plan* plan) { delete plan; }

tec_status tec_plan_profile_count(const tec_plan* plan, int* count) {
  if (!plan || !count) return usage("null argument");
  *count = static_cast<int>(plan->profiles.size());
  return ok();
}

tec_status tec_plan_profile_dim(const tec_plan* plan, int profile, int index, const char** name, int64_t* value) {
  if (!valid_profile(plan, profile) || !name || !value) return usage("null handle or no such profile");
  const auto& dims = plan->profiles[static_cast<size_t>(profile)];
  if (index < 0 || static_cast<size_t>(index) >= dims.size()) return usage("dim index out of range");
  auto it = std::next(dims.begin(), index);
  *name = it->first.c_str();
  *value = it->second;
  return ok();
}

tec_status tec_plan_input_count(const tec_plan* plan, int profile, int* count) {
  return count_of(&tec_plan::inputs, plan, profile, count);
}

tec_status tec_plan_input(const tec_plan* plan, int profile, int index, tec_tensor* tensor) {
  return tensor_of(&tec_plan::inputs, plan, profile, index, tensor);
}

tec_status tec_plan_output_count(const tec_plan* plan, int profile, int* count) {
  return count_of(&tec_plan::outputs, plan, profile, count);
}

tec_status tec_plan_output(const tec_plan* plan, int profile, int index, tec_tensor* tensor) {
  return tensor_of(&tec_plan::outputs, plan, profile, index, tensor);
}

tec_status tec_session_create(const tec_plan* plan, int profile, tec_backend backend, tec_session** session) {
  if (!valid_profile(plan, profile) || !session) return usage("null handle or no such profile");
  if (backend != TEC_BACKEND_GPU && backend != TEC_BACKEND_CPU) return usage("unknown backend");
  return guard([&] {
    auto created = tec::Session::create(plan->plan, plan->profiles[static_cast<size_t>(profile)],
                                        backend == TEC_BACKEND_CPU ? tec::Backend::cpu : tec::Backend::gpu);
    if (!created.ok()) return fail(created.status());
    *session = new tec_session{std::move(created.value()), {}};
    return ok();
  });
}

void tec_session_free(tec_session* session) { delete session; }

tec_status tec_session_run(tec_session* session, void* cuda_stream) {
  if (!session) return usage("null session");
  return guard([&] {
    const tec::Status s = session->session.run(static_cast<cudaStream_t>(cuda_stream));
    return s.ok() ? ok() : fail(s);
  });
}

tec_status tec_session_input(tec_session* session, const char* name, tec_tensor* tensor) {
  return session_view(session, name, tensor, true);
}

tec_status tec_session_output(tec_session* session, const char* name, tec_tensor* tensor) {
  return session_view(session, name, tensor, false);
}

tec_status tec_session_get_state(tec_session* session, void* buffer, size_t capacity, size_t* size) {
  if (!session || !size) return usage("null argument");
  return guard([&] {
    auto state = session->session.state();
    if (!state.ok()) return fail(state.status());
    *size = state.value().size();
    if (!buffer) return ok();
    if (capacity < state.value().size()) return usage("state buffer too small (call with buffer NULL for the size)");
    std::memcpy(buffer, state.value().data(), state.value().size());
    return ok();
  });
}

tec_status tec_session_set_state(tec_session* session, const void* buffer, size_t size) {
  if (!session || (!buffer && size)) return usage("null argument");
  const auto* p = static_cast<const uint8_t*>(buffer);
  return guard([&] {
    const tec::Status s = session->session.set_state(std::vector<uint8_t>(p, p + size));
    return s.ok() ? ok() : fail(s);
  });
}

}  // extern "C"
