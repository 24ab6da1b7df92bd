// The device layout "small_m_tiles" of an [N][K] FP8 weight, which kernels/gemm_small_m.cu
// streams (a constant buffer's device_layout in the plan; the runtime permutes the bytes at
// upload, the plan file and the CPU reference keep them row-major). Tiles of 16 rows; in a
// tile, K in steps of 64 bytes, 1 KB per step: rows 0-7, then rows 8-15, each half 32 lanes
// x 16 bytes, lane = 4 * (row % 8) + (k % 64) / 16. So each 16-byte load of a warp's step
// comes from one contiguous 512-byte run, where row-major rows put them 8 rows (K bytes)
// apart: streaming mlp.json's weights took 25.0 instead of 26.0-26.4 us per 64 MB on the H100.
#pragma once

// Its own host/device marker rather than tec_math.h's TEC_HD: the runtime includes this next to
// the CUDA headers, whose global `half` a tec_math.h local shadows (-Wshadow).
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define TEC_LAYOUT_HD __host__ __device__ __forceinline__
#else
#define TEC_LAYOUT_HD inline
#endif

// Where W[n][k] lies; requires N % 16 == 0 and K % 64 == 0.
TEC_LAYOUT_HD long long tec_small_m_tiled_offset(long long n, long long k, long long K) {
  const long long tile = n / 16, row = n % 16, step = k / 64, within = k % 64;
  return tile * 16 * K + step * 1024 + (row / 8) * 512 + ((row % 8) * 4 + within / 16) * 16 + within % 16;
}
