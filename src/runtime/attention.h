// Attention launches (plan::Attention) through cuDNN's fused SDPA (issue 25). cuDNN graphs are
// not portable across cuDNN versions or GPUs, so the plan holds only the attention's shape and
// the session builds the graph when it is created: through the cuDNN frontend's C++ API over the
// libcudnn.so.9 that runtime/cudnn.h loads, cached per process by shape, device and cuDNN
// version. Plans without attention never load cuDNN.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "plan/plan.h"

namespace tec::runtime {

// Where one attention launch reads and writes (null for an absent optional buffer).
struct AttentionPointers {
  void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *stats = nullptr, *seq_lens = nullptr, *bias = nullptr;
  void *d_o = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;  // a backward launch's
};

// One session's attention launches: their cuDNN graphs (built, or found in the process's
// cache) and a cuDNN handle. Throws Error(device) naming the library when cuDNN cannot be
// loaded, and Error(unsupported) naming the step when cuDNN takes no engine for a launch's shape
// (a head dim it does not support, say).
class AttentionRunner {
 public:
  // `launches` (indices into profile.launches) are the attention launches; `where` names each
  // launch's step, for errors; `pointers` gives a launch's buffers, on which a graph new to the
  // process times cuDNN's candidate plans with TEC_CUDNN_AUTOTUNE=1 (else: the heuristic's first).
  AttentionRunner(const plan::Profile& profile, const std::vector<size_t>& launches, const std::vector<std::string>& where,
                  const std::function<AttentionPointers(size_t launch)>& pointers);
  ~AttentionRunner();
  AttentionRunner(const AttentionRunner&) = delete;
  AttentionRunner& operator=(const AttentionRunner&) = delete;

  // The most workspace any of the launches needs; the session allocates it once.
  size_t workspace_bytes() const;
  // Enqueues launch `launch` (an index into profile.launches) on `stream`.
  void enqueue(size_t launch, const AttentionPointers& pointers, void* workspace, cudaStream_t stream) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether this build can run attention at all (it was configured with the cuDNN frontend's
// headers); when not, AttentionRunner throws Error(unsupported) saying how to get them.
bool attention_available();

}  // namespace tec::runtime
