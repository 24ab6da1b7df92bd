// The CPU reference executor: runs a plan's steps over a host arena laid out exactly like
// the device arena (ARCHITECTURE.md §10). It is the oracle for every GPU test, so it is
// plain and slow on purpose: values in fp32, buffers rounded or quantized when stored.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/op_registry.h"
#include "plan/plan.h"

namespace tec::reference {

// Not thread-safe; one per thread. The plan must outlive it.
class Session {
 public:
  // Checks every op of the profile against this build's registry (unknown ops, bad
  // attributes) before anything runs; state starts at scale 1 and a zero history. `rank`: the
  // rank whose constants a tensor-parallel plan's session holds (RankGroup runs them all).
  Session(const plan::Plan& plan, const plan::Profile& profile, int64_t rank = 0);

  const plan::Profile& profile() const { return profile_; }
  // Writes an input, rounded to its dtype. Throws if the name or size is wrong.
  void set_input(const std::string& name, const HostTensor& values);
  // Seeded N(0, 1) values for every input, rounded to its dtype.
  void randomize_inputs(uint64_t seed);
  // Poisons scratch and outputs (0xFF bytes), runs every step, then updates delayed scaling.
  // Train plans: refuses a runtime scalar that is not finite, and skips the weight workspace
  // steps when the state tensor first_microbatch is 0, and runs only them and the forward
  // when forward_only is 1.
  void run();
  // A tensor with storage, decoded to float (quantized tensors are dequantized, from their
  // columnwise copy when asked).
  HostTensor read(const std::string& tensor) const;
  HostTensor read(const std::string& tensor, bool columnwise) const;
  // A state tensor of shape [1] (a runtime scalar, the optimizer's step).
  float scalar(const std::string& tensor) const;
  void set_scalar(const std::string& tensor, float value);
  const std::vector<uint8_t>& arena() const { return arena_; }
  // One arena buffer's bytes, in place (the embedding API's host views).
  std::span<uint8_t> buffer_bytes(int index) { return bytes_of(profile_.buffers.at(static_cast<size_t>(index))); }
  // The whole arena, e.g. a GPU arena's bytes, to run one step from (GPU verification).
  void set_arena(std::span<const uint8_t> bytes);
  // One step alone, without poisoning or the delayed-scaling update. A collective step needs
  // every rank: RankGroup runs those.
  void run_step(size_t step);
  // After run_step: what run() does after the last step.
  void update_delayed_scaling();
  // run() in parts, for RankGroup: checks, poisons and returns the steps to run in order;
  // then, after them, the delayed-scaling update (unless the run was forward_only).
  std::vector<size_t> begin_run();
  void end_run();
  // A collective step's one op: its input on this rank, and storing its output.
  HostTensor collective_input(size_t step) const;
  void store_collective_output(size_t step, HostTensor value);
  const Attributes& attributes(size_t step, size_t op) const { return attrs_.at(step).at(op); }
  // The next run remakes the weights' copies even if first_microbatch is 0 (restored masters).
  void remake_weight_workspace() { workspace_stale_ = true; }

 private:
  std::span<uint8_t> bytes_of(const plan::Buffer& b);
  std::span<const uint8_t> bytes_of(const plan::Buffer& b) const;
  void store(const plan::Tensor& t, std::vector<float> values);

  const plan::Plan& plan_;
  const plan::Profile& profile_;
  const std::vector<uint8_t>& constants_;  // this rank's
  std::vector<uint8_t> arena_;
  bool forward_only_ = false;
  std::vector<std::vector<Attributes>> attrs_;  // per step, per op: checked, defaults filled
  bool workspace_stale_ = true;                 // no run has made the weights' copies yet
};

// Every rank of a tensor-parallel plan in one process, step by step in lockstep: the oracle
// for multi-GPU runs (ARCHITECTURE.md §14). A collective step combines the ranks' tensors
// with its op's OpDef::collective; every other step runs on each rank alone. Inputs and
// outputs are whole tensors, split and joined by the profile's tp_layouts, so a TP=N plan
// takes and gives what the same model's one-rank plan does.
class RankGroup {
 public:
  RankGroup(const plan::Plan& plan, const plan::Profile& profile);

  int64_t size() const { return static_cast<int64_t>(ranks_.size()); }
  Session& rank(int64_t r) { return *ranks_.at(static_cast<size_t>(r)); }
  const plan::Profile& profile() const { return profile_; }
  // The whole tensor's shape: a rank's, times the ranks along the split dim.
  Shape whole_shape(const std::string& tensor) const;
  void set_input(const std::string& name, const HostTensor& whole);
  // The whole inputs the one-rank plan's Session::randomize_inputs draws, split.
  void randomize_inputs(uint64_t seed);
  // `after_step`, if given, is called after each step on every rank (a test reads the
  // intermediates there, before a later step reuses their scratch).
  void run(const std::function<void(size_t step)>& after_step = {});
  // An output (or input) made whole from the ranks' parts; a replicated one is rank 0's, and
  // must be every rank's, bit for bit. One with no layout (a weight gradient) is each rank's
  // own: read it from rank(r).
  HostTensor read(const std::string& name) const;

 private:
  TpLayout layout_of(const std::string& name) const;

  const plan::Plan& plan_;
  const plan::Profile& profile_;
  std::vector<std::unique_ptr<Session>> ranks_;
};

// An input's or output's whole shape: a rank's, times the plan's ranks along the dim its
// tp_layout splits (a one-rank plan's own shape).
Shape whole_shape(const plan::Plan& plan, const plan::Profile& profile, const std::string& tensor);

// Seeded N(0, 1) values of an input's shape, rounded later when stored (an int32 input gets
// 0 or 1; see Session::randomize_inputs).
HostTensor random_input(uint64_t seed, const std::string& name, const Shape& shape, DType dtype, const plan::Profile* profile = nullptr);
// The ops that read an int32 input, through reshapes: an embedding (token ids) or
// sequence_lengths (a padding mask); empty for routing data.
std::vector<const plan::Op*> integer_input_readers(const plan::Profile& profile, const std::string& input);

}  // namespace tec::reference
