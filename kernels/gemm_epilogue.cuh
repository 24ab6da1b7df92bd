// The epilogue of tec's own FP8 GEMM kernels (gemm_small_m.cu, gemm_mid_m.cu), in the order
// cuBLASLt applies its epilogue: alpha, bias, activation, then + C (the residual, beta = 1),
// then the store. One definition, so that the two kernels cannot drift apart.
//
// Defines: TEC_BIAS 0 none, 1 bf16, 2 fp32; TEC_ACT 0 none, 1 gelu tanh, 3 relu; TEC_RESIDUAL
// 0 none, 1 bf16, 2 fp32; TEC_OUT 0 bf16, 2 fp32, 11 FP8 with the D scale and amax (delayed
// scaling), 20 bf16 and the amax of its rounded values (current scaling's staging).
//
// Argument slots (one TecArgs by value): 0 W data, 1 W scale_inv, 2 X data, 3 X scale_inv,
// 4 bias, 5 C, 6 D, 7 D scale, 8 amax: TEC_OUT 11 maxes into amax_history[0] atomically;
// TEC_OUT 20 writes one float per block (gridDim.x of them), which the cast pass reduces, so
// that no memset has to zero a target first (row.cu, TEC_AMAX_PARTIALS).
#pragma once

#include "common.cuh"
#include "tec_math.h"

struct TecArgs {
  unsigned long long slot[16];
};

__device__ __forceinline__ float tec_load_param(const void* base, i64 index, int dtype) {
  return dtype == 2 ? ((const float*)base)[index] : tec_bf16_to_float(((const u16*)base)[index]);
}

// alpha = the product of the operands' scale_inv.
__device__ __forceinline__ float tec_gemm_alpha(const TecArgs& args) {
  return *(const float*)args.slot[1] * *(const float*)args.slot[3];
}

// tanh-GELU with the hardware's tanh.approx (max relative error ~2^-11): the same formula as
// tec_math.h's tec_gelu_tanh, for the epilogue of a kernel whose few warps per SM would otherwise
// spend microseconds in the exact tanh. Like cuBLASLt's GELU epilogue it is not bit-identical to
// the reference, which GEMM outputs need not be (they are checked within the recipe's bound).
__device__ __forceinline__ float tec_gelu_tanh_approx(float x) {
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(0.7978845608f * (x + 0.044715f * x * x * x)));
  return 0.5f * x * (1.0f + t);
}

// The value of D[m][n] (out = m * N + n) before its store.
__device__ __forceinline__ float tec_gemm_epilogue(const TecArgs& args, float alpha, float sum, i64 n, i64 out) {
  float v = alpha * sum;
#if TEC_BIAS
  v += tec_load_param((const void*)args.slot[4], n, TEC_BIAS == 2 ? 2 : 0);
#endif
#if TEC_ACT == 1 && TEC_APPROX_GELU
  v = tec_gelu_tanh_approx(v);
#elif TEC_ACT == 1
  v = tec_gelu_tanh(v);
#elif TEC_ACT == 3
  v = tec_relu(v);
#endif
#if TEC_RESIDUAL
  v += tec_load_param((const void*)args.slot[5], out, TEC_RESIDUAL == 2 ? 2 : 0);
#endif
  return v;
}

// Stores v as D[out] in TEC_OUT's format; `amax` collects what the amax outputs need.
__device__ __forceinline__ void tec_gemm_store(const TecArgs& args, i64 out, float v, float& amax) {
#if TEC_OUT == 0
  ((u16*)args.slot[6])[out] = tec_float_to_bf16(v);
#elif TEC_OUT == 2
  ((float*)args.slot[6])[out] = v;
#elif TEC_OUT == 11
  amax = fmaxf(amax, fabsf(v));
  ((u8*)args.slot[6])[out] = tec_encode(v * *(const float*)args.slot[7]);
#elif TEC_OUT == 20
  const u16 rounded = tec_float_to_bf16(v);
  amax = fmaxf(amax, fabsf(tec_bf16_to_float(rounded)));
  ((u16*)args.slot[6])[out] = rounded;
#endif
}

// Publishes the amax that tec_gemm_store collected in each thread of kWarps warps (`warp`: this
// thread's among them): TEC_OUT 11 maxes each warp's into amax_history[0]; TEC_OUT 20 writes
// their max as partial blockIdx.x. `sync` is a barrier over exactly those warps.
template <int kWarps, typename Sync>
__device__ __forceinline__ void tec_gemm_publish_amax(const TecArgs& args, float amax, int warp, Sync sync) {
#if TEC_OUT == 11 || TEC_OUT == 20
  for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
  const int lane = threadIdx.x % 32;
#endif
#if TEC_OUT == 11
  if (lane == 0) tec_atomic_amax((float*)args.slot[8], amax);
#elif TEC_OUT == 20
  __shared__ float warp_amax[kWarps];
  if (lane == 0) warp_amax[warp] = amax;
  sync();
  if (warp == 0 && lane == 0) {
    float block_amax = 0.0f;
#pragma unroll
    for (int i = 0; i < kWarps; ++i) block_amax = fmaxf(block_amax, warp_amax[i]);
    ((float*)args.slot[8])[blockIdx.x] = block_amax;
  }
#endif
}
