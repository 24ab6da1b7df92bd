// Delayed scaling, after each run (LAYOUTS.md §1.5): for every delayed-scaling tensor, in one
// launch (one block per tensor), take the staged amax in history[0], roll the history, and
// compute the new scale. Matches reference::delayed_scaling_update bit for bit.
// Specialised by TEC_HISTORY_LEN (all tensors of a recipe share it).
#include "common.cuh"

struct TecDelayedTensor {
  float* history;     // [TEC_HISTORY_LEN], history_stride apart
  float* scale;       // [1]
  float* scale_inv;   // [1] of the tensor's quantized data
  float scaled_max;   // fp8_max * 2^-margin
  int most_recent;    // amax algorithm: 1 most_recent, 0 max
  int history_stride;  // floats from one history entry to the next: 1, or a grouped tensor's members (column m of [L, members])
};

extern "C" __global__ void tec_delayed_update(const TecDelayedTensor* __restrict__ tensors, int count) {
  if ((int)blockIdx.x >= count) return;
  const TecDelayedTensor t = tensors[blockIdx.x];
  __shared__ float old[TEC_HISTORY_LEN];
  __shared__ float warp_max[32];
  for (int j = threadIdx.x; j < TEC_HISTORY_LEN; j += blockDim.x) old[j] = t.history[(i64)j * t.history_stride];
  __syncthreads();
  const float a_new = old[0];
  if (a_new == 0.0f) return;  // the fused update skips roll and scale when nothing was staged
  float local = 0.0f;
  for (int j = threadIdx.x; j < TEC_HISTORY_LEN; j += blockDim.x) local = fmaxf(local, old[j]);
  for (int offset = 16; offset > 0; offset /= 2) local = fmaxf(local, __shfl_xor_sync(0xFFFFFFFFu, local, offset));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x / 32] = local;
  __syncthreads();
  for (int j = threadIdx.x; j < TEC_HISTORY_LEN; j += blockDim.x)
    t.history[(i64)j * t.history_stride] = j == 0 ? 0.0f : j == TEC_HISTORY_LEN - 1 ? a_new : old[j + 1];
  if (threadIdx.x == 0) {
    // fmaxf skips NaN like the reference's std::fmax; the warp maxima start at 0, which
    // changes no outcome since only a finite amax > 0 updates the scale.
    float amax = a_new;
    if (!t.most_recent)
      for (int w = 0; w < (int)(blockDim.x + 31) / 32; ++w) amax = fmaxf(amax, warp_max[w]);
    if (isfinite(amax) && amax > 0.0f) {
      float scale = __fdiv_rn(t.scaled_max, amax);
      if (isinf(scale)) scale = 3.402823466e38f;
      *t.scale = scale;
    }
  }
}

// Before each run: scale_inv = 1 / scale for every delayed tensor, so that tensors a GEMM
// epilogue writes in FP8 (with the scale as its D scale) carry their scale_inv too.
extern "C" __global__ void tec_delayed_scale_inv(const TecDelayedTensor* __restrict__ tensors, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) *tensors[i].scale_inv = __fdiv_rn(1.0f, *tensors[i].scale);
}
