// Fuzzes the manifest validator and the reference executor: the input is a manifest text,
// wrapped in a container with a valid checksum (and the blob section of a real plan, from
// TEC_FUZZ_BLOBS) so that the fuzzer gets past the checksum. A manifest that loads is then
// run on the CPU reference when its arena is small.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/file_io.h"
#include "plan/file.h"
#include "plan/format.h"
#include "plan/plan.h"
#include "reference/executor.h"

namespace {
std::vector<uint8_t> blob_section() {
  const char* path = std::getenv("TEC_FUZZ_BLOBS");
  if (!path) return std::vector<uint8_t>(256, 0);
  const auto bytes = tec::plan::read_plan_file(path);
  tec::plan::FileHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  return std::vector<uint8_t>(bytes.begin() + static_cast<long>(h.blobs_offset),
                              bytes.begin() + static_cast<long>(h.blobs_offset + h.blobs_size));
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<uint8_t> blobs = blob_section();
  const std::string manifest(reinterpret_cast<const char*>(data), size);
  try {
    const auto file = tec::plan::assemble_plan(manifest, blobs);
    const tec::plan::Plan plan = tec::plan::Plan::load(file, "fuzz.teplan");
    if (plan.arena_bytes > (1 << 22)) return 0;
    for (const auto& profile : plan.profiles) {
      tec::reference::Session session(plan, profile);
      session.randomize_inputs(1);
      session.run();
    }
  } catch (const tec::Error&) {
  }
  return 0;
}
