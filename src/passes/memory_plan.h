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

// workspace: train plans' weight copies made from the masters, kept across runs so that a
// microbatch after the first may skip remaking them.
enum class Region : uint8_t { constants, state, workspace, input, output, scratch };
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

// Train plans: what a step holds for its backward, and what persists across steps.
struct TrainMemory {
  // The buffers the backward nodes read as saved tensors, each once, in the copies they read
  // (the FP8 columnwise copy of a linear's input, not its rowwise copy): TE's save layout.
  int64_t saved_bytes = 0;
  int64_t saved_new_bytes = 0;  // of which tensors made only to be saved (mean, rsigma, a mask)
  // Of which the forward's own tensors, held rather than copied (the seeds' aliases), once
  // each however many backward nodes read them.
  int64_t bytes_saved_by_aliasing = 0;
  // --recompute: what the backward recomputes instead (without --recompute, saved_bytes would
  // be this much more).
  int64_t recomputed_bytes = 0;
  int64_t state_bytes = 0;      // masters, main_grad, optimizer moments, scalars, scaling state
  int64_t workspace_bytes = 0;  // the weights' copies made from the masters
};
TrainMemory train_memory(const Graph& graph, const MemoryPlan& plan);

// The buffer names memory_plan gives: "ln.data", "act.state.scale", "fc1+act.ws.staging.data".
std::string value_buffer_name(const std::string& value, BufferRole role);
std::string state_buffer_name(const std::string& value, const std::string& state);
std::string workspace_buffer_name(const std::string& step, const std::string& workspace, BufferRole role);

}  // namespace tec
