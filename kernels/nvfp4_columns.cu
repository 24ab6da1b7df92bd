// NVFP4's columnwise copy (LAYOUTS.md §4.1-4.2, 4.4): the quantization of x^T with 1x16 blocks
// along its rows (16x1 blocks of x), stored transposed, packed [TEC_COLS, TEC_ROWS / 2], with
// E4M3 scales [roundup(TEC_COLS, 128)][roundup(TEC_ROWS / 16, 4)] and the copy's global amax,
// from an fp32 [TEC_ROWS, TEC_COLS] source, with the CPU reference's arithmetic (nvfp4_copy in
// src/reference/quantize.cpp). Without RHT both copies share the tensor's amax: the row kernel's
// amax pass leaves it in slot 1, and this kernel copies it to the columnwise amax.
// TEC_COLUMNWISE: whether the tensor has the columnwise copy (a weight may not: no dgrad).
// TEC_TWO_D (a weight's 16x16 tiles, §4.4): one scale per tile, so the rowwise copy is the
// columnwise one transposed; with TEC_ROWWISE the kernel writes it too (slots 5 and 6), where
// the row kernel's 1x16 blocks would be wrong.
//
// A thread owns one column of one 16-row block: 16 values in registers, 8 bytes of the
// transposed copy; a tile's 16 columns are 16 lanes of a warp, which share its amax by
// shuffles. Grid (TEC_ROWS / 16, ceil(TEC_COLS / 256), members); TEC_ROWS % 16 == TEC_COLS % 16 == 0.
// A grouped weight (an MoE layer's experts) is quantized per member, as the reference does:
// grid z is the member, TEC_ROWS its rows, its own amax (slots 1 and 4 hold a float per member),
// TEC_MEMBER_* the bytes from one member's copy to the next's.
// Slots: 0 source, 1 amax, 2 columnwise_data, 3 columnwise_scale_inv, 4 columnwise_amax,
// 5 data, 6 scale_inv. The scale buffers' padding is zeroed by a memset before.
#include "common.cuh"

struct TecNvfp4ColumnsArgs {
  unsigned long long slot[7];
};

#ifndef TEC_MEMBER_DATA
#define TEC_MEMBER_DATA 0
#define TEC_MEMBER_SCALES 0
#endif
#ifndef TEC_MEMBER_COLUMNWISE_DATA
#define TEC_MEMBER_COLUMNWISE_DATA 0
#define TEC_MEMBER_COLUMNWISE_SCALES 0
#endif

#define TEC_NV_BLOCK 16
#define TEC_NV_COLUMNWISE_SCALE_PITCH ((TEC_ROWS / 16 + 3) / 4 * 4)
#define TEC_NV_ROWWISE_SCALE_PITCH ((TEC_COLS / 16 + 3) / 4 * 4)

extern "C" __global__ void __launch_bounds__(256) tec_nvfp4_quantize_columns(TecNvfp4ColumnsArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();
  const i64 c = (i64)blockIdx.y * blockDim.x + threadIdx.x, block = blockIdx.x, member = blockIdx.z;
  // No early return: the 2-D tile's shuffles need every lane. Columns past the end form whole
  // 16-lane tiles (TEC_COLS % 16 == 0), whose results are not stored.
  const bool valid = c < TEC_COLS;
  const float global_amax = ((const float*)args.slot[1])[member];
  const float s_enc = tec_nvfp4_encode_scale(global_amax);
  const float s_dec = __fdiv_rn(1.0f, s_enc);
  const float* in = (const float*)args.slot[0] + (member * TEC_ROWS + block * TEC_NV_BLOCK) * TEC_COLS + c;
  float v[TEC_NV_BLOCK];
  float amax = 0.0f;
#pragma unroll
  for (int r = 0; r < TEC_NV_BLOCK; ++r) {
    v[r] = valid ? in[r * TEC_COLS] : 0.0f;
    amax = fmaxf(amax, fabsf(v[r]));
  }
#if TEC_TWO_D
  for (int offset = 8; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
#endif
  float multiplier;
  const u8 s_b = tec_nvfp4_block_scale(amax, s_enc, s_dec, multiplier);
  u8 codes[TEC_NV_BLOCK];
#pragma unroll
  for (int r = 0; r < TEC_NV_BLOCK; ++r) codes[r] = tec_float_to_e2m1(v[r] * multiplier);
#if TEC_COLUMNWISE
  if (valid) {
    // x^T's row c, elements [16 block, +16): element 2b in byte b's low nibble.
    u32 words[2] = {0, 0};
#pragma unroll
    for (int r = 0; r < TEC_NV_BLOCK; ++r) words[r / 8] |= (u32)codes[r] << (4 * (r % 8));
    *(uint2*)((u8*)args.slot[2] + member * TEC_MEMBER_COLUMNWISE_DATA + c * (TEC_ROWS / 2) + block * (TEC_NV_BLOCK / 2)) =
        make_uint2(words[0], words[1]);
    ((u8*)args.slot[3])[member * TEC_MEMBER_COLUMNWISE_SCALES + c * TEC_NV_COLUMNWISE_SCALE_PITCH + block] = s_b;
    if (c == 0 && block == 0) ((float*)args.slot[4])[member] = global_amax;
  }
#endif
#if TEC_TWO_D && TEC_ROWWISE
  // The rowwise copy: row 16 block + r holds this column's code beside its neighbour's.
#pragma unroll
  for (int r = 0; r < TEC_NV_BLOCK; ++r) {
    const u8 odd = (u8)__shfl_down_sync(0xFFFFFFFFu, (u32)codes[r], 1);
    if (valid && (c & 1) == 0)
      ((u8*)args.slot[5])[member * TEC_MEMBER_DATA + (block * TEC_NV_BLOCK + r) * (TEC_COLS / 2) + c / 2] = (u8)(codes[r] | (odd << 4));
  }
  if (valid && (c & 15) == 0)
#pragma unroll
    for (int r = 0; r < TEC_NV_BLOCK; ++r)
      ((u8*)args.slot[6])[member * TEC_MEMBER_SCALES + (block * TEC_NV_BLOCK + r) * TEC_NV_ROWWISE_SCALE_PITCH + c / 16] = s_b;
#endif
}
