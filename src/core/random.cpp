#include "core/random.h"

#include <algorithm>
#include <cmath>
#include <thread>

namespace tec {

namespace {
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

// splitmix64 of the n-th state after `base`: the generator is a counter, so any value can
// be computed from its index, and a tensor can be filled in parallel with the same result.
uint64_t splitmix64_at(uint64_t base, uint64_t n) {
  uint64_t z = base + n * kGolden;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// Uniform in (0, 1], never 0, so that log() is finite. 24 bits: the values end up as bf16 or
// FP8, and float math halves te-compile's time on a random-initialised model.
float uniform(uint64_t bits) { return (static_cast<float>(bits >> 40) + 1.0f) * 0x1p-24f; }
}  // namespace

std::vector<float> random_weight(uint64_t seed, const std::string& name, int64_t count, float mean, float stddev) {
  uint64_t base = seed ^ 0x6a09e667f3bcc909ull;
  for (unsigned char c : name) base = (base ^ c) * 0x100000001b3ull;
  std::vector<float> out(static_cast<size_t>(count));
  const size_t pairs = (out.size() + 1) / 2;
  // Box-Muller: pair p uses draws 2p+1 and 2p+2.
  auto fill = [&](size_t first, size_t last) {
    for (size_t p = first; p < last; ++p) {
      const float r = stddev * std::sqrt(-2.0f * std::log(uniform(splitmix64_at(base, 2 * p + 1))));
      const float theta = 6.2831853f * uniform(splitmix64_at(base, 2 * p + 2));
      out[2 * p] = mean + r * std::cos(theta);
      if (2 * p + 1 < out.size()) out[2 * p + 1] = mean + r * std::sin(theta);
    }
  };
  const size_t threads = pairs < (size_t{1} << 16) ? 1 : std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 16);
  std::vector<std::thread> workers;
  for (size_t t = 1; t < threads; ++t) workers.emplace_back(fill, pairs * t / threads, pairs * (t + 1) / threads);
  fill(0, pairs / threads);
  for (auto& w : workers) w.join();
  return out;
}

}  // namespace tec
