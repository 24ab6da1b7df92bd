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

// Whole tiles of 16-aligned rows and columns go 16 bytes a thread each way: one global load and
// one global store per thread, where the byte-wise path below issues 16 of each.
#define TEC_TRANSPOSE_VECTOR (TEC_ROWS % 16 == 0 && TEC_COLS % 16 == 0)

extern "C" __global__ void __launch_bounds__(256) tec_transpose_u8(TecTransposeArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();
  // Rows of 68 bytes: 17 words, so that a warp's 4-byte stores and byte loads of a column
  // spread over the banks.
  __shared__ __align__(16) u8 tile[TEC_TILE][TEC_TILE + 4];
  // blockIdx.z: the member of a grouped tensor, each [TEC_ROWS, TEC_COLS] transposed alone.
  const u8* in = (const u8*)args.slot[0] + (i64)blockIdx.z * TEC_ROWS * TEC_COLS;
  u8* out = (u8*)args.slot[1] + (i64)blockIdx.z * TEC_ROWS * TEC_COLS;
  const i64 row0 = (i64)blockIdx.y * TEC_TILE, col0 = (i64)blockIdx.x * TEC_TILE;
#if TEC_TRANSPOSE_VECTOR
  if (row0 + TEC_TILE <= TEC_ROWS && col0 + TEC_TILE <= TEC_COLS && ((args.slot[0] | args.slot[1]) & 15) == 0) {
    {  // thread t loads bytes [16 (t % 4), +16) of the tile's row t / 4
      const int y = threadIdx.x / 4, x = 16 * (threadIdx.x % 4);
      const uint4 v = *(const uint4*)(in + (row0 + y) * TEC_COLS + col0 + x);
      u32* dst = (u32*)&tile[y][x];
      dst[0] = v.x, dst[1] = v.y, dst[2] = v.z, dst[3] = v.w;
    }
    __syncthreads();
    // thread t stores rows [16 (t % 4), +16) of the tile's column t / 4: the 4 threads of a
    // column write its 64 contiguous bytes.
    const int c = threadIdx.x / 4, y = 16 * (threadIdx.x % 4);
    u32 words[4];
#pragma unroll
    for (int w = 0; w < 4; ++w)
      words[w] = tile[y + 4 * w][c] | tile[y + 4 * w + 1][c] << 8 | tile[y + 4 * w + 2][c] << 16 | (u32)tile[y + 4 * w + 3][c] << 24;
    *(uint4*)(out + (col0 + c) * TEC_ROWS + row0 + y) = make_uint4(words[0], words[1], words[2], words[3]);
    return;
  }
#endif
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
