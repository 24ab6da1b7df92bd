#include "core/hash.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace tec {

namespace {
constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full;

uint64_t mix_word(uint64_t h, uint64_t w) {
  h ^= w * kP2;
  return ((h << 31) | (h >> 33)) * kP1;
}
}  // namespace

Checksum64::Checksum64(uint64_t total_bytes) : total_bytes_(total_bytes), h_(0x27D4EB2F165667C5ull ^ (total_bytes * kP1)) {}

void Checksum64::update(std::span<const uint8_t> bytes) {
  seen_ += bytes.size();
  size_t i = 0;
  if (partial_size_ > 0) {
    const size_t take = std::min(bytes.size(), 8 - partial_size_);
    std::memcpy(partial_ + partial_size_, bytes.data(), take);
    partial_size_ += take;
    i = take;
    if (partial_size_ < 8) return;
    uint64_t w;
    std::memcpy(&w, partial_, 8);
    h_ = mix_word(h_, w);
    partial_size_ = 0;
  }
  uint64_t h = h_;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, &bytes[i], 8);
    h = mix_word(h, w);
  }
  h_ = h;
  partial_size_ = bytes.size() - i;
  std::memcpy(partial_, bytes.data() + i, partial_size_);
}

uint64_t Checksum64::finish() const {
  TEC_INTERNAL_CHECK(seen_ == total_bytes_, {}) << "checksum of " << total_bytes_ << " bytes was given " << seen_;
  uint64_t tail = 0;
  std::memcpy(&tail, partial_, partial_size_);
  uint64_t h = h_ ^ (tail * kP2);
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  return h;
}

uint64_t checksum64(std::span<const uint8_t> bytes) {
  Checksum64 sum(bytes.size());
  sum.update(bytes);
  return sum.finish();
}

std::string hex64(uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

}  // namespace tec
