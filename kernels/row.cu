// The row kernel: one block of TEC_ROW_THREADS threads per output row (or per part of one,
// TEC_CHUNK). A producer computes
// element i of the row in fp32 (a norm, an activation, an add, a load or a dequantize), and
// an output stage stores it (bf16 / fp32) or quantizes it (LAYOUTS.md §1-4). The compiler
// specialises both with defines (src/codegen/lower.cpp); every float operation is the one
// the CPU reference performs, in the same order, so quantized outputs match it bit for bit.
// One exception, with the same outputs: silu and swiglu first compute each element with the
// hardware's approximate exp2 and reciprocal and recompute exactly every element whose stored
// bits could differ (the verified fast SiLU, below tec_store_row).
//
// Producers (TEC_PRODUCER, named in row_producers.h): 1 load, 2 layernorm, 3 rmsnorm, 4 unary activation (TEC_ACT),
// 5 gated activation (act(x[:n]) * x[n:]), 6 add, 7 bias (TEC_RESIDUAL: then + the residual in
// slot 2, of dtype TEC_RESIDUAL_DTYPE: a fused step [bias, add]), 8 scale (TEC_SCALE), 9 dequantize
// (TEC_DQ: 1 per-tensor FP8, 2 MXFP8, 3 FP8 1x128, 4 FP8 128x128, 5 NVFP4), and the general
// ops: 10 unary math (TEC_UNARY), 11 binary with numpy broadcasting (TEC_BINARY; the output's
// dims TEC_BCAST_DIMS and each operand's element strides into them, 0 where it broadcasts),
// (12: free; reductions are on the general path, kernels/general.cu), 14 l2norm
// (x / sqrt(sum x^2 + eps)), 15 a gather through strides (transpose: the output's dims
// TEC_BCAST_DIMS, the input's element strides in TEC_A_STRIDES), 13 a GEMM's
// fp32 product with its epilogue in fp32: + bias (TEC_EPI_BIAS, a dtype code), activation
// (TEC_ACT), + residual (TEC_EPI_RESIDUAL). Dequantize also takes fp8-static's scales: TEC_DQ
// 6 one per row, 7 one per 1 x TEC_DQ_BLOCK block (row-major [M, K / TEC_DQ_BLOCK]).
// The backward (train plans), each the CPU reference's float operations in its order: 16
// dy * act'(x) (TEC_ACT picks act; x in slot 0, dy in slot 1), 17 the gated activations'
// [da | db] (x = [a | b] in slot 0, dy in slot 1, TEC_HALF = the width of a), 18 the norms'
// dx (x, gamma, dy in slots 0-2, mean (layernorm, TEC_HAS_MEAN) in slot 8, rsigma in slot 9).
// The MoE layer: 19 a gather of rows (moe_permute: output row r is input row slot 1[r], int32),
// 20 the router-weighted sum of TEC_TOPK rows (moe_unpermute: y in slot 0, the row map in slot
// 1, the weights in slot 2, the status word in slot 8, TEC_Y_ROWS = y's rows; TEC_UNWEIGHTED:
// each weight 1, moe_permute's backward), 22 moe_unpermute's backward scatter (d(out) in slot
// 0, each row's slot or -1 in slot 1, the weights in slot 2).
// 23 an embedding lookup: output row r is table row slot 1[r] (int32 token ids) of the table in
// slot 0 (TEC_TABLE_ROWS rows); an id outside them gives zeros and sets the status word (slot 8).
// Attention's glue: 21 rope, element i of a token row of heads x TEC_ROPE_HEAD_DIM turned with
// its pair partner by position x tec_rope_inv_frequency[pair] (the position: the row modulo
// TEC_ROPE_INNER, or divided by it under sbhd; TEC_ROPE_INVERSE: the backward's opposite turn;
// the row's cos and sin staged in shared memory first).
// TEC_SAVE_STATS (forward norms of train plans): the row's mean to slot 10 (layernorm) and
// rsigma to slot 11, for the backward.
// Activations (TEC_ACT): 1 gelu tanh, 2 gelu erf, 3 relu, 4 silu.
// Input dtypes (TEC_IN_DTYPE for slot 0, TEC_PARAM_DTYPE for slots 1-2): 0 bf16, 1 fp16, 2 fp32.
// Outputs (TEC_OUT): 0 bf16, 1 fp16, 2 fp32, 10 FP8 current scaling, 11 FP8 delayed scaling,
// 12 FP8 1x128 blocks, 13 MXFP8, 14 NVFP4, 15 FP8 with the model's static scale
// (TEC_STATIC_SCALE_INV: code = x / scale_inv, as ONNX QuantizeLinear); TEC_OUT_MID_M_TILES=1
// with bf16 stores the rows in kernels/mid_m_layout.h's device layout (a dequantized grouped
// weight for the grouped GEMM; rows % 64 == 0, TEC_N % 64 == 0). TEC_PASS: 0 the only pass, 1 the amax pass and
// 2 the cast pass of the quantizers that need the whole tensor's amax first.
//
// Arguments: one TecArgs by value, slots in this order:
//   0 input (or quantized data), 1 gamma / second input / bias / dequant scale_inv,
//   2 beta / dequant amax, 3 output data, 4 output scale_inv, 5 output amax (current scaling
//   and NVFP4: the tensor's amax; delayed: amax_history[0]), 6 delayed scale, 7 rows (M),
//   8-9 more inputs (the norms' backward), 10-11 more outputs (a norm's saved statistics).
// TEC_AMAX_PARTIALS = P > 0 (current scaling): slot 5 holds P per-block amaxes instead of
// one atomically maxed float; the amax pass writes its block's (block x * gridDim.y + y) and
// the cast pass reduces all P. That needs no zeroed buffer, so no memset before the amax
// pass: a memset node cost ~2 us in a replayed graph on the H100, a kernel node ~1 us.
#include "common.cuh"
#include "row_producers.h"
#include "tec_math.h"
#include "block_sum.cuh"
#ifndef TEC_RESIDUAL
#define TEC_RESIDUAL 0
#endif
#ifndef TEC_OUT_MID_M_TILES
#define TEC_OUT_MID_M_TILES 0
#endif
#ifndef TEC_UNWEIGHTED
#define TEC_UNWEIGHTED 0
#endif
// TEC_MEMBER_ROWS = R > 0 (a grouped tensor made on the GPU, a train plan's expert weights):
// every R rows are one member, quantized alone as the reference does. Current scaling: its
// own amax (slot 5[member], maxed atomically) and scale_inv (slot 4[member]); delayed: its own
// scale (slot 6[member]) and history column (slot 5[member] of row 0).
#ifndef TEC_MEMBER_ROWS
#define TEC_MEMBER_ROWS 0
#endif
#if TEC_MEMBER_ROWS
#define TEC_MEMBER(r) ((r) / TEC_MEMBER_ROWS)
#define TEC_MEMBER_FIRST_ROW(r) ((r) % TEC_MEMBER_ROWS == 0)
#else
#define TEC_MEMBER(r) 0
#define TEC_MEMBER_FIRST_ROW(r) ((r) == 0)
#endif
#if TEC_OUT_MID_M_TILES
#include "mid_m_layout.h"
#endif

struct TecArgs {
  unsigned long long slot[12];
};

#define TEC_WARPS (TEC_ROW_THREADS / 32)

// The offset of output element e (row-major over `dims`) in an operand with these element
// strides: the general ops' broadcasting and transpose.
template <int kRank>
__device__ __forceinline__ i64 tec_strided_offset(i64 e, const i64 (&dims)[kRank], const i64 (&strides)[kRank]) {
  i64 offset = 0;
#pragma unroll
  for (int d = kRank - 1; d >= 0; --d) {
    offset += (e % dims[d]) * strides[d];
    e /= dims[d];
  }
  return offset;
}
#ifndef TEC_AMAX_PARTIALS
#define TEC_AMAX_PARTIALS 0
#endif

__device__ __forceinline__ float tec_decode_fp8(u8 code) {
#if TEC_DQ_FP8_E4M3
  return tec_e4m3_to_float(code);
#else
  return tec_e5m2_to_float(code);
#endif
}

__device__ __forceinline__ float tec_activation_derivative(float x) {
#if TEC_ACT == 1
  return tec_dgelu_tanh(x);
#elif TEC_ACT == 2
  return tec_dgelu_erf(x);
#elif TEC_ACT == 3
  return tec_drelu(x);
#else
  return tec_dsilu(x);
#endif
}

#ifdef TEC_ACT
__device__ __forceinline__ float tec_activation(float x) { return tec_apply_activation(TEC_ACT, x); }

// Both at once, as the two above compute them; SiLU's share their exp (the gated backward
// needs both of every element, and the compiler did not share them by itself).
__device__ __forceinline__ void tec_activation_with_derivative(float x, float& value, float& derivative) {
#if TEC_ACT == 4
  const float denominator = tec_silu_denominator(x);
  value = tec_silu_given(x, denominator);
  derivative = tec_dsilu_given(x, denominator);
#else
  value = tec_activation(x);
  derivative = tec_activation_derivative(x);
#endif
}
#endif

__device__ float tec_block_max(float v, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float w = 0.0f;
  for (int i = 0; i < TEC_WARPS; ++i) w = fmaxf(w, scratch[i]);
  return w;
}

struct TecRow {
  i64 r;      // the row
  i64 rows;   // M
  float mean, rsigma;
  float mean_g, mean_gx;  // the norms' backward: the row means of g = dy gamma and of g xhat
  const float* staged;  // norms: the input row in shared memory (nullptr: read it from global)
};

// Norm rows up to this length are staged in shared memory once (16-byte loads), instead of
// being read from global memory three times (sum, squares, output).
#define TEC_STAGE_LIMIT 8192
#if (TEC_PRODUCER == TEC_ROW_LAYERNORM || TEC_PRODUCER == TEC_ROW_RMSNORM || TEC_PRODUCER == TEC_ROW_L2NORM) && TEC_N <= TEC_STAGE_LIMIT
#define TEC_STAGED 1
#else
#define TEC_STAGED 0
#endif

#if TEC_PRODUCER == TEC_ROW_ROPE
__device__ const double tec_rope_inv_frequency[] = {TEC_ROPE_INV_FREQUENCY};
#endif

// The per-element producers' arithmetic on an element x of slot 0 and its partner y (the
// gate's second half, the other addend, the bias), shared by the scalar and the vector loads.
#if TEC_PRODUCER == TEC_ROW_ACTIVATION || TEC_PRODUCER == TEC_ROW_GATED || TEC_PRODUCER == TEC_ROW_ADD || TEC_PRODUCER == TEC_ROW_BIAS || TEC_PRODUCER == TEC_ROW_SCALE
__device__ __forceinline__ float tec_elementwise(float x, float y) {
#if TEC_PRODUCER == TEC_ROW_ACTIVATION
  return tec_activation(x);
#elif TEC_PRODUCER == TEC_ROW_GATED
  return tec_activation(x) * y;
#elif TEC_PRODUCER == TEC_ROW_ADD || TEC_PRODUCER == TEC_ROW_BIAS
  return x + y;
#else
  return x * TEC_SCALE;
#endif
}
#endif

// Element `index` of an NVFP4 row (packed E2M1, element 2b in byte b's low nibble) with its
// block's E4M3 scale and the copy's global amax, as reference dequantize (LAYOUTS.md §4.2 step 5).
__device__ __forceinline__ float tec_nvfp4_value(const u8* row_data, i64 index, u8 s_b, float amax) {
  const u8 byte = row_data[index / 2];
  const u8 code = (index % 2 == 0) ? (byte & 0xF) : (byte >> 4);
  return (float)((double)tec_e2m1_to_float(code) * (double)tec_e4m3_to_float(s_b) * ((double)amax / (6.0 * 448.0)));
}

// Element i of row r, in fp32.
__device__ __forceinline__ float tec_produce(const TecArgs& args, const TecRow& row, i64 i) {
  const void* in0 = (const void*)args.slot[0];
  const void* in1 = (const void*)args.slot[1];
  const void* in2 = (const void*)args.slot[2];
#if TEC_PRODUCER == TEC_ROW_LOAD
  return tec_load<TEC_IN_DTYPE>(in0, row.r * TEC_N + i);
#elif TEC_PRODUCER == TEC_ROW_LAYERNORM || TEC_PRODUCER == TEC_ROW_RMSNORM || TEC_PRODUCER == TEC_ROW_L2NORM
#if TEC_STAGED
  const float x = row.staged[i];
#else
  const float x = tec_load<TEC_IN_DTYPE>(in0, row.r * TEC_N + i);
#endif
#if TEC_PRODUCER == TEC_ROW_L2NORM
  return x * row.rsigma;
#else
  float v = (x - row.mean) * row.rsigma * (tec_load<TEC_PARAM_DTYPE>(in1, i) + TEC_GAMMA_OFFSET);
#if TEC_PRODUCER == TEC_ROW_LAYERNORM
  v += tec_load<TEC_PARAM_DTYPE>(in2, i);
#endif
  return v;
#endif
#elif TEC_PRODUCER == TEC_ROW_ACTIVATION
  return tec_elementwise(tec_load<TEC_IN_DTYPE>(in0, row.r * TEC_N + i), 0.0f);
#elif TEC_PRODUCER == TEC_ROW_ACTIVATION_BACKWARD
  return tec_load<TEC_PARAM_DTYPE>(in1, row.r * TEC_N + i) * tec_activation_derivative(tec_load<TEC_IN_DTYPE>(in0, row.r * TEC_N + i));
#elif TEC_PRODUCER == TEC_ROW_GATED_BACKWARD
  const i64 j = i < TEC_HALF ? i : i - TEC_HALF;
  const float a = tec_load<TEC_IN_DTYPE>(in0, row.r * TEC_N + j);
  const float g = tec_load<TEC_PARAM_DTYPE>(in1, row.r * TEC_HALF + j);
  if (i < TEC_HALF) return g * tec_load<TEC_IN_DTYPE>(in0, row.r * TEC_N + TEC_HALF + j) * tec_activation_derivative(a);
  return g * tec_activation(a);
#elif TEC_PRODUCER == TEC_ROW_NORM_BACKWARD
  const float xhat = (tec_load<TEC_IN_DTYPE>(in0, row.r * TEC_N + i) - row.mean) * row.rsigma;
  const float g = tec_load<TEC_PARAM_DTYPE>(in2, row.r * TEC_N + i) * (tec_load<TEC_PARAM_DTYPE>(in1, i) + TEC_GAMMA_OFFSET);
  return row.rsigma * (g - row.mean_g - xhat * row.mean_gx);
#elif TEC_PRODUCER == TEC_ROW_GATED
  return tec_elementwise(tec_load<TEC_IN_DTYPE>(in0, row.r * 2 * TEC_N + i), tec_load<TEC_IN_DTYPE>(in0, row.r * 2 * TEC_N + TEC_N + i));
#elif TEC_PRODUCER == TEC_ROW_ADD
  return tec_elementwise(tec_load<TEC_IN_DTYPE>(in0, row.r * TEC_N + i), tec_load<TEC_PARAM_DTYPE>(in1, row.r * TEC_N + i));
#elif TEC_PRODUCER == TEC_ROW_BIAS
  const float biased = tec_elementwise(tec_load<TEC_IN_DTYPE>(in0, row.r * TEC_N + i), tec_load<TEC_PARAM_DTYPE>(in1, i));
#if TEC_RESIDUAL
  return biased + tec_load<TEC_RESIDUAL_DTYPE>(in2, row.r * TEC_N + i);
#else
  return biased;
#endif
#elif TEC_PRODUCER == TEC_ROW_SCALE
  return tec_elementwise(tec_load<TEC_IN_DTYPE>(in0, row.r * TEC_N + i), 0.0f);
#elif TEC_PRODUCER == TEC_ROW_UNARY
  return tec_apply_unary(TEC_UNARY, tec_load<TEC_IN_DTYPE>(in0, row.r * TEC_N + i));
#elif TEC_PRODUCER == TEC_ROW_BINARY
  const i64 dims[] = {TEC_BCAST_DIMS}, a_strides[] = {TEC_A_STRIDES}, b_strides[] = {TEC_B_STRIDES};
  const i64 e = row.r * TEC_N + i;
  return tec_apply_binary(TEC_BINARY, tec_load<TEC_IN_DTYPE>(in0, tec_strided_offset(e, dims, a_strides)),
                          tec_load<TEC_PARAM_DTYPE>(in1, tec_strided_offset(e, dims, b_strides)));
#elif TEC_PRODUCER == TEC_ROW_PERMUTE
  // moe_permute: row r of the tokens in expert order is token row_source[r] (kernels/moe.cu
  // writes only tokens in range).
  return tec_load<TEC_IN_DTYPE>(in0, (i64)((const int*)in1)[row.r] * TEC_N + i);
#elif TEC_PRODUCER == TEC_ROW_UNPERMUTE
  // moe_unpermute: sum over j of weights[t, j] * y[row_map[t k + j]], j from 0 up; a row map
  // entry outside y's rows adds nothing and sets the status bit.
  // TEC_UNWEIGHTED (moe_permute's backward: d(permuted) back to the tokens) weighs each by 1.
  float acc = 0.0f;
  for (int j = 0; j < TEC_TOPK; ++j) {
    const int r = ((const int*)in1)[row.r * TEC_TOPK + j];
    if (r < 0 || r >= TEC_Y_ROWS) {
      atomicOr((int*)args.slot[8], TEC_STATUS_BAD_ROW_MAP);
      continue;
    }
    const float weight = TEC_UNWEIGHTED ? 1.0f : ((const float*)in2)[row.r * TEC_TOPK + j];
    acc += weight * tec_load<TEC_IN_DTYPE>(in0, (i64)r * TEC_N + i);
  }
  return acc;
#elif TEC_PRODUCER == TEC_ROW_EMBEDDING
  const int id = ((const int*)in1)[row.r];
  if (id < 0 || id >= TEC_TABLE_ROWS) {
    if (i == 0) atomicOr((int*)args.slot[8], TEC_STATUS_BAD_TOKEN_ID);
    return 0.0f;
  }
  return tec_load<TEC_IN_DTYPE>(in0, (i64)id * TEC_N + i);
#elif TEC_PRODUCER == TEC_ROW_UNPERMUTE_BACKWARD
  // moe_unpermute's backward: row r of d(y) is weights[s] d(out)[s / k] for the slot s that
  // maps to it (kernels/moe.cu's tec_moe_invert_row_map), 0 where none does.
  const int s = ((const int*)in1)[row.r];
  if (s < 0) return 0.0f;
  return ((const float*)in2)[s] * tec_load<TEC_IN_DTYPE>(in0, (i64)(s / TEC_TOPK) * TEC_N + i);
#elif TEC_PRODUCER == TEC_ROW_ROPE
  const i64 c = i % TEC_ROPE_HEAD_DIM;
  const float x = tec_load<TEC_IN_DTYPE>(in0, row.r * TEC_N + i);
  if (c >= TEC_ROPE_ROTARY) return x;  // channels past rotary_dim pass through
#if TEC_ROPE_INTERLEAVED
  const i64 pair = c / 2;
  const bool first = c % 2 == 0;
  const i64 partner = first ? i + 1 : i - 1;
#else
  const i64 pair = c < TEC_ROPE_ROTARY / 2 ? c : c - TEC_ROPE_ROTARY / 2;
  const bool first = c < TEC_ROPE_ROTARY / 2;
  const i64 partner = first ? i + TEC_ROPE_ROTARY / 2 : i - TEC_ROPE_ROTARY / 2;
#endif
  const float other = tec_load<TEC_IN_DTYPE>(in0, row.r * TEC_N + partner);
  const float cosine = row.staged[2 * pair], sine = TEC_ROPE_INVERSE ? -row.staged[2 * pair + 1] : row.staged[2 * pair + 1];
  float y1, y2;
  if (first) tec_rope_rotate(x, other, cosine, sine, &y1, &y2);
  else tec_rope_rotate(other, x, cosine, sine, &y1, &y2);
  return first ? y1 : y2;
#elif TEC_PRODUCER == TEC_ROW_STRIDED_GATHER
  const i64 dims[] = {TEC_BCAST_DIMS}, strides[] = {TEC_A_STRIDES};
  return tec_load<TEC_IN_DTYPE>(in0, tec_strided_offset(row.r * TEC_N + i, dims, strides));
#elif TEC_PRODUCER == TEC_ROW_GEMM_EPILOGUE
  float v = ((const float*)in0)[row.r * TEC_N + i];
#ifdef TEC_EPI_BIAS
  v = v + tec_load<TEC_EPI_BIAS>(in1, i);
#endif
#ifdef TEC_ACT
  v = tec_activation(v);
#endif
#ifdef TEC_EPI_RESIDUAL
  v = v + tec_load<TEC_EPI_RESIDUAL>(in2, row.r * TEC_N + i);
#endif
  return v;
#elif TEC_PRODUCER == TEC_ROW_DEQUANTIZE
  const u8* data = (const u8*)in0;
  const i64 r = row.r, c = i;
#if TEC_DQ == 1
  return tec_decode_fp8(data[r * TEC_N + c]) * *(const float*)in1;
#elif TEC_DQ == 2
  const u8 e = ((const u8*)in1)[r * ((TEC_N / 32 + 3) / 4 * 4) + c / 32];
  return tec_decode_fp8(data[r * TEC_N + c]) * tec_e8m0_to_float(e);
#elif TEC_DQ == 8
  // MXFP8's columnwise copy: [M, K] as the rowwise one, E8M0 scales [roundup(M/32, 4)][roundup(K, 128)].
  const u8 e = ((const u8*)in1)[(r / 32) * ((TEC_N + 127) / 128 * 128) + c];
  return tec_decode_fp8(data[r * TEC_N + c]) * tec_e8m0_to_float(e);
#elif TEC_DQ == 3
  const i64 padded_rows = (row.rows + 3) / 4 * 4;
  return tec_decode_fp8(data[r * TEC_N + c]) * ((const float*)in1)[(c / 128) * padded_rows + r];
#elif TEC_DQ == 4
  const i64 kb = (TEC_N + 127) / 128;
  return tec_decode_fp8(data[r * TEC_N + c]) * ((const float*)in1)[(r / 128) * ((kb + 3) / 4 * 4) + c / 128];
#elif TEC_DQ == 6
  return tec_decode_fp8(data[r * TEC_N + c]) * ((const float*)in1)[r];
#elif TEC_DQ == 7
  return tec_decode_fp8(data[r * TEC_N + c]) * ((const float*)in1)[r * (TEC_N / TEC_DQ_BLOCK) + c / TEC_DQ_BLOCK];
#elif TEC_DQ == 9
  // NVFP4's columnwise copy read back in x's shape: element (r, c) is x^T's (c, r), a row of
  // row.rows / 2 bytes (strided reads: the wgrad operands of a grouped layer, whose kernel
  // takes 16-bit operands in x's shape only).
  return tec_nvfp4_value(data + c * (row.rows / 2), r, ((const u8*)in1)[c * ((row.rows / 16 + 3) / 4 * 4) + r / 16], *(const float*)in2);
#else
#ifdef TEC_DQ_MEMBER_ROWS  // a grouped weight: each member (TEC_DQ_MEMBER_ROWS rows) has its own amax
  const float amax = ((const float*)in2)[r / TEC_DQ_MEMBER_ROWS];
#else
  const float amax = *(const float*)in2;
#endif
  return tec_nvfp4_value(data + r * (TEC_N / 2), c, ((const u8*)in1)[r * ((TEC_N / 16 + 3) / 4 * 4) + c / 16], amax);
#endif
#endif
}

// Calls use(i, value) for this thread's elements of the row, TEC_BATCH at a time: a batch's
// loads are all issued before any of its stores, so that a thread keeps TEC_BATCH loads in
// flight. (At small M there is one block per row on a few SMs, and a loop that loaded,
// converted and stored one element at a time waited out the memory latency per element:
// 22 us for the 16 x 16384 GELU output at T=16, measured on the H100.) Only the order of
// the memory operations changes: every element's value is computed as before.
#define TEC_BATCH 8
// With TEC_CHUNK (per-element producers, few rows), block y of a row covers columns
// [y * TEC_CHUNK, (y + 1) * TEC_CHUNK).
#ifndef TEC_CHUNK
#define TEC_CHUNK TEC_N
#endif
template <typename Use>
__device__ __forceinline__ void tec_for_row(const TecArgs& args, const TecRow& row, Use use) {
  const i64 begin = (i64)blockIdx.y * TEC_CHUNK;
  const i64 end = begin + TEC_CHUNK < TEC_N ? begin + TEC_CHUNK : TEC_N;
  for (i64 base = begin + threadIdx.x; base < end; base += (i64)TEC_ROW_THREADS * TEC_BATCH) {
    float v[TEC_BATCH];
#pragma unroll
    for (int k = 0; k < TEC_BATCH; ++k) {
      const i64 i = base + (i64)k * TEC_ROW_THREADS;
      v[k] = i < end ? tec_produce(args, row, i) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < TEC_BATCH; ++k) {
      const i64 i = base + (i64)k * TEC_ROW_THREADS;
      if (i < end) use(i, v[k]);
    }
  }
}

// The vector path: each thread takes 8 consecutive elements at a time, loaded 16 bytes at a
// time and stored 8 x sizeof(T) bytes at a time. The per-element producers over 16-bit rows
// were instruction-bound with a 2-byte load per operand and a 1-byte store per element
// (swiglu's FP8 cast pass over 8192 x 28672 took ~500 us on the H100, three times its bytes'
// time). Each element's value is the scalar path's; only the memory operations are wider.
// It needs rows whose length and chunk are multiples of 8 and 16-byte aligned operands, which
// the arena's 256-byte alignment gives; tec_vector_aligned checks before using it. rope takes it
// where a group of 8 stays within one head and one half of its rotary channels (and loads its
// partners as a group too); the staged norms take it for their stores.
#if TEC_PRODUCER == TEC_ROW_ROPE
#define TEC_ROPE_VECTOR (TEC_ROPE_HEAD_DIM % 8 == 0 && TEC_ROPE_ROTARY % (TEC_ROPE_INTERLEAVED ? 8 : 16) == 0)
#else
#define TEC_ROPE_VECTOR 0
#endif
// The gated activations' backward takes it unchunked, where both halves' groups are 8-aligned:
// one load each of a, b and dy gives a group of da and one of db (tec_for_row8).
#if TEC_PRODUCER == TEC_ROW_GATED_BACKWARD
#define TEC_GATED_BACKWARD_VECTOR (TEC_HALF % 8 == 0 && TEC_CHUNK == TEC_N)
#else
#define TEC_GATED_BACKWARD_VECTOR 0
#endif
#if (TEC_PRODUCER == TEC_ROW_LOAD || TEC_PRODUCER == TEC_ROW_ACTIVATION || TEC_PRODUCER == TEC_ROW_GATED || TEC_PRODUCER == TEC_ROW_ADD || TEC_PRODUCER == TEC_ROW_BIAS || \
     TEC_PRODUCER == TEC_ROW_SCALE || TEC_ROPE_VECTOR || TEC_GATED_BACKWARD_VECTOR ||                                    \
     ((TEC_PRODUCER == TEC_ROW_LAYERNORM || TEC_PRODUCER == TEC_ROW_RMSNORM || TEC_PRODUCER == TEC_ROW_L2NORM) && TEC_STAGED)) &&                     \
    TEC_N % 8 == 0 && TEC_CHUNK % 8 == 0 && !TEC_OUT_MID_M_TILES
#define TEC_VECTOR 1
#else
#define TEC_VECTOR 0
#endif

#if TEC_VECTOR
template <int kDtype>
__device__ __forceinline__ void tec_load8(const void* base, i64 index, float (&x)[8]) {
  if constexpr (kDtype == 2) {
    const float4 a = ((const float4*)base)[index / 4], b = ((const float4*)base)[index / 4 + 1];
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
    return;
  }
  const uint4 v = ((const uint4*)base)[index / 8];
  if constexpr (kDtype == 0) {
    tec_unpack_bf16x8(v, x);
    return;
  }
  const u32 words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    x[2 * k] = tec_fp16_to_float((u16)(words[k] & 0xFFFFu));
    x[2 * k + 1] = tec_fp16_to_float((u16)(words[k] >> 16));
  }
}

#if TEC_PRODUCER != TEC_ROW_GATED_BACKWARD
// Elements [i, i + 8) of row r, as tec_produce computes each.
__device__ __forceinline__ void tec_produce8(const TecArgs& args, const TecRow& row, i64 i, float (&v)[8]) {
  const void* in0 = (const void*)args.slot[0];
#if TEC_PRODUCER == TEC_ROW_LAYERNORM || TEC_PRODUCER == TEC_ROW_RMSNORM || TEC_PRODUCER == TEC_ROW_L2NORM
  // tec_produce's arithmetic, from the staged row and gamma (beta) 16 bytes at a time: a thread
  // reading 8 consecutive floats one by one hit each shared-memory bank 8 times over (the norms
  // were bound by L1 and shared memory: 94% busy, DRAM 22%, in Nsight Compute on the H100).
  const float4 lo = ((const float4*)row.staged)[i / 4], hi = ((const float4*)row.staged)[i / 4 + 1];
  const float x[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#if TEC_PRODUCER == TEC_ROW_L2NORM
#pragma unroll
  for (int k = 0; k < 8; ++k) v[k] = x[k] * row.rsigma;
#else
  float gamma[8];
  tec_load8<TEC_PARAM_DTYPE>((const void*)args.slot[1], i, gamma);
#if TEC_PRODUCER == TEC_ROW_LAYERNORM
  float beta[8];
  tec_load8<TEC_PARAM_DTYPE>((const void*)args.slot[2], i, beta);
#endif
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    v[k] = (x[k] - row.mean) * row.rsigma * (gamma[k] + TEC_GAMMA_OFFSET);
#if TEC_PRODUCER == TEC_ROW_LAYERNORM
    v[k] += beta[k];
#endif
  }
#endif
#elif TEC_PRODUCER == TEC_ROW_ROPE
  // As tec_produce's rope, element by element: the same tec_rope_rotate call for each pair.
  float x[8];
  tec_load8<TEC_IN_DTYPE>(in0, row.r * TEC_N + i, x);
  const i64 c = i % TEC_ROPE_HEAD_DIM;
  if (c >= TEC_ROPE_ROTARY) {  // channels past rotary_dim pass through
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = x[k];
    return;
  }
  float y1, y2;
#if TEC_ROPE_INTERLEAVED
#pragma unroll
  for (int k = 0; k < 8; k += 2) {
    const i64 pair = (c + k) / 2;
    const float cosine = row.staged[2 * pair], sine = TEC_ROPE_INVERSE ? -row.staged[2 * pair + 1] : row.staged[2 * pair + 1];
    tec_rope_rotate(x[k], x[k + 1], cosine, sine, &y1, &y2);
    v[k] = y1;
    v[k + 1] = y2;
  }
#else
  const bool first = c < TEC_ROPE_ROTARY / 2;
  float other[8];
  tec_load8<TEC_IN_DTYPE>(in0, row.r * TEC_N + (first ? i + TEC_ROPE_ROTARY / 2 : i - TEC_ROPE_ROTARY / 2), other);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const i64 pair = (first ? c : c - TEC_ROPE_ROTARY / 2) + k;
    const float cosine = row.staged[2 * pair], sine = TEC_ROPE_INVERSE ? -row.staged[2 * pair + 1] : row.staged[2 * pair + 1];
    if (first) tec_rope_rotate(x[k], other[k], cosine, sine, &y1, &y2);
    else tec_rope_rotate(other[k], x[k], cosine, sine, &y1, &y2);
    v[k] = first ? y1 : y2;
  }
#endif
#else
  float x[8], y[8] = {};
#if TEC_PRODUCER == TEC_ROW_GATED
  tec_load8<TEC_IN_DTYPE>(in0, row.r * 2 * TEC_N + i, x);
  tec_load8<TEC_IN_DTYPE>(in0, row.r * 2 * TEC_N + TEC_N + i, y);
#else
  tec_load8<TEC_IN_DTYPE>(in0, row.r * TEC_N + i, x);
#endif
#if TEC_PRODUCER == TEC_ROW_ADD
  tec_load8<TEC_PARAM_DTYPE>((const void*)args.slot[1], row.r * TEC_N + i, y);
#elif TEC_PRODUCER == TEC_ROW_BIAS
  tec_load8<TEC_PARAM_DTYPE>((const void*)args.slot[1], i, y);
#endif
#pragma unroll
  for (int k = 0; k < 8; ++k) {
#if TEC_PRODUCER == TEC_ROW_LOAD
    v[k] = x[k];
#else
    v[k] = tec_elementwise(x[k], y[k]);
#endif
  }
#if TEC_PRODUCER == TEC_ROW_BIAS && TEC_RESIDUAL
  float residual[8];
  tec_load8<TEC_RESIDUAL_DTYPE>((const void*)args.slot[2], row.r * TEC_N + i, residual);
#pragma unroll
  for (int k = 0; k < 8; ++k) v[k] += residual[k];
#endif
#endif
}
#endif

#if TEC_PRODUCER == TEC_ROW_GATED_BACKWARD
// Elements [j, j + 8) of the row's da and of its db (at TEC_HALF + j), as tec_produce computes
// each. The scalar path loaded a, b and dy one element at a time, twice over (once for da,
// once for db), and ran SiLU's exp for each of them: ~4.4 ms for swiglu's FP8 backward at
// 16384 x 28672 on the H100, against ~0.7 ms for its bytes. Here one exp serves both.
__device__ __forceinline__ void tec_produce_gated_backward8(const TecArgs& args, const TecRow& row, i64 j, float (&da)[8],
                                                            float (&db)[8]) {
  float a[8], b[8], dy[8];
  tec_load8<TEC_IN_DTYPE>((const void*)args.slot[0], row.r * TEC_N + j, a);
  tec_load8<TEC_IN_DTYPE>((const void*)args.slot[0], row.r * TEC_N + TEC_HALF + j, b);
  tec_load8<TEC_PARAM_DTYPE>((const void*)args.slot[1], row.r * TEC_HALF + j, dy);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    float value, derivative;
    tec_activation_with_derivative(a[k], value, derivative);
    da[k] = dy[k] * b[k] * derivative;
    db[k] = dy[k] * value;
  }
}
#endif

__device__ __forceinline__ bool tec_vector_aligned(const TecArgs& args) {
#if TEC_PRODUCER == TEC_ROW_LAYERNORM || (TEC_PRODUCER == TEC_ROW_BIAS && TEC_RESIDUAL)
  if (args.slot[2] & 15) return false;  // layernorm's beta, the residual
#endif
  return ((args.slot[0] | args.slot[1] | args.slot[3]) & 15) == 0;
}

// Calls use(i, v) for this thread's groups of 8 elements [i, i + 8), two groups in flight (the
// gated backward: two groups of da and their two of db).
template <typename Use>
__device__ __forceinline__ void tec_for_row8(const TecArgs& args, const TecRow& row, Use use) {
#if TEC_PRODUCER == TEC_ROW_GATED_BACKWARD
  for (i64 j = 8 * (i64)threadIdx.x; j < TEC_HALF; j += 16 * (i64)TEC_ROW_THREADS) {
    const i64 next = j + 8 * (i64)TEC_ROW_THREADS;
    float da[8], db[8], da_next[8], db_next[8];
    tec_produce_gated_backward8(args, row, j, da, db);
    if (next < TEC_HALF) tec_produce_gated_backward8(args, row, next, da_next, db_next);
    use(j, da);
    use(TEC_HALF + j, db);
    if (next < TEC_HALF) {
      use(next, da_next);
      use(TEC_HALF + next, db_next);
    }
  }
#else
  const i64 begin = (i64)blockIdx.y * TEC_CHUNK;
  const i64 end = begin + TEC_CHUNK < TEC_N ? begin + TEC_CHUNK : TEC_N;
  for (i64 i = begin + 8 * (i64)threadIdx.x; i < end; i += 16 * (i64)TEC_ROW_THREADS) {
    const i64 next = i + 8 * (i64)TEC_ROW_THREADS;
    float v[8], w[8];
    tec_produce8(args, row, i, v);
    if (next < end) tec_produce8(args, row, next, w);
    use(i, v);
    if (next < end) use(next, w);
  }
#endif
}

template <typename T>
__device__ __forceinline__ void tec_store8(T* out, const T (&c)[8]) {
  if constexpr (sizeof(T) == 1) {
    *(uint2*)out = make_uint2(c[0] | c[1] << 8 | c[2] << 16 | (u32)c[3] << 24, c[4] | c[5] << 8 | c[6] << 16 | (u32)c[7] << 24);
  } else if constexpr (sizeof(T) == 2) {
    *(uint4*)out = make_uint4(c[0] | (u32)c[1] << 16, c[2] | (u32)c[3] << 16, c[4] | (u32)c[5] << 16, c[6] | (u32)c[7] << 16);
  } else {
    ((float4*)out)[0] = make_float4(c[0], c[1], c[2], c[3]);
    ((float4*)out)[1] = make_float4(c[4], c[5], c[6], c[7]);
  }
}
#endif

// Calls use(i, v) for every element of this thread's part of the row (vectors where they fit).
template <typename Use>
__device__ __forceinline__ void tec_for_each(const TecArgs& args, const TecRow& row, Use use) {
#if TEC_VECTOR
  if (tec_vector_aligned(args)) {
    tec_for_row8(args, row, [&](i64 i, const float (&v)[8]) {
#pragma unroll
      for (int k = 0; k < 8; ++k) use(i + k, v[k]);
    });
    return;
  }
#endif
  tec_for_row(args, row, use);
}

// Stores encode(v) of every element of this thread's part of the row at out[r * TEC_N + i].
template <typename T, typename Encode>
__device__ __forceinline__ void tec_store_row(const TecArgs& args, const TecRow& row, T* out, Encode encode) {
#if TEC_VECTOR
  if (tec_vector_aligned(args)) {
    tec_for_row8(args, row, [&](i64 i, const float (&v)[8]) {
      T c[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) c[k] = encode(v[k]);
      tec_store8(out + row.r * TEC_N + i, c);
    });
    return;
  }
#endif
  tec_for_row(args, row, [&](i64 i, float v) { out[row.r * TEC_N + i] = encode(v); });
}

// The verified fast SiLU (silu and swiglu over bf16 rows, vector path). The exact tec_silu
// costs ~50 instructions an element (tec_exp's polynomial, an IEEE division, no FMAs), which
// made these kernels instruction-bound: the Llama layer's swiglu at 8192 x 28672 took 587 us
// under fp8-current (an amax pass and a cast pass) against ~350 us for its bytes, on the H100.
// The fast path computes each element with ex2.approx and rcp.approx instead, and recomputes
// it exactly only where that could change a stored bit:
// - a store rounds to the same bf16 or FP8 code unless the value lies near a midpoint between
//   two codes, which the fast value shows (tec_near_bf16_midpoint, tec_near_fp8_midpoint);
// - an amax is the exact value of one element, and only an element whose fast |value| comes
//   near the largest fast value can be it (tec_mark_amax_candidates).
// Both need a bound on the fast value's error. For every bf16 x with |x| <= 16 and |silu(x)| >=
// 2^-100 (26370 of them), |tec_fast_silu(x) - tec_silu(x)| <= 1e-6 |tec_silu(x)| (tests/gpu's
// silu_bound_test checks all; 8.2e-7 on the H100, at x = -13.69); the products with the gate
// and the scale add 2^-24 on each side: 1.25e-6 in all, 21 units of the last fp32 bit at most.
// The windows below are 12x (bf16) and 24x (FP8) that, the amax's 2^-14 24x. Elements outside
// the bound (|x| > 16, NaN, results below 2^-100 or above 2^100) are always recomputed. So
// every stored bit is the exact path's, which the bit-for-bit tests against the CPU reference
// check (tests/gpu/silu_fast_path.json takes x to +-100).
#if (TEC_PRODUCER == TEC_ROW_ACTIVATION || TEC_PRODUCER == TEC_ROW_GATED) && defined(TEC_ACT) && TEC_ACT == 4 && TEC_IN_DTYPE == 0 && TEC_VECTOR && \
    (TEC_OUT == 0 || ((TEC_OUT == 10 || TEC_OUT == 14) && TEC_PASS == 1) || (TEC_OUT == 10 && TEC_PASS == 2) || TEC_OUT == 11)
#define TEC_FAST_SILU 1
#else
#define TEC_FAST_SILU 0
#endif

#if TEC_FAST_SILU

// Whether a fast value v might round to another bf16 than the exact one: its low 16 bits
// within 256 units of the midpoint 0x8000.
__device__ __forceinline__ bool tec_near_bf16_midpoint(float v) {
  const int low = (int)(__float_as_uint(v) & 0xFFFFu);
  return abs(low - 0x8000) <= 256;
}

// The same for an FP8 code of y = v * scale: below the smallest normal, the codes are a grid
// of spacing 2^-9 (E4M3) or 2^-16 (E5M2), whose midpoints the fraction shows; above it, the
// bits below the 3 (2) mantissa bits within 512 units of their midpoint.
__device__ __forceinline__ bool tec_near_fp8_midpoint(float y) {
#if TEC_FP8_E4M3
  const float min_normal = 0.015625f, grid = 512.0f;
  const unsigned low_mask = (1u << 20) - 1u, midpoint = 1u << 19;
#else
  const float min_normal = 6.103515625e-05f, grid = 65536.0f;
  const unsigned low_mask = (1u << 21) - 1u, midpoint = 1u << 20;
#endif
  const float u = fabsf(y);
  if (u < min_normal) {
    const float t = u * grid;  // < 8 (4): exact scaling
    return fabsf(t - floorf(t) - 0.5f) <= 0.0009765625f;
  }
  return abs((int)(__float_as_uint(u) & low_mask) - (int)midpoint) <= 512;
}

// A group of 8 consecutive elements by the fast path: the values, the inputs, and the mask of
// those to recompute.
struct TecFastGroup {
  float v[8], x[8], y[8];
  unsigned exact;
};

// The 8 bf16 elements of slot 0 at element offset `offset`, as loaded.
__device__ __forceinline__ uint4 tec_raw8(const TecArgs& args, i64 offset) { return ((const uint4*)args.slot[0])[offset / 8]; }

// A group from its loaded bytes: x (and the gate y of swiglu).
__device__ __forceinline__ void tec_fast_silu_group(uint4 raw_x, uint4 raw_y, TecFastGroup& g) {
  tec_unpack_bf16x8(raw_x, g.x);
#if TEC_PRODUCER == TEC_ROW_GATED
  tec_unpack_bf16x8(raw_y, g.y);
#else
  (void)raw_y;
#endif
  g.exact = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
#if TEC_PRODUCER == TEC_ROW_GATED
    g.v[k] = tec_fast_silu(g.x[k]) * g.y[k];
#else
    g.y[k] = 0.0f;
    g.v[k] = tec_fast_silu(g.x[k]);
#endif
    const float a = fabsf(g.v[k]);
    // NaN fails every comparison, so it is recomputed too.
    if (!(fabsf(g.x[k]) <= 16.0f && a >= 7.88860905e-31f && a <= 1.26765060e30f)) g.exact |= 1u << k;
  }
}

// Marks the elements that may hold the amax: trusted fast values within 2^-14 of the largest
// trusted one the warp has seen so far, this group included. The element holding the exact
// maximum is always marked (its fast value is at least (1 - d) times it, every fast value so
// far at most (1 + d) times it, d < 2^-19), and the warp-wide maximum leaves about one mark per
// warp and row, where a thread's own running maximum marked every new record among its elements.
__device__ __forceinline__ void tec_mark_amax_candidates(TecFastGroup& g, float& running) {
  float group_max = 0.0f;
#pragma unroll
  for (int k = 0; k < 8; ++k)
    if (!(g.exact >> k & 1u)) group_max = fmaxf(group_max, fabsf(g.v[k]));
  // Non-negative floats order as their bits do. Every lane of the warp comes here.
  unsigned bits = __float_as_uint(group_max);
#if __CUDA_ARCH__ >= 800
  bits = __reduce_max_sync(0xFFFFFFFFu, bits);
#else
  for (int offset = 16; offset > 0; offset /= 2) bits = max(bits, __shfl_xor_sync(0xFFFFFFFFu, bits, offset));
#endif
  running = fmaxf(running, __uint_as_float(bits));
  const float threshold = running * 0.99993896484375f;
#pragma unroll
  for (int k = 0; k < 8; ++k)
    if (!(g.exact >> k & 1u) && fabsf(g.v[k]) >= threshold) g.exact |= 1u << k;
}

// Recomputes the marked elements exactly, one at a time (a warp loops as often as its most
// marked lane needs), and returns the largest exact |value| among them.
__device__ __forceinline__ float tec_recompute_marked(TecFastGroup& g) {
  float exact_max = 0.0f;
  unsigned mask = g.exact;
  while (mask) {
    const int k = __ffs(mask) - 1;
    mask &= mask - 1u;
    float x = g.x[0], y = g.y[0];
#pragma unroll
    for (int j = 1; j < 8; ++j)
      if (j == k) x = g.x[j], y = g.y[j];
    const float v = tec_elementwise(x, y);
    exact_max = fmaxf(exact_max, fabsf(v));
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (j == k) g.v[j] = v;
  }
  return exact_max;
}

// The row's part of this thread by the fast path: stores encode(v) when kStore, and
// returns the exact amax of its elements when kAmax. `ambiguous(v)` says whether a fast value
// might encode differently from the exact one. A trip loads TEC_FAST_GROUPS groups of 8 before
// it computes any: these kernels are bound by the bytes in flight, and the row kernels' blocks
// are short (a row of 14336 is 7 groups a thread). Every thread makes the same trips (the
// warp-wide maximum needs all lanes).
#ifndef TEC_FAST_GROUPS
#define TEC_FAST_GROUPS 4
#endif
template <bool kAmax, bool kStore, typename T, typename Encode, typename Ambiguous>
__device__ __forceinline__ float tec_fast_silu_row(const TecArgs& args, const TecRow& row, T* out, Encode encode, Ambiguous ambiguous) {
  const i64 begin = (i64)blockIdx.y * TEC_CHUNK;
  const i64 end = begin + TEC_CHUNK < TEC_N ? begin + TEC_CHUNK : TEC_N;
#if TEC_PRODUCER == TEC_ROW_GATED
  const i64 x_row = row.r * 2 * TEC_N, y_row = x_row + TEC_N;
#else
  const i64 x_row = row.r * TEC_N, y_row = x_row;
#endif
  float running = 0.0f, amax = 0.0f;
  for (i64 base = begin; base < end; base += TEC_FAST_GROUPS * 8 * (i64)TEC_ROW_THREADS) {
    uint4 raw_x[TEC_FAST_GROUPS], raw_y[TEC_FAST_GROUPS];
#pragma unroll
    for (int h = 0; h < TEC_FAST_GROUPS; ++h) {
      const i64 at = base + 8 * ((i64)threadIdx.x + (i64)h * TEC_ROW_THREADS);
      raw_x[h] = raw_y[h] = make_uint4(0, 0, 0, 0);
      if (at < end) {
        raw_x[h] = tec_raw8(args, x_row + at);
        if (TEC_PRODUCER == TEC_ROW_GATED) raw_y[h] = tec_raw8(args, y_row + at);
      }
    }
#pragma unroll
    for (int h = 0; h < TEC_FAST_GROUPS; ++h) {
      const i64 at = base + 8 * ((i64)threadIdx.x + (i64)h * TEC_ROW_THREADS);
      TecFastGroup g;
      tec_fast_silu_group(raw_x[h], raw_y[h], g);
      if (at >= end) g.exact = 0;  // zeros: no marks, nothing stored, but in the warp's maximum
      if (kAmax) tec_mark_amax_candidates(g, running);
      if (at >= end) continue;
      if (kStore) {
#pragma unroll
        for (int k = 0; k < 8; ++k)
          if (ambiguous(g.v[k])) g.exact |= 1u << k;
      }
      amax = fmaxf(amax, tec_recompute_marked(g));
      if (kStore) {
        T c[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) c[k] = encode(g.v[k]);
        tec_store8(out + row.r * TEC_N + at, c);
      }
    }
  }
  return amax;
}
#endif

extern "C" __global__ void __launch_bounds__(TEC_ROW_THREADS) tec_row(TecArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();  // the input may be the previous kernel's output, the output a buffer it reads
  __shared__ float scratch[TEC_WARPS];
  TecRow row;
  row.r = blockIdx.x;
  row.rows = (i64)args.slot[7];
  row.mean = 0.0f;
  row.rsigma = 1.0f;
  row.staged = nullptr;
  row.mean_g = row.mean_gx = 0.0f;
  const int t = threadIdx.x;
#if TEC_PRODUCER == TEC_ROW_LAYERNORM || TEC_PRODUCER == TEC_ROW_RMSNORM || TEC_PRODUCER == TEC_ROW_L2NORM
  {
    const void* in0 = (const void*)args.slot[0];
#if TEC_STAGED
    __shared__ __align__(16) float staged[TEC_N];
    if (TEC_IN_DTYPE == 0 && TEC_N % 8 == 0) {
      const uint4* src = (const uint4*)((const u16*)in0 + row.r * TEC_N);  // rows are 16-byte aligned: N % 8 == 0
      for (i64 j = t; j < TEC_N / 8; j += TEC_ROW_THREADS) {
        float x[8];
        tec_unpack_bf16x8(src[j], x);
        // 16-byte stores: 8 scalar ones at a stride of 8 floats were 8-way bank conflicts.
        ((float4*)staged)[2 * j] = make_float4(x[0], x[1], x[2], x[3]);
        ((float4*)staged)[2 * j + 1] = make_float4(x[4], x[5], x[6], x[7]);
      }
    } else {
      for (i64 i = t; i < TEC_N; i += TEC_ROW_THREADS) staged[i] = tec_load<TEC_IN_DTYPE>(in0, row.r * TEC_N + i);
    }
    __syncthreads();
    row.staged = staged;
#define TEC_X(i) staged[i]
#else
#define TEC_X(i) tec_load<TEC_IN_DTYPE>(in0, row.r * TEC_N + (i))
#endif
    float local = 0.0f;
#if TEC_PRODUCER == TEC_ROW_LAYERNORM
    for (i64 i = t; i < TEC_N; i += TEC_ROW_THREADS) local += TEC_X(i);
    row.mean = tec_block_sum(local, scratch) / (float)TEC_N;
#endif
    local = 0.0f;
    for (i64 i = t; i < TEC_N; i += TEC_ROW_THREADS) {
      const float d = TEC_X(i) - row.mean;
      local += d * d;
    }
#undef TEC_X
    const float var = tec_block_sum(local, scratch);
#if TEC_PRODUCER == TEC_ROW_L2NORM
    row.rsigma = 1.0f / sqrtf(var + TEC_EPS);  // l2norm: the sum itself, not its mean
#else
    row.rsigma = 1.0f / sqrtf(var / (float)TEC_N + TEC_EPS);
#endif
#if TEC_SAVE_STATS
    if (t == 0) {
#if TEC_PRODUCER == TEC_ROW_LAYERNORM
      ((float*)args.slot[10])[row.r] = row.mean;
#endif
      ((float*)args.slot[11])[row.r] = row.rsigma;
    }
#endif
  }
#endif

#if TEC_PRODUCER == TEC_ROW_ROPE
  // rope: the row's cos and sin per pair, once, shared by its heads (in double, they would cost
  // more than the row's memory traffic if every element made its own).
  __shared__ float rope_angles[TEC_ROPE_ROTARY];
  {
    const i64 position = TEC_ROPE_SBHD ? row.r / TEC_ROPE_INNER : row.r % TEC_ROPE_INNER;
    for (i64 pair = t; pair < TEC_ROPE_ROTARY / 2; pair += TEC_ROW_THREADS)
      tec_rope_cos_sin(position, tec_rope_inv_frequency[pair], &rope_angles[2 * pair], &rope_angles[2 * pair + 1]);
    __syncthreads();
    row.staged = rope_angles;
  }
#endif

#if TEC_PRODUCER == TEC_ROW_NORM_BACKWARD
  {
    // The row sums of g and g xhat in tec_row_sum_order, as backward_reference_norm adds them.
#if TEC_HAS_MEAN
    row.mean = ((const float*)args.slot[8])[row.r];
#endif
    row.rsigma = ((const float*)args.slot[9])[row.r];
    const void* x = (const void*)args.slot[0];
    const void* gamma = (const void*)args.slot[1];
    const void* dy = (const void*)args.slot[2];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (i64 i = t; i < TEC_N; i += TEC_ROW_THREADS) {
      const float xhat = (tec_load<TEC_IN_DTYPE>(x, row.r * TEC_N + i) - row.mean) * row.rsigma;
      const float g = tec_load<TEC_PARAM_DTYPE>(dy, row.r * TEC_N + i) * (tec_load<TEC_PARAM_DTYPE>(gamma, i) + TEC_GAMMA_OFFSET);
      sum_g += g;
      sum_gx += g * xhat;
    }
#if TEC_HAS_MEAN
    row.mean_g = tec_block_sum(sum_g, scratch) / (float)TEC_N;
#else
    row.mean_g = 0.0f;
#endif
    row.mean_gx = tec_block_sum(sum_gx, scratch) / (float)TEC_N;
  }
#endif


#if TEC_OUT == 0 && TEC_OUT_MID_M_TILES
  tec_for_row(args, row, [&](i64 i, float v) {
    ((u16*)args.slot[3])[tec_mid_m_tiled_offset(row.r, 2 * i, 2 * TEC_N) / 2] = tec_float_to_bf16(v);
  });
#elif TEC_OUT == 0
#if TEC_FAST_SILU
  if (tec_vector_aligned(args)) {
    tec_fast_silu_row<false, true>(args, row, (u16*)args.slot[3], [](float v) { return tec_float_to_bf16(v); }, tec_near_bf16_midpoint);
    return;
  }
#endif
  tec_store_row(args, row, (u16*)args.slot[3], [](float v) { return tec_float_to_bf16(v); });
#elif TEC_OUT == 1
  tec_store_row(args, row, (u16*)args.slot[3], [](float v) { return tec_float_to_fp16(v); });
#elif TEC_OUT == 2
  tec_store_row(args, row, (float*)args.slot[3], [](float v) { return v; });

#elif (TEC_OUT == 10 || TEC_OUT == 14) && TEC_PASS == 1
  float local = 0.0f;
#if TEC_FAST_SILU
  if (tec_vector_aligned(args))
    local = tec_fast_silu_row<true, false>(args, row, (u8*)nullptr, [](float) { return (u8)0; }, [](float) { return false; });
  else
#endif
    tec_for_each(args, row, [&](i64, float v) { local = fmaxf(local, fabsf(v)); });
  const float amax = tec_block_max(local, scratch);
#if TEC_AMAX_PARTIALS
  if (t == 0) ((float*)args.slot[5])[blockIdx.x * gridDim.y + blockIdx.y] = amax;
#else
  if (t == 0) tec_atomic_amax((float*)args.slot[5] + TEC_MEMBER(row.r), amax);
#endif

#elif TEC_OUT == 10 || TEC_OUT == 11
#if TEC_OUT == 10
#if TEC_AMAX_PARTIALS
  float partials_max = 0.0f;
  for (int i = t; i < TEC_AMAX_PARTIALS; i += TEC_ROW_THREADS) partials_max = fmaxf(partials_max, ((const float*)args.slot[5])[i]);
  const float tensor_amax = tec_block_max(partials_max, scratch);
#else
  const float tensor_amax = ((const float*)args.slot[5])[TEC_MEMBER(row.r)];
#endif
  const float scale = tec_scale_from_amax_value(tensor_amax, TEC_FP8_MAX, TEC_POW2_SCALES, TEC_AMAX_EPSILON, 3.402823466e38f);
#else
  const float scale = ((const float*)args.slot[6])[TEC_MEMBER(row.r)];
  float local = 0.0f;
#endif
#if TEC_FAST_SILU
  if (tec_vector_aligned(args)) {
    const float exact_amax = tec_fast_silu_row<TEC_OUT == 11, true>(
        args, row, (u8*)args.slot[3], [&](float v) { return tec_encode(v * scale); }, [&](float v) { return tec_near_fp8_midpoint(v * scale); });
#if TEC_OUT == 11
    local = exact_amax;
#else
    (void)exact_amax;
#endif
  } else
#endif
  tec_store_row(args, row, (u8*)args.slot[3], [&](float v) {
#if TEC_OUT == 11
    local = fmaxf(local, fabsf(v));
#endif
    return tec_encode(v * scale);
  });
#if TEC_OUT == 11
  const float amax = tec_block_max(local, scratch);
  if (t == 0) tec_atomic_amax((float*)args.slot[5] + TEC_MEMBER(row.r), amax);  // history row 0: one column per member
#endif
  if (TEC_MEMBER_FIRST_ROW(row.r) && blockIdx.y == 0 && t == 0) ((float*)args.slot[4])[TEC_MEMBER(row.r)] = __fdiv_rn(1.0f, scale);

#elif TEC_OUT == 15
  tec_store_row(args, row, (u8*)args.slot[3], [](float v) { return tec_encode(__fdiv_rn(v, TEC_STATIC_SCALE_INV)); });
  if (row.r == 0 && blockIdx.y == 0 && t == 0) *(float*)args.slot[4] = TEC_STATIC_SCALE_INV;

#elif TEC_OUT == 12
  // 1x128 blocks: a warp per block, 4 elements per lane; scales M-major [K/128][roundup(M, 4)].
  const int lane = t & 31;
  const i64 blocks = (TEC_N + 127) / 128, padded_rows = (row.rows + 3) / 4 * 4;
  for (i64 b = t / 32; b < blocks; b += TEC_WARPS) {
    float v[4];
    float local = 0.0f;
    for (int j = 0; j < 4; ++j) {
      const i64 c = b * 128 + lane + 32 * j;
      v[j] = c < TEC_N ? tec_produce(args, row, c) : 0.0f;
      local = fmaxf(local, fabsf(v[j]));
    }
    for (int offset = 16; offset > 0; offset /= 2) local = fmaxf(local, __shfl_xor_sync(0xFFFFFFFFu, local, offset));
    const float scale = tec_scale_from_amax_value(local, TEC_FP8_MAX, TEC_POW2_SCALES, TEC_AMAX_EPSILON, TEC_OVERFLOW);
    for (int j = 0; j < 4; ++j) {
      const i64 c = b * 128 + lane + 32 * j;
      if (c < TEC_N) ((u8*)args.slot[3])[row.r * TEC_N + c] = tec_encode(v[j] * scale);
    }
    if (lane == 0) ((float*)args.slot[4])[b * padded_rows + row.r] = __fdiv_rn(1.0f, scale);
  }

#elif TEC_OUT == 13
  // MXFP8: a warp per 32-element block; E8M0 scales [roundup(M, 128)][roundup(K/32, 4)].
  const int lane = t & 31;
  for (i64 b = t / 32; b < TEC_N / 32; b += TEC_WARPS) {
    const float v = tec_produce(args, row, b * 32 + lane);
    float local = fabsf(v);
    for (int offset = 16; offset > 0; offset /= 2) local = fmaxf(local, __shfl_xor_sync(0xFFFFFFFFu, local, offset));
    const u8 e = tec_mxfp8_exponent(local, TEC_FP8_MAX);
    ((u8*)args.slot[3])[row.r * TEC_N + b * 32 + lane] = tec_encode(v * tec_mxfp8_multiplier(e));
    if (lane == 0) ((u8*)args.slot[4])[row.r * ((TEC_N / 32 + 3) / 4 * 4) + b] = e;
  }

#elif TEC_OUT == 14
  // NVFP4 cast pass: 16 lanes per 1x16 block; the global encode scale from the tensor's amax.
  const float s_enc = tec_nvfp4_encode_scale(*(const float*)args.slot[5]);
  const float s_dec = __fdiv_rn(1.0f, s_enc);
  // Whole warps run every iteration (the shuffles need all 32 lanes); TEC_N % 16 == 0, so a
  // block of 16 is either all valid or all padding.
  for (i64 base = 0; base < TEC_N; base += TEC_ROW_THREADS) {
    const i64 c = base + t;
    const bool valid = c < TEC_N;
    const float v = valid ? tec_produce(args, row, c) : 0.0f;
    float local = fabsf(v);
    for (int offset = 8; offset > 0; offset /= 2) local = fmaxf(local, __shfl_xor_sync(0xFFFFFFFFu, local, offset));
    float multiplier;
    const u8 s_b = tec_nvfp4_block_scale(local, s_enc, s_dec, multiplier);
    const u8 code = tec_float_to_e2m1(v * multiplier);
    const u8 odd = (u8)__shfl_down_sync(0xFFFFFFFFu, (u32)code, 1);
    if (valid && (c & 1) == 0) ((u8*)args.slot[3])[row.r * (TEC_N / 2) + c / 2] = (u8)(code | (odd << 4));
    if (valid && (c & 15) == 0) ((u8*)args.slot[4])[row.r * ((TEC_N / 16 + 3) / 4 * 4) + c / 16] = s_b;
  }
#endif
}
