// Fuzzes the ONNX frontend (protobuf parsing, validation, constant folding, pattern matching)
// and the passes after it: any bytes must compile to a memory plan or throw tec::Error.
// External data resolves against a folder that does not exist, so no input reads files.
#include <cstddef>
#include <cstdint>

#include "frontend/onnx/onnx_import.h"
#include "frontend/onnx/onnx_model.h"
#include "fuzz_passes.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tec::fuzz::run_passes(tec::import_onnx(tec::onnx::parse_model(data, size, "fuzz.onnx", "/nonexistent"), {}).graphs, int64_t{1} << 22);
  } catch (const tec::Error&) {
  }
  return 0;
}
