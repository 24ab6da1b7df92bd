// The ONNX ops tec claims (docs/onnx.md's table and te-compile --onnx-ops come from here), and
// the first check of the import: every node's op, domain, arity and opset against its claim.
#include <algorithm>

#include "frontend/onnx/onnx_graph.h"
#include "frontend/onnx/onnx_import.h"

namespace tec {

namespace {

// Comparisons and logic on run-time values.
constexpr const char* kComparisonClaim =
    "float, int32 or bool tensors with numpy broadcasting -> a bool (general path); or in attention's padding mask (see GatherND)";

const std::vector<OnnxOpClaim> kClaims = {
    {"MatMul", 13, 2, 2, {}, "float tensors; a constant 2-D B becomes a TE linear, two run-time operands a general matmul (batch "
                     "broadcasting, fp32 accumulation: cuBLASLt GEMMs, strided-batched, where rows are 16-byte aligned, else "
                     "tec's general kernel), or part of attention's spelling"},
    {"Gemm", 13, 2, 3, {}, "float tensors; constant B with transA=0 becomes a linear (alpha and beta folded into the constants); "
                     "other forms run as transpose/matmul/scale/add (the general path)"},
    {"Add", 13, 2, 2, {}, "float tensors; equal shapes become the residual add, a constant over the last dim a bias, other "
                    "broadcasts a general add (a GPU row kernel)"},
    {"Sub", 13, 2, 2, {}, "float tensors, numpy broadcasting (a GPU row kernel, or part of a LayerNorm pattern)"},
    {"Mul", 13, 2, 2, {}, "float tensors; by a constant scalar becomes scale, otherwise numpy broadcasting (a GPU row kernel)"},
    {"Div", 13, 2, 2, {}, "float tensors, numpy broadcasting (a GPU row kernel, or part of a GELU/LayerNorm pattern)"},
    {"Relu", 13, 1, 1, {}, "float tensors"},
    {"Gelu", 20, 1, 1, {}, "approximate 'none' (erf) or 'tanh'"},
    {"Sigmoid", 13, 1, 1, {}, "float tensors (a GPU row kernel; x*sigmoid(x) becomes silu)"},
    {"Tanh", 13, 1, 1, {}, "float tensors (a GPU row kernel, or part of the GELU tanh pattern)"},
    {"Erf", 13, 1, 1, {}, "float tensors (a GPU row kernel, or part of the GELU erf pattern)"},
    {"Sqrt", 13, 1, 1, {}, "float tensors (a GPU row kernel, or part of a norm pattern)"},
    {"Reciprocal", 13, 1, 1, {}, "float tensors (a GPU row kernel, or part of the RMSNorm pattern)"},
    {"Neg", 13, 1, 1, {}, "float tensors (a GPU row kernel)"},
    {"Exp", 13, 1, 1, {}, "float tensors (a GPU row kernel)"},
    {"Log", 13, 1, 1, {}, "float tensors (a GPU row kernel)"},
    {"Abs", 13, 1, 1, {}, "float tensors (a GPU row kernel)"},
    {"Pow", 13, 2, 2, {}, "float tensors, float exponent (a GPU row kernel, or part of a GELU/norm pattern)"},
    {"ReduceMean", 13, 1, 2, {1}, "float tensors; axes constant (general path, or part of a norm pattern)"},
    {"ReduceSum", 13, 1, 2, {1}, "float tensors; axes constant (general path)"},
    {"ReduceMax", 13, 1, 2, {1}, "float tensors; axes constant (an attribute before opset 18, an input from 18) (general path)"},
    {"LayerNormalization", 17, 2, 3, {1, 2}, "Scale and B constant; the Mean and InvStdDev outputs run as general ops"},
    {"RMSNormalization", 23, 2, 2, {1}, "Scale constant"},
    {"Attention", 23, 3, 7, {}, "3-D Q, K, V [batch, seq, heads x head_size] with q_num_heads and kv_num_heads, or 4-D [batch, heads, "
                           "seq, head_size] (MHA, GQA, MQA; self or cross; V's head size may differ), is_causal, scale, a float "
                           "attn_mask (added to the scores). Not yet: a boolean attn_mask, past key/value, nonpad_kv_seqlen, "
                           "softcap, windows, the extra outputs. On the GPU through cuDNN in bf16 or fp16 (an fp32 model's inference "
                           "plan casts q, k and v to bf16 and the output back, the CPU reference alike)"},
    {"Slice", 13, 3, 5, {1, 2, 3, 4}, "starts, ends, axes and steps constant (general path; empty slices refused), or as rotate_half in "
                        "the rotary embedding exporters write for Hugging Face's apply_rotary_pos_emb: x cos + cat(-x[..., D/2:], "
                        "x[..., :D/2]) sin, the cos and sin tables constants of the positions 0..S-1 -> tec's rope"},
    {"Softmax", 13, 1, 1, {}, "float tensors, any axis (general path), or as attention's softmax in the spelling exporters write for "
                         "scaled_dot_product_attention: Softmax(MatMul(q, Transpose(k)) x scale + mask) MatMul v, each scale and "
                         "the mask optional -> tec's attention (a constant causal mask becomes its causal flag)"},
    {"Expand", 13, 2, 2, {1}, "shape constant (general path), or in Hugging Face's repeat_kv before attention's spelling: "
                        "Reshape(Expand(Unsqueeze(k, 2), [B, KVH, n, S, D]), [B, KVH x n, S, D]) -> tec's GQA attention"},
    {"Split", 13, 1, 2, {1}, "split constant, or num_outputs (opset 18), or equal parts (general path: slices), or of a projection's "
                        "output along its features (GPT-2's fused c_attn, a fused gate_up) -> one linear per part"},
    {"Reshape", 13, 2, 2, {1}, "shape constant"},
    {"Flatten", 13, 1, 1, {}, ""},
    {"Transpose", 13, 1, 1, {}, "float tensors (a GPU row kernel)"},
    {"Squeeze", 13, 1, 2, {1}, "axes constant"},
    {"Unsqueeze", 13, 1, 2, {1}, "axes constant"},
    {"Identity", 13, 1, 1, {}, "tensors only"},
    {"Cast", 13, 1, 1, {}, "between FLOAT, FLOAT16 and BFLOAT16 at run time (a GPU row kernel; none at all when the input has "
                     "that type already), to and from BOOL, INT64 and INT32 (general path: integers are int32, toward zero); any "
                     "type in constant subgraphs"},
    {"Constant", 13, 0, 0, {}, ""},
    {"Shape", 13, 1, 1, {}, "folded: tec fixes every shape per profile"},
    {"Cos", 7, 1, 1, {}, "float tensors (a GPU row kernel, through double arithmetic rounded once); a constant one (the rotary "
                     "embedding's tables, made in forward from inv_freq and the positions) folds"},
    {"Sin", 7, 1, 1, {}, "float tensors (see Cos)"},
    {"Trilu", 14, 1, 2, {1}, "k constant; of a constant it folds (Hugging Face's causal mask: triu of -inf, then attention's causal "
                         "flag), of a run-time value it is where(a constant triangle, x, 0) (general path)"},
    {"Range", 11, 3, 3, {0, 1, 2}, "start, limit and delta constant, or computed from shapes (folded: positions 0..S-1); a range "
                                 "of run-time values would have a run-time length"},
    {"Gather", 13, 2, 2, {}, "of a constant 2-D float table along axis 0 at run-time indices (an embedding lookup: token ids, "
                           "an INT64 or INT32 graph input, become int32; an id outside the table is an error at run time) -> "
                           "tec's embedding; any other along any axis (general path, int32 indices, checked at run time); or "
                           "where it computes a constant (shape arithmetic)"},
    {"IsNaN", 9, 1, 1, {}, "float tensors (general path); as the guard transformers' sdpa attention writes after its softmax, "
                         "Where(IsNaN(p), 0, p), it joins the attention"},
    {"ConstantOfShape", 9, 1, 1, {0}, "folded (torch.onnx's expand: the shape of ones it compares against)"},
    {"Equal", 11, 2, 2, {}, kComparisonClaim},
    {"Where", 9, 3, 3, {}, "a bool condition, float, int32 or bool branches (general path); or attention's NaN guard (see IsNaN), or in "
                       "a padding mask (see GatherND)"},
    {"And", 7, 2, 2, {}, kComparisonClaim},
    {"Or", 7, 2, 2, {}, kComparisonClaim},
    {"Xor", 7, 2, 2, {}, kComparisonClaim},
    {"Not", 1, 1, 1, {}, kComparisonClaim},
    {"Less", 9, 2, 2, {}, kComparisonClaim},
    {"LessOrEqual", 12, 2, 2, {}, kComparisonClaim},
    {"Greater", 9, 2, 2, {}, kComparisonClaim},
    {"GreaterOrEqual", 12, 2, 2, {}, kComparisonClaim},
    {"GatherND", 11, 2, 2, {}, "batch_dims 0 (general path, int32 index tuples, checked at run time); or in attention's mask made "
                             "from an INT64/INT32 graph input (transformers' attention_mask): evaluated at right-padded probe masks it "
                             "must be the key padding, with or without the causal triangle, whatever its ops -> the attention's "
                             "sequence lengths (cuDNN's padding mask; the input's rows must be ones, then zeros)"},
    {"Concat", 13, 1, kVariadicInputs, {}, "float, int32 or bool tensors (general path), or as rotate_half in the rotary "
                                             "embedding (see Slice)"},
    {"QuantizeLinear", 13, 2, 3, {1, 2}, "FLOAT8E4M3FN; on a constant (folded), or as a Q->DQ pair on a MatMul/Gemm input, which "
                                   "chooses the recipe: a scalar scale fp8-static (the model's scales kept), block_size 128 "
                                   "fp8-block, block_size 32 with E8M0 scales mxfp8 (scales computed at run time)"},
    {"DequantizeLinear", 13, 2, 3, {1, 2}, "on a constant (stored FP8/INT8 weights: folded, or under fp8-static the FP8 codes and scales "
                                     "kept, per tensor, per output channel or block_size along K), or closing a Q->DQ pair"},
};

const OnnxOpClaim* find_claim(const std::string& op) {
  for (const auto& c : kClaims)
    if (c.op == op) return &c;
  return nullptr;
}

}  // namespace

const std::vector<OnnxOpClaim>& onnx_op_claims() { return kClaims; }

namespace onnx {

bool check_claims(const OnnxGraph& graph, Problems& problems) {
  bool malformed = false;
  for (const Node& n : graph.nodes) {
    // Every stage after this one may read a node's first output, whatever its op or domain.
    if (n.outputs.empty()) {
      problems.add(n, n.op_type + " has no outputs (every ONNX node writes at least one)");
      malformed = true;
      continue;
    }
    if (!n.domain.empty()) {
      problems.add(n, "domain '" + n.domain + "' is not supported (tec reads the default ONNX domain)");
      continue;
    }
    const OnnxOpClaim* claim = find_claim(n.op_type);
    if (!claim) {
      problems.add(n, "op " + n.op_type + " is not supported (te-compile --onnx-ops lists what is)");
      continue;
    }
    // Every later stage indexes inputs and outputs: a node outside its op's arity stops the
    // import here (with the other such nodes, in one error).
    const int inputs = static_cast<int>(n.inputs.size());
    if (inputs < claim->min_inputs || inputs > claim->max_inputs || n.outputs.empty()) {
      const std::string range = claim->max_inputs == kVariadicInputs      ? std::to_string(claim->min_inputs) + " or more"
                                : claim->max_inputs > claim->min_inputs ? std::to_string(claim->min_inputs) + " to " +
                                                                              std::to_string(claim->max_inputs)
                                                                        : std::to_string(claim->min_inputs);
      problems.add(n, n.op_type + " takes " + range + " inputs and at least 1 output, this one has " + std::to_string(inputs) +
                     " and " + std::to_string(n.outputs.size()));
      malformed = true;
      continue;
    }
    if (graph.model.opset < claim->since_opset)
      problems.add(n, n.op_type + " needs opset " + std::to_string(claim->since_opset) + " or newer");
    if ((n.op_type == "QuantizeLinear" || n.op_type == "DequantizeLinear") && graph.model.opset < 21 &&
        n.attrs.count("block_size"))
      problems.add(n, "block_size needs opset 21");
  }
  return malformed;
}

void check_constant_inputs(const OnnxGraph& graph, Problems& problems) {
  for (const Node& n : graph.nodes) {
    const OnnxOpClaim* claim = find_claim(n.op_type);
    if (!claim || !n.domain.empty()) continue;
    for (int slot : claim->constant_inputs) {
      const auto s = static_cast<size_t>(slot);
      if (s < n.inputs.size() && !graph.is_constant(n.inputs[s]))
        problems.add(n, "input " + std::to_string(slot) + " ('" + n.inputs[s] +
                       "') must be a constant (an initializer, or computed from constants) for tec");
    }
  }
}

}  // namespace onnx

}  // namespace tec
