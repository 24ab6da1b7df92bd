// Seeded random weights for benchmarks and tests: the same (seed, name) gives the same
// values on every machine, so every contender of a benchmark can load identical weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tec {

// `count` normal values with this mean and stddev, from splitmix64 and Box-Muller in float.
std::vector<float> random_weight(uint64_t seed, const std::string& name, int64_t count, float mean, float stddev);

}  // namespace tec
