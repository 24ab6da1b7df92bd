#include "frontend/weights/safetensors.h"

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_text.h"

namespace tec {

namespace {

constexpr int64_t kMaxHeaderBytes = int64_t{100} << 20;

ErrorContext file_context(const std::string& path) { return ErrorContext{"weights", "", "", path}; }

std::optional<DType> safetensors_dtype(const std::string& name) {
  if (name == "BF16") return DType::bf16;
  if (name == "F16") return DType::fp16;
  if (name == "F32") return DType::fp32;
  return std::nullopt;
}


}  // namespace

SafetensorsIndex read_safetensors_index(const std::string& path) {
  SafetensorsIndex index;
  index.path = path;
  index.file_size = static_cast<int64_t>(regular_file_size(path, "weights file", file_context(path)));
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error(ErrorKind::io, file_context(path), "cannot open weights file: " + std::string(std::strerror(errno)));
  TEC_USER_CHECK(index.file_size >= 8, file_context(path))
      << "not a safetensors file: " << index.file_size << " bytes, shorter than the 8-byte header size";
  unsigned char size_bytes[8];
  file.read(reinterpret_cast<char*>(size_bytes), 8);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | size_bytes[i];
  TEC_USER_CHECK(header_size <= static_cast<uint64_t>(std::min(kMaxHeaderBytes, index.file_size - 8)), file_context(path))
      << "safetensors header size " << header_size << " does not fit in the file (" << index.file_size << " bytes)";
  std::string header(header_size, '\0');
  file.read(header.data(), static_cast<std::streamsize>(header_size));
  TEC_USER_CHECK(file.good(), file_context(path)) << "cannot read the safetensors header";
  const int64_t data_start = 8 + static_cast<int64_t>(header_size);
  const int64_t data_size = index.file_size - data_start;

  // Metadata values may be long (some tools store a whole config there); names may not.
  const nlohmann::json doc = parse_json_text(header, file_context(path), kMaxHeaderBytes);
  TEC_USER_CHECK(doc.is_object(), file_context(path)) << "safetensors header is not a JSON object";
  for (const auto& [name, entry] : doc.items()) {
    if (name == "__metadata__") continue;
    TEC_USER_CHECK(name.size() <= kMaxStringBytes, file_context(path))
        << "tensor name '" << text_excerpt(name) << "' is " << name.size() << " bytes; the limit is " << kMaxStringBytes;
    ErrorContext ctx = file_context(path);
    ctx.node = name;
    TEC_USER_CHECK(entry.is_object() && entry.contains("dtype") && entry.contains("shape") &&
                       entry.contains("data_offsets"),
                   ctx)
        << "tensor entry needs dtype, shape and data_offsets";
    TEC_USER_CHECK(entry["dtype"].is_string(), ctx) << "dtype must be a string";
    auto dtype = safetensors_dtype(entry["dtype"].get<std::string>());
    TEC_UNSUPPORTED_CHECK(dtype.has_value(), ctx)
        << "tensor dtype " << entry["dtype"].get<std::string>() << " is not supported; use BF16, F16 or F32";
    Shape shape;
    TEC_USER_CHECK(entry["shape"].is_array(), ctx) << "shape must be an array";
    for (const auto& d : entry["shape"]) {
      TEC_USER_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0 && d.get<int64_t>() <= kMaxDim, ctx)
          << "shape entries must be integers in [0, " << kMaxDim << "]";
      shape.dims.push_back(d.get<int64_t>());
    }
    const auto& offsets = entry["data_offsets"];
    TEC_USER_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                       offsets[1].is_number_unsigned(),
                   ctx)
        << "data_offsets must be two non-negative integers";
    const auto begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    TEC_USER_CHECK(begin <= end && end <= static_cast<uint64_t>(data_size), ctx)
        << "data_offsets [" << begin << ", " << end << ") lie outside the data section of " << data_size << " bytes";
    const int64_t bytes = with_context(ctx, [&] { return checked_mul(shape.numel(), storage_bytes(*dtype)); });
    TEC_USER_CHECK(static_cast<int64_t>(end - begin) == bytes, ctx)
        << "data_offsets span " << (end - begin) << " bytes, shape " << shape.str() << " of "
        << entry["dtype"].get<std::string>() << " needs " << bytes;
    index.tensors[name] = SafetensorsEntry{name, *dtype, shape, data_start + static_cast<int64_t>(begin), bytes};
  }
  return index;
}

std::vector<float> read_tensor_as_float(const SafetensorsIndex& index, const SafetensorsEntry& entry) {
  std::ifstream file(index.path, std::ios::binary);
  if (!file) throw Error(ErrorKind::io, file_context(index.path), "cannot open weights file");
  std::vector<unsigned char> raw(static_cast<size_t>(entry.bytes));
  file.seekg(entry.offset);
  file.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size()));
  TEC_USER_CHECK(file.good(), file_context(index.path)) << "weights file changed while reading '" << entry.name << "'";
  const size_t count = raw.size() / static_cast<size_t>(storage_bytes(entry.dtype));
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) {
    if (entry.dtype == DType::fp32) {
      std::memcpy(&out[i], &raw[4 * i], 4);
    } else {
      const auto bits = static_cast<uint16_t>(raw[2 * i] | (raw[2 * i + 1] << 8));
      out[i] = entry.dtype == DType::bf16 ? std::bit_cast<float>(static_cast<uint32_t>(bits) << 16) : fp16_to_float(bits);
    }
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  int64_t offset = 0;
  for (const auto& t : tensors) {
    const int64_t bytes = checked_mul(static_cast<int64_t>(t.values.size()), 4);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape.dims}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8) text += ' ';  // keep the data 8-byte aligned
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(ErrorKind::io, file_context(path), "cannot write " + tmp);
    uint64_t size = text.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((size >> (8 * i)) & 0xff));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& t : tensors)
      out.write(reinterpret_cast<const char*>(t.values.data()), static_cast<std::streamsize>(t.values.size() * 4));
    if (!out) throw Error(ErrorKind::io, file_context(path), "write failed for " + tmp);
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace tec
