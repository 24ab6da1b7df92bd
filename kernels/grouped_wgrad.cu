// The weight gradient of an MoE layer's grouped linear (train plans): for each expert e,
//   D[e] (N x K) = alpha * dY[rows of e]^T . X[rows of e]  (+ D[e] as it was, TEC_ACCUMULATE)
// where the rows of e are the m_splits[e] rows after those of the experts before it, read from
// device memory as kernels/grouped_gemm.cu reads them: one graph serves any routing. The sum
// runs along the experts' rows, so its length is the routing's; cuBLASLt takes it from the
// host, hence this kernel.
//
// A block makes a 128 x 128 tile of one expert's D (grid: K / 128, N / 128, E), 8 warps of
// 32 x 64 each, with mma.sync m16n8k16 (fp32 sums). Each step stages TEC_CHUNK rows of the sum
// in shared memory, rows past the expert's end as zeros, and loads the next step's into
// registers while this one's multiply:
// - dY from its rows ([ROWS, N], 16-byte loads), read by ldmatrix.trans as the MMA's A;
// - X from its rows ([ROWS, K]) in bf16, read by ldmatrix.trans as B; FP8 X from its
//   columnwise copy ([K, ROWS], LAYOUTS.md 1.1), the one the memory plan keeps for the backward
//   (the rowwise codes are freed after the forward), staged as [K][rows] and read by ldmatrix.
// bf16 operands multiply as bf16. FP8 codes are widened to fp16 by cvt (exact: every E4M3 and
// E5M2 value is an fp16 value) and multiply as fp16; alpha, the two per-tensor scale_inv, puts
// their scales back.
//
// TEC_BLOCK_SCALES = 1 takes FP8 block scaling (fp8-block: both operands' columnwise copies
// in 1x128 blocks down their columns, LAYOUTS.md section 3). dY is then read from its
// columnwise copy too ([N, ROWS]: its rowwise copy has other blocks), staged as [n][rows] and
// read by ldmatrix as A. A scale block is 128 rows of the whole tensor, which an expert's rows
// need not start on, so the steps start on 64-row boundaries (rows outside the expert zero)
// and each lies in one block; a block's product is summed apart and added into the tile times
// dY's scale_inv for its row n and X's for its column k.
//
// An expert with no rows writes zeros (or leaves D as it was). m_splits that are negative or
// do not sum to the rows set TEC_STATUS_BAD_SPLITS in the session's status word, and every
// block returns before reading anything by them.
//
// Defines: TEC_N, TEC_K (% 128 == 0), TEC_E, TEC_ROWS (all experts' rows), TEC_DY_TYPE and
// TEC_X_TYPE (0 bf16, 3 FP8 E4M3, 4 FP8 E5M2; both bf16 or both FP8), TEC_OUT (0 bf16, 2 fp32),
// TEC_ACCUMULATE, TEC_BLOCK_SCALES. Slots: 0 dY [ROWS, N] (block scales: its columnwise copy
// [N, ROWS]), 1 dY scale_inv (FP8; block scales: [ceil(ROWS / 128), roundup(N, 4)]), 2 X
// ([ROWS, K]; FP8: its columnwise copy [K, ROWS]), 3 X scale_inv (FP8; block scales:
// [ceil(ROWS / 128), roundup(K, 4)]), 4 m_splits, 5 D [E, N, K], 6 status.
// Dynamic shared memory: 2 steps x 2 operands x TEC_STAGE 16-bit elements (73728 bytes).
#include "grouped_wgrad.cuh"

#define TEC_FP8 (TEC_DY_TYPE != 0)
#if (TEC_X_TYPE != 0) != TEC_FP8
#error "dY and X: both bf16 or both FP8"
#endif
#ifndef TEC_BLOCK_SCALES
#define TEC_BLOCK_SCALES 0
#endif
#if TEC_BLOCK_SCALES && !TEC_FP8
#error "block scales: FP8 operands"
#endif
#define TEC_CHUNK 64                   // rows of the sum per step
#define TEC_ROWS_PITCH (128 + 8)       // a [rows][128] stage's row, 16 bytes of skew against ldmatrix bank conflicts
#define TEC_COLUMNS_PITCH (TEC_CHUNK + 8)  // a [128][rows] stage's row
#define TEC_STAGE (128 * TEC_COLUMNS_PITCH)  // 16-bit elements of one operand's step (>= TEC_CHUNK * TEC_ROWS_PITCH)


// Two FP8 codes (the low 16 bits of `codes`) as an fp16 pair, the low byte in the low half.
template <int kType>
__device__ __forceinline__ u32 tec_fp8x2_to_f16x2(u32 codes) {
  u32 out;
  const unsigned short pair = (unsigned short)(codes & 0xFFFFu);
  if (kType == 3) asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(out) : "h"(pair));
  else asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(out) : "h"(pair));
  return out;
}

// An operand's step from its rows: TEC_CHUNK rows x 128 columns at (row0, col0) of a
// [ROWS, kCols] array, rows at or past `end` zero. bf16: 1024 16-byte loads, 4 per thread;
// FP8: 512, 2 per thread, each widened to 32 bytes. Staged as [row][column].
template <int kType, i64 kCols>
struct TecRowsStep {
  static constexpr int kLoads = kType == 0 ? 4 : 2;
  static constexpr int kVectorsPerRow = kType == 0 ? 16 : 8;
  uint4 raw[kLoads];
  __device__ __forceinline__ void load(const u8* base, i64 row0, i64 end, i64 col0) {
    const int element_bytes = kType == 0 ? 2 : 1;
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int id = i * 256 + (int)threadIdx.x, row = id / kVectorsPerRow, vector = id % kVectorsPerRow;
      const i64 r = row0 + row;
      raw[i] = r < end ? *(const uint4*)(base + (r * kCols + col0) * element_bytes + vector * 16) : make_uint4(0, 0, 0, 0);
    }
  }
  __device__ __forceinline__ void store(u16* stage) const {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int id = i * 256 + (int)threadIdx.x, row = id / kVectorsPerRow, vector = id % kVectorsPerRow;
      if (kType == 0) {
        *(uint4*)(stage + row * TEC_ROWS_PITCH + vector * 8) = raw[i];
      } else {
        const u32 words[4] = {raw[i].x, raw[i].y, raw[i].z, raw[i].w};
        uint4 lo, hi;
        lo.x = tec_fp8x2_to_f16x2<kType>(words[0]), lo.y = tec_fp8x2_to_f16x2<kType>(words[0] >> 16);
        lo.z = tec_fp8x2_to_f16x2<kType>(words[1]), lo.w = tec_fp8x2_to_f16x2<kType>(words[1] >> 16);
        hi.x = tec_fp8x2_to_f16x2<kType>(words[2]), hi.y = tec_fp8x2_to_f16x2<kType>(words[2] >> 16);
        hi.z = tec_fp8x2_to_f16x2<kType>(words[3]), hi.w = tec_fp8x2_to_f16x2<kType>(words[3] >> 16);
        *(uint4*)(stage + row * TEC_ROWS_PITCH + vector * 16) = lo;
        *(uint4*)(stage + row * TEC_ROWS_PITCH + vector * 16 + 8) = hi;
      }
    }
  }
};

// An FP8 operand's step from its columnwise copy [128-column block of K][ROWS]: for each of
// the 128 columns, the TEC_CHUNK bytes of rows row0.. (an expert's rows start anywhere, so
// byte loads; a warp reads 32 consecutive bytes of one column), rows outside [begin, end)
// zero. Thread t holds row t % 64 of columns 4i + t / 64, packed 4 to a word. Staged as
// [column][row] in fp16.
template <int kType, i64 kRows>
struct TecColumnsStep {
  u32 packed[8];
  __device__ __forceinline__ void load(const u8* base, i64 row0, i64 begin, i64 end, i64 col0) {
    const int row = (int)threadIdx.x % TEC_CHUNK, column = (int)threadIdx.x / TEC_CHUNK;
    const bool valid = row0 + row >= begin && row0 + row < end;
#pragma unroll
    for (int w = 0; w < 8; ++w) packed[w] = 0;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const u32 code = valid ? base[(col0 + 4 * i + column) * kRows + row0 + row] : 0u;
      packed[i / 4] |= code << (8 * (i % 4));
    }
  }
  __device__ __forceinline__ void store(u16* stage) const {
    const int row = (int)threadIdx.x % TEC_CHUNK, column = (int)threadIdx.x / TEC_CHUNK;
#pragma unroll
    for (int i = 0; i < 32; i += 2) {
      const u32 pair = tec_fp8x2_to_f16x2<kType>(packed[i / 4] >> (8 * (i % 4)));
      stage[(4 * i + column) * TEC_COLUMNS_PITCH + row] = (u16)(pair & 0xFFFFu);
      stage[(4 * (i + 1) + column) * TEC_COLUMNS_PITCH + row] = (u16)(pair >> 16);
    }
  }
};

template <bool kTranspose>
__device__ __forceinline__ void tec_ldmatrix_x4(u32 (&r)[4], const u16* p) {
  const u32 address = (u32)__cvta_generic_to_shared(p);
  if (kTranspose)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}

__device__ __forceinline__ void tec_mma(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if TEC_FP8
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
#else
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
#endif
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

extern "C" __global__ void __launch_bounds__(256) tec_grouped_wgrad(TecWgradArgs args) {
  extern __shared__ __align__(16) u16 tec_stages[];  // [2 steps][dY, X][TEC_STAGE]
  tec_wait_for_previous_kernel();
  tec_allow_next_kernel();
  __shared__ i64 expert_rows[2];  // first row, end
  __shared__ int bad;
  tec_wgrad_expert_rows(args, expert_rows, bad);
  const int expert = blockIdx.z;
  __syncthreads();
  if (bad) return;
  const i64 first = expert_rows[0], end = expert_rows[1];
  const i64 n0 = (i64)blockIdx.y * 128, k0 = (i64)blockIdx.x * 128;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_n = (warp / 2) * 32, warp_k = (warp % 2) * 64;  // the warp's 32 x 64 of the tile

  float acc[2][8][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 8; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mi][ni][c] = 0.0f;

#if TEC_BLOCK_SCALES
  TecColumnsStep<TEC_DY_TYPE, TEC_ROWS> dy;
  float part[2][8][4];  // this scale block's product
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 8; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) part[mi][ni][c] = 0.0f;
  float(&sum)[2][8][4] = part;
  const i64 step0 = first / TEC_CHUNK * TEC_CHUNK;  // steps on 64-row boundaries: each in one scale block
#else
  TecRowsStep<TEC_DY_TYPE, TEC_N> dy;
  float(&sum)[2][8][4] = acc;
  const i64 step0 = first;
#endif
#if TEC_FP8
  TecColumnsStep<TEC_X_TYPE, TEC_ROWS> x;
#else
  TecRowsStep<TEC_X_TYPE, TEC_K> x;
#endif
  const u8* dy_base = (const u8*)args.slot[0];
  const u8* x_base = (const u8*)args.slot[2];
  const int steps = end > first ? (int)((end - step0 + TEC_CHUNK - 1) / TEC_CHUNK) : 0;
  auto load_step = [&](i64 row0) {
#if TEC_BLOCK_SCALES
    dy.load(dy_base, row0, first, end, n0);
#else
    dy.load(dy_base, row0, end, n0);
#endif
#if TEC_FP8
    x.load(x_base, row0, first, end, k0);
#else
    x.load(x_base, row0, end, k0);
#endif
  };
  if (steps > 0) {
    load_step(step0);
    dy.store(tec_stages);
    x.store(tec_stages + TEC_STAGE);
  }
  __syncthreads();
  for (int step = 0; step < steps; ++step) {
    const u16* a_stage = tec_stages + (step % 2) * 2 * TEC_STAGE;
    const u16* b_stage = a_stage + TEC_STAGE;
    const bool more = step + 1 < steps;
    if (more) load_step(step0 + (i64)(step + 1) * TEC_CHUNK);
    const int j = lane / 8;  // lane l gives row l % 8 of ldmatrix's matrix l / 8
#pragma unroll
    for (int kk = 0; kk < TEC_CHUNK; kk += 16) {
      // A (the tile's N rows by the sum) is dY's step [rows][n] transposed: matrices (n, k),
      // (n + 8, k), (n, k + 8), (n + 8, k + 8).
      u32 a[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#if TEC_BLOCK_SCALES  // dY's [n][rows] stage as it is
        tec_ldmatrix_x4<false>(a[mi], a_stage + (warp_n + mi * 16 + (j & 1) * 8 + lane % 8) * TEC_COLUMNS_PITCH + kk + (j >> 1) * 8);
#else
        tec_ldmatrix_x4<true>(a[mi], a_stage + (kk + (j >> 1) * 8 + lane % 8) * TEC_ROWS_PITCH + warp_n + mi * 16 + (j & 1) * 8);
#endif
#pragma unroll
      for (int nj = 0; nj < 4; ++nj) {
        // B (the sum by the tile's K columns), two 8-column fragments: matrices (k, n),
        // (k + 8, n), (k, n + 8), (k + 8, n + 8) of X's rows transposed, or of its [n][rows]
        // stage as it is.
        u32 b[4];
#if TEC_FP8
        tec_ldmatrix_x4<false>(b, b_stage + (warp_k + nj * 16 + (j >> 1) * 8 + lane % 8) * TEC_COLUMNS_PITCH + kk + (j & 1) * 8);
#else
        tec_ldmatrix_x4<true>(b, b_stage + (kk + (j & 1) * 8 + lane % 8) * TEC_ROWS_PITCH + warp_k + nj * 16 + (j >> 1) * 8);
#endif
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          tec_mma(sum[mi][2 * nj], a[mi], b[0], b[1]);
          tec_mma(sum[mi][2 * nj + 1], a[mi], b[2], b[3]);
        }
      }
    }
#if TEC_BLOCK_SCALES
    const i64 row0 = step0 + (i64)step * TEC_CHUNK;
    if (!more || (row0 + TEC_CHUNK) % 128 == 0) {  // the scale block's last step
      const float* dy_scale = (const float*)args.slot[1] + (row0 / 128) * ((TEC_N + 3) / 4 * 4);
      const float* x_scale = (const float*)args.slot[3] + (row0 / 128) * ((TEC_K + 3) / 4 * 4);
      // The accumulator layout: c0, c1 at row lane / 4, columns 2 (lane % 4) and + 1; c2, c3 eight rows on.
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const float s_n = dy_scale[n0 + warp_n + mi * 16 + lane / 4 + half * 8];
#pragma unroll
          for (int ni = 0; ni < 8; ++ni)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const float s = s_n * x_scale[k0 + warp_k + ni * 8 + 2 * (lane % 4) + c];
              acc[mi][ni][2 * half + c] += part[mi][ni][2 * half + c] * s;
              part[mi][ni][2 * half + c] = 0.0f;
            }
        }
    }
#endif
    if (more) {
      u16* next = tec_stages + ((step + 1) % 2) * 2 * TEC_STAGE;
      dy.store(next);
      x.store(next + TEC_STAGE);
    }
    __syncthreads();
  }

#if TEC_FP8 && !TEC_BLOCK_SCALES
  const float alpha = *(const float*)args.slot[1] * *(const float*)args.slot[3];
#else
  const float alpha = 1.0f;
#endif
  // The accumulator layout: c0, c1 at row lane / 4, columns 2 (lane % 4) and + 1; c2, c3 eight rows on.
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 8; ++ni)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const i64 n = n0 + warp_n + mi * 16 + lane / 4 + half * 8, k = k0 + warp_k + ni * 8 + 2 * (lane % 4);
        tec_wgrad_store(args, ((i64)expert * TEC_N + n) * TEC_K + k, alpha * acc[mi][ni][2 * half], alpha * acc[mi][ni][2 * half + 1]);
      }
}
