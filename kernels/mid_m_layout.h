// The device layout "mid_m_tiles" of an [N][K] FP8 weight, which kernels/gemm_mid_m.cu copies
// into shared memory (a constant buffer's device_layout in the plan; the runtime permutes the
// bytes at upload, the plan file and the CPU reference keep them row-major).
//
// Tiles of 64 rows; in a tile, K in steps of 128 bytes, 8 KB per step, so that one step of a
// tile is one contiguous bulk copy. Inside a step the bytes are already in the order Hopper's
// wgmma reads a K-major operand with the 128-byte swizzle: groups of 8 rows (1 KB), each row
// 128 bytes, its 16-byte chunk c stored at chunk position c ^ (row % 8). That swizzle is what
// keeps the tensor cores' shared-memory reads free of bank conflicts (without it the
// prototype's shared-memory pipe, not DRAM, was the limit on the H100).
#pragma once

#include "small_m_layout.h"  // TEC_LAYOUT_HD

// Where 16-byte chunk `chunk` (0-7) of row `row` lies in rows of 128 bytes in the 128-byte
// swizzle: groups of 8 rows (1 KB), the chunk at position chunk ^ (row % 8) of its row. Every
// kernel that stages a K-major (or MN-major) wgmma operand in shared memory stores it so.
TEC_LAYOUT_HD int tec_sw128_offset(int row, int chunk) { return row * 128 + ((chunk ^ (row % 8)) * 16); }

// Where W[n][k] lies; requires N % 64 == 0 and K % 128 == 0.
TEC_LAYOUT_HD long long tec_mid_m_tiled_offset(long long n, long long k, long long K) {
  const long long tile = n / 64, row = n % 64, step = k / 128, chunk = (k % 128) / 16;
  return tile * 64 * K + step * 8192 + tec_sw128_offset((int)row, (int)chunk) + k % 16;
}

// The mid-M kernel's tiling, shared with the lowering that sizes its launch: 128 rows of W per
// block, one consumer warpgroup per 64 tokens, and a ring of 4 slots, each one 128-byte step of
// K for the block's W rows and its tokens (4 x 32 KB at 128 tokens).
#define TEC_MID_M_BLOCK_ROWS 128
#define TEC_MID_M_SLOTS 4
#define TEC_MID_M_CONSUMERS(m) (((m) + 63) / 64)
#define TEC_MID_M_SLOT_BYTES(m) (128 * (TEC_MID_M_BLOCK_ROWS + 64 * TEC_MID_M_CONSUMERS(m)))

// Dynamic shared memory of a launch: the slots, 1 KB to align them to the swizzle's period, and
// the mbarriers.
TEC_LAYOUT_HD long long tec_mid_m_shared_bytes(long long m) {
  return TEC_MID_M_SLOTS * (long long)TEC_MID_M_SLOT_BYTES(m) + 1024 + 16 * TEC_MID_M_SLOTS;
}
