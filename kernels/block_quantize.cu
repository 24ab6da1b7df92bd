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
//     wgrad): blocks of 128 rows down each column, written transposed; grid (ceil(cols / 128),
//     row blocks). Slots: 0 source, 1 columnwise_data, 2 columnwise_scale_inv
//     [ceil(rows / 128)][roundup(cols, 4)].
// The scale buffers' padding is zeroed by a memset before (as the reference leaves it).
//
// Both kernels take a 128 x 128 tile per block into registers: warp w holds rows 16w..16w+15,
// lane l columns l, l + 32, l + 64, l + 96, so that loads go along rows and each thread holds
// 16 consecutive rows of a column - 16 bytes of the transposed copy. Those go through shared
// memory and out as whole 128-byte rows of the transposed copy: written a byte at a time down
// a column, as the first version did, the transposed stores cost ten times the bytes' floor
// (17 ms for moe.json's fc1 weight on an H100, 1.9 GB of fp32).
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
#define TEC_TILE_ROWS 16               // a warp's rows of the tile
#define TEC_TRANSPOSED_PITCH (128 + 16)  // bytes of a transposed tile's row: 16-byte stores from 8 lanes hit distinct banks
// 16-byte stores of the transposed copy need its rows (TEC_ROWS bytes apart) 16-byte aligned.
#define TEC_TRANSPOSED_VECTORS (TEC_ROWS % 16 == 0)

__device__ __forceinline__ float tec_block_scale(float amax) {
  return tec_scale_from_amax_value(amax, TEC_FP8_MAX, TEC_POW2_SCALES, TEC_AMAX_EPSILON, TEC_OVERFLOW);
}

// The tile [r0, r1) x [c0, c1) of x ([rows][TEC_COLS] fp32) into v: v[i][j] is row
// r0 + 16 * warp + i, column c0 + lane + 32 j; zero outside the tile (|0| leaves an amax as it is).
__device__ __forceinline__ void tec_load_tile(const float* x, i64 r0, i64 c0, i64 r1, i64 c1, float (&v)[TEC_TILE_ROWS][4]) {
  const i64 row = r0 + TEC_TILE_ROWS * (threadIdx.x / 32), col = c0 + threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < TEC_TILE_ROWS; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
      v[i][j] = row + i < r1 && col + 32 * j < c1 ? x[(row + i) * TEC_COLS + col + 32 * j] : 0.0f;
}

// Writes the tile's codes transposed: out[c][r] for c in [c0, c1), r in [r0, r1), out's rows
// TEC_ROWS bytes apart. Each thread's 16 codes of column j (its 16 rows) are one 16-byte row
// piece of `transposed` (shared); the block then writes whole rows of it.
__device__ __forceinline__ void tec_store_transposed(const u32 (&codes)[4][4], u8 (*transposed)[TEC_TRANSPOSED_PITCH], u8* out, i64 r0, i64 c0,
                                                     i64 r1, i64 c1) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < 4; ++j)
    *(uint4*)&transposed[lane + 32 * j][TEC_TILE_ROWS * warp] = make_uint4(codes[j][0], codes[j][1], codes[j][2], codes[j][3]);
  __syncthreads();
#pragma unroll
  for (int k = 0; k < 4; ++k) {  // 128 rows x 8 pieces of 16 bytes, 8 threads a row
    const int piece = threadIdx.x + 256 * k, c = piece / 8, r = TEC_TILE_ROWS * (piece % 8);
    if (c0 + c >= c1) continue;
    u8* dst = out + (c0 + c) * TEC_ROWS + r0 + r;
    if (TEC_TRANSPOSED_VECTORS && r0 + r + TEC_TILE_ROWS <= r1) {
      *(uint4*)dst = *(const uint4*)&transposed[c][r];
    } else {
      for (int b = 0; b < TEC_TILE_ROWS && r0 + r + b < r1; ++b) dst[b] = transposed[c][r + b];
    }
  }
}

// Code (i, j) of the tile into byte i % 4 of codes[j][i / 4]: the 16 codes of column j in row order.
__device__ __forceinline__ void tec_pack_code(u32 (&codes)[4][4], int i, int j, u8 code) {
  if (i % 4 == 0) codes[j][i / 4] = 0u;
  codes[j][i / 4] |= (u32)code << (8 * (i % 4));
}

extern "C" __global__ void __launch_bounds__(256) tec_block_quantize_2d(TecBlockArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();
  __shared__ float scratch[8];
  __shared__ __align__(16) u8 transposed[TEC_COLUMNWISE ? TEC_BLOCK : 1][TEC_TRANSPOSED_PITCH];
  const i64 member = blockIdx.z, member_values = member * TEC_ROWS * TEC_COLS;
  const i64 a = blockIdx.y, b = blockIdx.x;
  const i64 r0 = a * TEC_BLOCK, c0 = b * TEC_BLOCK;
  const i64 r1 = r0 + TEC_BLOCK < TEC_ROWS ? r0 + TEC_BLOCK : TEC_ROWS;
  const i64 c1 = c0 + TEC_BLOCK < TEC_COLS ? c0 + TEC_BLOCK : TEC_COLS;
  float v[TEC_TILE_ROWS][4];
  tec_load_tile((const float*)args.slot[0] + member_values, r0, c0, r1, c1, v);
  float local = 0.0f;
#pragma unroll
  for (int i = 0; i < TEC_TILE_ROWS; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) local = fmaxf(local, fabsf(v[i][j]));
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
  const i64 row = r0 + TEC_TILE_ROWS * (threadIdx.x / 32), col = c0 + threadIdx.x % 32;
  u32 codes[4][4];
#pragma unroll
  for (int i = 0; i < TEC_TILE_ROWS; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const u8 code = tec_encode(v[i][j] * scale);
      tec_pack_code(codes, i, j, code);
#if TEC_ROWWISE
      if (row + i < r1 && col + 32 * j < c1) ((u8*)args.slot[1])[member_values + (row + i) * TEC_COLS + col + 32 * j] = code;
#endif
    }
#if TEC_COLUMNWISE
  tec_store_transposed(codes, transposed, (u8*)args.slot[3] + member_values, r0, c0, r1, c1);
#endif
}

extern "C" __global__ void __launch_bounds__(256) tec_block_quantize_columns(TecBlockArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();
  __shared__ float column_amax[8][TEC_BLOCK];
  __shared__ __align__(16) u8 transposed[TEC_BLOCK][TEC_TRANSPOSED_PITCH];
  const i64 a = blockIdx.y, r0 = a * TEC_BLOCK, c0 = (i64)blockIdx.x * TEC_BLOCK;
  const i64 r1 = r0 + TEC_BLOCK < TEC_ROWS ? r0 + TEC_BLOCK : TEC_ROWS;
  const i64 c1 = c0 + TEC_BLOCK < TEC_COLS ? c0 + TEC_BLOCK : TEC_COLS;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float v[TEC_TILE_ROWS][4];
  tec_load_tile((const float*)args.slot[0], r0, c0, r1, c1, v);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float local = 0.0f;
#pragma unroll
    for (int i = 0; i < TEC_TILE_ROWS; ++i) local = fmaxf(local, fabsf(v[i][j]));
    column_amax[warp][lane + 32 * j] = local;
  }
  __syncthreads();
  float scale[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float amax = 0.0f;
    for (int w = 0; w < 8; ++w) amax = fmaxf(amax, column_amax[w][lane + 32 * j]);
    scale[j] = tec_block_scale(amax);
    if (warp == 0 && c0 + lane + 32 * j < c1) ((float*)args.slot[2])[a * ((TEC_COLS + 3) / 4 * 4) + c0 + lane + 32 * j] = __fdiv_rn(1.0f, scale[j]);
  }
  u32 codes[4][4];
#pragma unroll
  for (int i = 0; i < TEC_TILE_ROWS; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) tec_pack_code(codes, i, j, tec_encode(v[i][j] * scale[j]));
  tec_store_transposed(codes, transposed, (u8*)args.slot[1], r0, c0, r1, c1);
}
