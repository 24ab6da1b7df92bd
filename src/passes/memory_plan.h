// memory_plan: the lifetime of every buffer, packed into one arena with 256-byte aligned
// offsets (ARCHITECTURE.md §5). Weights live in a separate constants region (shared by
// every session on a device); the arena holds state, inputs, outputs, then scratch, where
// buffers whose lifetimes do not overlap share bytes.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "passes/schedule.h"

namespace tec {

inline constexpr int64_t kArenaAlignment = 256;

enum class Region : uint8_t { constants, state, input, output, scratch };
std::string_view to_string(Region region);

struct PlannedBuffer {
  std::string tensor;  // the value it belongs to
  std::string name;    // "ln.data", "x.quantized.scale_inv", "act.state.amax_history"
  BufferRole role = BufferRole::data;
  std::string state;   // "" or the state buffer's name ("scale", "amax_history")
  Region region = Region::scratch;
  Shape shape;
  DType dtype = DType::uint8;
  int64_t bytes = 0;
  int64_t offset = 0;  // in the constants blob for Region::constants, else in the arena
  int first_step = 0;  // lifetime, inclusive; fixed regions span the whole run
  int last_step = 0;
  // Constants: "" when the device holds the bytes as the plan does, "small_m_tiles" /
  // "mid_m_tiles" for an FP8 weight the runtime permutes at upload into
  // kernels/small_m_layout.h's / kernels/mid_m_layout.h's layout.
  std::string device_layout;
};

struct MemoryPlan {
  std::vector<PlannedBuffer> buffers;
  int64_t arena_bytes = 0;
  int64_t constant_bytes = 0;
  int64_t scratch_peak_bytes = 0;   // the packed scratch region
  int64_t scratch_naive_bytes = 0;  // every scratch buffer side by side
  int64_t naive_bytes = 0;          // the arena if nothing shared storage
};

// A buffer to place: size, alignment and the steps it is live in (inclusive).
struct Interval {
  int64_t bytes;
  int64_t alignment;
  int first;
  int last;
};

// Greedy by size: the largest buffer first, each at the lowest aligned offset that does not
// overlap a placed buffer live at the same time. Returns the packed size; offsets[i] is
// interval i's. Deterministic for equal inputs.
int64_t pack_intervals(std::span<const Interval> intervals, std::vector<int64_t>& offsets);

MemoryPlan memory_plan(const Graph& graph, const Schedule& schedule);

// The buffer names memory_plan gives: "ln.data", "act.state.scale", "fc1+act.ws.staging.data".
std::string value_buffer_name(const std::string& value, BufferRole role);
std::string state_buffer_name(const std::string& value, const std::string& state);
std::string workspace_buffer_name(const std::string& step, const std::string& workspace, BufferRole role);

}  // namespace tec
