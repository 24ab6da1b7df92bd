// The mid-M FP8 GEMM for Hopper: D[m, n] = epilogue(sa * sb * sum_k X[m, k] W[n, k]) for
// per-tensor FP8 operands and 33-128 rows (tokens), as at T = 128. Like the small-M kernel's,
// its time is the time to stream W (one byte per weight, read once), but at 64-128 tokens the
// small-M kernel's register accumulators no longer fit, and cuBLASLt streamed mlp.json's fc1
// weights at ~2 TB/s. This kernel streams them through shared memory to wgmma instead:
//
// - A block owns 128 rows of W (grid = N / 128) and every token. Warpgroup 0 is the producer:
//   per step of 128 bytes of K it copies the block's 16 KB of W with two TMA bulk copies (W is
//   in the device layout of mid_m_layout.h, so a tile's step is 8 KB contiguous and already
//   128-byte swizzled) and the tokens' 128 bytes each with cp.async, in the same swizzle, into
//   a ring of TEC_SLOTS slots guarded by mbarriers ("full" and "empty" per slot).
// - Warpgroups 1..TEC_CONSUMERS each own 64 tokens: four wgmma m64n128k32 per step, both
//   operands from shared memory (X as A, W as B, both K-major as FP8 wgmma requires), fp32
//   accumulators in registers, one step's wgmma in flight while the next slot is awaited.
// - Each consumer applies the epilogue (gemm_epilogue.cuh) to its 64 x 128 outputs.
//
// Why this shape, measured on the H100 with fc1's shape (N = 16384, K = 4096, M = 128), per
// launch back to back: W in registers feeding wgmma could not keep loads in flight
// (wgmma.fence waits for them all): 50 us; unswizzled shared-memory tiles made the
// shared-memory pipe the limit (81 % busy): 38 us; with the 128-byte swizzle 33.5 us (bf16 out,
// no activation; 33.9 us with GELU, bias and the amax), and the MMA is hidden. X by a 2D TMA
// tensor map, with or without cluster multicast, was slower (45-113 us). Where it stands:
// Nsight Compute shows DRAM at only 52 % of its peak, so the stream is latency-bound still;
// and inside mlp.json's CUDA graph at T = 128 the plan is not faster than with cuBLASLt (86.6
// against 85.2 us), though its eager step is (43.6 against 46.5 us). Hence te-compile uses it
// only when asked (--mid-m-gemm).
//
// cp.async writes through the generic proxy and wgmma reads through the async proxy, so a
// producer thread publishes X only after its copies are complete (cp.async.wait_group, TEC_LAG
// steps behind the newest) and a proxy fence; the bulk copies of W complete on the mbarrier.
// Tried on the H100 without gain: 5 or 6 slots, a warp of its own issuing W's copies, and W's
// copies without the evict-first L2 hint (slower: 37.8 against 33.9 us).
//
// The GELU is the tanh.approx one (gemm_epilogue.cuh): with the exact tanh the epilogue, which
// two warpgroups per SM run after the main loop, took 45.4 instead of 38.7 us per launch
// (timed one launch at a time, launch latency included).
//
// Needs sm_90a (wgmma). Defines: TEC_M (33..128), TEC_N (% 128 == 0), TEC_K (% 128 == 0);
// TEC_A_E4M3 / TEC_B_E4M3 (W / X formats); the epilogue's TEC_BIAS, TEC_ACT, TEC_RESIDUAL and
// TEC_OUT, and the argument slots: gemm_epilogue.cuh. Dynamic shared memory:
// tec_mid_m_shared_bytes(TEC_M) of mid_m_layout.h.
#define TEC_APPROX_GELU 1
#include "gemm_epilogue.cuh"
#include "hopper.cuh"
#include "mid_m_layout.h"

#define TEC_CONSUMERS TEC_MID_M_CONSUMERS(TEC_M)
#define TEC_SLOTS TEC_MID_M_SLOTS
#define TEC_LAG 2  // steps a producer's cp.async runs ahead of its publication; <= TEC_SLOTS - 2

#if TEC_A_E4M3
#define TEC_W_TYPE "e4m3"
#else
#define TEC_W_TYPE "e5m2"
#endif
#if TEC_B_E4M3
#define TEC_X_TYPE "e4m3"
#else
#define TEC_X_TYPE "e5m2"
#endif

constexpr int kStepBytes = 128;  // of K per pipeline step: one 128-byte swizzle row
constexpr int kWSlotBytes = TEC_MID_M_BLOCK_ROWS * kStepBytes;
constexpr int kSlotBytes = TEC_MID_M_SLOT_BYTES(TEC_M);
constexpr int kSteps = TEC_K / kStepBytes;

// d += A (64 x 32, X) . B (128 x 32, W)^T; 64 fp32 accumulators per thread.
__device__ __forceinline__ void tec_wgmma_m64n128k32(float (&d)[64], unsigned long long a, unsigned long long b) {
  asm volatile(
      "{ .reg .pred p; setp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32." TEC_X_TYPE "." TEC_W_TYPE " {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1; }"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                 "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                 "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                 "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                 "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(a), "l"(b));
}

extern "C" __global__ void __launch_bounds__(128 * (TEC_CONSUMERS + 1), 1) tec_gemm_mid_m(TecArgs args) {
  extern __shared__ __align__(1024) u8 tec_shared[];
  // The swizzle repeats every 1024 bytes, and the descriptors assume slots aligned to it.
  const u32 base = (tec_shared_address(tec_shared) + 1023u) & ~1023u;
  const u32 barriers = base + TEC_SLOTS * kSlotBytes;
  auto full = [&](int s) { return barriers + 8u * (u32)s; };
  auto empty = [&](int s) { return barriers + 8u * (u32)(TEC_SLOTS + s); };
  const int warpgroup = threadIdx.x / 128, tid = threadIdx.x % 128;
  const i64 row0 = (i64)blockIdx.x * TEC_MID_M_BLOCK_ROWS;

  if (threadIdx.x == 0) {
    for (int s = 0; s < TEC_SLOTS; ++s) {
      tec_barrier_init(full(s), 128 + 1);               // each producer thread's X, + the W bytes
      tec_barrier_init(empty(s), 128 * TEC_CONSUMERS);  // every consumer thread
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (warpgroup == 0) {
    const u8* x = (const u8*)args.slot[2];
    const u8* w = (const u8*)args.slot[0];
    const u8* w_low = w + tec_mid_m_tiled_offset(row0, 0, TEC_K);       // rows 0-63 of the block
    const u8* w_high = w + tec_mid_m_tiled_offset(row0 + 64, 0, TEC_K);  // rows 64-127
    // W is read once per run: first out of L2, so that it does not push out the activations.
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    for (int step = 0; step < kSteps; ++step) {
      const int s = step % TEC_SLOTS;
      if (step >= TEC_SLOTS) tec_barrier_wait(empty(s), (u32)((step / TEC_SLOTS - 1) & 1));
      const u32 slot = base + (u32)(s * kSlotBytes);
      if (tid == 0) {
        tec_barrier_arrive_expect_bytes(full(s), kWSlotBytes);
        tec_bulk_copy(slot, w_low + (i64)step * 8192, 8192, full(s), policy);
        tec_bulk_copy(slot + 8192, w_high + (i64)step * 8192, 8192, full(s), policy);
      }
      // 16 bytes per copy, 8 consecutive threads per token's 128 bytes; tokens past TEC_M
      // repeat the last one (their rows of D are not stored).
#pragma unroll
      for (int i = 0; i < TEC_CONSUMERS * 4; ++i) {
        const int id = i * 128 + tid, token = id / 8, chunk = id % 8;
        const int source_token = token < TEC_M ? token : TEC_M - 1;
        const u32 dst = slot + kWSlotBytes + (u32)tec_sw128_offset(token, chunk);
        tec_copy16(dst, x + (i64)source_token * TEC_K + (i64)step * kStepBytes + chunk * 16);
      }
      asm volatile("cp.async.commit_group;" ::: "memory");
      if (step >= TEC_LAG) {
        asm volatile("cp.async.wait_group %0;" ::"n"(TEC_LAG) : "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        tec_barrier_arrive(full((step - TEC_LAG) % TEC_SLOTS));
      }
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    for (int step = kSteps > TEC_LAG ? kSteps - TEC_LAG : 0; step < kSteps; ++step) tec_barrier_arrive(full(step % TEC_SLOTS));
    return;
  }

  const int consumer = warpgroup - 1;
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
  for (int step = 0; step < kSteps; ++step) {
    const int s = step % TEC_SLOTS;
    tec_barrier_wait(full(s), (u32)((step / TEC_SLOTS) & 1));
    const u32 slot = base + (u32)(s * kSlotBytes);
    const unsigned long long a = tec_sw128_descriptor(slot + kWSlotBytes + (u32)consumer * 8192u);
    const unsigned long long b = tec_sw128_descriptor(slot);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int k = 0; k < 4; ++k) tec_wgmma_m64n128k32(acc, a + 2 * k, b + 2 * k);  // + 32 bytes of K each
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
    if (step > 0) tec_barrier_arrive(empty((step - 1) % TEC_SLOTS));
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(acc[i])::"memory");  // not read before the wait

  // The wgmma accumulator layout: warp w of the warpgroup holds tokens 16w + lane / 4 (+ 8),
  // and in each 8-column group j the columns 8j + 2 (lane % 4) and + 1.
  const int warp = tid / 32, lane = tid % 32;
  const float alpha = tec_gemm_alpha(args);
  float local_amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    const int token = consumer * 64 + warp * 16 + lane / 4 + ((i & 2) ? 8 : 0);
    const i64 n = row0 + (i / 4) * 8 + 2 * (lane % 4) + (i & 1), out = (i64)token * TEC_N + n;
    if (token < TEC_M) tec_gemm_store(args, out, tec_gemm_epilogue(args, alpha, acc[i], n, out), local_amax);
  }
  // The consumers only: the producer warpgroup has returned.
  tec_gemm_publish_amax<4 * TEC_CONSUMERS>(args, local_amax, consumer * 4 + warp, [] {
    asm volatile("bar.sync 1, %0;" ::"n"(128 * TEC_CONSUMERS) : "memory");
  });
}
