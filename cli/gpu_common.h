// What te-run's GPU backends share: latency statistics, output comparison against the CPU
// reference and its bound, and CUDA checks that report a lost device (exit code 8).
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/op_registry.h"
#include "runtime/session.h"

namespace tec::cli {

// Through the runtime's check, so that a sticky error (illegal address) is reported as a lost
// device (exit code 8) here too.
#define TEC_CLI_CUDA(call) runtime::check_cuda((call), #call, "")

struct Stats {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0, min = 0;
};

inline Stats stats_of(std::vector<double> us) {
  Stats s;
  if (us.empty()) return s;
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[std::min(us.size() - 1, static_cast<size_t>(q * static_cast<double>(us.size())))]; };
  s.p50 = at(0.5);
  s.p90 = at(0.9);
  s.p99 = at(0.99);
  s.min = us.front();
  double sum = 0;
  for (double v : us) sum += v;
  s.mean = sum / static_cast<double>(us.size());
  return s;
}

inline nlohmann::json stats_json(const Stats& s) { return {{"p50_us", s.p50}, {"p90_us", s.p90}, {"p99_us", s.p99}, {"mean_us", s.mean}, {"min_us", s.min}}; }

struct Compare {
  double rel = 0, max_abs = 0;
  bool finite = true;
  size_t worst = 0;  // the element of the largest |got - want|
};

inline Compare compare(const HostTensor& got, const HostTensor& want) {
  double num = 0, den = 0;
  Compare c;
  for (size_t i = 0; i < want.values.size(); ++i) {
    const double g = got.values[i], w = want.values[i];
    if (!std::isfinite(g) && std::isfinite(w)) c.finite = false;
    num += (g - w) * (g - w);
    den += w * w;
    if (std::fabs(g - w) > c.max_abs) c.max_abs = std::fabs(g - w), c.worst = i;
  }
  c.rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  if (!std::isfinite(c.rel)) c.finite = false;
  return c;
}

// A session's outputs, byte for byte: the replay checks.
inline std::vector<uint8_t> output_bytes(const plan::Profile& profile, runtime::Session& session, cudaStream_t stream) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i < profile.buffers.size(); ++i) {
    const plan::Buffer& b = profile.buffers[i];
    if (b.region != "output") continue;
    const size_t at = out.size();
    out.resize(at + static_cast<size_t>(b.bytes));
    session.download(static_cast<int>(i), out.data() + at, static_cast<size_t>(b.bytes), stream);
  }
  return out;
}

// Saves (restore = false) or restores a session's state buffers: delayed scaling's histories
// move on with every run, so replays that must give the same bytes start from the same state.
inline void state_bytes(const plan::Profile& profile, runtime::Session& session, std::vector<uint8_t>& bytes, bool restore,
                        cudaStream_t stream) {
  size_t at = 0;
  for (size_t i = 0; i < profile.buffers.size(); ++i) {
    const plan::Buffer& b = profile.buffers[i];
    if (b.region != "state") continue;
    if (!restore) bytes.resize(at + static_cast<size_t>(b.bytes));
    if (restore) session.upload(static_cast<int>(i), bytes.data() + at, static_cast<size_t>(b.bytes), stream);
    else session.download(static_cast<int>(i), bytes.data() + at, static_cast<size_t>(b.bytes), stream);
    at += static_cast<size_t>(b.bytes);
  }
}

// The bound on ||gpu - reference|| / ||reference|| for a whole output: the GEMMs accumulate
// in another order, and a few elements then round to a neighbouring code.
inline double output_bound(const std::string& recipe) {
  if (recipe == "bf16") return 0.01;
  if (recipe == "nvfp4") return 0.15;
  return 0.05;
}

// A train plan's lasting state (main_grad, masters, moments) after whole steps run apart on
// both backends: a last-bit difference upstream (cuDNN's attention sums in its own order) moves
// FP8 gradient codes (E5M2: a step is 12-25%) and the wgrad sums them, so the bound is the one
// the fp64 training tests hold the reference itself to (tests/fp64_train.h). Each step is also
// checked alone, from the GPU's arena before it, to the tighter bounds.
inline double train_state_bound(const std::string& recipe) {
  if (recipe == "bf16") return 0.01;
  if (recipe == "nvfp4") return 0.5;
  return 0.15;
}

inline std::string profile_name(const std::map<std::string, int64_t>& dims) {
  std::string out;
  for (const auto& [dim, size] : dims) out += (out.empty() ? "" : " ") + dim + "=" + std::to_string(size);
  return out;
}


}  // namespace tec::cli
