// FP8 block scaling's copies that the row kernel cannot write (LAYOUTS.md §3), from an fp32
// [TEC_ROWS, TEC_COLS] source, each the CPU reference's arithmetic (quantize_block in
// src/reference/quantize.cpp), so both give the same bytes:
//   tec_block_quantize_2d: 128 x 128 tiles (weights): grid (column tiles, row tiles), one scale
//     per tile; the rowwise copy (TEC_ROWWISE) and its exact transpose (TEC_COLUMNWISE), with the
//     scales in both grids. Slots: 0 source, 1 data, 2 scale_inv, 3 columnwise_data,
//     4 columnwise_scale_inv. A grouped weight (an MoE layer's experts) is quantized per
//     member, as the reference does: grid z is the member, TEC_ROWS a member's rows, and
//     TEC_MEMBER_SCALES / TEC_MEMBER_COLUMNWISE_SCALES the floats from one member's scales to
//     the next's (the columnwise copy is each member transposed, not the whole tensor).
//   tec_block_quantize_columns: the 1x128 columnwise copy (activations and gradients for
//     wgrad): blocks of 128 rows down each column, written transposed; grid (ceil(cols / 256),
//     row blocks), a thread per column. Slots: 0 source, 1 columnwise_data,
//     2 columnwise_scale_inv [ceil(rows / 128)][roundup(cols, 4)].
// The scale buffers' padding is zeroed by a memset before (as the reference leaves it).
#include "common.cuh"

struct TecBlockArgs {
  unsigned long long slot[5];
};

#ifndef TEC_MEMBER_SCALES
#define TEC_MEMBER_SCALES 0
#define TEC_MEMBER_COLUMNWISE_SCALES 0
#endif

#define TEC_BLOCK 128
#define TEC_ROW_BLOCKS ((TEC_ROWS + TEC_BLOCK - 1) / TEC_BLOCK)
#define TEC_COL_BLOCKS ((TEC_COLS + TEC_BLOCK - 1) / TEC_BLOCK)

__device__ __forceinline__ float tec_block_scale(float amax) {
  return tec_scale_from_amax_value(amax, TEC_FP8_MAX, TEC_POW2_SCALES, TEC_AMAX_EPSILON, TEC_OVERFLOW);
}

extern "C" __global__ void __launch_bounds__(256) tec_block_quantize_2d(TecBlockArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();
  __shared__ float scratch[8];
  const i64 member = blockIdx.z, member_values = member * TEC_ROWS * TEC_COLS;
  const float* x = (const float*)args.slot[0] + member_values;
  const i64 a = blockIdx.y, b = blockIdx.x;
  const i64 r0 = a * TEC_BLOCK, c0 = b * TEC_BLOCK;
  const i64 r1 = r0 + TEC_BLOCK < TEC_ROWS ? r0 + TEC_BLOCK : TEC_ROWS;
  const i64 c1 = c0 + TEC_BLOCK < TEC_COLS ? c0 + TEC_BLOCK : TEC_COLS;
  float local = 0.0f;
  for (int e = threadIdx.x; e < TEC_BLOCK * TEC_BLOCK; e += 256) {
    const i64 r = r0 + e / TEC_BLOCK, c = c0 + e % TEC_BLOCK;
    if (r < r1 && c < c1) local = fmaxf(local, fabsf(x[r * TEC_COLS + c]));
  }
  for (int offset = 16; offset > 0; offset /= 2) local = fmaxf(local, __shfl_xor_sync(0xFFFFFFFFu, local, offset));
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x / 32] = local;
  __syncthreads();
  float amax = 0.0f;
  for (int w = 0; w < 8; ++w) amax = fmaxf(amax, scratch[w]);
  const float scale = tec_block_scale(amax);
  if (threadIdx.x == 0) {
#if TEC_ROWWISE
    ((float*)args.slot[2])[member * TEC_MEMBER_SCALES + a * ((TEC_COL_BLOCKS + 3) / 4 * 4) + b] = __fdiv_rn(1.0f, scale);
#endif
#if TEC_COLUMNWISE
    ((float*)args.slot[4])[member * TEC_MEMBER_COLUMNWISE_SCALES + b * ((TEC_ROW_BLOCKS + 3) / 4 * 4) + a] = __fdiv_rn(1.0f, scale);
#endif
  }
  for (int e = threadIdx.x; e < TEC_BLOCK * TEC_BLOCK; e += 256) {
    const i64 r = r0 + e / TEC_BLOCK, c = c0 + e % TEC_BLOCK;
    if (r >= r1 || c >= c1) continue;
    const u8 code = tec_encode(x[r * TEC_COLS + c] * scale);
#if TEC_ROWWISE
    ((u8*)args.slot[1])[member_values + r * TEC_COLS + c] = code;
#endif
#if TEC_COLUMNWISE
    ((u8*)args.slot[3])[member_values + c * TEC_ROWS + r] = code;
#endif
  }
}

extern "C" __global__ void __launch_bounds__(256) tec_block_quantize_columns(TecBlockArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();
  const float* x = (const float*)args.slot[0];
  const i64 c = (i64)blockIdx.x * 256 + threadIdx.x;
  if (c >= TEC_COLS) return;
  const i64 a = blockIdx.y, r0 = a * TEC_BLOCK;
  const i64 r1 = r0 + TEC_BLOCK < TEC_ROWS ? r0 + TEC_BLOCK : TEC_ROWS;
  float amax = 0.0f;
  for (i64 r = r0; r < r1; ++r) amax = fmaxf(amax, fabsf(x[r * TEC_COLS + c]));
  const float scale = tec_block_scale(amax);
  ((float*)args.slot[2])[a * ((TEC_COLS + 3) / 4 * 4) + c] = __fdiv_rn(1.0f, scale);
  u8* out = (u8*)args.slot[1];
  for (i64 r = r0; r < r1; ++r) out[c * TEC_ROWS + r] = tec_encode(x[r * TEC_COLS + c] * scale);
}
