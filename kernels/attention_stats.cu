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
