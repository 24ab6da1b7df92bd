// A fast 64-bit checksum: plan integrity (plan/format.h) and kernel cache keys.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace tec {

// Four independent lanes, each a multiply-rotate mix over every fourth 8-byte word (the tail
// zero-padded), joined at the end, with the length folded in first. Four lanes run ~4x faster
// than one dependent chain: a plan's 128 MiB of constants are checksummed when written, when
// loaded and when read back from the compile cache. Not cryptographic: it guards against
// corruption, not tampering.
uint64_t checksum64(std::span<const uint8_t> bytes);
inline uint64_t checksum64(const std::string& text) {
  return checksum64(std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}
std::string hex64(uint64_t value);

// checksum64 of bytes that arrive in pieces (a plan written straight from its blobs, never
// copied into one image). The length is folded in first, so it is given up front; finish()
// checks that exactly that many bytes came.
class Checksum64 {
 public:
  explicit Checksum64(uint64_t total_bytes);
  void update(std::span<const uint8_t> bytes);
  uint64_t finish() const;

 private:
  static constexpr int kLanes = 4;
  static constexpr size_t kBlockBytes = 8 * kLanes;
  void mix_block(const uint8_t* block);

  uint64_t total_bytes_;
  uint64_t seen_ = 0;
  uint64_t lanes_[kLanes];
  uint8_t partial_[kBlockBytes] = {};  // a block split across pieces
  size_t partial_size_ = 0;
};

}  // namespace tec
