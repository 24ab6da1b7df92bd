#include "reference/convert.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace tec::reference {

namespace {

// A minifloat format: exponent bits, mantissa bits, bias, largest finite code magnitude.
struct Minifloat {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  uint8_t max_code;  // magnitude code of the largest finite value
  bool ieee_specials;  // E5M2: all-ones exponent is inf/NaN; E4M3: only S.1111.111 is NaN
};

constexpr Minifloat kE4M3{4, 3, 7, 0x7E, false};
constexpr Minifloat kE5M2{5, 2, 15, 0x7B, true};
constexpr Minifloat kE2M1{2, 1, 1, 0x7, false};

double decode_magnitude(const Minifloat& f, uint8_t magnitude) {
  const int e = magnitude >> f.mantissa_bits;
  const int m = magnitude & ((1 << f.mantissa_bits) - 1);
  if (e == 0) return std::ldexp(static_cast<double>(m), 1 - f.bias - f.mantissa_bits);
  return std::ldexp(static_cast<double>((1 << f.mantissa_bits) + m), e - f.bias - f.mantissa_bits);
}

// Round |x| to the format's grid with ties to even, then saturate. Works in double: the
// quotient a / quantum is exact (a float has 24 significant bits), so nearbyint decides the
// tie exactly, in the default round-to-nearest-even mode.
uint8_t encode(const Minifloat& f, float x, uint8_t nan_code) {
  const uint8_t sign = std::signbit(x) ? static_cast<uint8_t>(1u << (f.exponent_bits + f.mantissa_bits)) : 0;
  if (std::isnan(x)) return nan_code;
  const double max_finite = decode_magnitude(f, f.max_code);
  const double a = std::fabs(static_cast<double>(x));
  if (a >= max_finite) return sign | f.max_code;
  if (a == 0) return sign;
  const int min_exponent = 1 - f.bias;  // of the smallest normal
  int exponent = std::ilogb(a);
  if (exponent < min_exponent) exponent = min_exponent;
  const double quantum = std::ldexp(1.0, exponent - f.mantissa_bits);
  const double rounded = std::nearbyint(a / quantum) * quantum;
  if (rounded >= max_finite) return sign | f.max_code;
  if (rounded == 0) return sign;
  int e = std::ilogb(rounded);
  if (e < min_exponent) {  // subnormal: exponent field 0
    return sign | static_cast<uint8_t>(rounded / std::ldexp(1.0, min_exponent - f.mantissa_bits));
  }
  const auto mantissa = static_cast<uint8_t>(rounded / std::ldexp(1.0, e - f.mantissa_bits)) - (1u << f.mantissa_bits);
  return sign | static_cast<uint8_t>(((e + f.bias) << f.mantissa_bits) | mantissa);
}

float decode(const Minifloat& f, uint8_t code) {
  const int magnitude_bits = f.exponent_bits + f.mantissa_bits;
  const bool negative = (code >> magnitude_bits) & 1;
  const auto magnitude = static_cast<uint8_t>(code & ((1u << magnitude_bits) - 1));
  const int e = magnitude >> f.mantissa_bits;
  const int m = magnitude & ((1 << f.mantissa_bits) - 1);
  const int all_ones = (1 << f.exponent_bits) - 1;
  float value;
  if (f.ieee_specials && e == all_ones)
    value = m == 0 ? INFINITY : NAN;
  else if (!f.ieee_specials && magnitude_bits == 7 && magnitude == 0x7F)
    value = NAN;  // E4M3: S.1111.111
  else
    value = static_cast<float>(decode_magnitude(f, magnitude));
  return negative ? -value : value;
}

// The same rounding as encode(), by integer arithmetic on the float's bits: RNE of the
// mantissa for target normals, an exact power-of-two scaling plus nearbyint for target
// subnormals. About 20x faster; tests/reference/convert_test.py checks it against ml_dtypes.
template <int kMantissa, int kBias, uint8_t kMaxCode>
uint8_t encode_fast(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const auto sign = static_cast<uint8_t>((bits >> 31) << 7);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return 0x7F;  // NaN
  const int exponent = static_cast<int>(magnitude >> 23) - 127;
  if (exponent < 1 - kBias) {  // a subnormal (or zero) of the target: quantum 2^(1-bias-M)
    const float q = std::nearbyint(std::bit_cast<float>(magnitude) * std::ldexp(1.0f, kBias - 1 + kMantissa));
    return sign | static_cast<uint8_t>(q);  // q == 2^M encodes the smallest normal, as it should
  }
  if (exponent > 15 + kBias) return sign | kMaxCode;  // far past the max (and inf)
  constexpr int shift = 23 - kMantissa;
  const uint32_t rounded = (magnitude + ((1u << (shift - 1)) - 1) + ((magnitude >> shift) & 1)) >> shift;
  const int field = static_cast<int>(rounded >> kMantissa) - 127 + kBias;
  const uint32_t code = (static_cast<uint32_t>(field) << kMantissa) | (rounded & ((1u << kMantissa) - 1));
  return sign | static_cast<uint8_t>(code > kMaxCode ? kMaxCode : code);
}

}  // namespace

uint8_t float_to_e4m3(float x) { return encode_fast<3, 7, 0x7E>(x); }
uint8_t float_to_e5m2(float x) { return encode_fast<2, 15, 0x7B>(x); }
uint8_t float_to_e2m1(float x) { return encode(kE2M1, x, kE2M1.max_code); }
float e4m3_to_float(uint8_t code) { return decode(kE4M3, code); }
float e5m2_to_float(uint8_t code) { return decode(kE5M2, code); }
float e2m1_to_float(uint8_t code) { return decode(kE2M1, static_cast<uint8_t>(code & 0xF)); }

uint8_t float_to_e8m0_round_up(float v) {
  if (std::isnan(v)) return 0xFF;
  if (v == INFINITY) return 0xFE;
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  const uint32_t exponent = (bits >> 23) & 0xFF;
  const uint32_t mantissa = bits & 0x7FFFFF;
  if (v == 0) return 0;
  if (exponent == 0) return v <= 0x1p-127f ? 0 : 1;  // subnormal
  if (mantissa != 0 && exponent != 0xFE) return static_cast<uint8_t>(exponent + 1);
  return static_cast<uint8_t>(exponent);
}

float e8m0_to_float(uint8_t code) {
  if (code == 0xFF) return NAN;
  return std::ldexp(1.0f, static_cast<int>(code) - 127);
}

uint16_t float_to_bf16(float x) {
  uint32_t bits = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return static_cast<uint16_t>((bits >> 16) | 0x40);  // keep it a NaN
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

uint16_t float_to_fp16(float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return 0x7E00;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 65520.0) return sign | 0x7C00;  // rounds past the max: inf, as IEEE does
  if (a == 0) return sign;
  int exponent = std::max(std::ilogb(a), -14);
  const double rounded = std::nearbyint(a / std::ldexp(1.0, exponent - 10)) * std::ldexp(1.0, exponent - 10);
  const int e = std::ilogb(rounded);
  if (e < -14) return sign | static_cast<uint16_t>(rounded / std::ldexp(1.0, -24));
  return sign | static_cast<uint16_t>(((e + 15) << 10) | (static_cast<uint32_t>(rounded / std::ldexp(1.0, e - 10)) - 1024));
}


}  // namespace tec::reference
