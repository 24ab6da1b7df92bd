// The sum over a TEC_ROW_THREADS-thread block in the order tec_row_sum_order (kernels/tec_math.h)
// replays on the CPU: row.cu's norms and the general path's reductions (general.cu). Each thread
// passes its own partial; `scratch` holds TEC_ROW_THREADS / 32 floats of shared memory.
#pragma once

#include "tec_math.h"

__device__ float tec_block_sum(float v, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) v = v + __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float w = (threadIdx.x & 31) < TEC_ROW_THREADS / 32 ? scratch[threadIdx.x & 31] : 0.0f;
  for (int offset = TEC_ROW_THREADS / 64; offset > 0; offset /= 2) w = w + __shfl_xor_sync(0xFFFFFFFFu, w, offset);
  __syncthreads();
  if (threadIdx.x == 0) scratch[0] = w;
  __syncthreads();
  return scratch[0];
}
