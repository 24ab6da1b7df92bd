// Kernel compilation with NVRTC (ARCHITECTURE.md §6): a kernel template from kernels/,
// specialised by defines, compiled to a cubin for one arch. Compiles run in parallel, and a
// disk cache keyed by (source, headers, options, NVRTC version) makes an unchanged rebuild
// near-instant. NVRTC needs no GPU.
#pragma once

#include <string>
#include <vector>

#include "core/file_cache.h"

namespace tec::codegen {

struct KernelRequest {
  std::string source;                // file under kernels/, e.g. "quantize_per_tensor.cu"
  std::vector<std::string> defines;  // "TEC_FP8_E4M3=1", ...
  std::string arch = "sm_90";
  // Compile for the arch-specific target ("sm_90a"), whose features (wgmma) only that exact
  // arch has; the cubin stays filed under `arch`, on which it runs.
  bool arch_specific = false;
};

struct CompiledKernel {
  std::vector<uint8_t> cubin;
  // ptxas's warnings that the kernel spills registers to local memory, one per line; empty when
  // it spills none. A spill is no error, but in tec's kernels it has meant a slow inner loop
  // (grouped_gemm.cu's producer: 17% of fc1's time), so te-compile says so.
  std::string spills;
  bool cache_hit = false;
  double milliseconds = 0;  // compile time (0 for a hit)
  std::string cache_key;
};

using tec::default_cache_dir;  // core/file_cache.h
std::string nvrtc_version();

class KernelCompiler {
 public:
  // An empty cache_dir disables the cache.
  explicit KernelCompiler(std::string cache_dir);
  // Compiles every request on a pool of threads; results in request order. A failure throws
  // Error(compile) naming the kernel, the generated source kept on disk, and NVRTC's log
  // (whose lines carry the source's file and line).
  std::vector<CompiledKernel> compile(const std::vector<KernelRequest>& requests) const;

 private:
  CompiledKernel compile_one(const KernelRequest& request) const;
  std::string cache_dir_;
};

}  // namespace tec::codegen
