// Helpers shared by the op families, and the registry of built-in ops.
#pragma once

#include "ir/op_registry.h"

namespace tec {

// The registry holding every built-in op; built once, thread-safe.
const OpRegistry& builtin_ops();

// One function per op family file.
void register_linear_ops(OpRegistry& registry);
void register_activation_ops(OpRegistry& registry);
void register_norm_ops(OpRegistry& registry);
void register_elementwise_ops(OpRegistry& registry);
void register_quantize_ops(OpRegistry& registry);
void register_shape_ops(OpRegistry& registry);
void register_tensor_math_ops(OpRegistry& registry);
void register_optimizer_ops(OpRegistry& registry);
void register_moe_ops(OpRegistry& registry);
void register_embedding_ops(OpRegistry& registry);
void register_sequence_lengths_ops(OpRegistry& registry);
void register_attention_ops(OpRegistry& registry);
void register_collective_ops(OpRegistry& registry);
void register_softmax_ops(OpRegistry& registry);
void register_compare_ops(OpRegistry& registry);
void register_view_ops(OpRegistry& registry);
void register_gradient_ops(OpRegistry& registry);

// A high-precision tensor of the same shape and nominal dtype (drops any quantizer).
TensorProto dense_like(const TensorProto& proto);
// A per-row FP32 statistic of x's [M, K] view (mean, rsigma): shape [M].
TensorProto row_stat(const TensorProto& x);
// A saved tensor that is input `slot` itself.
SavedTensor save_input(const InferContext& ctx, int slot, std::string name);
// Gradients shaped like every forward input.
std::vector<std::optional<TensorProto>> grads_like_inputs(const BackwardContext& ctx);
// Reads of every saved tensor with rowwise usage (elementwise backward kernels).
std::vector<BackwardInfo::SavedRead> read_all_saved(const BackwardContext& ctx);
// The forward reference of ops that move no values (identity, reshape, casts: the executor
// dequantizes inputs and quantizes outputs).
std::vector<HostTensor> identity_reference(const Attributes& attrs, const std::vector<HostTensor>& in);
// The backward of an op whose gradient kernel reads every saved tensor rowwise and the
// output gradients (norms, activations, scale, bias, dropout, reshape).
BackwardResult elementwise_backward(const BackwardContext& ctx);
// The backward of an op whose gradient reaches its inputs unchanged (OpDef::gradient_passes_through).
BackwardResult passthrough_backward(const BackwardContext& ctx);

// A value as an error message shows it: an integer without decimals, else %g.
std::string value_text(float value);
// Row-major element `index` of `shape` as "i, j, k".
std::string index_text(const Shape& shape, size_t index);

// numpy / ONNX multidirectional broadcasting: the result shape, or nullopt when the shapes
// do not broadcast.
std::optional<Shape> broadcast_shape(const Shape& a, const Shape& b);
// The same, or a user error naming both shapes where they do not broadcast.
Shape broadcast_shape_checked(const Shape& a, const Shape& b, const ErrorContext& ctx);
// For each element of `out` (row-major), the index of the element of `in` it reads when `in`
// is broadcast to `out`.
std::vector<size_t> broadcast_index(const Shape& in, const Shape& out);

// The general ops' function codes in kernels/tec_math.h (TEC_BINARY_*, TEC_UNARY_*) from their
// `fn` attribute, for the lowering.
int binary_function_code(const std::string& fn);
int unary_function_code(const std::string& fn);
// rope's theta^(-2i / rotary_dim) for each pair i, in double: the reference and the GPU kernel
// (which gets them as literals) turn position x this by tec_rope_cos_sin (kernels/tec_math.h).
std::vector<double> rope_inverse_frequencies(const Attributes& attrs);

void require_rank_at_least(const InferContext& ctx, int slot, size_t rank);
void require_last_dim(const InferContext& ctx, int slot, int64_t expected, const char* what);
void require_high_precision(const InferContext& ctx, int slot);

}  // namespace tec
