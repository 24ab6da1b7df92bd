// parallel_for: the CPU reference's one form of parallelism. Work items are independent, so
// results never depend on the thread count.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace tec {

// Calls body(i) for i in [0, n) on up to hardware_concurrency threads; rethrows the first
// exception after all threads stop.
template <typename Body>
void parallel_for(int64_t n, Body&& body) {
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::max<int64_t>(1, n));
  if (threads <= 1 || n < 2) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  auto worker = [&] {
    for (int64_t i = next++; i < n && !failed; i = next++) {
      try {
        body(i);
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  // A thread that cannot be started (out of memory or threads) is simply not there: this
  // thread's worker takes its items. Throwing here would destroy joinable threads.
  for (int64_t t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(worker);
    } catch (...) {
      break;
    }
  }
  worker();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace tec
