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
//
// The backward (train plans), each kernel the CPU reference's sums in its order:
//   tec_moe_router_backward: one block per token; the scores and the choice made again as the
//     forward made them, then d(weights) back to the logits (thread 0, backward_reference_router's
//     order), dlogits [T, E] fp32 kept for the weight's gradient, and dx[t, i] = sum over e of
//     dlogits[t, e] W[e, i], e from 0 up. Slots: 0 x, 1 W, 2 d(weights) [T, k] fp32, 3 dlogits,
//     4 dx (TEC_OUT_DTYPE).
//   tec_moe_router_weight_grad: a thread per element of W: dW[e, i] = sum over t of
//     dlogits[t, e] x[t, i], t from 0 up. Slots: 0 x, 1 dlogits, 2 dW (TEC_DW_DTYPE).
//   tec_moe_unpermute_weights_grad: one block per token slot s: d(weights)[s] = the dot of
//     d(out)[s / k] with y[row_map[s]] in tec_row_sum_order. Slots: 0 y, 1 row_map, 2 d(out),
//     3 d(weights) fp32, 4 status.
//   tec_moe_invert_row_map: one block; each row of y gets the last slot that maps to it (-1:
//     none), for the row kernel that scatters d(out) back to expert order (row.cu producer 22).
//     Slots: 0 row_map, 1 the inverse, 2 status.
//
// Defines: TEC_H, TEC_E (experts), TEC_K (top k), TEC_SLOTS (T * k), TEC_SCORE (TEC_SCORE_*),
// TEC_NORMALIZE, TEC_OUT_DTYPE, TEC_ROUTER_TOKENS and TEC_DW_DTYPE (the router's weight gradient), TEC_COLS
// and TEC_Y_ROWS (unpermute), TEC_INVERT_SLOTS and TEC_Y_ROWS (the inverse row map).
#include "common.cuh"
#include "tec_math.h"

struct TecMoeArgs {
  unsigned long long slot[6];
};

#define TEC_WARPS (TEC_ROW_THREADS / 32)

#if defined(TEC_H) || defined(TEC_COLS)
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
#endif

#ifdef TEC_H
// Token `token`'s logits x . W[e] into `logits` (shared memory), each in tec_row_sum_order: the
// router and its backward (which makes the scores again) both take them from here.
__device__ void tec_moe_logits(i64 token, const void* x, const void* w, float* logits, float* scratch) {
  for (int e = 0; e < TEC_E; ++e) {
    float local = 0.0f;
    for (i64 i = threadIdx.x; i < TEC_H; i += TEC_ROW_THREADS)
      local += tec_load<TEC_IN_DTYPE>(x, token * TEC_H + i) * tec_load<TEC_PARAM_DTYPE>(w, (i64)e * TEC_H + i);
    const float sum = tec_moe_block_sum(local, scratch);
    if (threadIdx.x == 0) logits[e] = sum;
    __syncthreads();
  }
}

extern "C" __global__ void __launch_bounds__(TEC_ROW_THREADS) tec_moe_router(TecMoeArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();
  __shared__ float scratch[TEC_WARPS];
  __shared__ float scores[TEC_E];
  const i64 token = blockIdx.x;
  tec_moe_logits(token, (const void*)args.slot[0], (const void*)args.slot[1], scores, scratch);
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

#ifdef TEC_OUT_DTYPE
extern "C" __global__ void __launch_bounds__(TEC_ROW_THREADS) tec_moe_router_backward(TecMoeArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();
  __shared__ float scratch[TEC_WARPS];
  __shared__ float p[TEC_E];
  __shared__ float dlogits[TEC_E];
  const i64 token = blockIdx.x;
  const void* w = (const void*)args.slot[1];
  tec_moe_logits(token, (const void*)args.slot[0], w, p, scratch);
  if (threadIdx.x == 0) {
    float weights[TEC_K], dp[TEC_E];
    int chosen[TEC_K];
    tec_router_select(p, TEC_E, TEC_K, TEC_SCORE, TEC_NORMALIZE, weights, chosen);  // p: every expert's score now
    const float* dw = (const float*)args.slot[2] + token * TEC_K;
    float total = 0.0f, dot = 0.0f;
    for (int j = 0; j < TEC_K; ++j) {
      total += p[chosen[j]];
      dot += dw[j] * weights[j];
    }
    for (int e = 0; e < TEC_E; ++e) dp[e] = 0.0f;
    for (int j = 0; j < TEC_K; ++j) dp[chosen[j]] = TEC_NORMALIZE ? (dw[j] - dot) / total : dw[j];
    if (TEC_SCORE == TEC_SCORE_SOFTMAX) {
      float p_dot_dp = 0.0f;
      for (int e = 0; e < TEC_E; ++e) p_dot_dp += p[e] * dp[e];
      for (int e = 0; e < TEC_E; ++e) dlogits[e] = p[e] * (dp[e] - p_dot_dp);
    } else {
      for (int e = 0; e < TEC_E; ++e) dlogits[e] = dp[e] * p[e] * (1.0f - p[e]);
    }
    for (int e = 0; e < TEC_E; ++e) ((float*)args.slot[3])[token * TEC_E + e] = dlogits[e];
  }
  __syncthreads();
  for (i64 i = threadIdx.x; i < TEC_H; i += TEC_ROW_THREADS) {
    float acc = 0.0f;
    for (int e = 0; e < TEC_E; ++e) acc += dlogits[e] * tec_load<TEC_PARAM_DTYPE>(w, (i64)e * TEC_H + i);
    tec_store<TEC_OUT_DTYPE>((void*)args.slot[4], token * TEC_H + i, acc);
  }
}
#endif

#ifdef TEC_ROUTER_TOKENS
extern "C" __global__ void __launch_bounds__(256) tec_moe_router_weight_grad(TecMoeArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();
  const i64 element = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (element >= (i64)TEC_E * TEC_H) return;
  const i64 e = element / TEC_H, i = element % TEC_H;
  const void* x = (const void*)args.slot[0];
  const float* dlogits = (const float*)args.slot[1];
  float acc = 0.0f;
  for (i64 t = 0; t < TEC_ROUTER_TOKENS; ++t) acc += dlogits[t * TEC_E + e] * tec_load<TEC_IN_DTYPE>(x, t * TEC_H + i);
  tec_store<TEC_DW_DTYPE>((void*)args.slot[2], element, acc);
}
#endif

#ifdef TEC_COLS
extern "C" __global__ void __launch_bounds__(TEC_ROW_THREADS) tec_moe_unpermute_weights_grad(TecMoeArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();
  __shared__ float scratch[TEC_WARPS];
  const i64 slot = blockIdx.x;
  const int row = ((const int*)args.slot[1])[slot];
  const bool bad = row < 0 || row >= TEC_Y_ROWS;
  if (bad && threadIdx.x == 0) atomicOr((int*)args.slot[4], TEC_STATUS_BAD_ROW_MAP);
  float local = 0.0f;
  if (!bad)
    for (i64 c = threadIdx.x; c < TEC_COLS; c += TEC_ROW_THREADS)
      local += tec_load<TEC_PARAM_DTYPE>((const void*)args.slot[2], (slot / TEC_K) * TEC_COLS + c) *
               tec_load<TEC_IN_DTYPE>((const void*)args.slot[0], (i64)row * TEC_COLS + c);
  const float sum = tec_moe_block_sum(local, scratch);
  if (threadIdx.x == 0) ((float*)args.slot[3])[slot] = sum;
}
#endif

#ifdef TEC_INVERT_SLOTS
extern "C" __global__ void __launch_bounds__(1024) tec_moe_invert_row_map(TecMoeArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();
  const int* row_map = (const int*)args.slot[0];
  int* inverse = (int*)args.slot[1];
  for (i64 r = threadIdx.x; r < TEC_Y_ROWS; r += blockDim.x) inverse[r] = -1;
  __syncthreads();
  bool bad = false;
  for (i64 s = threadIdx.x; s < TEC_INVERT_SLOTS; s += blockDim.x) {
    const int r = row_map[s];
    if (r < 0 || r >= TEC_Y_ROWS) bad = true;
    else atomicMax(&inverse[r], (int)s);
  }
  if (bad) atomicOr((int*)args.slot[2], TEC_STATUS_BAD_ROW_MAP);
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
