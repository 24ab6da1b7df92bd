// Fuzzes the .teplan reader with raw bytes: any input must load or throw tec::Error.
#include <cstddef>
#include <cstdint>

#include "plan/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)tec::plan::Plan::load(std::span(data, size), "fuzz.teplan");
  } catch (const tec::Error&) {
  }
  return 0;
}
