// The small-M FP8 GEMM: D[m, n] = epilogue(sa * sb * sum_k X[m, k] W[n, k]) for per-tensor
// FP8 operands when M (the tokens) is small, as at decode-like T = 16. Such a GEMM reads every
// weight byte once and does little arithmetic per byte, so its time is the time to stream W;
// cuBLASLt's kernels streamed mlp.json's FP8 weights at about 2.1 TB/s on the H100 at T = 16.
// This kernel is shaped for the stream instead: each warp owns 16 rows of W over a slice of K,
// keeps TEC_UNROLL 16-byte loads per row in flight, and feeds them straight from registers to
// mma.sync m16n8k32 (W as A, X as B), so W never goes through shared memory.
//
// Fragment trick: the thread that holds A(row, k) for k in {4t..4t+3, 16+4t..16+4t+3} of an
// mma loads 16 contiguous bytes W[row][16t .. 16t+15] and uses them for two mmas. Since the
// thread that holds B(k, token) for the same logical k is the same t, both operands go
// through the same permutation of k, which a dot product does not see.
//
// A block owns 16 rows of W, and its TEC_WARPS warps split K; partial sums meet in shared
// memory, and one pass adds them and applies the epilogue in the order cuBLASLt's does: alpha,
// bias, activation, then + C (the residual, beta = 1), then the store.
//
// Defines: TEC_M, TEC_N, TEC_K (TEC_K % 64 == 0, TEC_N % 16 == 0), TEC_UNROLL; TEC_W_TILED (W in
// the device layout of kernels/small_m_layout.h, else row-major); TEC_A_E4M3 / TEC_B_E4M3 (W /
// X formats); the epilogue's TEC_BIAS, TEC_ACT, TEC_RESIDUAL and TEC_OUT, and the argument
// slots: gemm_epilogue.cuh.
#include "gemm_epilogue.cuh"
#include "small_m_layout.h"

// 8 warps per block, 2 blocks per SM: the best of 4-16 warps and 1-4 blocks per SM measured on
// the H100 at mlp.json's shapes (2.45-2.50 TB/s; splitting a block over more rows was slower).
#define TEC_WARPS 8
#define TEC_TOKEN_TILES ((TEC_M + 7) / 8)

#if TEC_A_E4M3
#define TEC_A_TYPE "e4m3"
#else
#define TEC_A_TYPE "e5m2"
#endif
#if TEC_B_E4M3
#define TEC_B_TYPE "e4m3"
#else
#define TEC_B_TYPE "e5m2"
#endif

__device__ __forceinline__ void tec_mma(float (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32." TEC_A_TYPE "." TEC_B_TYPE ".f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// W is read once per run: no L1 allocation, and first out of L2 (policy from
// tec_evict_first_policy), so that it does not push out the activations.
__device__ __forceinline__ unsigned long long tec_evict_first_policy() {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ uint4 tec_load_stream(const void* p, unsigned long long policy) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(policy));
  return v;
}

extern "C" __global__ void __launch_bounds__(TEC_WARPS * 32, 2) tec_gemm_small_m(TecArgs args) {
  const u8* w = (const u8*)args.slot[0];
  const u8* x = (const u8*)args.slot[2];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const i64 row0 = (i64)blockIdx.x * 16;

  constexpr int kSteps = TEC_K / 64;  // 64 bytes of K per step: 16 per thread of a row group
  const int step_begin = warp * kSteps / TEC_WARPS, step_end = (warp + 1) * kSteps / TEC_WARPS;
  const unsigned long long policy = tec_evict_first_policy();
  auto w_offset = [](i64 n, i64 k) -> i64 {
#if TEC_W_TILED
    return tec_small_m_tiled_offset(n, k, TEC_K);
#else
    return n * TEC_K + k;
#endif
  };
  // This thread's 16 bytes of rows g and g + 8 in step 0, and how far a step moves them.
  const u8* w_lo = w + w_offset(row0 + g, 16 * t);
  const u8* w_hi = w + w_offset(row0 + g + 8, 16 * t);
  const i64 w_step = w_offset(row0 + g, 64 + 16 * t) - w_offset(row0 + g, 16 * t);
  tec_wait_for_previous_kernel();  // X is the previous kernel's output (common.cuh)

  const u8* x_row[TEC_TOKEN_TILES];
#pragma unroll
  for (int j = 0; j < TEC_TOKEN_TILES; ++j) x_row[j] = x + (i64)(8 * j + g) * TEC_K + 16 * t;

  float acc[TEC_TOKEN_TILES][4];
#pragma unroll
  for (int j = 0; j < TEC_TOKEN_TILES; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

  auto consume = [&](const uint4& lo, const uint4& hi, const uint4 (&xs)[TEC_TOKEN_TILES]) {
#pragma unroll
    for (int j = 0; j < TEC_TOKEN_TILES; ++j) {
      tec_mma(acc[j], lo.x, hi.x, lo.y, hi.y, xs[j].x, xs[j].y);
      tec_mma(acc[j], lo.z, hi.z, lo.w, hi.w, xs[j].z, xs[j].w);
    }
  };
  auto load_x = [&](int step, uint4 (&xs)[TEC_TOKEN_TILES]) {
#pragma unroll
    for (int j = 0; j < TEC_TOKEN_TILES; ++j)
      xs[j] = (8 * j + g < TEC_M) ? __ldg((const uint4*)(x_row[j] + 64 * (i64)step)) : make_uint4(0, 0, 0, 0);
  };

  int step = step_begin;
  for (; step + TEC_UNROLL <= step_end; step += TEC_UNROLL) {
    uint4 lo[TEC_UNROLL], hi[TEC_UNROLL];
    uint4 xs[TEC_UNROLL][TEC_TOKEN_TILES];
#pragma unroll
    for (int u = 0; u < TEC_UNROLL; ++u) {
      lo[u] = tec_load_stream(w_lo + w_step * (step + u), policy);
      hi[u] = tec_load_stream(w_hi + w_step * (step + u), policy);
    }
#pragma unroll
    for (int u = 0; u < TEC_UNROLL; ++u) load_x(step + u, xs[u]);
#pragma unroll
    for (int u = 0; u < TEC_UNROLL; ++u) consume(lo[u], hi[u], xs[u]);
  }
  for (; step < step_end; ++step) {
    uint4 xs[TEC_TOKEN_TILES];
    const uint4 lo = tec_load_stream(w_lo + w_step * step, policy), hi = tec_load_stream(w_hi + w_step * step, policy);
    load_x(step, xs);
    consume(lo, hi, xs);
  }

  // Only now may the next kernel's blocks take their places: let in during the main loop, its
  // waiting blocks cost fp8-current at T = 16 2.5 us on the H200 (54.0 against 56.5 us).
  tec_allow_next_kernel();

  // Partial sums [warp = K slice][token][row]: the fragment holds rows g and g + 8 of the block,
  // tokens 8j + 2t and 8j + 2t + 1.
  __shared__ float partial[TEC_WARPS * TEC_M * 16];
#pragma unroll
  for (int j = 0; j < TEC_TOKEN_TILES; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int token = 8 * j + 2 * t + (e & 1), row = g + (e >= 2 ? 8 : 0);
      if (token < TEC_M) partial[(warp * TEC_M + token) * 16 + row] = acc[j][e];
    }
  __syncthreads();

  const float alpha = tec_gemm_alpha(args);
  float local_amax = 0.0f;
  for (int i = threadIdx.x; i < TEC_M * 16; i += TEC_WARPS * 32) {
    const int token = i / 16, row = i % 16;
    float sum = 0.0f;
#pragma unroll
    for (int s = 0; s < TEC_WARPS; ++s) sum += partial[(s * TEC_M + token) * 16 + row];
    const i64 n = row0 + row, out = (i64)token * TEC_N + n;
    tec_gemm_store(args, out, tec_gemm_epilogue(args, alpha, sum, n, out), local_amax);
  }
  tec_gemm_publish_amax<TEC_WARPS>(args, local_amax, warp, [] { __syncthreads(); });
}
