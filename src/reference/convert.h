// Bit-exact scalar conversions used by the CPU reference executor (the oracle for every GPU
// test). Encodings round to nearest even and saturate like PTX cvt.rn.satfinite (LAYOUTS.md
// §0): finite values past the max, and infinities, become ±max; NaN becomes the format's
// canonical NaN (0x7F for E4M3 and E5M2). FP4 E2M1 has no NaN: NaN encodes as +6.
#pragma once

#include <cstdint>

namespace tec::reference {

uint8_t float_to_e4m3(float x);
uint8_t float_to_e5m2(float x);
uint8_t float_to_e2m1(float x);  // a 4-bit code in the low nibble
float e4m3_to_float(uint8_t code);
float e5m2_to_float(uint8_t code);
float e2m1_to_float(uint8_t code);

// E8M0 scale exponent for MXFP8 (LAYOUTS.md §2.2 step 3): the biased exponent of v rounded
// toward +inf, saturated to finite; NaN -> 0xFF.
uint8_t float_to_e8m0_round_up(float v);
float e8m0_to_float(uint8_t code);  // 2^(code-127); 0xFF -> NaN

uint16_t float_to_bf16(float x);  // round to nearest even; NaN stays NaN
float bf16_to_float(uint16_t bits);
// x rounded through bf16, as a float (the values a bf16 tensor can hold).
inline float round_to_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }

// IEEE half precision, round to nearest even (decode: tec::fp16_to_float in core/dtype.h).
uint16_t float_to_fp16(float x);

}  // namespace tec::reference
