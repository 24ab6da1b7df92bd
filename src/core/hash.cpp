#include "core/hash.h"

#include <cstdio>
#include <cstring>

namespace tec {

uint64_t checksum64(std::span<const uint8_t> bytes) {
  constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full;
  uint64_t h = 0x27D4EB2F165667C5ull ^ (bytes.size() * kP1);
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, &bytes[i], 8);
    h ^= w * kP2;
    h = ((h << 31) | (h >> 33)) * kP1;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
  h ^= tail * kP2;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  return h;
}

std::string hex64(uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

}  // namespace tec
