// Fuzzes the .npy reader (te-run --input): any file must read or throw tec::Error.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "core/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/tec_npy_fuzz_" + std::to_string(::getpid()) + ".npy";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    (void)tec::read_npy(path, uint64_t{1} << 24);  // te-run passes the input's own size
  } catch (const tec::Error&) {
  }
  return 0;
}
