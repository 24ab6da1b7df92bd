// dst[i] += src[i] over TEC_COUNT elements (TEC_DTYPE 0 bf16, 1 fp16, 2 fp32: codegen's
// kernel_dtype_code), from element TEC_DST_OFFSET of slot 0 and TEC_SRC_OFFSET of slot 1: the
// sums of the ring reduce-scatter that overlaps a row-parallel GEMM (src/codegen/overlap.cpp),
// a received partial added into this rank's. Each sum is rounded once (fma.rn / add.rn with 1.0
// as the factor), as NCCL's own bf16 and fp16 sums, so a two-rank reduce-scatter gives the bytes
// of ncclReduceScatter. TEC_COUNT and the offsets are whole 16-byte vectors, the buffers 16-byte
// aligned. Slots: 0 dst, 1 src.
#include "common.cuh"

struct TecAccumulateArgs {
  unsigned long long slot[2];
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

extern "C" __global__ void __launch_bounds__(256) tec_accumulate(TecAccumulateArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();
  constexpr i64 kElementBytes = TEC_DTYPE == 2 ? 4 : 2, kVectors = (i64)TEC_COUNT * kElementBytes / 16;
  uint4* dst = (uint4*)args.slot[0] + (i64)TEC_DST_OFFSET * kElementBytes / 16;
  const uint4* src = (const uint4*)args.slot[1] + (i64)TEC_SRC_OFFSET * kElementBytes / 16;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < kVectors; i += (i64)gridDim.x * blockDim.x) {
    uint4 a = dst[i];
    const uint4 b = src[i];
#if TEC_DTYPE == 2
    a.x = __float_as_uint(__fadd_rn(__uint_as_float(a.x), __uint_as_float(b.x)));
    a.y = __float_as_uint(__fadd_rn(__uint_as_float(a.y), __uint_as_float(b.y)));
    a.z = __float_as_uint(__fadd_rn(__uint_as_float(a.z), __uint_as_float(b.z)));
    a.w = __float_as_uint(__fadd_rn(__uint_as_float(a.w), __uint_as_float(b.w)));
#else
    a.x = tec_add_pair(a.x, b.x);
    a.y = tec_add_pair(a.y, b.y);
    a.z = tec_add_pair(a.z, b.z);
    a.w = tec_add_pair(a.w, b.w);
#endif
    dst[i] = a;
  }
}
