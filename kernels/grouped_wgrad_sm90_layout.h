// The tiling of kernels/grouped_wgrad_sm90.cu, shared with the lowering that sizes its launch
// (as mid_m_layout.h is for gemm_mid_m.cu). `block_scales`: fp8-block's variant, whose
// per-step sum needs a second set of accumulators, hence half the tile's columns, and whose
// slots also hold the step's scales, released later, hence more of them.
#pragma once

#define TEC_WGRAD_SM90_TILE_N 128  // rows of D (dY's columns) per block
#define TEC_WGRAD_SM90_TILE_K(block_scales) ((block_scales) ? 128 : 256)  // columns of D (X's columns) per block
#define TEC_WGRAD_SM90_SLOTS(block_scales) ((block_scales) ? 6 : 4)
// A slot: one step, 128 bytes of the sum for the tile's dY and X columns (K-major or in
// MN-major atoms), then fp8-block's 128 + 128 scale_inv. A multiple of 1 KB, the swizzle's period.
#define TEC_WGRAD_SM90_SCALE_BYTES(block_scales) ((block_scales) ? 1024 : 0)
#define TEC_WGRAD_SM90_SLOT_BYTES(block_scales) \
  (128 * (TEC_WGRAD_SM90_TILE_N + TEC_WGRAD_SM90_TILE_K(block_scales)) + TEC_WGRAD_SM90_SCALE_BYTES(block_scales))
// Dynamic shared memory of a launch: the slots, 1 KB to align them, two mbarriers per slot.
#define TEC_WGRAD_SM90_SHARED_BYTES(block_scales) \
  (TEC_WGRAD_SM90_SLOTS(block_scales) * TEC_WGRAD_SM90_SLOT_BYTES(block_scales) + 1024 + 16 * TEC_WGRAD_SM90_SLOTS(block_scales))
