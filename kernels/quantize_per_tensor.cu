// Per-tensor FP8 quantization of a bf16 [M, K] tensor (LAYOUTS.md §1): amax, the scale from
// it (current scaling) or from state (delayed), and the cast writing the rowwise bytes and,
// on TN-only GPUs, the transposed copy. Specialised by defines: TEC_FP8_E4M3 (1: E4M3,
// 0: E5M2), TEC_ROWWISE, TEC_COLUMNWISE, TEC_DELAYED, TEC_POW2_SCALES, TEC_AMAX_EPSILON.
#include "common.cuh"

// Grid-stride max|x| into *amax, which the caller zeroes first.
extern "C" __global__ void tec_amax(const u16* __restrict__ x, i64 n, float* __restrict__ amax) {
  float local = 0.0f;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
    local = fmaxf(local, fabsf(tec_bf16_to_float(x[i])));
  for (int offset = 16; offset > 0; offset /= 2) local = fmaxf(local, __shfl_xor_sync(0xFFFFFFFFu, local, offset));
  __shared__ float warp_max[32];
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x / 32] = local;
  __syncthreads();
  if (threadIdx.x < 32) {
    local = threadIdx.x < (blockDim.x + 31) / 32 ? warp_max[threadIdx.x] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) local = fmaxf(local, __shfl_xor_sync(0xFFFFFFFFu, local, offset));
    if (threadIdx.x == 0) tec_atomic_amax(amax, local);
  }
}

// Current scaling (LAYOUTS.md §1.6), one thread: scale = fp8_max / amax with TE's edge cases.
extern "C" __global__ void tec_scale_from_amax(const float* __restrict__ amax_in, float* __restrict__ scale_out) {
  *scale_out = tec_scale_from_amax_value(*amax_in, TEC_FP8_MAX, TEC_POW2_SCALES, TEC_AMAX_EPSILON, 3.402823466e38f);
}

// q = sat_rn_fp8(x * scale); scale_inv = 1 / scale. Delayed scaling max-merges this tensor's
// amax into its history's staging slot (amax_history[0]). 32x32 tiles through shared
// memory keep both the rowwise and the transposed writes coalesced.
extern "C" __global__ void tec_cast(const u16* __restrict__ x, i64 m, i64 k, const float* __restrict__ scale_in,
                                    u8* __restrict__ data, u8* __restrict__ transposed, float* __restrict__ scale_inv,
                                    float* __restrict__ amax_history0) {
  __shared__ u8 tile[32][33];
  const float scale = *scale_in;
  const i64 row0 = (i64)blockIdx.y * 32, col0 = (i64)blockIdx.x * 32;
  float local = 0.0f;
  for (int r = threadIdx.y; r < 32; r += blockDim.y) {
    const i64 row = row0 + r, col = col0 + threadIdx.x;
    if (row < m && col < k) {
      const float v = tec_bf16_to_float(x[row * k + col]);
      local = fmaxf(local, fabsf(v));
      const u8 code = tec_encode(v * scale);
#if TEC_ROWWISE
      data[row * k + col] = code;
#endif
      tile[r][threadIdx.x] = code;
    }
  }
#if TEC_COLUMNWISE
  __syncthreads();
  for (int c = threadIdx.y; c < 32; c += blockDim.y) {
    const i64 col = col0 + c, row = row0 + threadIdx.x;
    if (row < m && col < k) transposed[col * m + row] = tile[threadIdx.x][c];
  }
#endif
#if TEC_DELAYED
  for (int offset = 16; offset > 0; offset /= 2) local = fmaxf(local, __shfl_xor_sync(0xFFFFFFFFu, local, offset));
  if (threadIdx.x == 0) tec_atomic_amax(amax_history0, local);
#endif
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) *scale_inv = __fdiv_rn(1.0f, scale);
}
