// MXFP8's columnwise copy (LAYOUTS.md §2.1-2.2): blocks of 32 rows down each column, from an
// fp32 [TEC_ROWS, TEC_COLS] source, with the CPU reference's arithmetic (quantize_mxfp8 in
// src/reference/quantize.cpp), so both give the same bytes. The copy is not transposed: codes
// [TEC_ROWS, TEC_COLS] as the rowwise copy, E8M0 scales [roundup(TEC_ROWS / 32, 4)]
// [roundup(TEC_COLS, 128)], whose padding a memset zeroes before. TEC_ROWS % 32 == 0.
//
// A thread owns one column of one 32-row block: it holds the 32 values in registers, so the
// source is read once, and a warp's loads and stores each cover consecutive columns of a row.
// Grid (TEC_ROWS / 32, ceil(TEC_COLS / 256)). Slots: 0 source, 1 columnwise_data,
// 2 columnwise_scale_inv.
#include "common.cuh"

struct TecMxfp8ColumnsArgs {
  unsigned long long slot[3];
};

#define TEC_MX_BLOCK 32
#define TEC_MX_SCALE_PITCH ((TEC_COLS + 127) / 128 * 128)

extern "C" __global__ void __launch_bounds__(256) tec_mxfp8_quantize_columns(TecMxfp8ColumnsArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();
  const i64 c = (i64)blockIdx.y * blockDim.x + threadIdx.x, block = blockIdx.x;
  if (c >= TEC_COLS) return;
  const float* in = (const float*)args.slot[0] + block * TEC_MX_BLOCK * TEC_COLS + c;
  float v[TEC_MX_BLOCK];
  float amax = 0.0f;
#pragma unroll
  for (int r = 0; r < TEC_MX_BLOCK; ++r) {
    v[r] = in[r * TEC_COLS];
    amax = fmaxf(amax, fabsf(v[r]));
  }
  const u8 e = tec_mxfp8_exponent(amax, TEC_FP8_MAX);
  const float multiplier = tec_mxfp8_multiplier(e);
  u8* out = (u8*)args.slot[1] + block * TEC_MX_BLOCK * TEC_COLS + c;
#pragma unroll
  for (int r = 0; r < TEC_MX_BLOCK; ++r) out[r * TEC_COLS] = tec_encode(v[r] * multiplier);
  ((u8*)args.slot[2])[block * TEC_MX_SCALE_PITCH + c] = e;
}
