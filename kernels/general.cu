// The general path's kernels (ir/general_kernel.h): strided loops over any shape, for the ops
// no row producer or codegen module of their own takes (src/codegen/general.cpp launches them).
// Each computes in the order src/ops/general.cpp's CPU reference does, so the two agree bit
// for bit. Dtype codes: TEC_A_DTYPE, TEC_B_DTYPE, TEC_C_DTYPE (the inputs), TEC_OUT_DTYPE:
// 0 bf16, 1 fp16, 2 fp32, 3 uint8 (bool: 0 or 1), 4 int32.
//
// Argument slots (64-bit words; dims and strides in elements, TEC_GENERAL_MAX_RANK of each):
//   0, 1, 2: the inputs; 3: the output; 4: the count of work items (below); 5: the rank;
//   6..11: dims; 12..17, 18..23, 24..29: the strides of inputs 0, 1, 2 along them (copy:
//   the input's, then the output's); 30, 31: copy's input and output offsets;
//   32, 33: softmax's n and inner; 34: reduce's reduced rank, 35..40 its reduced dims,
//   41..46 their strides, 47 the reduced count; 48, 49, 50: matmul's m, n, k (gather and
//   scatter_add: 48 m, 49 n, 33 inner).
#include "common.cuh"
#include "tec_math.h"
#include "block_sum.cuh"

#define TEC_GENERAL_MAX_RANK 6
#define TEC_GENERAL_THREADS TEC_ROW_THREADS  // reductions replay tec_row_sum_order (block_sum.cuh)

struct TecGeneralArgs {
  unsigned long long slot[64];
};

template <int kDtype>
__device__ __forceinline__ float tec_general_load(const void* base, i64 index) {
  if (kDtype == 3) return ((const u8*)base)[index] ? 1.0f : 0.0f;
  if (kDtype == 4) return (float)((const int*)base)[index];
  return tec_load<kDtype>(base, index);
}

// As the reference stores values (src/reference/quantize.cpp encode_values_into).
template <int kDtype>
__device__ __forceinline__ void tec_general_store(void* base, i64 index, float v) {
  if (kDtype == 3) {
    ((u8*)base)[index] = v != 0.0f ? 1 : 0;
  } else if (kDtype == 4) {
    const float clamped = fminf(fmaxf(v, -2147483648.0f), 2147483520.0f);
    ((int*)base)[index] = clamped == clamped ? (int)clamped : 0;
  } else {
    tec_store<kDtype>(base, index, v);
  }
}

// The offset of row-major index `e` over `rank` dims (slots dims_at...) through strides (slots strides_at...).
__device__ __forceinline__ i64 tec_general_offset(const TecGeneralArgs& args, i64 e, int rank, int dims_at, int strides_at) {
  i64 offset = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const i64 extent = (i64)args.slot[dims_at + d];
    offset += (e % extent) * (i64)args.slot[strides_at + d];
    e /= extent;
  }
  return offset;
}

// The block-wide max, NaN passed on (order does not matter).
__device__ float tec_general_block_max(float v, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) v = tec_max_nan(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float w = scratch[0];
  for (int i = 1; i < TEC_GENERAL_THREADS / 32; ++i) w = tec_max_nan(w, scratch[i]);
  __syncthreads();
  return w;
}

#if defined(TEC_MAP)
// out[e] = tec_apply_map(TEC_MAP, a, b, c): a thread per element, grid-strided.
extern "C" __global__ void __launch_bounds__(TEC_GENERAL_THREADS) tec_general_map(TecGeneralArgs args) {
  tec_wait_for_previous_kernel();
  const i64 count = (i64)args.slot[4];
  const int rank = (int)args.slot[5];
  for (i64 e = (i64)blockIdx.x * TEC_GENERAL_THREADS + threadIdx.x; e < count; e += (i64)gridDim.x * TEC_GENERAL_THREADS) {
    float v[3] = {0.0f, 0.0f, 0.0f};
    v[0] = tec_general_load<TEC_A_DTYPE>((const void*)args.slot[0], tec_general_offset(args, e, rank, 6, 12));
#ifdef TEC_B_DTYPE
    v[1] = tec_general_load<TEC_B_DTYPE>((const void*)args.slot[1], tec_general_offset(args, e, rank, 6, 18));
#endif
#ifdef TEC_C_DTYPE
    v[2] = tec_general_load<TEC_C_DTYPE>((const void*)args.slot[2], tec_general_offset(args, e, rank, 6, 24));
#endif
    tec_general_store<TEC_OUT_DTYPE>((void*)args.slot[3], e, tec_apply_map(TEC_MAP, v[0], v[1], v[2]));
  }
  tec_allow_next_kernel();
}
#endif

#if defined(TEC_COPY)
// One strided copy: region element e from in[in_offset + ...] to out[out_offset + ...].
extern "C" __global__ void __launch_bounds__(TEC_GENERAL_THREADS) tec_general_copy(TecGeneralArgs args) {
  tec_wait_for_previous_kernel();
  const i64 count = (i64)args.slot[4];
  const int rank = (int)args.slot[5];
  const i64 in_offset = (i64)args.slot[30], out_offset = (i64)args.slot[31];
  for (i64 e = (i64)blockIdx.x * TEC_GENERAL_THREADS + threadIdx.x; e < count; e += (i64)gridDim.x * TEC_GENERAL_THREADS) {
#if defined(TEC_COPY_ZEROS)
    const float v = 0.0f;  // (a zero fill reads nothing: slot 0 is unset)
    (void)in_offset;
#else
    const float v = tec_general_load<TEC_A_DTYPE>((const void*)args.slot[0], in_offset + tec_general_offset(args, e, rank, 6, 12));
#endif
    tec_general_store<TEC_OUT_DTYPE>((void*)args.slot[3], out_offset + tec_general_offset(args, e, rank, 6, 18), v);
  }
  tec_allow_next_kernel();
}
#endif

#if defined(TEC_SOFTMAX)
// A block per row: row r's element j at (r / inner) n inner + r % inner + j inner.
extern "C" __global__ void __launch_bounds__(TEC_GENERAL_THREADS) tec_general_softmax(TecGeneralArgs args) {
  __shared__ float scratch[TEC_GENERAL_THREADS / 32];
  tec_wait_for_previous_kernel();
  const i64 rows = (i64)args.slot[4], n = (i64)args.slot[32], inner = (i64)args.slot[33];
  const void* x = (const void*)args.slot[0];
  for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
    const i64 base = r / inner * n * inner + r % inner;
    float max = __int_as_float(0xFF800000);  // -inf
    for (i64 j = threadIdx.x; j < n; j += TEC_GENERAL_THREADS) max = tec_max_nan(tec_general_load<TEC_A_DTYPE>(x, base + j * inner), max);
    max = tec_general_block_max(max, scratch);
    float sum = 0.0f;
    for (i64 j = threadIdx.x; j < n; j += TEC_GENERAL_THREADS) sum += tec_exp(tec_general_load<TEC_A_DTYPE>(x, base + j * inner) - max);
    sum = tec_block_sum(sum, scratch);
    for (i64 j = threadIdx.x; j < n; j += TEC_GENERAL_THREADS)
      tec_general_store<TEC_OUT_DTYPE>((void*)args.slot[3], base + j * inner,
                                       tec_exp(tec_general_load<TEC_A_DTYPE>(x, base + j * inner) - max) / sum);
  }
  tec_allow_next_kernel();
}
#endif

#if defined(TEC_REDUCE)
// A block per output: thread t takes reduced elements t, t + 256, ... (row-major over the
// reduced dims), then the block combines them (TEC_REDUCE: sum, mean, max).
extern "C" __global__ void __launch_bounds__(TEC_GENERAL_THREADS) tec_general_reduce(TecGeneralArgs args) {
  __shared__ float scratch[TEC_GENERAL_THREADS / 32];
  tec_wait_for_previous_kernel();
  const i64 outputs = (i64)args.slot[4], count = (i64)args.slot[47];
  const int rank = (int)args.slot[5], reduced_rank = (int)args.slot[34];
  const void* x = (const void*)args.slot[0];
  for (i64 o = blockIdx.x; o < outputs; o += gridDim.x) {
    const i64 base = tec_general_offset(args, o, rank, 6, 12);
    float local = TEC_REDUCE == TEC_REDUCE_MAX ? __int_as_float(0xFF800000) : 0.0f;
    for (i64 i = threadIdx.x; i < count; i += TEC_GENERAL_THREADS) {
      const float v = tec_general_load<TEC_A_DTYPE>(x, base + tec_general_offset(args, i, reduced_rank, 35, 41));
      local = TEC_REDUCE == TEC_REDUCE_MAX ? tec_max_nan(v, local) : local + v;
    }
    float r;
    if (TEC_REDUCE == TEC_REDUCE_MAX) {
      r = tec_general_block_max(local, scratch);
    } else {
      r = tec_block_sum(local, scratch);
      if (TEC_REDUCE == TEC_REDUCE_MEAN) r = r / (float)count;
    }
    if (threadIdx.x == 0) tec_general_store<TEC_OUT_DTYPE>((void*)args.slot[3], o, r);
  }
  tec_allow_next_kernel();
}
#endif

#if defined(TEC_GATHER)
// A thread per output element [m, n, inner]: its k indices pick one inner row of data viewed as
// [m, D_1 .. D_k, inner] (slots: 0 data, 1 the int32 indices [n, k], 2 the status word, 4 the
// outputs, 5 k, 6.. D, 48 m, 49 n, 33 inner). An index outside [-D, D) writes 0 and sets
// TEC_STATUS_BAD_INDEX.
extern "C" __global__ void __launch_bounds__(TEC_GENERAL_THREADS) tec_general_gather(TecGeneralArgs args) {
  tec_wait_for_previous_kernel();
  const i64 count = (i64)args.slot[4], n = (i64)args.slot[49], inner = (i64)args.slot[33];
  const int k = (int)args.slot[5];
  i64 block = 1;  // D_1 x .. x D_k
  for (int t = 0; t < k; ++t) block *= (i64)args.slot[6 + t];
  for (i64 e = (i64)blockIdx.x * TEC_GENERAL_THREADS + threadIdx.x; e < count; e += (i64)gridDim.x * TEC_GENERAL_THREADS) {
    const i64 o = e / (n * inner), j = e / inner % n, i = e % inner;
    i64 flat = 0;
    bool inside = true;
    for (int t = 0; t < k; ++t) {
      const i64 extent = (i64)args.slot[6 + t];
      i64 index = (i64)((const int*)args.slot[1])[j * k + t];
      if (index < 0) index += extent;
      inside = inside && index >= 0 && index < extent;
      flat = flat * extent + (inside ? index : 0);
    }
    if (!inside) atomicOr((int*)args.slot[2], TEC_STATUS_BAD_INDEX);
    const float v = inside ? tec_general_load<TEC_A_DTYPE>((const void*)args.slot[0], (o * block + flat) * inner + i) : 0.0f;
    tec_general_store<TEC_OUT_DTYPE>((void*)args.slot[3], e, v);
  }
  tec_allow_next_kernel();
}
#endif

#if defined(TEC_SCATTER_ADD)
// gather's gradient: a block per output row (o, d) of [m, D_1 .. D_k, inner] (slot 4: their
// count), its threads over inner. The block tests 256 index tuples at a time (slot 1, [n, k]),
// each thread one, and every thread adds the picked rows of g (slot 0, [m, n, inner]) in the
// order of j, as the reference does; a tuple out of range picks nothing.
extern "C" __global__ void __launch_bounds__(TEC_GENERAL_THREADS) tec_general_scatter_add(TecGeneralArgs args) {
  __shared__ unsigned picks[TEC_GENERAL_THREADS / 32];
  tec_wait_for_previous_kernel();
  const i64 rows = (i64)args.slot[4], n = (i64)args.slot[49], inner = (i64)args.slot[33];
  const int k = (int)args.slot[5];
  i64 block = 1;  // D_1 x .. x D_k
  for (int t = 0; t < k; ++t) block *= (i64)args.slot[6 + t];
  const int* indices = (const int*)args.slot[1];
  for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const i64 o = row / block, d = row % block;
    for (i64 i0 = 0; i0 < inner; i0 += TEC_GENERAL_THREADS) {
      const i64 i = i0 + threadIdx.x;
      float acc = 0.0f;
      for (i64 j0 = 0; j0 < n; j0 += TEC_GENERAL_THREADS) {
        const i64 j = j0 + threadIdx.x;
        bool pick = j < n;
        i64 flat = 0;
        for (int t = 0; pick && t < k; ++t) {
          const i64 extent = (i64)args.slot[6 + t];
          i64 index = (i64)indices[j * k + t];
          if (index < 0) index += extent;
          pick = index >= 0 && index < extent;
          flat = flat * extent + index;
        }
        const unsigned ballot = __ballot_sync(0xFFFFFFFFu, pick && flat == d);
        __syncthreads();  // (the previous tuples' picks are read)
        if ((threadIdx.x & 31) == 0) picks[threadIdx.x / 32] = ballot;
        __syncthreads();
        if (i < inner)
          for (int w = 0; w < TEC_GENERAL_THREADS / 32; ++w)
            for (unsigned bits = picks[w]; bits != 0; bits &= bits - 1) {
              const i64 picked = j0 + w * 32 + (__ffs(bits) - 1);
              acc = acc + tec_general_load<TEC_A_DTYPE>((const void*)args.slot[0], (o * n + picked) * inner + i);
            }
      }
      if (i < inner) tec_general_store<TEC_OUT_DTYPE>((void*)args.slot[3], row * inner + i, acc);
    }
  }
  tec_allow_next_kernel();
}
#endif

#if defined(TEC_MATMUL)
// out[b, m, n] = sum over k in order of a[b, m, k] b[b, k, n], fp32, no fused multiply-add
// (NVRTC compiles with --fmad=false): a 16 x 16 tile of outputs per block, K in tiles of 16
// through shared memory, each thread one output; grid.z strides over the batches (slot 4), whose
// operands start at their batch strides.
#define TEC_MM_TILE 16
extern "C" __global__ void __launch_bounds__(TEC_MM_TILE * TEC_MM_TILE) tec_general_matmul(TecGeneralArgs args) {
  __shared__ float a_tile[TEC_MM_TILE][TEC_MM_TILE], b_tile[TEC_MM_TILE][TEC_MM_TILE + 1];
  tec_wait_for_previous_kernel();
  const i64 m = (i64)args.slot[48], n = (i64)args.slot[49], k = (i64)args.slot[50], batches = (i64)args.slot[4];
  const int rank = (int)args.slot[5];
  const int tx = threadIdx.x % TEC_MM_TILE, ty = threadIdx.x / TEC_MM_TILE;
  const i64 row = (i64)blockIdx.y * TEC_MM_TILE + ty, col = (i64)blockIdx.x * TEC_MM_TILE + tx;
  const void *a = (const void*)args.slot[0], *b = (const void*)args.slot[1];
  for (i64 batch = blockIdx.z; batch < batches; batch += gridDim.z) {
    const i64 a0 = tec_general_offset(args, batch, rank, 6, 12), b0 = tec_general_offset(args, batch, rank, 6, 18);
    float acc = 0.0f;
    for (i64 k0 = 0; k0 < k; k0 += TEC_MM_TILE) {
      a_tile[ty][tx] = row < m && k0 + tx < k ? tec_general_load<TEC_A_DTYPE>(a, a0 + row * k + k0 + tx) : 0.0f;
      b_tile[ty][tx] = k0 + ty < k && col < n ? tec_general_load<TEC_B_DTYPE>(b, b0 + (k0 + ty) * n + col) : 0.0f;
      __syncthreads();
      const int depth = k - k0 < TEC_MM_TILE ? (int)(k - k0) : TEC_MM_TILE;
      for (int i = 0; i < depth; ++i) acc = acc + a_tile[ty][i] * b_tile[i][tx];
      __syncthreads();
    }
    if (row < m && col < n) tec_general_store<TEC_OUT_DTYPE>((void*)args.slot[3], (batch * m + row) * n + col, acc);
  }
  tec_allow_next_kernel();
}
#endif
