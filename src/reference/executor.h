// The CPU reference executor: runs a plan's steps over a host arena laid out exactly like
// the device arena (ARCHITECTURE.md §10). It is the oracle for every GPU test, so it is
// plain and slow on purpose: values in fp32, buffers rounded or quantized when stored.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/op_registry.h"
#include "plan/plan.h"

namespace tec::reference {

// Not thread-safe; one per thread. The plan must outlive it.
class Session {
 public:
  // Checks every op of the profile against this build's registry (unknown ops, bad
  // attributes) before anything runs; state starts at scale 1 and a zero history.
  Session(const plan::Plan& plan, const plan::Profile& profile);

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
  // One step alone, without poisoning or the delayed-scaling update.
  void run_step(size_t step);
  // After run_step: what run() does after the last step.
  void update_delayed_scaling();
  // The next run remakes the weights' copies even if first_microbatch is 0 (restored masters).
  void remake_weight_workspace() { workspace_stale_ = true; }

 private:
  std::span<uint8_t> bytes_of(const plan::Buffer& b);
  std::span<const uint8_t> bytes_of(const plan::Buffer& b) const;
  void store(const plan::Tensor& t, std::vector<float> values);

  const plan::Plan& plan_;
  const plan::Profile& profile_;
  std::vector<uint8_t> arena_;
  std::vector<std::vector<Attributes>> attrs_;  // per step, per op: checked, defaults filled
  bool workspace_stale_ = true;                 // no run has made the weights' copies yet
};

}  // namespace tec::reference
