// Resource faults: plan load and session creation fail cleanly when any one allocation fails.
//
//   fault_test cpu PLAN              host allocations; CI runs it under ASan + LeakSanitizer
//   fault_test gpu PLAN BIG_PLAN     host allocations and device acquisitions (exit 77 without
//                                    a GPU); BIG_PLAN's arena must exceed 64 MiB
//
// This binary replaces operator new, so that the k-th host allocation can throw bad_alloc, and
// the runtime's hook (runtime/session.h) fails the k-th CUDA or cuBLASLt acquisition. For every
// k up to the number a clean attempt makes, the attempt must:
//   - return an error (out of host memory, or a device error), never crash or succeed;
//   - leave the device's free memory as it was;
//   - leave a session created earlier running with bit-identical output (the plan and other
//     sessions stay usable);
//   - be followed by a clean attempt that succeeds, after which as many host allocations are
//     alive as before the sweep (nothing leaked).
// TEC_FAULT_K=k runs only that k (with the clean attempts around it), e.g. under gdb.
// The gpu mode also fills the device until the big plan's arena does not fit: the preflight
// and Session::create must say so with the bytes needed and free, and it must work after.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <fstream>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "runtime/session.h"
#include "tec/runtime.h"
#include "tec/tec_c.h"

namespace {

// Host allocations: counted, the live ones tracked, and number k after fail_host_allocation_at(k) failing.
std::atomic<int64_t> g_allocations{0}, g_fail_allocation_at{0}, g_live{0};

void* allocate(size_t bytes, size_t alignment) {
  if (g_allocations.fetch_add(1) + 1 == g_fail_allocation_at.load()) throw std::bad_alloc();
  if (bytes == 0) bytes = 1;
  void* p = alignment > alignof(std::max_align_t) ? std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment)
                                                  : std::malloc(bytes);
  if (!p) throw std::bad_alloc();
  ++g_live;
  return p;
}
void release(void* p) noexcept {
  if (!p) return;
  --g_live;
  std::free(p);
}

int64_t fail_host_allocation_at(int64_t k) {
  g_fail_allocation_at = k;
  return g_allocations.exchange(0);
}

}  // namespace

void* operator new(size_t n) { return allocate(n, 0); }
void* operator new[](size_t n) { return allocate(n, 0); }
void* operator new(size_t n, std::align_val_t a) { return allocate(n, static_cast<size_t>(a)); }
void* operator new[](size_t n, std::align_val_t a) { return allocate(n, static_cast<size_t>(a)); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n, 0);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, size_t) noexcept { release(p); }
void operator delete[](void* p, size_t) noexcept { release(p); }
void operator delete(void* p, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }

namespace {

int g_failures = 0;
bool g_gpu = false;

void fail(const std::string& what) {
  std::fprintf(stderr, "fault_test: FAIL: %s\n", what.c_str());
  ++g_failures;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fault_test: cannot read %s\n", path.c_str());
    std::exit(2);
  }
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

size_t device_free() {
  size_t free_bytes = 0, total = 0;
  if (g_gpu) cudaMemGetInfo(&free_bytes, &total);
  return free_bytes;
}

tec::Backend backend() { return g_gpu ? tec::Backend::gpu : tec::Backend::cpu; }

// A session created before the sweep, with a seeded random input; after every failed attempt
// it must still reproduce its first output bit for bit.
struct Witness {
  tec::Session session;
  std::string output_name;
  std::vector<uint8_t> initial_state, expected;

  std::vector<uint8_t> run() {
    const tec::TensorView out = session.output(output_name).value();
    std::vector<uint8_t> got(out.bytes);
    if (!session.set_state(initial_state).ok() || !session.run().ok()) return {};
    if (g_gpu) {
      if (cudaMemcpy(got.data(), out.data, out.bytes, cudaMemcpyDeviceToHost) != cudaSuccess) return {};
    } else {
      std::memcpy(got.data(), out.data, out.bytes);
    }
    return got;
  }
};

Witness make_witness(const tec::Plan& plan) {
  Witness w{tec::Session::create(plan, {}, backend()).value(), plan.outputs().value().at(0).name, {}, {}};
  const tec::TensorView in = w.session.input(plan.inputs().value().at(0).name).value();
  std::vector<uint8_t> input(in.bytes);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (size_t i = 0; i + 1 < input.size(); i += 2) {  // bf16: the top half of a float
    const float v = normal(rng);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    input[i] = static_cast<uint8_t>(bits >> 16);
    input[i + 1] = static_cast<uint8_t>(bits >> 24);
  }
  if (g_gpu) cudaMemcpy(in.data, input.data(), in.bytes, cudaMemcpyHostToDevice);
  else std::memcpy(in.data, input.data(), in.bytes);
  w.initial_state = w.session.state().value();
  w.expected = w.run();
  return w;
}

struct Injector {
  const char* name;  // "host allocation", "device acquisition"
  int64_t (*fail_at)(int64_t);
};

const Injector kHost{"host allocation", fail_host_allocation_at};
const Injector kDevice{"device acquisition", tec::runtime::fail_device_acquisition_at};

// What an attempt returned, held without the heap (the sweep counts live allocations).
struct Outcome {
  int code = 0;
  char message[1024] = {};
};
Outcome outcome(int code, const char* message) {
  Outcome o;
  o.code = code;
  std::snprintf(o.message, sizeof o.message, "%s", message);
  return o;
}
Outcome outcome(const tec::Status& s) { return outcome(s.code, s.message.c_str()); }

// Runs `attempt` clean to count its allocations, then once for each k with the k-th failing.
void sweep(const std::string& what, const Injector& injector, const std::function<Outcome()>& attempt, Witness* witness) {
  {
    const Outcome clean = attempt();  // also warms lazily built state (CUDA modules, caches)
    if (clean.code != 0) return fail(what + ": the clean attempt failed: " + clean.message);
  }
  injector.fail_at(0);
  attempt();
  const int64_t count = injector.fail_at(0);
  const int64_t live_before = g_live.load();
  const size_t free_before = device_free();
  int64_t reported = 0;
  const char* only = std::getenv("TEC_FAULT_K");  // one k, e.g. to debug it in gdb
  for (int64_t k = only ? std::atoll(only) : 1; k <= (only ? std::atoll(only) : count); ++k) {
    // No heap object of this loop is alive when the live allocations are compared.
    auto at = [&] { return what + ", " + injector.name + " " + std::to_string(k) + " of " + std::to_string(count); };
    injector.fail_at(k);
    const Outcome failed = attempt();
    const int64_t made = injector.fail_at(0);
    const int code = failed.code;
    const char* message = failed.message;
    if (code == 0) {
      fail(at() + " failed but the attempt succeeded (" + std::to_string(made) + " made)");
    } else if (code != 7 || (&injector == &kHost && std::strstr(message, "out of host memory") == nullptr)) {
      fail(at() + ": error code " + std::to_string(code) + ", expected 7 (out of memory): " + message);
    } else if (reported++ < 2) {
      std::printf("  e.g. %s: %s\n", at().c_str(), message);
    }
    if (device_free() != free_before) {
      const int64_t now = static_cast<int64_t>(device_free()) - static_cast<int64_t>(free_before);
      cudaDeviceSynchronize();
      const int64_t synced = static_cast<int64_t>(device_free()) - static_cast<int64_t>(free_before);
      fail(at() + ": device free memory changed by " + std::to_string(now) + " bytes (" + std::to_string(synced) +
           " after a device synchronize)");
    }
    if (witness && witness->run() != witness->expected) fail(at() + ": the session created earlier no longer reproduces its output");
    if (attempt().code != 0) fail(at() + ": the next clean attempt failed");
    if (const int64_t leaked = g_live.load() - live_before; leaked != 0)
      fail(at() + ": " + std::to_string(leaked) + " host allocations leaked");
  }
  std::printf("%s: %lld %ss, each failed cleanly\n", what.c_str(), static_cast<long long>(count), injector.name);
}


void arena_larger_than_free_memory(const std::string& big_plan_path) {
  const tec::Plan big = tec::Plan::load_file(big_plan_path).value();
  const int64_t arena = big.check().value().bytes_needed;
  if (arena < (int64_t{96} << 20)) return fail("the big plan needs only " + std::to_string(arena) + " bytes");
  // Leave 32 MiB: the constants fit, the arena does not.
  std::vector<void*> hog;
  for (size_t chunk = size_t{1} << 30; chunk >= (size_t{2} << 20); chunk /= 2)
    while (device_free() > (size_t{32} << 20) + chunk) {
      void* p = nullptr;
      if (cudaMalloc(&p, chunk) != cudaSuccess) break;
      hog.push_back(p);
    }
  cudaGetLastError();
  const tec::Preflight pre = big.check().value();
  if (pre.ok || pre.reason.find("bytes needed") == std::string::npos)
    fail("preflight with " + std::to_string(pre.bytes_free) + " bytes free says ok or no bytes: '" + pre.reason + "'");
  else
    std::printf("arena > free memory: preflight says '%s'\n", pre.reason.c_str());
  const int64_t live_before = g_live.load();
  {
    const auto s = tec::Session::create(big, {}, tec::Backend::gpu);
    if (s.ok()) fail("a session whose arena does not fit was created");
    else if (s.status().code != 7 || s.status().message.find("bytes needed") == std::string::npos ||
             s.status().message.find("free") == std::string::npos)
      fail("arena > free memory: unclear error: " + s.status().message);
    else
      std::printf("arena > free memory: Session::create says '%s'\n", s.status().message.c_str());
  }
  for (void* p : hog) cudaFree(p);
  if (g_live.load() != live_before) fail("the failed creation leaked host allocations");
  if (!tec::Session::create(big, {}, tec::Backend::gpu).ok()) fail("with the memory back, the big session cannot be created");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || (std::strcmp(argv[1], "gpu") == 0 && argc < 4)) {
    std::fprintf(stderr, "usage: fault_test cpu PLAN | fault_test gpu PLAN BIG_PLAN\n");
    return 2;
  }
  g_gpu = std::strcmp(argv[1], "gpu") == 0;
  if (g_gpu) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      std::printf("fault_test: SKIPPED: no CUDA device (the device faults need a GPU)\n");
      return 77;
    }
  }
  const std::vector<uint8_t> bytes = read_file(argv[2]);
  const std::string name = argv[2];
  auto load = [&] { return tec::Plan::load_memory(bytes.data(), bytes.size(), name); };

  // 1. Nothing else alive: plan load and session creation from scratch (on the GPU this
  // uploads the constants and loads the modules).
  const auto load_and_create = [&] {
    const auto plan = load();
    if (!plan.ok()) return outcome(plan.status());
    return outcome(tec::Session::create(plan.value(), {}, backend()).status());
  };
  sweep("plan load + session creation", kHost, load_and_create, nullptr);
  if (g_gpu) sweep("plan load + session creation", kDevice, load_and_create, nullptr);
  // The same through the C API, whose entry points must not let an exception reach C.
  const auto c_load_and_create = [&] {
    tec_plan* p = nullptr;
    tec_session* s = nullptr;
    tec_status status = tec_plan_load_memory(bytes.data(), bytes.size(), &p);
    if (status == TEC_OK) status = tec_session_create(p, 0, g_gpu ? TEC_BACKEND_GPU : TEC_BACKEND_CPU, &s);
    Outcome o = outcome(status, status == TEC_OK ? "" : tec_last_error());
    tec_session_free(s);
    tec_plan_free(p);
    return o;
  };
  {  // the thread's last-error string keeps its buffer by design: allocate it before counting
    tec_plan* none = nullptr;
    tec_plan_load_memory("not a plan", 10, &none);
  }
  sweep("C API: plan load + session creation", kHost, c_load_and_create, nullptr);

  // 2. A plan and a session of it alive: another session's creation fails, they carry on.
  const tec::Plan plan = load().value();
  Witness witness = make_witness(plan);
  if (witness.expected.empty()) fail("the witness session does not run");
  const auto create = [&] { return outcome(tec::Session::create(plan, {}, backend()).status()); };
  sweep("a second session", kHost, create, &witness);
  if (g_gpu) sweep("a second session", kDevice, create, &witness);

  if (g_gpu) arena_larger_than_free_memory(argv[3]);
  if (g_failures) {
    std::fprintf(stderr, "fault_test: %d failures\n", g_failures);
    return 1;
  }
  std::printf("fault_test: all resource faults handled\n");
  return 0;
}
