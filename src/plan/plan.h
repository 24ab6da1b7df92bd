// A loaded plan: the manifest parsed into typed structs and validated in full, so that the
// executors can trust every offset, size and reference in it (ARCHITECTURE.md §7).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/graph.h"

namespace tec::plan {

struct Buffer {
  std::string name;
  std::string tensor;
  BufferRole role = BufferRole::data;
  std::string state;   // "" or "scale" / "amax_history"
  std::string region;  // constants, state, input, output, scratch
  DType dtype = DType::uint8;
  Shape shape;
  int64_t offset = 0;  // in the constants blob, or in the arena
  int64_t bytes = 0;
  int first_step = 0, last_step = 0;
};

struct Tensor {
  std::string name;
  std::string kind;  // input, activation, weight
  TensorProto proto;
  std::map<BufferRole, int> buffers;  // role -> index into Profile::buffers; empty: lives inside one step
  std::map<std::string, int> state;   // delayed scaling: "scale", "amax_history"
};

struct Op {
  std::string node;
  std::string op;
  Attributes attrs;
  std::vector<std::string> inputs, outputs;
};

struct Step {
  std::string name;
  std::string kind;  // gemm, kernel
  std::vector<Op> ops;
  std::vector<int> deps;
  std::vector<std::string> fusions;
};

struct Profile {
  std::map<std::string, int64_t> dims;
  int64_t arena_bytes = 0, scratch_peak_bytes = 0, scratch_naive_bytes = 0, naive_bytes = 0;
  std::vector<Buffer> buffers;
  std::map<std::string, Tensor> tensors;
  std::vector<Step> steps;
  std::vector<std::string> inputs, outputs;
  std::vector<std::string> delayed;  // tensors whose delayed-scaling state is updated after a run
};

struct Plan {
  nlohmann::json manifest;
  std::string name, recipe, mode;
  Target target;
  int64_t arena_bytes = 0;
  std::vector<uint8_t> constants;
  std::vector<Profile> profiles;

  // Throws Error(invalid_input, stage "plan") for any inconsistency.
  static Plan load(std::span<const uint8_t> bytes, const std::string& name);
  static Plan load_file(const std::string& path);
  // The profile whose dims match exactly; the error lists the profiles there are.
  const Profile& profile(const std::map<std::string, int64_t>& dims) const;
};

// Limits on a manifest's contents, checked before anything is allocated from them.
inline constexpr int64_t kMaxArenaBytes = int64_t{1} << 40;

}  // namespace tec::plan
