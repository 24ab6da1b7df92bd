// Many sessions of one shared Plan on many threads give bit-identical outputs.
//
//   thread_test PLAN cpu|gpu RUNS_PER_THREAD THREADS...   e.g. thread_test p.teplan gpu 1000 1 2 4 8
//
// Each thread gets its own Session and its own seeded input. The expected output for each
// input comes from one session on the main thread first. Every run restores the session's
// initial delayed-scaling state, so every run of an input must reproduce its expected output
// bit for bit. Prints the throughput for each thread count; exits 1 on any mismatch or error.
// In CI it runs on the CPU backend under ThreadSanitizer.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tec/runtime.h"

namespace {

bool g_gpu = false;

bool copy(void* to, const void* from, size_t bytes, cudaStream_t stream, cudaMemcpyKind kind) {
  if (!g_gpu) {
    std::memcpy(to, from, bytes);
    return true;
  }
  return cudaMemcpyAsync(to, from, bytes, kind, stream) == cudaSuccess && cudaStreamSynchronize(stream) == cudaSuccess;
}

struct Worker {
  tec::Session session;
  tec::TensorView in, out;
  std::vector<uint8_t> state, input, output;
  cudaStream_t stream = nullptr;

  // Restore the initial state, write the input, run, read the output.
  bool run() {
    return session.set_state(state).ok() && copy(in.data, input.data(), in.bytes, stream, cudaMemcpyHostToDevice) &&
           session.run(stream).ok() && copy(output.data(), out.data, out.bytes, stream, cudaMemcpyDeviceToHost);
  }
};

// A session with its input (bf16 N(0,1) from `seed`) and views; nullptr-free or exits.
Worker make_worker(const tec::Plan& plan, unsigned seed) {
  auto created = tec::Session::create(plan, {}, g_gpu ? tec::Backend::gpu : tec::Backend::cpu);
  if (!created.ok()) {
    std::fprintf(stderr, "thread_test: %s\n", created.status().message.c_str());
    std::exit(1);
  }
  Worker w{created.value(), {}, {}, {}, {}, {}, nullptr};
  const std::string in_name = plan.inputs().value().at(0).name, out_name = plan.outputs().value().at(0).name;
  w.in = w.session.input(in_name).value();
  w.out = w.session.output(out_name).value();
  w.state = w.session.state().value();
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  w.input.resize(w.in.bytes);
  for (size_t i = 0; i + 1 < w.input.size(); i += 2) {  // bf16: the top half of a float
    const float v = normal(rng);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    w.input[i] = static_cast<uint8_t>(bits >> 16);
    w.input[i + 1] = static_cast<uint8_t>(bits >> 24);
  }
  w.output.resize(w.out.bytes);
  if (g_gpu && cudaStreamCreateWithFlags(&w.stream, cudaStreamNonBlocking) != cudaSuccess) std::exit(1);
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: thread_test PLAN cpu|gpu RUNS_PER_THREAD THREADS...\n");
    return 2;
  }
  g_gpu = std::string(argv[2]) == "gpu";
  const int runs = std::atoi(argv[3]);
  auto plan = tec::Plan::load_file(argv[1]);
  if (!plan.ok()) {
    std::fprintf(stderr, "thread_test: %s\n", plan.status().message.c_str());
    return 1;
  }
  if (plan.value().inputs().value().size() != 1 || plan.value().inputs().value()[0].dtype != "bf16") {
    std::fprintf(stderr, "thread_test: needs a plan with one bf16 input\n");
    return 1;
  }
  int max_threads = 1;
  for (int a = 4; a < argc; ++a) max_threads = std::max(max_threads, std::atoi(argv[a]));

  // Expected outputs, one session on this thread, one input per worker index.
  std::vector<std::vector<uint8_t>> expected;
  {
    for (int t = 0; t < max_threads; ++t) {
      Worker w = make_worker(plan.value(), 1000u + static_cast<unsigned>(t));
      if (!w.run()) return 1;
      expected.push_back(w.output);
      if (w.stream) cudaStreamDestroy(w.stream);
    }
  }
  int failed = 0;
  for (int a = 4; a < argc; ++a) {
    const int threads = std::atoi(argv[a]);
    std::vector<Worker> workers;
    for (int t = 0; t < threads; ++t) workers.push_back(make_worker(plan.value(), 1000u + static_cast<unsigned>(t)));
    std::atomic<int> mismatches{0}, errors{0};
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        Worker& w = workers[static_cast<size_t>(t)];
        for (int r = 0; r < runs; ++r) {
          if (!w.run()) ++errors;
          else if (w.output != expected[static_cast<size_t>(t)]) ++mismatches;
        }
      });
    for (auto& th : pool) th.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("thread_test (%s): %d thread(s) x %d runs: %.1f runs/s, %d mismatches, %d errors\n", g_gpu ? "gpu" : "cpu", threads,
                runs, threads * runs / seconds, mismatches.load(), errors.load());
    failed += mismatches + errors;
    for (auto& w : workers)
      if (w.stream) cudaStreamDestroy(w.stream);
  }
  // Distinct inputs must give distinct outputs, or bit-identity would prove little.
  if (expected.size() > 1 && expected[0] == expected[1]) {
    std::printf("thread_test: different inputs gave the same output\n");
    ++failed;
  }
  std::printf("thread_test: %s\n", failed ? "FAILED" : "every output bit-identical to the single-thread result");
  return failed ? 1 : 0;
}
