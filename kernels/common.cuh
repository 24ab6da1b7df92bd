// Device helpers shared by the kernels: bf16 loads and the FP8 encodings. The encodings are
// the same integer arithmetic as the CPU reference (src/reference/convert.cpp), so GPU and
// reference bytes agree by construction; tests/gpu checks it.
#pragma once

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;

__device__ __forceinline__ float tec_bf16_to_float(u16 bits) { return __uint_as_float(((u32)bits) << 16); }

// Round to nearest even and saturate like cvt.rn.satfinite: NaN -> 0x7F, |x| past max -> max.
template <int kMantissa, int kBias, u32 kMaxCode>
__device__ __forceinline__ u8 tec_encode_fp8(float x) {
  const u32 bits = __float_as_uint(x);
  const u8 sign = (u8)((bits >> 31) << 7);
  const u32 magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return 0x7F;
  const int exponent = (int)(magnitude >> 23) - 127;
  if (exponent < 1 - kBias) {
    const float q = rintf(__uint_as_float(magnitude) * __uint_as_float((u32)(127 + kBias - 1 + kMantissa) << 23));
    return sign | (u8)q;
  }
  if (exponent > 15 + kBias) return sign | (u8)kMaxCode;
  const int shift = 23 - kMantissa;
  const u32 rounded = (magnitude + ((1u << (shift - 1)) - 1) + ((magnitude >> shift) & 1)) >> shift;
  const int field = (int)(rounded >> kMantissa) - 127 + kBias;
  const u32 code = ((u32)field << kMantissa) | (rounded & ((1u << kMantissa) - 1));
  return sign | (u8)(code > kMaxCode ? kMaxCode : code);
}

#if TEC_FP8_E4M3
#define TEC_FP8_MAX 448.0f
__device__ __forceinline__ u8 tec_encode(float x) { return tec_encode_fp8<3, 7, 0x7Eu>(x); }
#else
#define TEC_FP8_MAX 57344.0f
__device__ __forceinline__ u8 tec_encode(float x) { return tec_encode_fp8<2, 15, 0x7Bu>(x); }
#endif

// max|x| skipping NaN, as fmaxf does; the bits of a non-negative float order like the float.
__device__ __forceinline__ void tec_atomic_amax(float* target, float value) {
  atomicMax((u32*)target, __float_as_uint(value));
}
