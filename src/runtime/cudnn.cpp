#include "runtime/cudnn.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>

#include "core/error.h"

namespace tec::runtime {

namespace {

std::string version_string(size_t code) {
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
}

CudnnLibrary open_cudnn(const std::string& file, const std::string& needed_for, int cudart_version) {
  CudnnLibrary c{DynamicLibrary::open({file}, needed_for)};
  resolve_symbol(c.library, c.get_version, "cudnnGetVersion");
  resolve_symbol(c.library, c.get_cudart_version, "cudnnGetCudartVersion");
  resolve_symbol(c.library, c.get_error_string, "cudnnGetErrorString");
  c.version = c.get_version();
  c.cudart_version = c.get_cudart_version();
  if (c.version < kMinCudnnVersion)
    throw Error(ErrorKind::device, {"runtime", "", "", ""},
                c.library.path() + " is cuDNN " + version_string(c.version) + "; tec needs " + version_string(kMinCudnnVersion) + " or newer");
  const size_t want = static_cast<size_t>(cudart_version > 0 ? cudart_version : CUDART_VERSION);
  if (c.cudart_version / 1000 != want / 1000)
    throw Error(ErrorKind::device, {"runtime", "", "", ""},
                c.library.path() + " is cuDNN " + version_string(c.version) + " built for CUDA " + std::to_string(c.cudart_version / 1000) +
                    ", but this process runs CUDA " + std::to_string(want / 1000) + " (install the cuDNN 9 for CUDA " +
                    std::to_string(want / 1000) + ", e.g. the nvidia-cudnn-cu" + std::to_string(want / 1000) + " wheel)");
  return c;
}

}  // namespace

CudnnLibrary load_cudnn(const std::string& file, int cudart_version) {
  return open_cudnn(file, "cuDNN (" + file + ")", cudart_version);
}

const CudnnLibrary& cudnn(const std::string& needed_for) {
  static std::mutex mutex;
  static std::unique_ptr<CudnnLibrary> loaded;
  std::lock_guard lock(mutex);
  if (!loaded) {
    const LibraryChoice choice = library_from_environment("TEC_CUDNN_LIBRARY", "libcudnn.so.9", needed_for);
    loaded = std::make_unique<CudnnLibrary>(open_cudnn(choice.file, choice.needed_for, 0));
  }
  return *loaded;
}

}  // namespace tec::runtime
