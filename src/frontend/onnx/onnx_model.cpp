#include "frontend/onnx/onnx_model.h"

#include <onnx/onnx_pb.h>

#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"
#include "core/file_io.h"
#include "core/json_text.h"
#include "reference/convert.h"

namespace tec::onnx {

namespace {

namespace fs = std::filesystem;

ErrorContext at(const std::string& file, const std::string& where, std::string node = "", std::string op = "") {
  return ErrorContext{"onnx", std::move(node), std::move(op), file + (where.empty() ? "" : " " + where)};
}

// Names reach every error line, and the file system through --save-outputs: bounded here.
const std::string& bounded(const std::string& name, const std::string& file, const char* what) {
  TEC_USER_CHECK(name.size() <= kMaxStringBytes, at(file, what, text_excerpt(name)))
      << "a name of " << name.size() << " bytes; names are at most " << kMaxStringBytes;
  return name;
}

// Bytes per element in raw_data; 0 for types tec does not read.
int64_t element_bytes(int32_t type) {
  switch (type) {
    case kFloat: case kInt32: case kUint32: return 4;
    case kUint8: case kInt8: case kBool: case kFloat8E4M3FN: case kFloat8E5M2: return 1;
    case kUint16: case kInt16: case kFloat16: case kBfloat16: return 2;
    case kInt64: case kUint64: case kDouble: return 8;
    default: return 0;
  }
}

float decode_float_bits(int32_t type, uint64_t bits) {
  switch (type) {
    case kFloat16: return fp16_to_float(static_cast<uint16_t>(bits));
    case kBfloat16: return reference::bf16_to_float(static_cast<uint16_t>(bits));
    case kFloat8E4M3FN: return reference::e4m3_to_float(static_cast<uint8_t>(bits));
    case kFloat8E5M2: return reference::e5m2_to_float(static_cast<uint8_t>(bits));
    default: {
      float f;
      const auto u = static_cast<uint32_t>(bits);
      std::memcpy(&f, &u, 4);
      return f;
    }
  }
}

int64_t checked_numel(const std::vector<int64_t>& dims, const ErrorContext& ctx) {
  TEC_USER_CHECK(dims.size() <= kMaxRank, ctx) << "rank " << dims.size() << " exceeds tec's limit of " << kMaxRank;
  int64_t n = 1;
  for (int64_t d : dims) {
    TEC_USER_CHECK(d >= 0 && d <= kMaxDim, ctx) << "dim " << d << " is outside [0, " << kMaxDim << "]";
    TEC_USER_CHECK(d == 0 || n <= kMaxElements / d, ctx) << "more than " << kMaxElements << " elements";
    n *= d;
  }
  return n;
}

// Resolves an external-data location inside the model's folder: relative, no "..", and no
// link that leads out of it.
fs::path external_path(const std::string& location, const std::string& base_dir, const ErrorContext& ctx) {
  const fs::path rel(location);
  TEC_USER_CHECK(!location.empty() && rel.is_relative() && !rel.has_root_name(), ctx)
      << "external data location '" << location << "' must be a path relative to the model's folder";
  for (const auto& part : rel)
    TEC_USER_CHECK(part != "..", ctx) << "external data location '" << location << "' may not contain '..'";
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(fs::path(base_dir.empty() ? "." : base_dir), ec);
  TEC_USER_CHECK(!ec, ctx) << "cannot resolve the model's folder '" << base_dir << "': " << ec.message();
  const fs::path full = fs::weakly_canonical(base / rel, ec);
  TEC_USER_CHECK(!ec, ctx) << "cannot resolve external data '" << location << "': " << ec.message();
  auto [b, f] = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  TEC_USER_CHECK(b == base.end(), ctx) << "external data '" << location << "' resolves to " << full.string()
                                       << ", outside the model's folder " << base.string();
  return full;
}

std::string read_external(const ::onnx::TensorProto& t, const std::string& base_dir, int64_t expected_bytes,
                          const ErrorContext& ctx) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : t.external_data()) {
    auto number = [&](const std::string& v) {
      TEC_USER_CHECK(!v.empty() && v.size() < 19 && v.find_first_not_of("0123456789") == std::string::npos, ctx)
          << "external data '" << kv.key() << "' must be a non-negative integer, got '" << v << "'";
      return std::stoll(v);
    };
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = number(kv.value());
    else if (kv.key() == "length") length = number(kv.value());
  }
  const fs::path path = external_path(location, base_dir, ctx);
  std::error_code ec;
  TEC_USER_CHECK(fs::is_regular_file(path, ec), ctx) << "external data file " << path.string() << " does not exist";
  const auto size = static_cast<int64_t>(fs::file_size(path, ec));
  TEC_USER_CHECK(!ec, ctx) << "cannot read " << path.string() << ": " << ec.message();
  if (length < 0) length = expected_bytes;
  TEC_USER_CHECK(length == expected_bytes, ctx)
      << "external data length " << length << " does not match the dims (" << expected_bytes << " bytes)";
  TEC_USER_CHECK(offset <= size && length <= size - offset, ctx)
      << "external data [" << offset << ", " << offset + length << ") lies past the end of " << path.string() << " ("
      << size << " bytes)";
  std::ifstream in(path, std::ios::binary);
  std::string bytes(static_cast<size_t>(length), '\0');
  in.seekg(offset);
  in.read(bytes.data(), length);
  if (!in) throw Error(ErrorKind::io, ctx, "cannot read external data from " + path.string());
  return bytes;
}

Tensor read_tensor(const ::onnx::TensorProto& t, const std::string& base_dir, const ErrorContext& ctx) {
  Tensor out;
  out.elem_type = t.data_type();
  out.dims.assign(t.dims().begin(), t.dims().end());
  const int64_t n = checked_numel(out.dims, ctx);
  const int64_t width = element_bytes(out.elem_type);
  TEC_UNSUPPORTED_CHECK(width > 0, ctx) << "tensor element type " << elem_type_name(out.elem_type)
                                        << " is not supported (tec reads float, float16, bfloat16, double, "
                                           "float8 e4m3fn/e5m2, integer and bool tensors)";
  TEC_UNSUPPORTED_CHECK(!t.has_segment(), ctx) << "segmented tensors are not supported";
  const bool is_float = is_float_type(out.elem_type);
  if (is_float)
    out.floats.reserve(static_cast<size_t>(std::min<int64_t>(n, 1 << 20)));
  else
    out.ints.reserve(static_cast<size_t>(std::min<int64_t>(n, 1 << 20)));
  auto push_bits = [&](uint64_t bits) {
    if (is_float) {
      out.floats.push_back(decode_float_bits(out.elem_type, bits));
    } else {
      int64_t v;
      switch (out.elem_type) {
        case kInt8: v = static_cast<int8_t>(bits); break;
        case kInt16: v = static_cast<int16_t>(bits); break;
        case kInt32: v = static_cast<int32_t>(bits); break;
        case kBool: v = bits != 0; break;
        default: v = static_cast<int64_t>(bits);
      }
      out.ints.push_back(v);
    }
  };
  const bool external = t.data_location() == ::onnx::TensorProto::EXTERNAL;
  if (external || t.has_raw_data()) {
    const std::string raw = external ? read_external(t, base_dir, n * width, ctx) : t.raw_data();
    TEC_USER_CHECK(static_cast<int64_t>(raw.size()) == n * width, ctx)
        << "raw_data holds " << raw.size() << " bytes, the dims " << Shape(out.dims).str() << " of "
        << elem_type_name(out.elem_type) << " need " << n * width;
    for (int64_t i = 0; i < n; ++i) {
      if (out.elem_type == kDouble) {
        double d;
        std::memcpy(&d, raw.data() + i * 8, 8);
        out.floats.push_back(static_cast<float>(d));
        continue;
      }
      uint64_t bits = 0;
      std::memcpy(&bits, raw.data() + i * width, static_cast<size_t>(width));  // little-endian host
      push_bits(bits);
    }
    return out;
  }
  auto check_count = [&](int64_t count, const char* field) {
    TEC_USER_CHECK(count == n, ctx) << field << " holds " << count << " values, the dims " << Shape(out.dims).str()
                                    << " need " << n;
  };
  switch (out.elem_type) {
    case kFloat:
      check_count(t.float_data_size(), "float_data");
      out.floats.assign(t.float_data().begin(), t.float_data().end());
      break;
    case kDouble:
      check_count(t.double_data_size(), "double_data");
      for (double d : t.double_data()) out.floats.push_back(static_cast<float>(d));
      break;
    case kInt64:
      check_count(t.int64_data_size(), "int64_data");
      out.ints.assign(t.int64_data().begin(), t.int64_data().end());
      break;
    case kUint32:
    case kUint64:
      check_count(t.uint64_data_size(), "uint64_data");
      for (uint64_t v : t.uint64_data()) out.ints.push_back(static_cast<int64_t>(v));
      break;
    default:  // int32_data carries the bits of every narrower type
      check_count(t.int32_data_size(), "int32_data");
      for (int32_t v : t.int32_data()) push_bits(static_cast<uint32_t>(v));
  }
  return out;
}

ValueInfo read_value_info(const ::onnx::ValueInfoProto& v, const ErrorContext& ctx) {
  ValueInfo out;
  out.name = bounded(v.name(), ctx.location, "a graph input or output");
  TEC_USER_CHECK(!out.name.empty(), ctx) << "a graph input or output has no name";
  const ErrorContext vctx{ctx.stage, out.name, "", ctx.location};
  if (!v.type().has_tensor_type()) {
    out.elem_type = -1;  // a sequence, map or optional: the importer rejects it by name
    return out;
  }
  const auto& tt = v.type().tensor_type();
  out.elem_type = tt.elem_type();
  out.has_shape = tt.has_shape();
  TEC_USER_CHECK(static_cast<size_t>(tt.shape().dim_size()) <= kMaxRank, vctx)
      << "rank " << tt.shape().dim_size() << " exceeds tec's limit of " << kMaxRank;
  for (const auto& d : tt.shape().dim()) {
    Dim dim;
    if (d.has_dim_value()) {
      TEC_UNSUPPORTED_CHECK(d.dim_value() != 0, vctx) << "dim of size 0: tec does not take empty tensors";
      TEC_USER_CHECK(d.dim_value() >= 1 && d.dim_value() <= kMaxDim, vctx)
          << "dim " << d.dim_value() << " is outside [1, " << kMaxDim << "]";
      dim.value = d.dim_value();
    } else {
      dim.param = d.dim_param();
    }
    out.dims.push_back(std::move(dim));
  }
  return out;
}

Attribute read_attribute(const ::onnx::AttributeProto& a, const std::string& base_dir, const ErrorContext& ctx) {
  Attribute out;
  switch (a.type()) {
    case ::onnx::AttributeProto::FLOAT: out.type = Attribute::Type::float_; out.f = a.f(); break;
    case ::onnx::AttributeProto::INT: out.type = Attribute::Type::int_; out.i = a.i(); break;
    case ::onnx::AttributeProto::STRING: out.type = Attribute::Type::string_; out.s = a.s(); break;
    case ::onnx::AttributeProto::TENSOR:
      out.type = Attribute::Type::tensor;
      out.t = read_tensor(a.t(), base_dir, ErrorContext{ctx.stage, ctx.node, ctx.op, ctx.location + " attribute '" + a.name() + "'"});
      break;
    case ::onnx::AttributeProto::FLOATS:
      out.type = Attribute::Type::floats;
      out.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case ::onnx::AttributeProto::INTS:
      out.type = Attribute::Type::ints;
      out.ints.assign(a.ints().begin(), a.ints().end());
      break;
    default: out.type = Attribute::Type::other;  // graphs, strings lists, sparse tensors: no op tec claims takes them
  }
  return out;
}

}  // namespace

std::string elem_type_name(int32_t type) {
  switch (type) {
    case kFloat: return "FLOAT";
    case kUint8: return "UINT8";
    case kInt8: return "INT8";
    case kUint16: return "UINT16";
    case kInt16: return "INT16";
    case kInt32: return "INT32";
    case kInt64: return "INT64";
    case kString: return "STRING";
    case kBool: return "BOOL";
    case kFloat16: return "FLOAT16";
    case kDouble: return "DOUBLE";
    case kUint32: return "UINT32";
    case kUint64: return "UINT64";
    case kBfloat16: return "BFLOAT16";
    case kFloat8E4M3FN: return "FLOAT8E4M3FN";
    case kFloat8E4M3FNUZ: return "FLOAT8E4M3FNUZ";
    case kFloat8E5M2: return "FLOAT8E5M2";
    case kFloat8E5M2FNUZ: return "FLOAT8E5M2FNUZ";
    case kFloat4E2M1: return "FLOAT4E2M1";
    case kFloat8E8M0: return "FLOAT8E8M0";
    default: return "type " + std::to_string(type);
  }
}

bool is_float_type(int32_t type) {
  return type == kFloat || type == kFloat16 || type == kBfloat16 || type == kDouble || type == kFloat8E4M3FN ||
         type == kFloat8E5M2;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

Model parse_model(const uint8_t* data, size_t size, const std::string& display_name, const std::string& base_dir) {
  const ErrorContext file_ctx = at(display_name, "");
  TEC_USER_CHECK(size <= static_cast<size_t>(INT_MAX), file_ctx)
      << "the file is " << size << " bytes; protobuf reads at most 2 GiB (store large weights as external data)";
  ::onnx::ModelProto proto;
  TEC_USER_CHECK(size > 0 && proto.ParseFromArray(data, static_cast<int>(size)), file_ctx)
      << "not an ONNX model: the protobuf does not parse (truncated or not a ModelProto)";
  Model m;
  m.file = display_name;
  m.ir_version = proto.ir_version();
  TEC_USER_CHECK(proto.has_ir_version() && proto.has_graph(), file_ctx)
      << "not an ONNX model: no " << (proto.has_graph() ? "ir_version" : "graph");
  TEC_UNSUPPORTED_CHECK(m.ir_version >= kMinIrVersion && m.ir_version <= kMaxIrVersion, file_ctx)
      << "IR version " << m.ir_version << " is outside the versions tec reads (" << kMinIrVersion << " to "
      << kMaxIrVersion << ")";
  for (const auto& o : proto.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") m.opset = o.version();
  }
  TEC_USER_CHECK(m.opset != 0, file_ctx) << "the model imports no opset of the default ONNX domain";
  TEC_UNSUPPORTED_CHECK(m.opset <= kMaxOpset, file_ctx)
      << "opset " << m.opset << " is newer than tec knows (opsets " << kMinOpset << " to " << kMaxOpset
      << "); re-export with opset_version <= " << kMaxOpset;
  TEC_UNSUPPORTED_CHECK(m.opset >= kMinOpset, file_ctx)
      << "opset " << m.opset << " is older than tec reads (" << kMinOpset << " to " << kMaxOpset
      << "); re-export with opset_version >= " << kMinOpset;
  m.producer = proto.producer_name();
  const auto& g = proto.graph();
  m.graph_name = g.name();
  TEC_USER_CHECK(static_cast<size_t>(g.node_size()) <= kMaxNodes, file_ctx)
      << g.node_size() << " nodes exceed tec's limit of " << kMaxNodes;
  for (const auto& t : g.initializer()) {
    const ErrorContext ctx = at(display_name, "initializer '" + bounded(t.name(), display_name, "an initializer") + "'", t.name());
    TEC_USER_CHECK(!t.name().empty(), ctx) << "an initializer has no name";
    TEC_USER_CHECK(!m.initializers.count(t.name()), ctx) << "initializer '" << t.name() << "' is defined twice";
    m.initializers.emplace(t.name(), read_tensor(t, base_dir, ctx));
  }
  TEC_UNSUPPORTED_CHECK(g.sparse_initializer_size() == 0, file_ctx) << "sparse initializers are not supported";
  for (int i = 0; i < g.input_size(); ++i) {
    const ErrorContext ctx = at(display_name, "graph input " + std::to_string(i));
    ValueInfo v = read_value_info(g.input(i), ctx);
    const auto init = m.initializers.find(v.name);
    if (init == m.initializers.end()) {
      m.inputs.push_back(std::move(v));
      continue;
    }
    // An initializer also listed as an input (IR < 4 lists them all; later IRs make it an
    // overridable default, which tec keeps constant): the two must describe one tensor, as
    // onnxruntime requires.
    const Tensor& t = init->second;
    bool same = (v.elem_type <= 0 || v.elem_type == t.elem_type) && (!v.has_shape || v.dims.size() == t.dims.size());
    for (size_t d = 0; same && v.has_shape && d < v.dims.size(); ++d) same = v.dims[d].value < 1 || v.dims[d].value == t.dims[d];
    std::string declared;
    for (const Dim& d : v.dims) declared += (declared.empty() ? "" : ", ") + (d.value >= 1 ? std::to_string(d.value) : d.param);
    TEC_USER_CHECK(same, (ErrorContext{ctx.stage, v.name, "", ctx.location}))
        << "graph input '" << v.name << "' is also an initializer, of type " << elem_type_name(t.elem_type) << " and shape "
        << Shape{t.dims}.str() << ", but the input declares type " << elem_type_name(v.elem_type) << " and shape ["
        << (v.has_shape ? declared : "?") << "]";
  }
  for (int i = 0; i < g.output_size(); ++i)
    m.outputs.push_back(read_value_info(g.output(i), at(display_name, "graph output " + std::to_string(i))));
  TEC_USER_CHECK(!m.outputs.empty(), file_ctx) << "the graph has no outputs";
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& n = g.node(i);
    Node node;
    node.index = i;
    node.op_type = bounded(n.op_type(), display_name, "a node's op_type");
    node.name = n.name().empty() ? node.op_type + "_" + std::to_string(i) : bounded(n.name(), display_name, "a node's name");
    node.domain = n.domain() == "ai.onnx" ? "" : n.domain();
    const ErrorContext ctx = at(display_name, "node " + std::to_string(i), node.name, node.op_type);
    TEC_USER_CHECK(!node.op_type.empty(), ctx) << "node has no op_type";
    for (const auto& in : n.input()) node.inputs.push_back(bounded(in, display_name, "a node's input"));
    for (const auto& out : n.output()) node.outputs.push_back(bounded(out, display_name, "a node's output"));
    for (const auto& a : n.attribute()) {
      TEC_USER_CHECK(!node.attrs.count(a.name()), ctx) << "attribute '" << a.name() << "' is given twice";
      TEC_UNSUPPORTED_CHECK(a.ref_attr_name().empty(), ctx) << "attribute references (functions) are not supported";
      node.attrs.emplace(a.name(), read_attribute(a, base_dir, ctx));
    }
    m.nodes.push_back(std::move(node));
  }
  return m;
}

Model read_model_file(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file(path, ReadLimits{kMaxModelBytes, false}, "ONNX model", at(path, ""));
  const std::string base = fs::path(path).parent_path().string();
  return parse_model(bytes.data(), bytes.size(), path, base.empty() ? "." : base);
}

}  // namespace tec::onnx
