// embed_service: load a plan once, start N worker threads with a Session each, and serve
// requests from a queue; every request's output is checked against a saved expected output,
// and per-request latency is reported.
//
//   embed_service PLAN X.npy EXPECTED_Y.npy [--threads N] [--requests R] [--backend cpu|gpu]
//
// X.npy / EXPECTED_Y.npy: float32 [rows, cols] (tests/embed/make_expected.py writes a set).
// Each worker restores its session's initial delayed-scaling state before a request, so that
// every request sees the same scales (serving with frozen scaling state): each output must
// equal the expected one bit for bit.
#include <cuda_runtime.h>
#include <tec/runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "npy_min.h"

namespace {

struct Queue {
  std::mutex mutex;
  std::condition_variable ready;
  std::queue<int> requests;
  bool closed = false;

  void push(int id) {
    {
      std::lock_guard lock(mutex);
      requests.push(id);
    }
    ready.notify_one();
  }
  void close() {
    {
      std::lock_guard lock(mutex);
      closed = true;
    }
    ready.notify_all();
  }
  bool pop(int& id) {
    std::unique_lock lock(mutex);
    ready.wait(lock, [&] { return closed || !requests.empty(); });
    if (requests.empty()) return false;
    id = requests.front();
    requests.pop();
    return true;
  }
};

bool copy(void* to, const void* from, size_t bytes, tec::Backend backend, cudaMemcpyKind kind) {
  if (backend == tec::Backend::cpu) {
    std::memcpy(to, from, bytes);
    return true;
  }
  return cudaMemcpy(to, from, bytes, kind) == cudaSuccess;
}

int fail(const std::string& what) {
  std::fprintf(stderr, "embed_service: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: embed_service PLAN X.npy EXPECTED_Y.npy [--threads N] [--requests R] [--backend cpu|gpu]\n");
    return 2;
  }
  int threads = 4, requests = 64;
  tec::Backend backend = tec::Backend::gpu;
  for (int i = 4; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--threads") threads = std::max(1, std::atoi(value.c_str()));
    else if (flag == "--requests") requests = std::max(1, std::atoi(value.c_str()));
    else if (flag == "--backend" && (value == "cpu" || value == "gpu")) backend = value == "cpu" ? tec::Backend::cpu : tec::Backend::gpu;
    else return fail("unknown option " + flag + " " + value);
  }
  long rows = 0, cols = 0, yrows = 0, ycols = 0;
  float* x = npy_read_f32(argv[2], &rows, &cols);
  float* expected = npy_read_f32(argv[3], &yrows, &ycols);
  if (!x || !expected) return fail(std::string("cannot read ") + argv[2] + " or " + argv[3] + " (float32, 2-D)");
  const size_t n = static_cast<size_t>(rows * cols);
  std::vector<uint16_t> x_bf16(n), expected_bf16(static_cast<size_t>(yrows * ycols));
  for (size_t i = 0; i < n; ++i) x_bf16[i] = bf16_from_float(x[i]);
  for (size_t i = 0; i < expected_bf16.size(); ++i) expected_bf16[i] = bf16_from_float(expected[i]);

  auto plan = tec::Plan::load_file(argv[1]);
  if (!plan.ok()) return fail(plan.status().message);
  if (backend == tec::Backend::gpu) {
    auto check = plan.value().check();
    if (!check.ok()) return fail(check.status().message);
    if (!check.value().ok) return fail("this GPU cannot run the plan: " + check.value().reason + " (try --backend cpu)");
  }
  const auto inputs = plan.value().inputs();
  const auto outputs = plan.value().outputs();
  if (!inputs.ok() || !outputs.ok() || inputs.value().size() != 1 || outputs.value().size() != 1)
    return fail("this example serves plans with one input and one output");
  const tec::TensorView in_desc = inputs.value()[0], out_desc = outputs.value()[0];
  if (in_desc.dtype != "bf16" || in_desc.bytes != n * 2 || out_desc.dtype != "bf16" || out_desc.bytes != expected_bf16.size() * 2)
    return fail("X.npy / EXPECTED_Y.npy do not match the plan's bf16 input '" + in_desc.name + "' and output '" + out_desc.name + "'");

  Queue queue;
  std::vector<double> latency_us(static_cast<size_t>(requests));
  std::atomic<int> mismatches{0}, errors{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < threads; ++w)
    workers.emplace_back([&] {
      auto session = tec::Session::create(plan.value(), {}, backend);
      if (!session.ok()) {
        std::fprintf(stderr, "embed_service: session: %s\n", session.status().message.c_str());
        ++errors;
        return;
      }
      tec::Session& s = session.value();
      const auto initial = s.state();
      const tec::TensorView in = s.input(in_desc.name).value(), out = s.output(out_desc.name).value();
      std::vector<uint16_t> y(expected_bf16.size());
      for (int id; queue.pop(id);) {
        const auto start = std::chrono::steady_clock::now();
        const bool ok = initial.ok() && s.set_state(initial.value()).ok() &&
                        copy(in.data, x_bf16.data(), in.bytes, backend, cudaMemcpyHostToDevice) && s.run().ok() &&
                        copy(y.data(), out.data, out.bytes, backend, cudaMemcpyDeviceToHost);
        latency_us[static_cast<size_t>(id)] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
        if (!ok) ++errors;
        else if (y != expected_bf16) ++mismatches;
      }
    });
  const auto started = std::chrono::steady_clock::now();
  for (int id = 0; id < requests; ++id) queue.push(id);
  queue.close();
  for (auto& t : workers) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  std::sort(latency_us.begin(), latency_us.end());
  auto at = [&](double q) { return latency_us[std::min(latency_us.size() - 1, static_cast<size_t>(q * latency_us.size()))]; };
  std::printf("embed_service: %d requests on %d threads (%s backend): %.1f requests/s, latency p50 %.1f us, p99 %.1f us\n",
              requests, threads, backend == tec::Backend::cpu ? "cpu" : "gpu", requests / seconds, at(0.5), at(0.99));
  std::printf("embed_service: %d of %d outputs bit-identical to the expected output, %d errors\n",
              requests - mismatches.load() - errors.load(), requests, errors.load());
  free(x);
  free(expected);
  return mismatches == 0 && errors == 0 ? 0 : 1;
}
