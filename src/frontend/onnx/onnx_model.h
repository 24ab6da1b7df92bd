// An ONNX ModelProto read into plain structs: the one place that touches protobuf and the
// ONNX headers (ARCHITECTURE.md §2). Everything here is validated on the way in: IR version,
// opset, dims, tensor sizes against their data, external-data paths (which must stay inside
// the model's folder). Nothing past this header sees protobuf.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tec::onnx {

// onnx.TensorProto.DataType values tec reads.
enum ElemType : int32_t {
  kFloat = 1, kUint8 = 2, kInt8 = 3, kUint16 = 4, kInt16 = 5, kInt32 = 6, kInt64 = 7, kString = 8,
  kBool = 9, kFloat16 = 10, kDouble = 11, kUint32 = 12, kUint64 = 13, kBfloat16 = 16,
  kFloat8E4M3FN = 17, kFloat8E4M3FNUZ = 18, kFloat8E5M2 = 19, kFloat8E5M2FNUZ = 20,
  kFloat4E2M1 = 23, kFloat8E8M0 = 24,
};
std::string elem_type_name(int32_t type);  // "FLOAT", "FLOAT8E4M3FN", "type 99"
bool is_float_type(int32_t type);           // decoded into OnnxTensor::floats

// The IR versions and default-domain opsets tec knows the semantics of.
inline constexpr int64_t kMinIrVersion = 7, kMaxIrVersion = 14;
inline constexpr int64_t kMinOpset = 13, kMaxOpset = 28;

// A constant: an initializer, a Constant node's value, or a folded result. Float element
// types (FLOAT, FLOAT16, BFLOAT16, DOUBLE, FLOAT8*) are decoded into `floats`; integer and
// bool types into `ints`.
struct Tensor {
  int32_t elem_type = kFloat;
  std::vector<int64_t> dims;
  std::vector<float> floats;
  std::vector<int64_t> ints;

  bool is_float() const { return is_float_type(elem_type); }
  int64_t numel() const;
  double at(size_t i) const { return is_float() ? floats.at(i) : static_cast<double>(ints.at(i)); }
};

struct Dim {
  int64_t value = -1;  // >= 1 when fixed
  std::string param;   // the symbolic name, when not fixed
};

struct ValueInfo {
  std::string name;
  int32_t elem_type = 0;
  bool has_shape = false;
  std::vector<Dim> dims;
};

struct Attribute {
  enum class Type : uint8_t { float_, int_, string_, tensor, floats, ints, other } type = Type::other;
  float f = 0;
  int64_t i = 0;
  std::string s;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::optional<Tensor> t;
};

struct Node {
  int index = 0;         // position in the file
  std::string name;      // never empty: "<op_type>_<index>" when the file has none
  std::string op_type;
  std::string domain;    // "" for the default domain (also when the file says "ai.onnx")
  std::vector<std::string> inputs;   // "" marks a missing optional input
  std::vector<std::string> outputs;
  std::map<std::string, Attribute> attrs;
};

struct Model {
  std::string file;      // for error locations
  int64_t ir_version = 0;
  int64_t opset = 0;     // of the default domain
  std::string graph_name, producer;
  std::vector<ValueInfo> inputs;   // run-time inputs (initializers listed as inputs excluded)
  std::vector<ValueInfo> outputs;
  std::map<std::string, Tensor> initializers;
  std::vector<Node> nodes;  // in file order
};

// Limits on what a model may declare, checked before anything is allocated for it.
inline constexpr size_t kMaxNodes = 1 << 20;
// protobuf parses at most 2 GiB; larger weights go in external data files.
inline constexpr uint64_t kMaxModelBytes = uint64_t{2} << 30;
inline constexpr size_t kMaxRank = 8;

// Reads and validates a model. `base_dir` resolves external data (relative paths inside
// it only). Throws Error(io) when a file cannot be read, Error(invalid_input) for a
// malformed model, Error(unsupported) for a valid one tec cannot read (a future opset).
Model read_model_file(const std::string& path);
Model parse_model(const uint8_t* data, size_t size, const std::string& display_name, const std::string& base_dir);

}  // namespace tec::onnx
