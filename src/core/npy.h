// .npy files (NumPy format 1.0/2.0), for te-run's --input and --save-outputs. Reading
// accepts little-endian float16/32/64 and int32/64 in C order and checks the header against
// the file.
#pragma once

#include <string>
#include <vector>

#include "core/shape.h"

namespace tec {

struct NpyArray {
  Shape shape;
  std::vector<float> values;
  bool integer = false;  // the file held int32/int64 values (exact in float below 2^24)
  std::string dtype;     // NumPy's name of the file's dtype: "float32", "int64", ...
};

// The file, of at most `max_data_bytes` of data (a caller that knows the shape it wants passes
// its size; nothing larger is read, even from a pipe).
NpyArray read_npy(const std::string& path, uint64_t max_data_bytes);
// Writes float32, through a temporary file and a rename (core/file_io.h).
void write_npy(const std::string& path, const Shape& shape, const std::vector<float>& values);

}  // namespace tec
