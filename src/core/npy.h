// .npy files (NumPy format 1.0/2.0), for te-run's --input and --save-outputs. Reading
// accepts little-endian float16/32/64 in C order and checks the header against the file.
#pragma once

#include <string>
#include <vector>

#include "core/shape.h"

namespace tec {

struct NpyArray {
  Shape shape;
  std::vector<float> values;
};

NpyArray read_npy(const std::string& path);
// Writes float32, through a temporary file and a rename.
void write_npy(const std::string& path, const Shape& shape, const std::vector<float>& values);

}  // namespace tec
