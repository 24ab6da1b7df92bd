// The ONNX frontend: an ONNX model becomes one tec Graph per shape profile. Constant
// subgraphs (shape arithmetic, Constant, DequantizeLinear of stored weights) are folded;
// exporter patterns become TE ops (MatMul+Add -> linear, decomposed GELU -> gelu,
// x*sigmoid(x) -> silu, the gated MLP -> swiglu, decomposed LayerNorm/RMSNorm -> the norm);
// a Q/DQ pair on a GEMM operand chooses the recipe. Anything else that tec claims maps onto
// its general tensor ops (src/ops/tensor_math.cpp). An unsupported model gets one error that
// lists every offending node.
#pragma once

#include <string>
#include <vector>

#include "frontend/json/graph_json.h"
#include "frontend/onnx/onnx_model.h"

namespace tec {

// What one ONNX node became, for te-compile --report.
struct OnnxNodeReport {
  std::string node, op_type, became;
};

struct OnnxImport {
  std::vector<Graph> graphs;  // one per profile
  std::vector<OnnxNodeReport> nodes;
};

OnnxImport import_onnx(const onnx::Model& model, const FrontendOptions& options);
OnnxImport load_onnx_graphs(const std::string& path, const FrontendOptions& options);

// The ONNX ops tec claims, with the opset each is read from, the inputs that must be
// constant (initializers or folded), and the limits of the claim. docs/onnx.md's op table and the
// backend-test runner (te-compile --onnx-ops) both come from this table.
inline constexpr int kVariadicInputs = 1 << 30;  // OnnxOpClaim::max_inputs of Concat

struct OnnxOpClaim {
  std::string op;
  int since_opset;
  int min_inputs, max_inputs;  // the ONNX spec's arity; checked before anything reads inputs
  std::vector<int> constant_inputs;
  std::string limits;
};
const std::vector<OnnxOpClaim>& onnx_op_claims();

}  // namespace tec
