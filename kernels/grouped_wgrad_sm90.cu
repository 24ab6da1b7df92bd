// The weight gradient of an MoE layer's grouped linear on Hopper (sm_90a), with wgmma: for
// each expert e,
//   D[e] (N x K) = alpha * dY[rows of e]^T . X[rows of e]  (+ D[e] as it was, TEC_ACCUMULATE)
// where the rows of e are the m_splits[e] rows after those of the experts before it, read from
// device memory: one graph serves any routing. kernels/grouped_wgrad.cu does the same with
// mma.sync (about 270 TFLOP/s on moe.json's fc1, H100) and stays for the shapes this kernel
// does not take.
//
// bf16: the sum runs along the rows, and both operands are stored row-major ([ROWS, N] and
// [ROWS, K]), so in shared memory both are MN-major: a step of 64 rows is, per 64 columns, an
// atom of 64 rows x 128 bytes in the 128-byte swizzle (16-byte chunk c of row r at c ^ (r % 8)),
// which wgmma reads transposed (imm-trans 1) by tec_sw128_mn_descriptor. Every chunk lies in
// one row, so the rows outside the expert are zero-filled by the copy itself (cp.async with
// source size 0), and an expert's rows may start anywhere.
//
// FP8 per tensor (TEC_DY_TYPE, TEC_X_TYPE: 3 E4M3, 4 E5M2): FP8 wgmma takes K-major operands
// only, which the columnwise copies are ([N, ROWS] and [K, ROWS], LAYOUTS.md 1.1). A step is
// 128 rows (bytes) of each column, laid out as the grouped GEMM's operands (K-major, 128-byte
// swizzle), from a 16-byte boundary at or before the expert's first row (TEC_ROWS % 16 == 0,
// so every 16 bytes are aligned). A 16-byte chunk may then hold rows of the expert next door:
// the producer loads such a chunk into registers, zeroes those bytes and stores it (at most
// two chunks per column per expert); the others come by cp.async, zero-filled past the
// expert. alpha, the two scale_inv, puts the scales back.
//
// fp8-block (TEC_BLOCK_SCALES = 1: both columnwise copies in 1x128 blocks down their columns,
// LAYOUTS.md section 3): a scale block is 128 rows of the whole tensor, so the steps start on
// a 128-row boundary at or before the expert's first row (rows outside the expert zeroed as
// above), and each step is one block. Its product goes into a second set of accumulators
// (the FP8 wgmma's own sum over 128 rows), which the consumer then adds into the first times
// dY's scale_inv for row n and X's for column k, in fp32, as TE promotes its block-scaled
// GEMMs. Both sets take registers, so the tile is 128 x 128 (m64n128 per consumer); the
// producer copies the step's 128 + 128 scales into the slot with the codes, and a slot is
// released only after its scales are read, so 6 slots of 33 KB keep the copies ahead.
//
// A block makes a 128 x 256 tile of one expert's D (grid: (N / 128) * (K / 256), 1, E; block
// scales: 128 x 128, (N / 128) * (K / 128)): a producer warpgroup copies the steps into a ring
// of 4 slots (each 16 KB of dY, 32 KB of X; block scales: 6 slots);
// a slot is full when each producer thread's cp.async copies have landed and it has arrived
// once more after its own stores; two consumer warpgroups own 64 rows of D each and run wgmma
// m64n256 (k16 bf16, k32 FP8; 4 per step) into fp32 registers.
//
// An expert with no rows writes zeros (or adds them). m_splits that are negative or do not sum
// to the rows set TEC_STATUS_BAD_SPLITS in the session's status word, and every block returns
// before reading anything by them.
//
// Defines: TEC_N (% 128 == 0), TEC_K (% 256 == 0; block scales: % 128), TEC_E, TEC_ROWS (FP8:
// % 16 == 0), TEC_OUT (0 bf16, 2 fp32), TEC_ACCUMULATE, TEC_DY_TYPE and TEC_X_TYPE (FP8;
// absent: bf16), TEC_BLOCK_SCALES. Slots: grouped_wgrad.cu's (0 dY [ROWS, N], FP8: its
// columnwise copy [N, ROWS]; 1 dY scale_inv (block scales: [ceil(ROWS / 128), N]); 2 X
// [ROWS, K], FP8: [K, ROWS]; 3 X scale_inv (block scales: [ceil(ROWS / 128), K]); 4 m_splits;
// 5 D [E, N, K]; 6 status). Dynamic shared memory: TEC_WGRAD_SM90_SHARED_BYTES
// (grouped_wgrad_sm90_layout.h).
#include "grouped_wgrad.cuh"
#include "grouped_wgrad_sm90_layout.h"
#include "hopper.cuh"
#include "mid_m_layout.h"  // tec_sw128_offset

#ifndef TEC_DY_TYPE
#define TEC_DY_TYPE 0
#define TEC_X_TYPE 0
#endif
#define TEC_FP8 (TEC_DY_TYPE != 0)
#ifndef TEC_BLOCK_SCALES
#define TEC_BLOCK_SCALES 0
#endif
#if (TEC_X_TYPE != 0) != TEC_FP8 || (TEC_FP8 && TEC_ROWS % 16 != 0) || (TEC_BLOCK_SCALES && !TEC_FP8)
#error "dY and X: both bf16 or both FP8 (block scales: FP8), and FP8 needs TEC_ROWS % 16 == 0"
#endif

#define TEC_SLOTS TEC_WGRAD_SM90_SLOTS(TEC_BLOCK_SCALES)
#define TEC_STEP_ROWS (TEC_FP8 ? 128 : 64)  // 128 bytes of every column (FP8), or of every row (bf16)

constexpr int kTileN = TEC_WGRAD_SM90_TILE_N, kTileK = TEC_WGRAD_SM90_TILE_K(TEC_BLOCK_SCALES);
constexpr u32 kDyBytes = kTileN * 128;                // 16 KB
constexpr u32 kXBytes = kTileK * 128;                 // 32 KB (block scales: 16 KB), then the step's scales
constexpr u32 kSlotBytes = TEC_WGRAD_SM90_SLOT_BYTES(TEC_BLOCK_SCALES);
constexpr u32 kAtomBytes = 64 * 128;                 // bf16: 64 columns by the step's 64 rows; FP8: 64 columns' 128 rows
constexpr int kColumnTiles = (int)(TEC_K / kTileK);
constexpr int kAccumulators = kTileK / 2;            // per consumer thread: 64 rows of D by kTileK columns over 128 threads

#if TEC_FP8
#if TEC_DY_TYPE == 4 && TEC_X_TYPE == 4
#define TEC_WGMMA_FP8_TYPES "e5m2.e5m2"
#elif TEC_DY_TYPE == 4
#define TEC_WGMMA_FP8_TYPES "e5m2.e4m3"
#elif TEC_X_TYPE == 4
#define TEC_WGMMA_FP8_TYPES "e4m3.e5m2"
#else
#define TEC_WGMMA_FP8_TYPES "e4m3.e4m3"
#endif
// d (64 x 256, fp32) += A (64 x 32) . B (32 x 256), both K-major FP8 from shared memory.
__device__ __forceinline__ void tec_wgmma_fp8_step(float (&d)[128], unsigned long long a, unsigned long long b) {
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %130, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k32.f32." TEC_WGMMA_FP8_TYPES " {" TEC_WGMMA_D128_REGISTERS "}, %128, %129, p, 1, 1; }"
               : TEC_WGMMA_D128_OPERANDS(d)
               : "l"(a), "l"(b), "r"(1));
}
// d (64 x 128, fp32) = A (64 x 32) . B (32 x 128) (+ d when `accumulate`).
__device__ __forceinline__ void tec_wgmma_fp8_step(float (&d)[64], unsigned long long a, unsigned long long b, int accumulate) {
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k32.f32." TEC_WGMMA_FP8_TYPES " {" TEC_WGMMA_D64_REGISTERS "}, %64, %65, p, 1, 1; }"
               : TEC_WGMMA_D64_OPERANDS(d)
               : "l"(a), "l"(b), "r"(accumulate));
}
#endif

extern "C" __global__ void __launch_bounds__(384, 1) tec_grouped_wgrad_sm90(TecWgradArgs args) {
  extern __shared__ __align__(1024) u8 tec_shared[];
  tec_wait_for_previous_kernel();
  __shared__ i64 expert_rows[2];  // first row, end
  __shared__ int bad;
  tec_wgrad_expert_rows(args, expert_rows, bad);
  const int expert = blockIdx.z;
  const u32 base = (tec_shared_address(tec_shared) + 1023u) & ~1023u;  // the swizzle's period
  const u32 barriers = base + TEC_SLOTS * kSlotBytes;
  auto full = [&](int s) { return barriers + 8u * (u32)s; };
  auto empty = [&](int s) { return barriers + 8u * (u32)(TEC_SLOTS + s); };
  if (threadIdx.x == 0) {
    for (int s = 0; s < TEC_SLOTS; ++s) {
      tec_barrier_init(full(s), 256);  // each producer thread's copies landing, and its arrival after its stores
      tec_barrier_init(empty(s), 256);  // every consumer thread
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (bad) return;
  const i64 first = expert_rows[0], end = expert_rows[1];
  // FP8: from a 16-byte boundary; block scales: from the boundary of a scale block.
  const i64 step0 = TEC_BLOCK_SCALES ? first / 128 * 128 : TEC_FP8 ? first / 16 * 16 : first;
  const int steps = end > first ? (int)((end - step0 + TEC_STEP_ROWS - 1) / TEC_STEP_ROWS) : 0;
  const i64 n0 = (i64)(blockIdx.x / kColumnTiles) * kTileN, k0 = (i64)(blockIdx.x % kColumnTiles) * kTileK;
  const int warpgroup = threadIdx.x / 128, tid = threadIdx.x % 128;

  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 72;");  // at 56 ptxas spilled the copies' addresses
    const u8* dy = (const u8*)args.slot[0];
    const u8* x = (const u8*)args.slot[2];
    for (int g = 0; g < steps; ++g) {
      const int s = g % TEC_SLOTS;
      if (g >= TEC_SLOTS) tec_barrier_wait(empty(s), (u32)((g / TEC_SLOTS - 1) & 1));
      const u32 slot = base + (u32)s * kSlotBytes;
      const i64 row0 = step0 + (i64)g * TEC_STEP_ROWS;
#if TEC_FP8
      // Chunk id: the column (id / 8) and its 16 rows (id % 8), K-major in the 128-byte swizzle.
      auto copy = [&](u32 region, const u8* source, i64 column0, int id) {
        const int column = id / 8, chunk = id % 8;
        const i64 r = row0 + chunk * 16;
        const u32 dst = region + (u32)tec_sw128_offset(column, chunk);
        const u8* src = source + (column0 + column) * TEC_ROWS + r;
        if (r >= first && r + 16 <= end) {
          tec_copy16_or_zero(dst, src, true);
        } else if (r + 16 <= first || r >= end) {
          tec_copy16_or_zero(dst, source, false);
        } else {  // the expert begins or ends inside these 16 rows
          uint4 v = *(const uint4*)src;
          u32 words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
          for (int b = 0; b < 16; ++b)
            if (r + b < first || r + b >= end) words[b / 4] &= ~(0xFFu << (8 * (b % 4)));
          asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(dst), "r"(words[0]), "r"(words[1]), "r"(words[2]), "r"(words[3])
                       : "memory");
        }
      };
#pragma unroll
      for (int i = 0; i < 8; ++i) copy(slot, dy, n0, i * 128 + tid);
#pragma unroll
      for (int i = 0; i < kTileK / 16; ++i) copy(slot + kDyBytes, x, k0, i * 128 + tid);
#if TEC_BLOCK_SCALES
      if (tid < 64) {  // the step's scale block row0 / 128: 32 chunks of dY's scales, then 32 of X's
        const i64 block = row0 / 128;
        const float* scales = tid < 32 ? (const float*)args.slot[1] + block * TEC_N + n0 + 4 * tid
                                       : (const float*)args.slot[3] + block * TEC_K + k0 + 4 * (tid - 32);
        tec_copy16_or_zero(slot + kDyBytes + kXBytes + 16u * (u32)tid, scales, true);
      }
#endif
#else
      // Chunk id: row (id / chunks per row), the chunk's 64-column atom and its 16 bytes in it.
      auto copy = [&](u32 region, const u8* source, i64 row_bytes, i64 column0, int id, int chunks_per_row) {
        const int row = id / chunks_per_row, chunk = id % chunks_per_row, atom = chunk / 8, c = chunk % 8;
        const i64 r = row0 + row;
        const bool valid = r < end;
        const u32 dst = region + (u32)atom * kAtomBytes + (u32)tec_sw128_offset(row, c);
        tec_copy16_or_zero(dst, source + (valid ? r : first) * row_bytes + column0 * 2 + chunk * 16, valid);
      };
#pragma unroll
      for (int i = 0; i < 8; ++i) copy(slot, dy, TEC_N * 2, n0, i * 128 + tid, kTileN / 8);
#pragma unroll
      for (int i = 0; i < 16; ++i) copy(slot + kDyBytes, x, TEC_K * 2, k0, i * 128 + tid, kTileK / 8);
#endif
      // The slot counts this thread's copies when they land, and (release) its own stores.
      asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(full(s)) : "memory");
      tec_barrier_arrive(full(s));
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 216;");  // (168 x 384 - 72 x 128) / 256: what the block launched with
  const int consumer = warpgroup - 1;
  const int warp = tid / 32, lane = tid % 32;
  float acc[kAccumulators];
#pragma unroll
  for (int i = 0; i < kAccumulators; ++i) acc[i] = 0.0f;
#if TEC_BLOCK_SCALES
  float part[kAccumulators];  // one scale block's sum
#endif
  for (int g = 0; g < steps; ++g) {
    const int s = g % TEC_SLOTS;
    tec_barrier_wait(full(s), (u32)((g / TEC_SLOTS) & 1));
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // cp.async wrote (generic proxy), wgmma reads (async)
    const u32 slot = base + (u32)s * kSlotBytes;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#if TEC_BLOCK_SCALES
    const unsigned long long a = tec_sw128_descriptor(slot + (u32)consumer * 8192u), b = tec_sw128_descriptor(slot + kDyBytes);
#pragma unroll
    for (int k = 0; k < 4; ++k) tec_wgmma_fp8_step(part, a + 2 * k, b + 2 * k, k > 0);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
    for (int i = 0; i < kAccumulators; ++i) asm volatile("" : "+f"(part[i])::"memory");  // not read before the wait
    // acc += part times the scales of its row (dY's, for n) and column (X's, for k); the
    // accumulator layout is the epilogue's.
    const float* dy_scale = (const float*)(tec_shared + (slot + kDyBytes + kXBytes - tec_shared_address(tec_shared)));
    const float* x_scale = dy_scale + 128;
    const float s_low = dy_scale[consumer * 64 + warp * 16 + lane / 4], s_high = dy_scale[consumer * 64 + warp * 16 + lane / 4 + 8];
#pragma unroll
    for (int i = 0; i < kAccumulators; i += 4) {
      const float2 column_scale = *(const float2*)&x_scale[(i / 4) * 8 + 2 * (lane % 4)];
      acc[i] = fmaf(part[i], s_low * column_scale.x, acc[i]);
      acc[i + 1] = fmaf(part[i + 1], s_low * column_scale.y, acc[i + 1]);
      acc[i + 2] = fmaf(part[i + 2], s_high * column_scale.x, acc[i + 2]);
      acc[i + 3] = fmaf(part[i + 3], s_high * column_scale.y, acc[i + 3]);
    }
    tec_barrier_arrive(empty(s));  // its codes read by the finished wgmma, its scales above
  }
#else
#if TEC_FP8
    const unsigned long long a = tec_sw128_descriptor(slot + (u32)consumer * 8192u), b = tec_sw128_descriptor(slot + kDyBytes);
#pragma unroll
    for (int k = 0; k < 4; ++k) tec_wgmma_fp8_step(acc, a + 2 * k, b + 2 * k);  // 32 bytes of K on: + 2 in the descriptor's 16-byte units
#else
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      // 16 rows = two 8-row groups, 2 KB on in every atom.
      const unsigned long long a = tec_sw128_mn_descriptor(slot + (u32)consumer * kAtomBytes + (u32)k * 2048u, kAtomBytes);
      const unsigned long long b = tec_sw128_mn_descriptor(slot + kDyBytes + (u32)k * 2048u, kAtomBytes);
      tec_wgmma_bf16_m64n256k16<1, 1>(acc, a, b, 1);
    }
#endif
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
    if (g > 0) tec_barrier_arrive(empty((g - 1) % TEC_SLOTS));
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
  for (int i = 0; i < kAccumulators; ++i) asm volatile("" : "+f"(acc[i])::"memory");  // not read before the wait
#endif
  tec_allow_next_kernel();

  // The accumulator layout: warp w holds rows 16w + lane / 4 (+ 8), and in each 8-column group
  // j the columns 8j + 2 (lane % 4) and + 1.
#if TEC_FP8 && !TEC_BLOCK_SCALES
  const float alpha = *(const float*)args.slot[1] * *(const float*)args.slot[3];
#else
  const float alpha = 1.0f;
#endif
#pragma unroll
  for (int i = 0; i < kAccumulators; i += 2) {
    const i64 n = n0 + consumer * 64 + warp * 16 + lane / 4 + ((i & 2) ? 8 : 0);
    const i64 k = k0 + (i / 4) * 8 + 2 * (lane % 4);
    tec_wgrad_store(args, ((i64)expert * TEC_N + n) * TEC_K + k, alpha * acc[i], alpha * acc[i + 1]);
  }
}
