// out[i] = a[i] + b[i] over TEC_COUNT elements (TEC_DTYPE 0 bf16, 1 fp16, 2 fp32: codegen's
// kernel_dtype_code), from element TEC_OUT_OFFSET of slot 0, TEC_A_OFFSET of slot 1 and
// TEC_B_OFFSET of slot 2: the sums of the ring reduce-scatter that overlaps a row-parallel GEMM
// (src/codegen/overlap.cpp), a received partial added to this rank's. Each sum is rounded once
// (fma.rn / add.rn with 1.0 as the factor), as NCCL's own bf16 and fp16 sums, so a two-rank
// reduce-scatter gives the bytes of ncclReduceScatter.
// The ring's last sum may carry the row kernel that came after the reduce-scatter (a bias
// row, TEC_BIAS, and a residual, TEC_RESIDUAL: a step [bias, add]): then the rounded sum, as
// the reduce-scatter stored it, + bias[column] + residual in fp32 and rounded once, the row
// kernel's float operations in its order (kernels/row.cu, producer 7).
// TEC_COUNT and the offsets are whole 16-byte vectors, the buffers 16-byte aligned, and TEC_COLS
// (the bias's length) whole vectors too. Slots: 0 out, 1 a, 2 b, 3 bias (TEC_BIAS_DTYPE),
// 4 residual (TEC_RESIDUAL_DTYPE, indexed as the output).
#include "common.cuh"

#ifndef TEC_BIAS
#define TEC_BIAS 0
#endif
#ifndef TEC_RESIDUAL
#define TEC_RESIDUAL 0
#endif

struct TecAccumulateArgs {
  unsigned long long slot[5];
};

__device__ __forceinline__ u32 tec_add_pair(u32 a, u32 b) {
  u32 d;
#if TEC_DTYPE == 0
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(0x3F803F80u), "r"(b));
#else
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(0x3C003C00u), "r"(b));
#endif
  return d;
}

__device__ __forceinline__ u32 tec_add_word(u32 a, u32 b) {
#if TEC_DTYPE == 2
  return __float_as_uint(__fadd_rn(__uint_as_float(a), __uint_as_float(b)));
#else
  return tec_add_pair(a, b);
#endif
}

#if TEC_BIAS || TEC_RESIDUAL
constexpr int kLanes = TEC_DTYPE == 2 ? 4 : 8;  // elements in a 16-byte vector

__device__ __forceinline__ u32 tec_store_bits(float x) {
#if TEC_DTYPE == 0
  return tec_float_to_bf16(x);
#elif TEC_DTYPE == 1
  return tec_float_to_fp16(x);
#else
  return __float_as_uint(x);
#endif
}

// A vector of the output's dtype, element by element in fp32.
__device__ __forceinline__ void tec_unpack_lanes(uint4 v, float (&x)[kLanes]) {
  const u32 words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int lane = 0; lane < kLanes; ++lane) {
    const u32 word = words[lane * 4 / kLanes];
    const u16 half = (u16)(lane % 2 ? word >> 16 : word & 0xFFFFu);
    x[lane] = TEC_DTYPE == 2 ? __uint_as_float(word) : TEC_DTYPE == 1 ? tec_fp16_to_float(half) : tec_bf16_to_float(half);
  }
}

// Elements [first, first + kLanes) of a kDtype array in fp32: one 16-byte load when it has
// the output's dtype (first is then a whole vector), else one by one.
template <int kDtype>
__device__ __forceinline__ void tec_load_lanes(const void* base, i64 first, float (&x)[kLanes]) {
  if constexpr (kDtype == TEC_DTYPE) {
    tec_unpack_lanes(((const uint4*)base)[first / kLanes], x);
  } else {
#pragma unroll
    for (int lane = 0; lane < kLanes; ++lane) x[lane] = tec_load<kDtype>(base, first + lane);
  }
}

// The vector of sums, elements [first, first + kLanes) of the output, plus the bias and the
// residual there.
__device__ __forceinline__ uint4 tec_add_bias_residual(uint4 sum, const TecAccumulateArgs& args, i64 first) {
  float x[kLanes], term[kLanes];
  tec_unpack_lanes(sum, x);
#if TEC_BIAS
  tec_load_lanes<TEC_BIAS_DTYPE>((const void*)args.slot[3], first % TEC_COLS, term);
#pragma unroll
  for (int lane = 0; lane < kLanes; ++lane) x[lane] = x[lane] + term[lane];
#endif
#if TEC_RESIDUAL
  tec_load_lanes<TEC_RESIDUAL_DTYPE>((const void*)args.slot[4], first, term);
#pragma unroll
  for (int lane = 0; lane < kLanes; ++lane) x[lane] = x[lane] + term[lane];
#endif
  u32 out[4] = {0, 0, 0, 0};
#pragma unroll
  for (int lane = 0; lane < kLanes; ++lane) out[lane * 4 / kLanes] |= tec_store_bits(x[lane]) << (kLanes == 8 && lane % 2 ? 16 : 0);
  return make_uint4(out[0], out[1], out[2], out[3]);
}
#endif

extern "C" __global__ void __launch_bounds__(256) tec_accumulate(TecAccumulateArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();
  constexpr i64 kElementBytes = TEC_DTYPE == 2 ? 4 : 2, kVectors = (i64)TEC_COUNT * kElementBytes / 16;
  uint4* out = (uint4*)args.slot[0] + (i64)TEC_OUT_OFFSET * kElementBytes / 16;
  const uint4* a = (const uint4*)args.slot[1] + (i64)TEC_A_OFFSET * kElementBytes / 16;
  const uint4* b = (const uint4*)args.slot[2] + (i64)TEC_B_OFFSET * kElementBytes / 16;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < kVectors; i += (i64)gridDim.x * blockDim.x) {
    const uint4 x = a[i], y = b[i];
    uint4 sum = make_uint4(tec_add_word(x.x, y.x), tec_add_word(x.y, y.y), tec_add_word(x.z, y.z), tec_add_word(x.w, y.w));
#if TEC_BIAS || TEC_RESIDUAL
    sum = tec_add_bias_residual(sum, args, i * kLanes);
#endif
    out[i] = sum;
  }
}
