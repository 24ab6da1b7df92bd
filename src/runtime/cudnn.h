// cuDNN loaded at run time (ARCHITECTURE.md §15), for attention (issue 25): libcudnn.so.9 is
// opened the first time a plan with attention needs it, so plans without attention run where
// there is no cuDNN. The cuDNN frontend, built with NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING,
// resolves its own backend calls from this library's handle. No attention step uses it yet:
// the cuDNN lowering is not written (docs/status.md).
#pragma once

#include <cstddef>

#include "runtime/dynamic_library.h"

namespace tec::runtime {

struct CudnnLibrary {
  DynamicLibrary library;
  size_t version = 0;         // cudnnGetVersion: major * 10000 + minor * 100 + patch (9.14.0: 91400)
  size_t cudart_version = 0;  // the CUDA runtime it was built for (13.0: 13000)

  size_t (*get_version)() = nullptr;
  size_t (*get_cudart_version)() = nullptr;
  const char* (*get_error_string)(int) = nullptr;  // cudnnStatus_t, an int-sized enum
};

// The oldest cuDNN tec takes: 9.0, whose fused SDPA graphs (bf16 and FP8, forward and
// backward) the frontend builds.
constexpr size_t kMinCudnnVersion = 90000;

// Opens `file` (a path or a soname) and resolves the entry points tec calls; throws
// Error(device) naming the file when it is missing, lacks an entry point, is older than
// kMinCudnnVersion, or was built for another major CUDA version than `cudart_version`
// (this build's CUDART_VERSION by default): its kernels would not load in this process.
CudnnLibrary load_cudnn(const std::string& file, int cudart_version = 0);

// The process's cuDNN, loaded once on first use: $TEC_CUDNN_LIBRARY if set (e.g. the
// nvidia-cudnn-cu13 wheel's lib/libcudnn.so.9), else libcudnn.so.9 by the loader's search.
// `needed_for` names what needs it, for the error; a failed load is retried on the next call.
const CudnnLibrary& cudnn(const std::string& needed_for);

}  // namespace tec::runtime
