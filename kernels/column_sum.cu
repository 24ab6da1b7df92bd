// Column sums over the rows of a [TEC_ROWS, TEC_N] matrix: a linear's dbias and a norm's
// dgamma / dbeta (train plans). Two kernels, in the order tec_column_sum_order
// (kernels/tec_math.h) gives the CPU reference, so both compute the same bits, run after run:
//   tec_column_partials: grid (ceil(N / 256), chunks); thread = one column of one chunk of
//     TEC_COLUMN_CHUNK_ROWS rows, summed top-down into partials[chunk][column];
//   tec_column_finish: grid ceil(N / 256); out[column] = the partials summed top-down.
// TEC_COLUMN: 1 the column sums of dy; 2 a norm's dgamma = sum dy ((x - mean) rsigma) and,
// with TEC_HAS_MEAN (layernorm), dbeta = sum dy in a second set of partials.
// Partials: slots 0 dy, 1 x, 2 mean, 3 rsigma, 4 partials, 5 second partials.
// Finish: slots 0 partials, 1 out (TEC_OUT: 0 bf16, 2 fp32).
#include "common.cuh"
#include "tec_math.h"

struct TecColumnArgs {
  unsigned long long slot[6];
};

#define TEC_CHUNKS ((TEC_ROWS + TEC_COLUMN_CHUNK_ROWS - 1) / TEC_COLUMN_CHUNK_ROWS)

template <int kDtype>
__device__ __forceinline__ float tec_column_load(const void* base, i64 index) {
  if (kDtype == 2) return ((const float*)base)[index];
  if (kDtype == 1) return tec_fp16_to_float(((const u16*)base)[index]);
  return tec_bf16_to_float(((const u16*)base)[index]);
}

extern "C" __global__ void __launch_bounds__(256) tec_column_partials(TecColumnArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();
  const i64 c = (i64)blockIdx.x * 256 + threadIdx.x;
  if (c >= TEC_N) return;
  const i64 begin = (i64)blockIdx.y * TEC_COLUMN_CHUNK_ROWS;
  const i64 end = begin + TEC_COLUMN_CHUNK_ROWS < TEC_ROWS ? begin + TEC_COLUMN_CHUNK_ROWS : TEC_ROWS;
  const void* dy = (const void*)args.slot[0];
  float sum = 0.0f;
#if TEC_COLUMN == 2
  const void* x = (const void*)args.slot[1];
  float sum_dy = 0.0f;
#endif
  for (i64 r = begin; r < end; ++r) {
    const float g = tec_column_load<TEC_IN_DTYPE>(dy, r * TEC_N + c);
#if TEC_COLUMN == 1
    sum += g;
#else
#if TEC_HAS_MEAN
    const float mean = ((const float*)args.slot[2])[r];
    sum_dy += g;
#else
    const float mean = 0.0f;
#endif
    sum += g * ((tec_column_load<TEC_X_DTYPE>(x, r * TEC_N + c) - mean) * ((const float*)args.slot[3])[r]);
#endif
  }
  ((float*)args.slot[4])[blockIdx.y * TEC_N + c] = sum;
#if TEC_COLUMN == 2 && TEC_HAS_MEAN
  ((float*)args.slot[5])[blockIdx.y * TEC_N + c] = sum_dy;
#endif
}

extern "C" __global__ void __launch_bounds__(256) tec_column_finish(TecColumnArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();
  const i64 c = (i64)blockIdx.x * 256 + threadIdx.x;
  if (c >= TEC_N) return;
  const float* partials = (const float*)args.slot[0];
  float sum = 0.0f;
  for (i64 k = 0; k < TEC_CHUNKS; ++k) sum += partials[k * TEC_N + c];
#if TEC_OUT == 2
  ((float*)args.slot[1])[c] = sum;
#elif TEC_OUT == 1
  ((u16*)args.slot[1])[c] = tec_float_to_fp16(sum);
#else
  ((u16*)args.slot[1])[c] = tec_float_to_bf16(sum);
#endif
}
