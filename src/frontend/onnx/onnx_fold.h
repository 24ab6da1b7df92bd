// Constant folding for the ONNX importer, and the ONNX shape rules both share. No protobuf:
// this works on the plain structs of onnx_model.h.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "frontend/onnx/onnx_model.h"

namespace tec::onnx {

using TensorPtr = std::shared_ptr<const Tensor>;
using ConstMap = std::map<std::string, TensorPtr>;
// The shape of a run-time value (Shape nodes fold once every shape is fixed per profile).
using ShapeOf = std::function<std::optional<Shape>(const std::string&)>;

// ONNX elementwise op -> the `fn` of tec's binary / unary op.
extern const std::map<std::string, std::string> kBinaryFunctions;
extern const std::map<std::string, std::string> kUnaryFunctions;

// FLOAT, FLOAT16, BFLOAT16 -> tec's dtype; nullopt for the rest.
std::optional<DType> tec_dtype(int32_t elem_type);
// Ops fold() computes when all their inputs are constant (Shape: when its input's shape is known).
bool foldable(const std::string& op);
// Folds one constant node into its outputs. Errors carry no node: callers add it.
std::vector<TensorPtr> fold(const Node& n, const ConstMap& consts, const ShapeOf& shape_of);

int64_t attr_int(const Node& n, const std::string& name, int64_t fallback);
std::optional<std::vector<int64_t>> attr_ints(const Node& n, const std::string& name);
std::string attr_string(const Node& n, const std::string& name, const std::string& fallback);
float attr_float(const Node& n, const std::string& name, float fallback);

std::vector<int64_t> as_ints(const Tensor& t);
// axis in [-rank, rank) -> [0, rank).
int64_t axis_of(int64_t axis, size_t rank, const char* what);
// The dims Reshape produces (0 copies the input dim unless allowzero, one -1 inferred).
std::vector<int64_t> reshape_dims(const std::vector<int64_t>& in, std::vector<int64_t> shape, bool allowzero);
std::vector<int64_t> squeeze_dims(const std::vector<int64_t>& in, const std::optional<std::vector<int64_t>>& axes);
std::vector<int64_t> unsqueeze_dims(const std::vector<int64_t>& in, const std::vector<int64_t>& axes);
std::vector<int64_t> flatten_dims(const std::vector<int64_t>& in, int64_t axis);

}  // namespace tec::onnx
