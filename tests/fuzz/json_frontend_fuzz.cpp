// Fuzzes the JSON graph frontend and every pass after it: any graph must compile to a
// memory plan or throw tec::Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "frontend/json/graph_json.h"
#include "fuzz_passes.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    tec::fuzz::run_passes(tec::parse_json_graphs(text, "fuzz.json", "/nonexistent", {}), int64_t{1} << 24);
  } catch (const tec::Error&) {
  }
  return 0;
}
