// The general path: how an op that no row producer or codegen module of its own takes runs on
// any shape, as strided loops. Its OpDef describes the loops (OpDef::general); the GPU runs
// them with kernels/general.cu (src/codegen/general.cpp) and the CPU reference with
// src/ops/general_reference.cpp, both in the same order, so the two agree bit for bit:
// - map: out[i] = f(a[...], b[...], c[...]) over the output's dims, each input read through its
//   own strides (0 along a broadcast dim); f is a TEC_MAP_* code of kernels/tec_math.h.
// - copies: elements moved, not computed (slice, concat, expand): each copy reads one input
//   over a region of the output (or writes zeros there), in order.
// - softmax: rows of `n` elements `inner` apart; each row's max, then the sum of exp(x - max)
//   in a 256-thread block's order (tec_row_sum_order), then exp(x - max) / sum.
// - reduce: one output per kept index; its reduced elements in row-major order of the reduced
//   dims, summed in a block's order (sum, mean) or maxed.
// - matmul: out[b, m, n] = sum over k, in order, of a[b, m, k] x b[b, k, n], in fp32 without
//   fused multiply-add; the batch dims broadcast through each operand's batch strides.
// - gather: data viewed as [m, D_1 .. D_k, inner], indices as [n, k] (int32, negative from the
//   end): out[o, j, i] = data[o, indices[j, 0 .. k), i]. ONNX Gather (k = 1) and GatherND. An
//   index out of range is hostile input: the reference stops naming it, the GPU writes 0 and
//   sets the session's status bit TEC_STATUS_BAD_INDEX.
// - scatter_add: gather's gradient, over gather's plan: out[o, d, i] = the sum, in the order of
//   j, of g[o, j, i] over the index tuples j that pick d (0 where none does). An index out of
//   range picks nothing (the forward gather reported it).
#pragma once

#include <cstdint>
#include <vector>

namespace tec {

enum class GeneralKernel : uint8_t { map, copies, softmax, reduce, matmul, gather, scatter_add };

// The most dims a general loop walks after adjacent dims are merged (general_loops.h); more
// is refused when the op is defined, naming the node.
inline constexpr size_t kGeneralMaxRank = 6;

// StridedCopy::input of a copy that writes zeros and reads nothing (the region a gradient's
// scatter leaves untouched: unslice).
inline constexpr int kZeroFill = -1;

// Input `input` read over a region of the output: element at region coordinate c is
// in[in_offset + sum c_d in_strides_d], written to out[out_offset + sum c_d out_strides_d].
struct StridedCopy {
  int input = 0;
  std::vector<int64_t> dims;
  int64_t in_offset = 0, out_offset = 0;
  std::vector<int64_t> in_strides, out_strides;
};

struct GeneralPlan {
  GeneralKernel kernel = GeneralKernel::map;
  std::vector<int64_t> out_dims;  // the output's shape
  int code = 0;  // map: TEC_MAP_*; reduce: TEC_REDUCE_* (kernels/tec_math.h)
  // map: the output's dims, and each input's strides along them. reduce: the kept dims (the
  // output's, row-major) with the input's strides along them, and the reduced ones.
  // matmul: the batch dims, with each operand's batch strides (elements). gather, scatter_add:
  // D_1 .. D_k.
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> strides;
  std::vector<int64_t> reduced_dims, reduced_strides;
  std::vector<StridedCopy> copies;
  int64_t rows = 0, n = 0, inner = 1;  // softmax (gather, scatter_add: n indices, inner)
  int64_t m = 0, k = 0;                // matmul (n above); gather, scatter_add: m outer rows, k index depth
};

}  // namespace tec
