// What te-run's GPU backends share: latency statistics, output comparison against the CPU
// reference and its bound, and CUDA checks that report a lost device (exit code 8).
#pragma once

#include <algorithm>
#include <set>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/op_registry.h"
#include "core/file_io.h"
#include "plan/file.h"
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
  double error_rms = 0, want_rms = 0;  // sqrt(mean (got - want)^2), sqrt(mean want^2)
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
  const double n = static_cast<double>(std::max<size_t>(want.values.size(), 1));
  c.error_rms = std::sqrt(num / n), c.want_rms = std::sqrt(den / n);
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
// in another order, and a few elements then round to a neighbouring code. Each quantized GEMM
// the difference passes adds its own rounding noise, independent of the last, so the bound
// grows as the square root of the plan's GEMM steps past four (a layer's MLP): a whole causal
// LM of two layers and its lm_head (13 GEMM steps) measured 0.058 under fp8-current and 0.19
// under NVFP4 on the H200, every step of it bit-identical or within its own bound.
inline double output_bound(const std::string& recipe, const plan::Profile& profile) {
  const double base = recipe == "bf16" ? 0.01 : recipe == "nvfp4" ? 0.15 : 0.05;
  if (recipe == "bf16") return base;
  const auto gemm_steps = std::count_if(profile.steps.begin(), profile.steps.end(), [](const plan::Step& s) { return s.kind == "gemm"; });
  return base * std::max(1.0, std::sqrt(static_cast<double>(gemm_steps) / 4.0));
}

// A train plan's lasting state (main_grad, masters, moments) after whole steps run apart on
// both backends: a last-bit difference upstream (cuDNN's attention sums in its own order) moves
// FP8 gradient codes (E5M2: a step is 12-25%) and the wgrad sums them, so the bound is the one
// the fp64 training tests hold the reference itself to (tests/fp64_train.h). Each step is also
// checked alone, from the GPU's arena before it, to the tighter bounds.
// Under bf16 each attention layer's backward (cuDNN's order against the reference's, in bf16)
// adds its own error to the gradients below it, which add up like a random walk: the bound
// grows with the square root of the layers (a 2-layer fp32 Qwen2 LM, attention cast to bf16:
// 1.02e-2 in a k projection's gradient).
inline double train_state_bound(const std::string& recipe, const plan::Profile& profile) {
  if (recipe == "nvfp4") return 0.5;
  if (recipe != "bf16") return 0.15;
  std::set<int> attention_steps;
  for (const plan::Launch& l : profile.launches)
    if (l.kind == "attention" && profile.steps.at(static_cast<size_t>(l.step)).phase == Phase::forward) attention_steps.insert(l.step);
  return 0.01 * std::max(1.0, std::sqrt(static_cast<double>(attention_steps.size())));
}

// One eager run timed step by step (te-run --profile, --trace): an event before the run and one
// after each step's launches on the run's stream (Session::run_eager's after_step). Keys: the
// step's index, or -1 / -2 for the run-level launches before and after the steps (delayed
// scaling's scale_inv and update). Work on the side stream (a collective overlapped with a
// later step) counts where the run's stream waits for it.
struct StepTimes {
  std::vector<int> keys;                 // in run order
  std::vector<double> us, start_us;      // each key's time, and when it started after the run's
};

// `finish` waits for the run (a tensor-parallel rank waits with its collective timeout); by
// default the stream is synchronized.
inline StepTimes time_steps_eager(runtime::Session& session, cudaStream_t stream, const std::function<void()>& finish = {}) {
  std::vector<std::pair<int, cudaEvent_t>> marks;
  cudaEvent_t begin;
  TEC_CLI_CUDA(cudaEventCreate(&begin));
  TEC_CLI_CUDA(cudaEventRecord(begin, stream));
  session.run_eager(stream, [&](int step) {
    cudaEvent_t e;
    TEC_CLI_CUDA(cudaEventCreate(&e));
    TEC_CLI_CUDA(cudaEventRecord(e, stream));
    marks.push_back({step, e});
  });
  if (finish) finish();
  else TEC_CLI_CUDA(cudaStreamSynchronize(stream));
  StepTimes t;
  float prev = 0;
  for (size_t m = 0; m < marks.size(); ++m) {
    float ms = 0;
    TEC_CLI_CUDA(cudaEventElapsedTime(&ms, begin, marks[m].second));
    t.keys.push_back(marks[m].first < 0 ? (m == 0 ? -1 : -2) : marks[m].first);
    t.us.push_back((ms - prev) * 1000.0);
    t.start_us.push_back(prev * 1000.0);
    prev = ms;
    cudaEventDestroy(marks[m].second);
  }
  cudaEventDestroy(begin);
  return t;
}

// The per-step medians of many such runs: printed under `heading` when `print`, into `report`
// ("steps", a train plan's "phases_us"), and as a Chrome trace at `trace_path` (where each
// step first started, its median) unless "". A step is matched across runs by its key and how
// often the key came before in that run: runs may skip steps (a train plan's weight copies
// after the first microbatch), and a step can come in parts (a GEMM's row blocks around the
// collective overlapped with them).
inline void report_step_times(const plan::Profile& profile, const std::vector<StepTimes>& runs, bool print, const std::string& heading,
                              const std::string& trace_path, nlohmann::json& report) {
  using nlohmann::json;
  using Part = std::pair<int, int>;  // key, occurrence within the run
  std::vector<Part> order;
  std::map<Part, std::vector<double>> times;
  std::map<Part, double> first_start;
  for (const StepTimes& run : runs) {
    std::map<int, int> seen;
    for (size_t i = 0; i < run.keys.size(); ++i) {
      const Part part{run.keys[i], seen[run.keys[i]]++};
      if (!times.count(part)) {
        order.push_back(part);
        first_start[part] = run.start_us[i];
      }
      times[part].push_back(run.us[i]);
    }
  }
  auto name_of = [&](int key) {
    return key == -1 ? std::string("(delayed scale_inv)") : key == -2 ? std::string("(delayed update)") : profile.steps[static_cast<size_t>(key)].name;
  };
  auto kind_of = [&](int key) { return key < 0 ? std::string("kernel") : profile.steps[static_cast<size_t>(key)].kind; };
  json per_step = json::array(), trace = json::array();
  std::map<std::string, double> phase_us;
  if (print) std::printf("\n%s:\n  %-28s %-10s %10s\n", heading.c_str(), "step", "kind", "us");
  for (const Part& part : order) {
    const int key = part.first;
    const double median = stats_of(times[part]).p50;
    if (print) std::printf("  %-28s %-10s %10.1f\n", name_of(key).c_str(), kind_of(key).c_str(), median);
    per_step.push_back({{"step", name_of(key)}, {"kind", kind_of(key)}, {"p50_us", median}});
    trace.push_back({{"name", name_of(key)}, {"cat", kind_of(key)}, {"ph", "X"}, {"pid", 0}, {"tid", 0}, {"ts", first_start[part]}, {"dur", median}});
    if (key >= 0) phase_us[std::string(to_string(profile.steps[static_cast<size_t>(key)].phase))] += median;
  }
  report["steps"] = per_step;
  if (profile.train) {  // the step time split by phase
    if (print) {
      std::printf("per phase (sum of the step medians, us):");
      for (const auto& [phase, us] : phase_us) std::printf("  %s %.1f", phase.c_str(), us);
      std::printf("\n");
    }
    report["phases_us"] = phase_us;
  }
  if (!trace_path.empty()) {
    const std::string text = json{{"traceEvents", trace}, {"displayTimeUnit", "ns"}}.dump(1) + "\n";
    tec::write_text_file(trace_path, text);
    std::printf("wrote Chrome trace %s (open in Perfetto)\n", trace_path.c_str());
  }
}

inline std::string profile_name(const std::map<std::string, int64_t>& dims) {
  std::string out;
  for (const auto& [dim, size] : dims) out += (out.empty() ? "" : " ") + dim + "=" + std::to_string(size);
  return out;
}


}  // namespace tec::cli
