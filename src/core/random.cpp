#include "core/random.h"

#include <cmath>

namespace tec {

namespace {
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// Uniform in (0, 1], never 0, so that log() is finite.
double uniform(uint64_t& state) { return (static_cast<double>(splitmix64(state) >> 11) + 1.0) * 0x1p-53; }
}  // namespace

std::vector<float> random_weight(uint64_t seed, const std::string& name, int64_t count, float mean, float stddev) {
  uint64_t state = seed ^ 0x6a09e667f3bcc909ull;
  for (unsigned char c : name) state = (state ^ c) * 0x100000001b3ull;
  std::vector<float> out(static_cast<size_t>(count));
  const double two_pi = 6.283185307179586;
  for (size_t i = 0; i < out.size(); i += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform(state))), theta = two_pi * uniform(state);
    out[i] = static_cast<float>(mean + stddev * r * std::cos(theta));
    if (i + 1 < out.size()) out[i + 1] = static_cast<float>(mean + stddev * r * std::sin(theta));
  }
  return out;
}

}  // namespace tec
