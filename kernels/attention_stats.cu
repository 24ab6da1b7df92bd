// The log-sum-exp rows of padded sequences past their lengths (attention with seq_lens in a train
// plan, whose forward saves the log-sum-exp): cuDNN leaves them as it likes (inf, measured on the
// H100); the reference writes 0 there, and nothing reads them. A thread per row. Slots: 0 stats
// [B, TEC_HEADS, TEC_SEQ] fp32, 1 seq_lens int32 [B]; TEC_ROWS = B x TEC_HEADS x TEC_SEQ.
#include "common.cuh"

struct TecStatsArgs {
  unsigned long long slot[2];
};

extern "C" __global__ void __launch_bounds__(256) tec_zero_padded_stats(TecStatsArgs args) {
  const i64 i = (i64)blockIdx.x * 256 + threadIdx.x;
  if (i >= TEC_ROWS) return;
  const i64 b = i / (TEC_HEADS * TEC_SEQ), position = i % TEC_SEQ;
  if (position >= ((const int*)args.slot[1])[b]) ((float*)args.slot[0])[i] = 0.0f;
}

// Each sequence's length from a padding mask [TEC_BATCH, TEC_SEQ] of 1 (token) and 0 (padding),
// right-padded (the ones first): attention's seq_lens. A thread per sequence. A row that is not
// ones then zeros, or holds another value, sets the status word's TEC_STATUS_BAD_PADDING; its
// length is then its leading ones, still within [0, TEC_SEQ]. Slots: 0 the mask (int32), 1 the
// lengths (int32 [B]), 2 the status word.

#ifdef TEC_BATCH  // (the module of tec_zero_padded_stats defines no batch)
struct TecLengthsArgs {
  unsigned long long slot[3];
};

extern "C" __global__ void __launch_bounds__(256) tec_sequence_lengths(TecLengthsArgs args) {
  const i64 b = (i64)blockIdx.x * 256 + threadIdx.x;
  if (b >= TEC_BATCH) return;
  const int* row = (const int*)args.slot[0] + b * TEC_SEQ;
  int length = 0;
  while (length < TEC_SEQ && row[length] == 1) ++length;
  bool right_padded = true;
  for (i64 j = length; j < TEC_SEQ; ++j) right_padded = right_padded && row[j] == 0;
  if (!right_padded) atomicOr((int*)args.slot[2], TEC_STATUS_BAD_PADDING);
  ((int*)args.slot[1])[b] = length;
}
#endif
