// Device helpers shared by the kernels: bf16 loads and the FP8 encodings. The encodings are
// the same integer arithmetic as the CPU reference (src/reference/convert.cpp), so GPU and
// reference bytes agree by construction; tests/gpu checks it.
#pragma once

#include "status.h"

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;

__device__ __forceinline__ float tec_bf16_to_float(u16 bits) { return __uint_as_float(((u32)bits) << 16); }

// Eight bf16 values as one 16-byte load holds them, in memory order.
__device__ __forceinline__ void tec_unpack_bf16x8(uint4 raw, float (&x)[8]) {
  const u32 words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    x[2 * k] = __uint_as_float(words[k] << 16);
    x[2 * k + 1] = __uint_as_float(words[k] & 0xFFFF0000u);
  }
}

// IEEE half, exactly (as tec::fp16_to_float).
__device__ __forceinline__ float tec_fp16_to_float(u16 h) {
  const u32 e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  float v;
  if (e == 0) v = (float)m * 5.9604644775390625e-08f;  // 2^-24, exact
  else if (e == 31) v = m ? __uint_as_float(0x7FC00000u) : __uint_as_float(0x7F800000u);
  else v = __uint_as_float(((e + 112u) << 23) | (m << 13));
  return (h & 0x8000u) ? -v : v;
}

// Element `index` of a bf16 (kDtype 0), fp16 (1) or fp32 (2) array, in fp32 (the kernels' dtype
// codes: codegen's kernel_dtype_code).
template <int kDtype>
__device__ __forceinline__ float tec_load(const void* base, i64 index) {
  if (kDtype == 2) return ((const float*)base)[index];
  if (kDtype == 1) return tec_fp16_to_float(((const u16*)base)[index]);
  return tec_bf16_to_float(((const u16*)base)[index]);
}

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

// The same encoding by sm_89's conversion instruction (one instead of some twenty integer
// operations, which made the quantizing row kernels instruction-bound). Its NaN is set to 0x7F
// whatever the sign, as above; tests/gpu/fp8_encode_gpu.cu compares the two on all 2^32 floats.
template <bool kE4M3>
__device__ __forceinline__ u8 tec_encode_fp8_hardware(float x) {
#if __CUDA_ARCH__ >= 890
  u16 pair;
  if (kE4M3) asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(x));
  else asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(x));
  return x != x ? (u8)0x7F : (u8)pair;
#else
  return kE4M3 ? tec_encode_fp8<3, 7, 0x7Eu>(x) : tec_encode_fp8<2, 15, 0x7Bu>(x);
#endif
}

#if TEC_FP8_E4M3
#define TEC_FP8_MAX 448.0f
__device__ __forceinline__ u8 tec_encode(float x) { return tec_encode_fp8_hardware<true>(x); }
#else
#define TEC_FP8_MAX 57344.0f
__device__ __forceinline__ u8 tec_encode(float x) { return tec_encode_fp8_hardware<false>(x); }
#endif

// Programmatic dependent launch (Hopper and later). The runtime may launch a kernel whose
// plan launch says "early_launch" before the kernel ahead of it in the stream has finished, so
// that its launch and setup overlap the other kernel's tail. Such a kernel calls
// tec_wait_for_previous_kernel() before it reads or writes any memory but the plan's constants:
// the wait returns once the previous kernel has completed and its writes are visible (at once
// when launched the ordinary way). tec_allow_next_kernel() lets the next kernel launch; it is
// safe anywhere, since that kernel waits for this one's completion all the same, but the next
// kernel's blocks then sit on the SMs, so a kernel that holds them for long calls it late.
__device__ __forceinline__ void tec_allow_next_kernel() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void tec_wait_for_previous_kernel() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// max|x| skipping NaN, as fmaxf does; the bits of a non-negative float order like the float.
__device__ __forceinline__ void tec_atomic_amax(float* target, float value) {
  atomicMax((u32*)target, __float_as_uint(value));
}

// LAYOUTS.md §1.6 / §3.2: scale = fp8_max / amax with TE's edge cases, as
// reference::scale_from_amax.
__device__ __forceinline__ float tec_scale_from_amax_value(float amax, float fp8_max, bool pow2, float epsilon,
                                                           float overflow) {
  if (amax < epsilon) amax = epsilon;
  float scale;
  if (amax == 0.0f || isinf(amax) || isnan(amax)) {
    scale = 1.0f;
  } else {
    scale = __fdiv_rn(fp8_max, amax);
    if (isinf(scale)) scale = overflow;
  }
  if (pow2) scale = __uint_as_float(__float_as_uint(scale) & 0xFF800000u);
  return scale;
}

// Decodings, exact, as reference/convert.cpp.
__device__ __forceinline__ float tec_e4m3_to_float(u8 code) {
  const u32 magnitude = code & 0x7Fu;
  float v;
  if (magnitude == 0x7Fu) v = __uint_as_float(0x7FC00000u);
  else if ((magnitude >> 3) == 0) v = (float)(magnitude & 7u) * 0.001953125f;  // 2^-9
  else v = (float)(8u + (magnitude & 7u)) * __uint_as_float((u32)((int)(magnitude >> 3) - 10 + 127) << 23);
  return (code & 0x80u) ? -v : v;
}
__device__ __forceinline__ float tec_e5m2_to_float(u8 code) {
  const u32 magnitude = code & 0x7Fu;
  const u32 e = magnitude >> 2, m = magnitude & 3u;
  float v;
  if (e == 31u) v = m == 0 ? __uint_as_float(0x7F800000u) : __uint_as_float(0x7FC00000u);
  else if (e == 0) v = (float)m * 1.52587890625e-05f;  // 2^-16
  else v = (float)(4u + m) * __uint_as_float((u32)((int)e - 17 + 127) << 23);
  return (code & 0x80u) ? -v : v;
}
__device__ __forceinline__ float tec_e2m1_to_float(u8 code) {
  const float magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = magnitudes[code & 7u];
  return (code & 8u) ? -v : v;
}
__device__ __forceinline__ float tec_e8m0_to_float(u8 code) {
  if (code == 0xFFu) return __uint_as_float(0x7FC00000u);
  if (code == 0) return __uint_as_float(0x00400000u);  // 2^-127
  return __uint_as_float((u32)code << 23);
}

// E2M1 with round to nearest even and saturation; NaN -> 0x7 (the reference's choice).
__device__ __forceinline__ u8 tec_float_to_e2m1(float x) {
  if (isnan(x)) return 0x7;
  const u8 sign = (__float_as_uint(x) >> 31) ? 8 : 0;
  const float a = fabsf(x);
  u8 code;
  if (a <= 0.25f) code = 0;
  else if (a < 0.75f) code = 1;
  else if (a <= 1.25f) code = 2;
  else if (a < 1.75f) code = 3;
  else if (a <= 2.5f) code = 4;
  else if (a < 3.5f) code = 5;
  else if (a <= 5.0f) code = 6;
  else code = 7;
  return sign | code;
}

// LAYOUTS.md §2.2 step 3: the biased exponent of v rounded toward +inf, saturated.
__device__ __forceinline__ u8 tec_float_to_e8m0_round_up(float v) {
  if (isnan(v)) return 0xFF;
  if (isinf(v) && v > 0) return 0xFE;
  const u32 bits = __float_as_uint(v);
  const u32 exponent = (bits >> 23) & 0xFFu, mantissa = bits & 0x7FFFFFu;
  if (v == 0.0f) return 0;
  if (exponent == 0) return v <= __uint_as_float(0x00400000u) ? 0 : 1;
  if (mantissa != 0 && exponent != 0xFEu) return (u8)(exponent + 1);
  return (u8)exponent;
}

// LAYOUTS.md §4.2 step 1: a copy's global encode scale S_enc from its amax, as reference
// nvfp4_global_encode_scale.
__device__ __forceinline__ float tec_nvfp4_encode_scale(float global_amax) {
  float s_enc = __fdiv_rn(448.0f * 6.0f, global_amax);
  if (isinf(s_enc)) s_enc = 3.402823466e38f;
  if (global_amax == 0.0f || s_enc == 0.0f) s_enc = 1.0f;
  return s_enc;
}

// §4.2 steps 2-3: a block's E4M3 scale s_b from its amax, and the multiplier its elements take
// before the E2M1 cast, as reference nvfp4_block (s_dec = 1 / s_enc).
__device__ __forceinline__ u8 tec_nvfp4_block_scale(float block_amax, float s_enc, float s_dec, float& multiplier) {
  float product = block_amax * (s_enc * __fdiv_rn(1.0f, 6.0f));
  product = 3.402823466e38f < product ? 3.402823466e38f : product;
  const u8 s_b = tec_encode_fp8_hardware<true>(product);
  multiplier = __fdiv_rn(1.0f, tec_e4m3_to_float(s_b) * s_dec);
  multiplier = 3.402823466e38f < multiplier ? 3.402823466e38f : multiplier;
  return s_b;
}

// LAYOUTS.md §2.2 steps 1-3: a 32-element block's E8M0 exponent from its amax (the
// reciprocal of fp8_max rounded first, as the reference multiplies by it).
__device__ __forceinline__ u8 tec_mxfp8_exponent(float block_amax, float fp8_max) {
  return tec_float_to_e8m0_round_up(block_amax * __fdiv_rn(1.0f, fp8_max));
}

// LAYOUTS.md §2.2 step 5: the encode multiplier 2^(127 - e) of E8M0 exponent e, exact in fp32
// (e = 254: the subnormal 2^-127; e = 255: NaN), as the reference's ldexp.
__device__ __forceinline__ float tec_mxfp8_multiplier(u8 e) {
  if (e == 0xFF) return __uint_as_float(0x7FC00000u);
  if (e == 254) return __uint_as_float(0x00400000u);
  return __uint_as_float((u32)(254 - e) << 23);
}

// IEEE half with round to nearest even; past 65504 (from 65520 on) inf; NaN -> 0x7E00 (as
// reference float_to_fp16, whose NaN has no sign).
__device__ __forceinline__ u16 tec_float_to_fp16(float x) {
  const u32 bits = __float_as_uint(x);
  const u16 sign = (u16)((bits >> 16) & 0x8000u);
  const u32 a = bits & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7E00;
  if (a >= 0x477FF000u) return sign | 0x7C00;  // 65520 and up round to inf
  if (a < 0x38800000u) return sign | (u16)rintf(__uint_as_float(a) * 16777216.0f);  // below 2^-14: subnormal (x 2^24, exact)
  // Drop 13 mantissa bits with round to nearest even; a carry moves into the exponent, as it should.
  const u32 rounded = (a + 0xFFFu + ((a >> 13) & 1u)) >> 13;
  return sign | (u16)(rounded - (112u << 10));
}

// bf16 with round to nearest even; NaN stays a quiet NaN (as reference float_to_bf16).
__device__ __forceinline__ u16 tec_float_to_bf16(float x) {
  u32 bits = __float_as_uint(x);
  if (isnan(x)) return (u16)((bits >> 16) | 0x40u);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return (u16)(bits >> 16);
}

// Two floats as bf16 with round to nearest even, packed (lo in the low half) by one cvt. A NaN
// becomes the canonical quiet NaN rather than keeping its payload as tec_float_to_bf16 does:
// for GEMM epilogues, whose outputs are compared within a bound.
__device__ __forceinline__ u32 tec_float2_to_bf16x2(float lo, float hi) {
  u32 packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
}

// v rounded to a bf16 (kDtype 0), fp16 (1) or fp32 (2) array's type and stored at `index`: tec_load's counterpart.
template <int kDtype>
__device__ __forceinline__ void tec_store(void* base, i64 index, float v) {
  if (kDtype == 2) ((float*)base)[index] = v;
  else if (kDtype == 1) ((u16*)base)[index] = tec_float_to_fp16(v);
  else ((u16*)base)[index] = tec_float_to_bf16(v);
}

// x * sigmoid(x) by the hardware's approximate 2^x and reciprocal: no bit-for-bit promise, so
// only kernels/row.cu's fast path uses it, which recomputes with tec_silu wherever the
// difference could show. Its error against tec_silu over every bf16 x is measured by
// kernels/silu_bound_check.cu (tests/gpu, group encode).
__device__ __forceinline__ float tec_fast_silu(float x) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * -1.44269504f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return x * r;
}
