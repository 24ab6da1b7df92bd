// safetensors files (8-byte little-endian header size, a JSON header, then raw tensors):
// the index is read and validated up front; tensor data is read on demand.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace tec {

struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  int64_t offset = 0;  // absolute byte offset in the file
  int64_t bytes = 0;
};

struct SafetensorsIndex {
  std::string path;
  int64_t file_size = 0;
  std::map<std::string, SafetensorsEntry> tensors;
};

// Throws Error(io) if the file cannot be read, Error(invalid_input) if it is malformed:
// every offset and size is checked against the file.
SafetensorsIndex read_safetensors_index(const std::string& path);
// The tensor's values converted to float (bf16, fp16 and fp32 files).
std::vector<float> read_tensor_as_float(const SafetensorsIndex& index, const SafetensorsEntry& entry);

struct NamedTensor {
  std::string name;
  Shape shape;
  std::vector<float> values;
};
// Writes an F32 safetensors file through a temporary file and a rename.
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors);

}  // namespace tec
