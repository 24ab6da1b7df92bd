// The grouped GEMM of an MoE layer on Hopper (sm_90a): for each expert e,
//   D[rows of e] = alpha_e * X[rows of e] . W[e]^T (+ bias[e]),
// where the rows of e are the m_splits[e] rows after those of the experts before it, and
// m_splits lives in device memory: the graph's own router and permute wrote it this run. So
// one launch (one CUDA graph) serves any routing, with no host synchronisation and no
// re-capture. cuBLASLt's grouped GEMM takes its shapes from the host, hence this kernel.
//
// Work: tiles of 128 rows of one expert x TEC_TILE_N (128 or 256) columns, at most the most
// tiles any routing can need (ceil(rows / 128) + E per column tile). The block's tiles are
// blockIdx.x, + gridDim.x, ...: the runtime launches the grid persistent, one block per SM
// (Launch::persistent), and each block finds its tiles by walking m_splits (E integers,
// cached), ending where the routing needs no more. The ring of slots runs on from one tile
// to the next, so the producer fills the next tile's first slots during this tile's epilogue:
// moe.json fp8-current T = 8192, fc1 4313 -> 4145 us, the layer's graph 900 -> 918 TFLOP/s
// (H100, one call, two runs each; T = 2048 even within the noise). Tiles go in
// groups of 8 column tiles per expert, rows fastest, so that a group's W (8 x 128 rows) and the
// expert's X stay in L2 while the group's blocks run.
//
// The last round of tiles is split along K when it would leave more than half the blocks idle
// (grouped_schedule.h; kernels with K of 64 steps or more, which the lowering gives TEC_SPLIT_SLOTS
// and the partial sums' buffers): at T = 2048, moe.json's fc2 has ~576 tiles of 112 steps, 4 full rounds of 132
// blocks and 48 tiles, which run as 96 half-K items instead. A partial item leaves its fp32
// sum in global memory; the tile's owner item adds those to its own and runs the epilogue.
//
// A block is gemm_mid_m.cu's pipeline with 128 rows: one thread of warpgroup 0 produces,
// copying per 128-byte step of K the block's TEC_TILE_N rows of W (a bulk copy per 64 rows: W
// is in the mid_m_tiles device layout, kernels/mid_m_layout.h, over the [E * N, K] rows of all
// experts; or, TEC_W_ROW_MAJOR, a TMA tensor copy per 64 rows of row-major W) and its 128 rows
// of X (one TMA tensor copy: the runtime encodes X as a tensor map, tensor_maps[0], and W
// row-major as tensor_maps[1]) in the 128-byte swizzle into a ring of TEC_SLOTS slots, every
// byte counted on the slot's mbarrier; warpgroups 1 and 2 each own 64 rows and run wgmma
// m64nTEC_TILE_N (k32 for FP8, k16 for bf16) from shared memory into fp32 registers
// (setmaxnreg moves registers from the producer to them). Rows past the expert's last are the
// next expert's (or zeros past X's end), and are not stored.
//
// X came by cp.async until 2026-11-29: 1024 16-byte copies per step from the producer
// warpgroup's 128 threads, each thread's arrival counted on the slot's mbarrier, and a proxy
// fence per step in the consumers before their wgmma read those generic-proxy writes.
//
// The epilogue of a bf16 D is staged: each consumer writes its 64 rows into the slot of one of
// the tile's last two steps, which the consumers release to the producer only when bulk copies
// (cp.async.bulk, shared -> global) have read them, after the next tile's first MMAs are issued.
// So the consumers do not wait on D's global stores, which were the epilogue's cost (below):
// moe.json fp8-current, T = 8192 (H200, one call, two rounds, eager step times): fc1 3599 /
// 3622 -> 3150 / 3564 us, fc2 1608 / 1622 -> 1448 / 1601 us; with no epilogue at all, fc1
// 2955 / 3076 us. fp32 D (TEC_OUT = 2) and one-step K store from the registers.
//
// Tried on 2026-11-28 and not kept: clusters of two blocks on a pair of row tiles of the same W
// columns, each bulk-copying half of the step's W into both blocks' slots (multicast), as
// cuBLAS's Hopper kernels run. W's reads from L2 halved and nothing got faster (H200, one call,
// two rounds, fc1 / fc2 eager): T = 8192 3865 / 1776 and 3653 / 1712 us without, 3518 / 1747
// and 3644 / 1823 us with; T = 2048 1013 / 524 and 1017 / 523 us without, 975 / 549 and 990 /
// 557 us with. So L2 bandwidth for W does not bound this kernel. (A first form was 1.35x
// slower, with or without the multicast: its consumers released the peer's slots by
// mbarrier.arrive.release.cluster, a cluster-scope fence each; CTA scope, as CUTLASS's
// ClusterBarrier arrives, removed the loss.)
//
// m_splits that are negative or do not sum to the rows set TEC_STATUS_BAD_SPLITS in the
// session's status word, and every block returns before reading anything by them.
//
// TEC_GATED = 1 runs the step's gated activation (swiglu, geglu: act(first half of a row) x
// second half, act by TEC_ACT as in kernels/tec_math.h) in the epilogue, so the [rows, N] GEMM
// output never reaches memory: a tile's 256 columns of W are 128 gate rows and the 128 up rows
// N / 2 further on, so every thread holds both members of its pairs, and D is [rows, N / 2].
// With TEC_AMAX = 1 the blocks also max |D| as stored into slot 8 (one float, zeroed before
// the launch), for the cast pass of a current-scaling output.
//
// TEC_BLOCK_SCALES = 1 takes FP8 block scaling (fp8-block: X 1x128, W 128x128, LAYOUTS.md
// section 3): each step's product is scaled by its blocks' scale_inv as it is added.
//
// Defines: TEC_N (% TEC_TILE_N == 0), TEC_TILE_N (128 or 256), TEC_K (elements; K bytes % 128 == 0), TEC_E, TEC_ROWS (all
// experts' rows), TEC_BF16 (1: bf16 operands; 0: FP8 E4M3 with per-expert W scale_inv and one X
// scale_inv), TEC_BIAS (0 none, 1 bf16, 2 fp32), TEC_OUT (0 bf16, 2 fp32), TEC_GATED, TEC_ACT,
// TEC_AMAX, TEC_X_E5M2 (FP8 X in E5M2), TEC_W_ROW_MAJOR, TEC_W_TRANSPOSED, TEC_BLOCK_SCALES (with TEC_X_SCALE_ROW = roundup(TEC_ROWS, 4), TEC_W_SCALE_ROW =
// roundup(K / 128, 4) and TEC_W_SCALE_MEMBER, floats from one expert's W scales to the next's).
// Tensor maps (the second parameter): 0 X [TEC_ROWS, K bytes] in boxes of 128 rows; 1, with
// TEC_W_ROW_MAJOR, W [E * N, K bytes] (TEC_W_TRANSPOSED: [E * K, N x 2 bytes]) in boxes of 64.
// Slots: 0 W, 1 W scale_inv ([E], or block scales), 2 X, 3 X scale_inv, 4 bias [E, N],
// 5 m_splits, 6 D, 7 status, 8 amax, 9 partial sums (TEC_SPLIT_SLOTS x kAccumulators x 256
// floats), 10 their counters (one int per split tile, zeroed before the launch). Dynamic shared
// memory: TEC_SLOTS x (TEC_TILE_N + 128) x 128 bytes, 1 KB to align them, the mbarriers.
#include "grouped_schedule.h"
#include "hopper.cuh"
#include "mid_m_layout.h"
#include "tec_math.h"

#ifndef TEC_GATED
#define TEC_GATED 0
#endif
#ifndef TEC_AMAX
#define TEC_AMAX 0
#endif
#ifndef TEC_BLOCK_SCALES
#define TEC_BLOCK_SCALES 0
#endif
// The partial sums a split last round may keep (grouped_schedule.h): 0, no split.
#ifndef TEC_SPLIT_SLOTS
#define TEC_SPLIT_SLOTS 0
#endif
// TEC_W_ROW_MAJOR = 1: W is row-major [E * N, K] (a train plan's weight, made every run),
// read through a tensor map as X is, rather than by bulk copies from mid_m_tiles: so the
// weight needs no tiled copy of its own every run.
#ifndef TEC_W_ROW_MAJOR
#define TEC_W_ROW_MAJOR 0
#endif
// TEC_W_TRANSPOSED = 1 (bf16, with TEC_W_ROW_MAJOR): W is stored as its transpose, row-major
// [E * K, N] (the dgrad's W^T is a train plan's weight as made, [E, N_forward, K_forward]):
// a step's 64 rows of K come in as MN-major atoms (per 64 columns of the tile, 64 rows x 128
// bytes in the 128-byte swizzle), which wgmma reads transposed, as kernels/grouped_wgrad_sm90.cu
// reads its operands. FP8 wgmma takes K-major operands only: FP8 has its columnwise copy.
#ifndef TEC_W_TRANSPOSED
#define TEC_W_TRANSPOSED 0
#endif
#if TEC_W_TRANSPOSED && !(TEC_BF16 && TEC_W_ROW_MAJOR && !TEC_GATED)
#error "a transposed W: bf16, read row-major, no gated epilogue"
#endif
// FP8 X in E5M2 (a gradient: the dgrad multiplies dY by W^T) rather than E4M3.
#if TEC_X_E5M2
#define TEC_X_FP8 "e5m2"
#else
#define TEC_X_FP8 "e4m3"
#endif
#if TEC_BLOCK_SCALES && (TEC_BF16 || TEC_TILE_N != 128)
#error "block scales: FP8 operands, and 128-column tiles (a step's product and the sum both live in registers)"
#endif
#if TEC_GATED && TEC_TILE_N != 256
#error "a gated epilogue pairs 128 gate with 128 up columns in a 256-column tile"
#endif

// Registers per thread of the producer warpgroup; the two consumers take the rest of what the
// block launched with: 168 per thread (64 K / 384, in multiples of 8, as ptxas allots them), a
// pool setmaxnreg moves registers within but cannot grow (an .inc past it waits forever). See
// the producer below for why 40, or 56 with a split last round.
#ifndef TEC_PRODUCER_REGISTERS
#define TEC_PRODUCER_REGISTERS (TEC_SPLIT_SLOTS > 0 ? 56 : 40)
#endif
#define TEC_CONSUMER_REGISTERS ((168 * 384 - 128 * TEC_PRODUCER_REGISTERS) / 256 / 8 * 8)

#define TEC_SLOTS 4
#define TEC_TILE 128       // rows of a block's tile (TEC_TILE_N columns)
#define TEC_GROUP 8        // column tiles per group
#define TEC_ELEMENT_BYTES (TEC_BF16 ? 2 : 1)
#define TEC_K_BYTES ((i64)TEC_K * TEC_ELEMENT_BYTES)

// The gated epilogue's activation. This step is a GEMM step, compared within a bound, so the
// epilogue takes the hardware's approximate exp, tanh and reciprocal rather than tec_math.h's
// bit-reproducible forms: those cost ~0.6 ms of fc1's 5.5 ms at T = 8192 (moe.json, H100), run
// between tiles while the tensor cores wait.
__device__ __forceinline__ float tec_epilogue_activation(float x) {
#if TEC_ACT == 1
  const float inner = 0.7978845608f * (x + 0.044715f * x * x * x);
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(inner));
  return 0.5f * x * (1.0f + t);
#elif TEC_ACT == 4 || TEC_ACT == 0
  return tec_fast_silu(x);  // 0 where exp(-x) overflows
#else
  return tec_apply_activation(TEC_ACT, x);
#endif
}

constexpr int kStepBytes = 128;
constexpr int kWSlotBytes = TEC_TILE_N * kStepBytes;
constexpr int kSlotBytes = (TEC_TILE_N + TEC_TILE) * kStepBytes;
constexpr int kSteps = (int)(TEC_K_BYTES / kStepBytes);
constexpr i64 kOutColumns = TEC_GATED ? TEC_N / 2 : TEC_N;       // D's row length
constexpr int kOutTileColumns = TEC_GATED ? 128 : TEC_TILE_N;     // D's columns per tile
constexpr int kColumnTiles = (int)(kOutColumns / kOutTileColumns);
constexpr int kAccumulators = TEC_TILE_N / 2;
// The staged epilogue (bf16 D, two steps of K or more; see the top). A staged row is 16 bytes
// longer than D's tile row, so that a warp's 8 rows x 4 pairs fall in 32 different banks.
#if TEC_OUT == 2
using Out = float;
#else
using Out = u16;
#endif
constexpr bool kStaged = TEC_OUT != 2 && kSteps >= 2;
constexpr int kTileRowBytes = kOutTileColumns * (int)sizeof(Out);
constexpr int kStagingRowBytes = kTileRowBytes + 16;
static_assert(64 * kStagingRowBytes <= kSlotBytes, "a consumer's 64 staged rows fit in a slot");

struct TecGroupedArgs {
  unsigned long long slot[11];
};

#if TEC_W_TRANSPOSED
#define TEC_W_TRANS_B "1"
#else
#define TEC_W_TRANS_B "0"
#endif

// d = A (64 rows of X) . B (TEC_TILE_N rows of W)^T over 32 bytes of K, + d when `accumulate`;
// TEC_TILE_N / 2 fp32 accumulators per thread.
#if TEC_TILE_N == 256
__device__ __forceinline__ void tec_wgmma_step(float (&d)[128], unsigned long long a, unsigned long long b, int accumulate = 1) {
  asm volatile(
      "{ .reg .pred p; setp.ne.b32 p, %130, 0;\n"
#if TEC_BF16
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" TEC_WGMMA_D128_REGISTERS "}, %128, %129, p, 1, 1, 0, " TEC_W_TRANS_B "; }"
#else
      "wgmma.mma_async.sync.aligned.m64n256k32.f32." TEC_X_FP8 ".e4m3 {" TEC_WGMMA_D128_REGISTERS "}, %128, %129, p, 1, 1; }"
#endif
      : TEC_WGMMA_D128_OPERANDS(d)
      : "l"(a), "l"(b), "r"(accumulate));
}
#else
__device__ __forceinline__ void tec_wgmma_step(float (&d)[64], unsigned long long a, unsigned long long b, int accumulate = 1) {
  asm volatile(
      "{ .reg .pred p; setp.ne.b32 p, %66, 0;\n"
#if TEC_BF16
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
#else
      "wgmma.mma_async.sync.aligned.m64n128k32.f32." TEC_X_FP8 ".e4m3 {"
#endif
      TEC_WGMMA_D64_REGISTERS
#if TEC_BF16
      "}, %64, %65, p, 1, 1, 0, " TEC_W_TRANS_B "; }"
#else
      "}, %64, %65, p, 1, 1; }"
#endif
      : TEC_WGMMA_D64_OPERANDS(d)
      : "l"(a), "l"(b), "r"(accumulate));
}
#endif

extern "C" __global__ void __launch_bounds__(384, 1) tec_grouped_gemm(TecGroupedArgs args, const __grid_constant__ TecTensorMaps maps) {
  extern __shared__ __align__(1024) u8 tec_shared[];
  tec_wait_for_previous_kernel();  // m_splits and X are the previous kernels' outputs
  const int* m_splits = (const int*)args.slot[5];
  const TecGroupedShape shape{TEC_E, TEC_ROWS, TEC_TILE, kColumnTiles, kOutTileColumns, TEC_GROUP, kSteps, TEC_SPLIT_SLOTS, gridDim.x};
  TecSchedule schedule;
  bool bad;
  if (!tec_schedule(shape, m_splits, args.slot[9] != 0, schedule, bad)) {
    if (bad && blockIdx.x == 0 && threadIdx.x == 0) atomicOr((int*)args.slot[7], TEC_STATUS_BAD_SPLITS);
    return;
  }
  TecTile tile;
  if (!tec_find_item(shape, m_splits, schedule, blockIdx.x, tile)) return;
  // The block's next item after item `t`: persistent blocks (a grid of at most the resident
  // blocks, launch.persistent) stride over the items, and both roles walk the same sequence.
  // A split item is its block's last (the split tiles' items are at most one round).
  auto next_tile = [&](i64& t, TecTile& next) {
    t += gridDim.x;
    return tec_find_item(shape, m_splits, schedule, t, next);
  };
  // The swizzle repeats every 1024 bytes, and the descriptors assume slots aligned to it.
  const u32 base = (tec_shared_address(tec_shared) + 1023u) & ~1023u;
  const u32 barriers = base + TEC_SLOTS * kSlotBytes;
  auto full = [&](int s) { return barriers + 8u * (u32)s; };
  auto empty = [&](int s) { return barriers + 8u * (u32)(TEC_SLOTS + s); };
  const int warpgroup = threadIdx.x / 128, tid = threadIdx.x % 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < TEC_SLOTS; ++s) {
      tec_barrier_init(full(s), 1);    // the producer's arrival with the slot's bytes
      tec_barrier_init(empty(s), 256);     // every consumer thread
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  // The ring of slots runs on across a block's tiles: `ring` counts the steps of the tiles
  // before, so a slot's phase is that of its global step. The producer thus fills the next
  // tile's first slots while the consumers run this tile's epilogue.
  if (warpgroup == 0) {
    // The consumers' accumulators take most of the 64 K registers. A producer that spills
    // delays every slot: the cp.async producer at 40 registers spilled its W addresses, and ncu
    // showed the kernel stalled on L1TEX (local memory) 59% of the time (moe.json fp8-current
    // T = 8192, fc1 4664 -> 3878 us at 64, H100); it needed 80 once tiles were persistent. The
    // one-thread TMA producer spilled at 24, not at 32 (before grouped_schedule.h, below), and at
    // 40 the consumers' 232 against 208 registers gave T = 2048's fc1 956 / 942 against 983 /
    // 1043 us (moe.json fp8-current, H200, one call, two rounds). The split last round's item
    // walk, which checked m_splits again for every tile, made it spill at 40, not at 48, hence
    // 56 there (the consumers' 224, as 48 would). Since the walk stops at its tile
    // (grouped_schedule.h) no producer spills even at 24, setmaxnreg's least; 40 and 56 stay
    // as measured until a device compares them with less.
    // te-compile warns of any kernel that spills, and the codegen tests hold the example plans
    // to none.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(TEC_PRODUCER_REGISTERS));
    if (tid != 0) return;  // one thread issues every copy
    tec_prefetch_tensor_map(maps.map[0]);
    if (TEC_W_ROW_MAJOR) tec_prefetch_tensor_map(maps.map[1]);
    [[maybe_unused]] const u8* w = (const u8*)args.slot[0];
    // The tile's W rows, 64 per part (gated: two parts of gate rows, then two of up rows).
    [[maybe_unused]] auto w_row = [&](int part) -> i64 {
      const i64 expert_row = (i64)tile.expert * TEC_N;
      if (TEC_GATED && part >= 2) return expert_row + TEC_N / 2 + tile.n0 + (part - 2) * 64;
      return expert_row + tile.n0 + part * 64;
    };
    i64 t = blockIdx.x;
    for (int ring = 0;;) {
      for (int step = 0; step < tile.steps; ++step) {
        const int g = ring + step, s = g % TEC_SLOTS, k_step = tile.step0 + step;
        if (g >= TEC_SLOTS) tec_barrier_wait(empty(s), (u32)((g / TEC_SLOTS - 1) & 1));
        const u32 slot = base + (u32)(s * kSlotBytes);
        tec_barrier_arrive_expect_bytes(full(s), kSlotBytes);
#pragma unroll
        for (int part = 0; part < TEC_TILE_N / 64; ++part)
#if TEC_W_TRANSPOSED
          // W^T's 64 rows of K of this step, 64 columns of the tile (128 bytes) per part: the
          // MN-major atom wgmma reads transposed.
          tec_tensor_copy(slot + part * 8192, maps.map[1], (int)((tile.n0 + 64 * part) * 2), (int)((i64)tile.expert * TEC_K + k_step * 64), full(s));
#elif TEC_W_ROW_MAJOR
          tec_tensor_copy(slot + part * 8192, maps.map[1], k_step * kStepBytes, (int)w_row(part), full(s));
#else
          // 8 KB per 64 rows: a tile's step is contiguous in mid_m_tiles.
          tec_bulk_copy(slot + part * 8192, w + tec_mid_m_tiled_offset(w_row(part), 0, TEC_K_BYTES) + (i64)k_step * 8192, 8192, full(s));
#endif
        tec_tensor_copy(slot + kWSlotBytes, maps.map[0], k_step * kStepBytes, (int)tile.first_row, full(s));
      }
      ring += tile.steps;
      if (!next_tile(t, tile)) break;
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(TEC_CONSUMER_REGISTERS));
  const int consumer = warpgroup - 1;
  float acc[kAccumulators];
#pragma unroll
  for (int i = 0; i < kAccumulators; ++i) acc[i] = 0.0f;
  // The staged epilogue's slots, held until its bulk copies have read them: the tile before's
  // last two, released once the next tile's first MMAs (step g) are issued, so the tensor cores
  // need not wait for the copies.
  bool release_pending = false;
  auto release_staging = [&](int g) {
    tec_bulk_store_wait_read();
    tec_barrier_arrive(empty((g - 2) % TEC_SLOTS));
    tec_barrier_arrive(empty((g - 1) % TEC_SLOTS));
    release_pending = false;
  };
  // Waits for global step `g`'s slot and issues its four wgmma (32 bytes of K each) into d;
  // `fresh`: the first overwrites d rather than adding to it.
  auto issue_step = [&](float (&d)[kAccumulators], int g, bool fresh) {
    const int s = g % TEC_SLOTS;
    tec_barrier_wait(full(s), (u32)((g / TEC_SLOTS) & 1));
    const u32 slot = base + (u32)(s * kSlotBytes);
    const unsigned long long a = tec_sw128_descriptor(slot + kWSlotBytes + (u32)consumer * 8192u);
    const unsigned long long b = tec_sw128_descriptor(slot);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int k = 0; k < 4; ++k)
#if TEC_W_TRANSPOSED
      // 16 rows of K = two 8-row groups, 2 KB on in every atom.
      tec_wgmma_step(d, a + 2 * k, tec_sw128_mn_descriptor(slot + (u32)k * 2048u, 8192u), !fresh || k > 0);
#else
      tec_wgmma_step(d, a + 2 * k, b + 2 * k, !fresh || k > 0);
#endif
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    if (kStaged && release_pending) release_staging(g);
  };
  // The wgmma accumulator layout: warp w of the warpgroup holds rows 16w + lane / 4 (+ 8), and
  // in each 8-column group j the columns 8j + 2 (lane % 4) and + 1.
  const int warp = tid / 32, lane = tid % 32;
  // max |D| over all the block's tiles, taken before D's rounding to bf16: rounding to nearest
  // is monotone in |v|, so the max of the stored values is this max rounded, once, at the end.
  float amax = 0.0f;
  // This tile's: the thread's row of D (columns 2 (lane % 4), + 1), its staging row, and whether
  // the row and the one 8 below it are the expert's.
  Out* out = nullptr;
  u32 staging = 0;
  bool valid0 = false, valid1 = false;
  // Columns 8 j + 2 (lane % 4) and + 1 of the thread's row (8 rows below when `lower`).
  auto store = [&](bool lower, int j, float v0, float v1) {
    if (!(lower ? valid1 : valid0)) return;
    amax = fmaxf(amax, fmaxf(fabsf(v0), fabsf(v1)));
#if TEC_OUT == 2
    *(float2*)(out + (lower ? 8 * kOutColumns : 0) + 8 * j) = make_float2(v0, v1);
#else
    const u32 packed = tec_float2_to_bf16x2(v0, v1);
    if constexpr (kStaged)
      tec_store_shared_u32(staging + (lower ? 8 * kStagingRowBytes : 0) + 16 * j, packed);
    else
      *(u32*)(out + (lower ? 8 * kOutColumns : 0) + 8 * j) = packed;
#endif
  };
  auto biased = [&](float v, i64 column) {
    const i64 index = (i64)tile.expert * TEC_N + column;
#if TEC_BIAS == 1
    return v + tec_bf16_to_float(((const u16*)args.slot[4])[index]);
#elif TEC_BIAS == 2
    return v + ((const float*)args.slot[4])[index];
#else
    (void)index;
    return v;
#endif
  };

  i64 t = blockIdx.x;
  for (int ring = 0;;) {
    const int steps = tile.steps;
    // The staged epilogue holds the item's last two slots; a partial sum has no epilogue here.
    const bool staged = kStaged && tile.part <= 0;
    auto held = [&](int step) { return staged && step >= steps - 2; };
#if TEC_BLOCK_SCALES
    // A 128-byte step of K is one scale block of X (1x128) and of W (128x128, the tile's 128
    // rows): the step's product is made apart and added into acc times both blocks' scale_inv.
    // The tensor cores cannot scale mid-sum, and their FP8 accumulation keeps too few bits for
    // long K anyway (DeepSeek-V3's promotion); the price is no wgmma overlap across steps.
    const float* x_scale = (const float*)args.slot[3];
    const float* w_scale = (const float*)args.slot[1] + (i64)tile.expert * TEC_W_SCALE_MEMBER + (tile.n0 / 128) * TEC_W_SCALE_ROW;
    const int thread_row = consumer * 64 + (tid / 32) * 16 + (tid % 32) / 4;  // and + 8 (the accumulator layout)
    const i64 x_row0 = tile.first_row + (thread_row < tile.rows ? thread_row : tile.rows - 1);
    const i64 x_row1 = tile.first_row + (thread_row + 8 < tile.rows ? thread_row + 8 : tile.rows - 1);
    float part[kAccumulators];
#pragma unroll
    for (int i = 0; i < kAccumulators; ++i) acc[i] = part[i] = 0.0f;
    for (int step = 0; step < steps; ++step) {
      const i64 k_step = tile.step0 + step;
      const float w_s = w_scale[k_step];
      const float s0 = x_scale[k_step * TEC_X_SCALE_ROW + x_row0] * w_s, s1 = x_scale[k_step * TEC_X_SCALE_ROW + x_row1] * w_s;
      issue_step(part, ring + step, true);
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
      if (!held(step)) tec_barrier_arrive(empty((ring + step) % TEC_SLOTS));
#pragma unroll
      for (int i = 0; i < kAccumulators; ++i) asm volatile("" : "+f"(part[i])::"memory");  // not read before the wait
#pragma unroll
      for (int i = 0; i < kAccumulators; ++i) acc[i] += part[i] * ((i & 2) ? s1 : s0);
    }
#else
    for (int step = 0; step < steps; ++step) {
      issue_step(acc, ring + step, step == 0);
      asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
      if (step > 0 && !held(step - 1)) tec_barrier_arrive(empty((ring + step - 1) % TEC_SLOTS));
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    if (!held(steps - 1)) tec_barrier_arrive(empty((ring + steps - 1) % TEC_SLOTS));  // the producer may fill it for the next tile
#endif
#pragma unroll
    for (int i = 0; i < kAccumulators; ++i) asm volatile("" : "+f"(acc[i])::"memory");  // not read before the wait

    TecTile next;
    const bool last = !next_tile(t, next);
    if (last) tec_allow_next_kernel();
    // A split tile: each partial item stores its sum in its slot of the partials (slot 9: per
    // slot, accumulator i of consumer thread c at i * 256 + c, so a warp's stores and loads are
    // contiguous) and counts itself done on the tile's counter (slot 10, zeroed before the
    // launch); the owner waits for them all, adds them in part order, and runs the epilogue.
    // Every split item is in the last round, so a waiting owner waits only for blocks that wait
    // for nothing.
    const int consumer_thread = threadIdx.x - 128;
    float* partials = (float*)args.slot[9];
    int* done = (int*)args.slot[10] + tile.split;
    auto partial_sum = [&](int part) { return partials + (i64)(tile.split * (schedule.parts - 1) + part - 1) * kAccumulators * 256 + consumer_thread; };
    if (tile.part > 0) {
      float* sum = partial_sum(tile.part);
#pragma unroll
      for (int i = 0; i < kAccumulators; ++i) __stcg(sum + i * 256, acc[i]);
      __threadfence();
      asm volatile("bar.sync 1, 256;" ::: "memory");
      if (consumer_thread == 0) atomicAdd(done, 1);
      break;  // the block's last item
    }
    if (tile.part == 0) {
      if (consumer_thread == 0) {
        int count;
        do {
          asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(count) : "l"(done) : "memory");
        } while (count < schedule.parts - 1);
      }
      asm volatile("bar.sync 1, 256;" ::: "memory");
      for (int part = 1; part < schedule.parts; ++part) {
        const float* sum = partial_sum(part);
#pragma unroll
        for (int i = 0; i < kAccumulators; ++i) acc[i] += __ldcg(sum + i * 256);
      }
    }
#if TEC_BF16 || TEC_BLOCK_SCALES
    const float alpha = 1.0f;
#else
    const float alpha = ((const float*)args.slot[1])[tile.expert] * *(const float*)args.slot[3];
#endif
    // The consumers run the epilogue between one tile's MMAs and the next while the tensor cores
    // wait, so it is kept short: per thread its two rows' pointers once, stores predicated rather
    // than branched around, bf16 pairs by one cvt, no bias add without a bias. On moe.json
    // fp8-current T = 8192 (H200) it was ~2180 instructions per warp and tile and 24% of the
    // consumers' stall samples (Nsight Compute), and fc1 took 3.9 ms against 3.1 ms with no
    // epilogue at all; this form has 1032 fewer SASS instructions in the gated kernel.
    const int row = consumer * 64 + warp * 16 + lane / 4;  // and row + 8 (the accumulator layout)
    const i64 column = tile.n0 + 2 * (lane % 4);            // + 8 j in column group j
    out = (Out*)args.slot[6] + (tile.first_row + row) * kOutColumns + column;
    valid0 = row < tile.rows;
    valid1 = row + 8 < tile.rows;
    // The consumer's staging slot: the last step's (consumer 0) or the one before (consumer 1).
    const u32 staging_slot = base + (u32)(((ring + steps - 1 - consumer) % TEC_SLOTS) * kSlotBytes);
    if constexpr (kStaged) {
      staging = staging_slot + (u32)((row - consumer * 64) * kStagingRowBytes + 4 * (lane % 4));
      asm volatile("bar.sync 1, 256;" ::: "memory");  // both consumers' MMAs have read the slots
    }
#if TEC_GATED
    // Accumulators i < 64 are gate columns, i + 64 the up column 128 further on.
    auto gated = [&](int i, i64 n) {
      return tec_epilogue_activation(biased(alpha * acc[i], n)) * biased(alpha * acc[i + 64], TEC_N / 2 + n);
    };
#pragma unroll
    for (int i = 0; i < kAccumulators / 2; i += 4) {
      const i64 n = column + (i / 4) * 8;
      store(false, i / 4, gated(i, n), gated(i + 1, n + 1));
      store(true, i / 4, gated(i + 2, n), gated(i + 3, n + 1));
    }
#else
#pragma unroll
    for (int i = 0; i < kAccumulators; i += 4) {
      const i64 n = column + (i / 4) * 8;
      store(false, i / 4, biased(alpha * acc[i], n), biased(alpha * acc[i + 1], n + 1));
      store(true, i / 4, biased(alpha * acc[i + 2], n), biased(alpha * acc[i + 3], n + 1));
    }
#endif
    if constexpr (kStaged) {
      // The staged rows to D, half a row per thread, once all the consumer's rows are written.
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // written generic, read by the bulk copies
      asm volatile("bar.sync %0, 128;" ::"r"(2 + consumer) : "memory");
      const int copy_row = consumer * 64 + tid / 2, half = tid % 2;
      if (copy_row < tile.rows)
        tec_bulk_store((u8*)args.slot[6] + ((tile.first_row + copy_row) * kOutColumns + tile.n0) * (i64)sizeof(Out) + half * (kTileRowBytes / 2),
                       staging_slot + (u32)((tid / 2) * kStagingRowBytes + half * (kTileRowBytes / 2)), kTileRowBytes / 2);
      tec_bulk_store_commit();
      release_pending = true;
    }
    if (last) break;
    ring += steps;
    tile = next;
  }
  if constexpr (kStaged) tec_bulk_store_wait_all();  // D written before the block exits (its last slots need no release)
#if TEC_AMAX
  // One atomic per block: the consumers' warps meet on named barrier 1.
  __shared__ float warp_amax[8];
  for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
  if (lane == 0) warp_amax[consumer * 4 + warp] = amax;
  asm volatile("bar.sync 1, 256;" ::: "memory");
  if (consumer == 0 && tid == 0) {
    float block_amax = 0.0f;
#pragma unroll
    for (int w = 0; w < 8; ++w) block_amax = fmaxf(block_amax, warp_amax[w]);
#if TEC_OUT != 2
    block_amax = tec_bf16_to_float(tec_float_to_bf16(block_amax));  // of what the cast pass reads
#endif
    tec_atomic_amax((float*)args.slot[8], block_amax);
  }
#else
  (void)amax;
#endif
}
