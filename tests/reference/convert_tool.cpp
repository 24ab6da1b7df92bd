// Test tool: applies one reference conversion to float32 values read from stdin and writes
// the result to stdout, so that tests/reference/convert_test.py can compare it with an
// independent oracle. Usage: convert_tool e4m3|e5m2|e2m1|e8m0|bf16 (encode) or
// convert_tool decode-e4m3|decode-e5m2|decode-e2m1 (uint8 codes in, float32 out).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "reference/convert.h"

using namespace tec::reference;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: convert_tool FORMAT < input > output\n");
    return 2;
  }
  const std::string format = argv[1];
  std::vector<unsigned char> in;
  unsigned char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) in.insert(in.end(), buf, buf + n);
  if (format.rfind("decode-", 0) == 0) {
    for (unsigned char code : in) {
      float v = format == "decode-e4m3" ? e4m3_to_float(code) : format == "decode-e5m2" ? e5m2_to_float(code) : e2m1_to_float(code);
      std::fwrite(&v, 4, 1, stdout);
    }
    return 0;
  }
  for (size_t i = 0; i + 4 <= in.size(); i += 4) {
    float x;
    std::memcpy(&x, &in[i], 4);
    if (format == "bf16") {
      const uint16_t b = float_to_bf16(x);
      std::fwrite(&b, 2, 1, stdout);
      continue;
    }
    const uint8_t code = format == "e4m3"   ? float_to_e4m3(x)
                         : format == "e5m2" ? float_to_e5m2(x)
                         : format == "e2m1" ? float_to_e2m1(x)
                                            : float_to_e8m0_round_up(x);
    std::fputc(code, stdout);
  }
  return 0;
}
