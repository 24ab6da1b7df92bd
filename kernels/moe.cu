// The MoE layer's routing on the device, so that one CUDA graph serves any routing:
//   tec_moe_router: one block of TEC_ROW_THREADS per token; the logits x . W[e] in the row
//     kernels' sum order (tec_row_sum_order), then thread 0 runs tec_router_select
//     (kernels/tec_math.h): the CPU reference's bits. Slots: 0 x [T, H] (TEC_IN_DTYPE),
//     1 W [E, H] (TEC_PARAM_DTYPE), 2 weights out [T, k] fp32, 3 indices out [T, k] int32.
//   tec_moe_route: one block; from the experts of each token slot (t * k + j) the rows per
//     expert (m_splits), each slot's row in expert order (row_map; stable: an expert's slots
//     keep their order) and each row's source token (row_source, what the permute's row kernel
//     gathers by). An index outside [0, E) sets TEC_STATUS_BAD_EXPERT in the session's status
//     word and its slot takes no row; rows left without a slot gather token 0. Slots: 0
//     indices, 1 m_splits, 2 row_map, 3 row_source, 4 status.
// Defines: TEC_H, TEC_E (experts), TEC_K (top k), TEC_SLOTS (T * k), TEC_SCORE (TEC_SCORE_*),
// TEC_NORMALIZE.
#include "common.cuh"
#include "tec_math.h"

struct TecMoeArgs {
  unsigned long long slot[6];
};

#define TEC_WARPS (TEC_ROW_THREADS / 32)

template <int kDtype>
__device__ __forceinline__ float tec_moe_load(const void* base, i64 index) {
  if (kDtype == 2) return ((const float*)base)[index];
  if (kDtype == 1) return tec_fp16_to_float(((const u16*)base)[index]);
  return tec_bf16_to_float(((const u16*)base)[index]);
}

#ifdef TEC_H
// The block-wide sum in tec_row_sum_order; thread 0 gets it.
__device__ float tec_moe_block_sum(float v, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) v = v + __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float w = (threadIdx.x & 31) < TEC_WARPS ? scratch[threadIdx.x & 31] : 0.0f;
  for (int offset = TEC_WARPS / 2; offset > 0; offset /= 2) w = w + __shfl_xor_sync(0xFFFFFFFFu, w, offset);
  return w;
}

extern "C" __global__ void __launch_bounds__(TEC_ROW_THREADS) tec_moe_router(TecMoeArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();
  __shared__ float scratch[TEC_WARPS];
  __shared__ float scores[TEC_E];
  const i64 token = blockIdx.x;
  const void* x = (const void*)args.slot[0];
  const void* w = (const void*)args.slot[1];
  for (int e = 0; e < TEC_E; ++e) {
    float local = 0.0f;
    for (i64 i = threadIdx.x; i < TEC_H; i += TEC_ROW_THREADS)
      local += tec_moe_load<TEC_IN_DTYPE>(x, token * TEC_H + i) * tec_moe_load<TEC_PARAM_DTYPE>(w, (i64)e * TEC_H + i);
    const float sum = tec_moe_block_sum(local, scratch);
    if (threadIdx.x == 0) scores[e] = sum;
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    float weights[TEC_K];
    int chosen[TEC_K];
    tec_router_select(scores, TEC_E, TEC_K, TEC_SCORE, TEC_NORMALIZE, weights, chosen);
    for (int j = 0; j < TEC_K; ++j) {
      ((float*)args.slot[2])[token * TEC_K + j] = weights[j];
      ((int*)args.slot[3])[token * TEC_K + j] = chosen[j];
    }
  }
}
#endif

#ifdef TEC_SLOTS
#define TEC_ROUTE_THREADS 1024
// Each thread owns a contiguous run of slots, so that a block-wide exclusive scan of the
// threads' counts gives every slot its rank within its expert in slot order.
#define TEC_RUN ((TEC_SLOTS + TEC_ROUTE_THREADS - 1) / TEC_ROUTE_THREADS)

// Exclusive prefix sum over the block's threads (integers: any order gives the same result).
__device__ int tec_block_exclusive_scan(int v, int* scratch, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  int inclusive = v;
  for (int offset = 1; offset < 32; offset *= 2) {
    const int other = __shfl_up_sync(0xFFFFFFFFu, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  __syncthreads();
  if (lane == 31) scratch[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int w = scratch[lane];
    for (int offset = 1; offset < 32; offset *= 2) {
      const int other = __shfl_up_sync(0xFFFFFFFFu, w, offset);
      if (lane >= offset) w += other;
    }
    scratch[lane] = w;  // inclusive over warps
  }
  __syncthreads();
  *total = scratch[31];
  return (warp > 0 ? scratch[warp - 1] : 0) + inclusive - v;
}

extern "C" __global__ void __launch_bounds__(TEC_ROUTE_THREADS) tec_moe_route(TecMoeArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();
  __shared__ int scratch[32];
  const int* indices = (const int*)args.slot[0];
  int* m_splits = (int*)args.slot[1];
  int* row_map = (int*)args.slot[2];
  int* row_source = (int*)args.slot[3];
  int* status = (int*)args.slot[4];
  const i64 first = (i64)threadIdx.x * TEC_RUN;
  const i64 last = first + TEC_RUN < TEC_SLOTS ? first + TEC_RUN : TEC_SLOTS;
  for (i64 r = threadIdx.x; r < TEC_SLOTS; r += TEC_ROUTE_THREADS) row_source[r] = 0;
  bool bad = false;
  for (i64 s = first; s < last; ++s) {
    row_map[s] = 0;
    bad = bad || indices[s] < 0 || indices[s] >= TEC_E;
  }
  if (bad) atomicOr(status, TEC_STATUS_BAD_EXPERT);
  __syncthreads();
  int expert_start = 0;
  for (int e = 0; e < TEC_E; ++e) {
    int mine = 0;
    for (i64 s = first; s < last; ++s) mine += indices[s] == e;
    int total;
    int row = expert_start + tec_block_exclusive_scan(mine, scratch, &total);
    for (i64 s = first; s < last; ++s)
      if (indices[s] == e) {
        row_map[s] = row;
        row_source[row] = (int)(s / TEC_K);
        ++row;
      }
    if (threadIdx.x == 0) m_splits[e] = total;
    expert_start += total;
  }
}
#endif
