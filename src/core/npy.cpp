#include "core/npy.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/file_io.h"

namespace tec {

namespace {

ErrorContext at(const std::string& path) { return ErrorContext{"npy", "", "", path}; }

// The value of 'key' in the header dict, as its raw text up to the next top-level comma.
std::string header_field(const std::string& header, const std::string& key, const std::string& path) {
  const auto pos = header.find("'" + key + "'");
  TEC_USER_CHECK(pos != std::string::npos, at(path)) << "npy header lacks '" << key << "'";
  auto colon = header.find(':', pos);
  TEC_USER_CHECK(colon != std::string::npos, at(path)) << "npy header is malformed";
  size_t begin = colon + 1;
  while (begin < header.size() && header[begin] == ' ') ++begin;
  size_t end = begin;
  int depth = 0;
  for (; end < header.size(); ++end) {
    const char c = header[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if ((c == ',' || c == '}') && depth == 0) break;
  }
  return header.substr(begin, end - begin);
}

}  // namespace

NpyArray read_npy(const std::string& path, uint64_t max_data_bytes) {
  // The header is at most 4 GiB in format 2.0, but no real one is over a few KiB.
  constexpr uint64_t kMaxHeaderBytes = 1 << 16;
  const std::vector<uint8_t> bytes = read_file(path, ReadLimits{max_data_bytes + kMaxHeaderBytes, true}, ".npy file", at(path));
  TEC_USER_CHECK(bytes.size() >= 10 && std::memcmp(bytes.data(), "\x93NUMPY", 6) == 0, at(path)) << "not a .npy file";
  const int major = bytes[6];
  TEC_USER_CHECK(major == 1 || major == 2 || major == 3, at(path)) << "unsupported .npy version " << major;
  size_t header_len, header_start;
  if (major == 1) {
    header_len = bytes[8] | (bytes[9] << 8);
    header_start = 10;
  } else {
    TEC_USER_CHECK(bytes.size() >= 12, at(path)) << "truncated .npy header";
    header_len = bytes[8] | (bytes[9] << 8) | (bytes[10] << 16) | (static_cast<size_t>(bytes[11]) << 24);
    header_start = 12;
  }
  TEC_USER_CHECK(header_len <= bytes.size() - header_start, at(path)) << "truncated .npy header";
  const std::string header(bytes.begin() + static_cast<long>(header_start), bytes.begin() + static_cast<long>(header_start + header_len));
  const std::string descr = header_field(header, "descr", path);
  int item = 0;
  const bool integer = descr == "'<i4'" || descr == "'<i8'";  // routing data: expert indices, m_splits
  if (descr == "'<f4'" || descr == "'<i4'") item = 4;
  else if (descr == "'<f2'") item = 2;
  else if (descr == "'<f8'" || descr == "'<i8'") item = 8;
  NpyArray out;
  out.integer = integer;
  out.dtype = std::string(integer ? "int" : "float") + std::to_string(item * 8);
  TEC_UNSUPPORTED_CHECK(item != 0, at(path)) << ".npy dtype " << descr
                                             << " is not supported; use float16, float32, float64, int32 or int64";
  TEC_UNSUPPORTED_CHECK(header_field(header, "fortran_order", path) == "False", at(path)) << "Fortran-order .npy is not supported";
  const std::string shape_text = header_field(header, "shape", path);
  size_t i = 0;
  while (i < shape_text.size()) {
    if (!std::isdigit(static_cast<unsigned char>(shape_text[i]))) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < shape_text.size() && std::isdigit(static_cast<unsigned char>(shape_text[j]))) ++j;
    TEC_USER_CHECK(j - i <= 12, at(path)) << "absurd dim in .npy shape " << shape_text;
    const int64_t dim = std::stoll(shape_text.substr(i, j - i));
    TEC_USER_CHECK(dim <= kMaxDim, at(path)) << "dim " << dim << " exceeds the limit";
    out.shape.dims.push_back(dim);
    i = j;
  }
  const int64_t count = with_context(at(path), [&] { return out.shape.numel(); });
  const size_t data_start = header_start + header_len;
  TEC_USER_CHECK(bytes.size() - data_start == static_cast<size_t>(count) * static_cast<size_t>(item), at(path))
      << ".npy data has " << bytes.size() - data_start << " bytes, shape " << out.shape.str() << " needs " << count * item;
  out.values.resize(static_cast<size_t>(count));
  for (size_t k = 0; k < out.values.size(); ++k) {
    const unsigned char* p = &bytes[data_start + k * static_cast<size_t>(item)];
    if (integer) {
      int64_t v = 0;
      if (item == 4) {
        int32_t v32;
        std::memcpy(&v32, p, 4);
        v = v32;
      } else {
        std::memcpy(&v, p, 8);
      }
      // Held as float, as the CPU reference holds int32 tensors: exact below 2^24.
      TEC_USER_CHECK(v > -(int64_t{1} << 24) && v < (int64_t{1} << 24), at(path))
          << "integer value " << v << " at index " << k << " is outside (-2^24, 2^24), which tec's int32 inputs hold";
      out.values[k] = static_cast<float>(v);
    } else if (item == 4) {
      std::memcpy(&out.values[k], p, 4);
    } else if (item == 8) {
      double d;
      std::memcpy(&d, p, 8);
      out.values[k] = static_cast<float>(d);
    } else {
      out.values[k] = fp16_to_float(static_cast<uint16_t>(p[0] | (p[1] << 8)));
    }
  }
  return out;
}

void write_npy(const std::string& path, const Shape& shape, const std::vector<float>& values) {
  std::string dims;
  for (int64_t d : shape.dims) dims += std::to_string(d) + ",";
  if (shape.rank() > 1) dims.pop_back();
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string head = std::string("\x93NUMPY\x01\x00", 8);
  head += static_cast<char>(header.size() & 0xFF);
  head += static_cast<char>(header.size() >> 8);
  head += header;
  const std::span<const uint8_t> pieces[] = {
      std::span(reinterpret_cast<const uint8_t*>(head.data()), head.size()),
      std::span(reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(float))};
  write_file_atomically(path, pieces);
}

}  // namespace tec
