// Column sums over the rows of a [TEC_ROWS, TEC_N] matrix: a linear's dbias and a norm's
// dgamma / dbeta (train plans). Two kernels, in the order tec_column_sum_order
// (kernels/tec_math.h) gives the CPU reference, so both compute the same bits, run after run:
//   tec_column_partials: grid (ceil(N / 256), chunks); thread = one column of one chunk of
//     TEC_COLUMN_CHUNK_ROWS rows, summed top-down into partials[chunk][column];
//   tec_column_finish: grid ceil(N / 256); out[column] = the partials summed top-down.
// TEC_COLUMN: 1 the column sums of dy; 2 a norm's dgamma = sum dy ((x - mean) rsigma) and,
// with TEC_HAS_MEAN (layernorm), dbeta = sum dy in a second set of partials.
// TEC_GROUPS = E (> 0): the sums per expert of an MoE layer's grouped linear (its dbias
// [E, N]), over the m_splits[e] rows of each expert e in turn, m_splits read on the device. The
// chunks start at each expert's first row, as tec_column_sum_order over that expert's rows
// adds them: the partials grid has one y per chunk any routing can need (ceil(rows / 64) + E),
// the finish grid one y per expert. m_splits that are negative or do not sum to the rows set
// TEC_STATUS_BAD_SPLITS in the session's status word, and no block reads by them.
// Partials: slots 0 dy, 1 x, 2 mean, 3 rsigma, 4 partials, 5 second partials, 6 m_splits,
// 7 status. Finish: slots 0 partials, 1 out (TEC_OUT: 0 bf16, 2 fp32), 6 m_splits, 7 status.
#include "common.cuh"
#include "tec_math.h"

#ifndef TEC_GROUPS
#define TEC_GROUPS 0
#endif

struct TecColumnArgs {
  unsigned long long slot[8];
};

#define TEC_CHUNKS ((TEC_ROWS + TEC_COLUMN_CHUNK_ROWS - 1) / TEC_COLUMN_CHUNK_ROWS)

// The chunks of one expert: partials [first_chunk, first_chunk + chunks) hold its rows
// [first_row, first_row + rows).
struct TecChunkGroup {
  i64 first_chunk, chunks, first_row, rows;
};

#if TEC_GROUPS
// Walks m_splits to expert `group` (or, with `chunk` >= 0, to the expert whose chunks hold
// `chunk`, if any: false past the last). False, with the status bit set once, on bad splits.
__device__ bool tec_chunk_group(const TecColumnArgs& args, int group, i64 chunk, TecChunkGroup& out) {
  const int* m_splits = (const int*)args.slot[6];
  i64 row = 0, first_chunk = 0;
  bool found = false;
  for (int e = 0; e < TEC_GROUPS; ++e) {
    const i64 m = m_splits[e];
    if (m < 0 || m > TEC_ROWS - row) {
      row = -1;
      break;
    }
    const i64 chunks = (m + TEC_COLUMN_CHUNK_ROWS - 1) / TEC_COLUMN_CHUNK_ROWS;
    if (!found && (chunk >= 0 ? chunk < first_chunk + chunks : e == group)) {
      out = {first_chunk, chunks, row, m};
      found = true;
    }
    first_chunk += chunks;
    row += m;
  }
  if (row != TEC_ROWS) {
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) atomicOr((int*)args.slot[7], TEC_STATUS_BAD_SPLITS);
    return false;
  }
  return found;
}
#endif

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
#if TEC_GROUPS
  TecChunkGroup group;
  if (!tec_chunk_group(args, 0, blockIdx.y, group) || c >= TEC_N) return;
  const i64 begin = group.first_row + (blockIdx.y - group.first_chunk) * TEC_COLUMN_CHUNK_ROWS;
  const i64 group_end = group.first_row + group.rows;
  const i64 end = begin + TEC_COLUMN_CHUNK_ROWS < group_end ? begin + TEC_COLUMN_CHUNK_ROWS : group_end;
#else
  if (c >= TEC_N) return;
  const i64 begin = (i64)blockIdx.y * TEC_COLUMN_CHUNK_ROWS;
  const i64 end = begin + TEC_COLUMN_CHUNK_ROWS < TEC_ROWS ? begin + TEC_COLUMN_CHUNK_ROWS : TEC_ROWS;
#endif
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
#if TEC_GROUPS
  TecChunkGroup group;
  if (!tec_chunk_group(args, blockIdx.y, -1, group) || c >= TEC_N) return;
  const i64 first_chunk = group.first_chunk, chunks = group.chunks, out = (i64)blockIdx.y * TEC_N + c;
#else
  if (c >= TEC_N) return;
  const i64 first_chunk = 0, chunks = TEC_CHUNKS, out = c;
#endif
  const float* partials = (const float*)args.slot[0];
  float sum = 0.0f;  // an expert with no rows: 0, as the reference's
  for (i64 k = first_chunk; k < first_chunk + chunks; ++k) sum += partials[k * TEC_N + c];
#if TEC_OUT == 2
  ((float*)args.slot[1])[out] = sum;
#elif TEC_OUT == 1
  ((u16*)args.slot[1])[out] = tec_float_to_fp16(sum);
#else
  ((u16*)args.slot[1])[out] = tec_float_to_bf16(sum);
#endif
}
