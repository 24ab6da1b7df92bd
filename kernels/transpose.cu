// The columnwise copy of a per-tensor FP8 tensor: its rowwise codes transposed,
// columnwise_data[c][r] = data[r][c] (LAYOUTS.md §1.1: one scale serves both copies, so the
// copy is the same bytes). One block of 256 threads per 64 x 64 tile, staged in shared memory
// so that both the reads and the writes are coalesced. Slots: 0 data [TEC_ROWS, TEC_COLS],
// 1 columnwise_data [TEC_COLS, TEC_ROWS].
#include "common.cuh"

struct TecTransposeArgs {
  unsigned long long slot[2];
};

#define TEC_TILE 64

extern "C" __global__ void __launch_bounds__(256) tec_transpose_u8(TecTransposeArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();
  __shared__ u8 tile[TEC_TILE][TEC_TILE + 4];
  // blockIdx.z: the member of a grouped tensor, each [TEC_ROWS, TEC_COLS] transposed alone.
  const u8* in = (const u8*)args.slot[0] + (i64)blockIdx.z * TEC_ROWS * TEC_COLS;
  u8* out = (u8*)args.slot[1] + (i64)blockIdx.z * TEC_ROWS * TEC_COLS;
  const i64 row0 = (i64)blockIdx.y * TEC_TILE, col0 = (i64)blockIdx.x * TEC_TILE;
  const int tx = threadIdx.x % TEC_TILE, ty = threadIdx.x / TEC_TILE;  // 64 x 4
  for (int y = ty; y < TEC_TILE; y += 4) {
    const i64 r = row0 + y, c = col0 + tx;
    if (r < TEC_ROWS && c < TEC_COLS) tile[y][tx] = in[r * TEC_COLS + c];
  }
  __syncthreads();
  for (int y = ty; y < TEC_TILE; y += 4) {
    const i64 c = col0 + y, r = row0 + tx;
    if (r < TEC_ROWS && c < TEC_COLS) out[c * TEC_ROWS + r] = tile[tx][y];
  }
}
