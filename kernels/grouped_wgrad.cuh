// What the two grouped wgrad kernels share (grouped_wgrad.cu, mma.sync; grouped_wgrad_sm90.cu,
// wgmma): their argument slots, the expert's rows from m_splits, and the store into D.
// Slots: 0 dY, 1 dY scale_inv, 2 X, 3 X scale_inv, 4 m_splits, 5 D [E, N, K], 6 status.
#pragma once

#include "common.cuh"

struct TecWgradArgs {
  unsigned long long slot[7];
};

// The rows [rows[0], rows[1]) of this block's expert (blockIdx.z) under this run's m_splits,
// found by thread 0 and shared through `rows` and `bad` (shared memory) after a __syncthreads.
// Splits that are negative or do not sum to TEC_ROWS set TEC_STATUS_BAD_SPLITS (once, from the
// first block) and `bad`; the block must then read nothing by them.
__device__ __forceinline__ void tec_wgrad_expert_rows(const TecWgradArgs& args, i64 (&rows)[2], int& bad) {
  if (threadIdx.x != 0) return;
  const int* m_splits = (const int*)args.slot[4];
  i64 row = 0, first = 0, end = 0;
  bool splits_bad = false;
  for (int e = 0; e < TEC_E; ++e) {
    const i64 m = m_splits[e];
    if (m < 0 || m > TEC_ROWS - row) {
      splits_bad = true;
      break;
    }
    if (e == (int)blockIdx.z) first = row, end = row + m;
    row += m;
  }
  bad = splits_bad || row != TEC_ROWS;
  rows[0] = first, rows[1] = end;
  if (bad && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) atomicOr((int*)args.slot[6], TEC_STATUS_BAD_SPLITS);
}

// D[index], D[index + 1] (elements of D [E, N, K]) = v0, v1, or + them (TEC_ACCUMULATE), in
// fp32 (TEC_OUT 2) or bf16 (0).
__device__ __forceinline__ void tec_wgrad_store(const TecWgradArgs& args, i64 index, float v0, float v1) {
#if TEC_OUT == 2
  float2* d = (float2*)((float*)args.slot[5] + index);
#if TEC_ACCUMULATE
  const float2 c = *d;
  v0 = c.x + v0, v1 = c.y + v1;
#endif
  *d = make_float2(v0, v1);
#else
  u32* d = (u32*)((u16*)args.slot[5] + index);
#if TEC_ACCUMULATE
  const u32 c = *d;
  v0 = tec_bf16_to_float((u16)(c & 0xFFFFu)) + v0, v1 = tec_bf16_to_float((u16)(c >> 16)) + v1;
#endif
  *d = (u32)tec_float_to_bf16(v0) | ((u32)tec_float_to_bf16(v1) << 16);
#endif
}
