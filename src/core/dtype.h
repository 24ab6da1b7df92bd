// Element types. Quantized payloads (FP8, E8M0, FP4) are stored as bytes; their DType
// names what the bytes mean (LAYOUTS.md §0, "Element encodings").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tec {

enum class DType : uint8_t {
  bf16,
  fp16,
  fp32,
  int32,
  int64,
  uint8,
  fp8_e4m3,
  fp8_e5m2,
  e8m0,        // biased power-of-two exponent, MXFP8 block scales
  fp4_e2m1x2,  // two FP4 E2M1 values per byte: element 2b in the low nibble (LAYOUTS.md §4.1)
};

inline constexpr int kDTypeCount = 10;

std::string_view to_string(DType dtype);
std::optional<DType> parse_dtype(std::string_view name);
// Bytes per stored element. fp4_e2m1x2 counts one byte per packed pair.
int64_t storage_bytes(DType dtype);
bool is_float8(DType dtype);
// The largest finite value of an FP8/FP4 format (448, 57344, 6).
float max_finite(DType dtype);
// IEEE half precision bits to float (exact). Used by every reader of fp16 data.
float fp16_to_float(uint16_t bits);
// Names accepted by parse_dtype, for error messages.
std::string dtype_names();

}  // namespace tec
