#include "core/dtype.h"

#include <array>
#include <cmath>

#include "core/error.h"

namespace tec {

namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  int64_t bytes;
};
constexpr std::array<DTypeInfo, kDTypeCount> kDTypes{{
    {DType::bf16, "bf16", 2},
    {DType::fp16, "fp16", 2},
    {DType::fp32, "fp32", 4},
    {DType::int32, "int32", 4},
    {DType::int64, "int64", 8},
    {DType::uint8, "uint8", 1},
    {DType::fp8_e4m3, "fp8_e4m3", 1},
    {DType::fp8_e5m2, "fp8_e5m2", 1},
    {DType::e8m0, "e8m0", 1},
    {DType::fp4_e2m1x2, "fp4_e2m1x2", 1},
}};
static_assert(kDTypes.size() == kDTypeCount, "every DType needs a row in kDTypes");

const DTypeInfo& info(DType dtype) {
  for (const auto& row : kDTypes)
    if (row.dtype == dtype) return row;
  TEC_INTERNAL_ERROR({}) << "DType " << static_cast<int>(dtype) << " has no row in kDTypes";
}
}  // namespace

std::string_view to_string(DType dtype) { return info(dtype).name; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& row : kDTypes)
    if (row.name == name) return row.dtype;
  return std::nullopt;
}

std::string dtype_names() {
  std::string names;
  for (const auto& row : kDTypes) names += (names.empty() ? "" : ", ") + std::string(row.name);
  return names;
}

int64_t storage_bytes(DType dtype) { return info(dtype).bytes; }

float fp16_to_float(uint16_t h) {
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  const float v = e == 0    ? std::ldexp(static_cast<float>(m), -24)
                  : e == 31 ? (m ? NAN : INFINITY)
                            : std::ldexp(static_cast<float>(1024 + m), e - 25);
  return (h & 0x8000) ? -v : v;
}

bool is_float8(DType dtype) { return dtype == DType::fp8_e4m3 || dtype == DType::fp8_e5m2; }

float max_finite(DType dtype) {
  switch (dtype) {
    case DType::fp8_e4m3: return 448.0f;
    case DType::fp8_e5m2: return 57344.0f;
    case DType::fp4_e2m1x2: return 6.0f;
    default: TEC_INTERNAL_ERROR({}) << "max_finite asked for non-quantized dtype " << to_string(dtype);
  }
}

}  // namespace tec
