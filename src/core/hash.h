// A fast 64-bit checksum: plan integrity (plan/format.h) and kernel cache keys.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace tec {

// A mix over 8-byte words (tail bytes zero-padded) with the length folded in. Not
// cryptographic: it guards against corruption, not tampering.
uint64_t checksum64(std::span<const uint8_t> bytes);
inline uint64_t checksum64(const std::string& text) {
  return checksum64(std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}
std::string hex64(uint64_t value);

}  // namespace tec
