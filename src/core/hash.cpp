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

Checksum64::Checksum64(uint64_t total_bytes) : total_bytes_(total_bytes) {
  for (int j = 0; j < kLanes; ++j) lanes_[j] = (0x27D4EB2F165667C5ull + static_cast<uint64_t>(j) * kP2) ^ (total_bytes * kP1);
}

void Checksum64::mix_block(const uint8_t* block) {
  for (int j = 0; j < kLanes; ++j) {
    uint64_t w;
    std::memcpy(&w, block + 8 * j, 8);
    lanes_[j] = mix_word(lanes_[j], w);
  }
}

void Checksum64::update(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return;  // its data() may be null, which memcpy must never see
  seen_ += bytes.size();
  size_t i = 0;
  if (partial_size_ > 0) {
    const size_t take = std::min(bytes.size(), kBlockBytes - partial_size_);
    std::memcpy(partial_ + partial_size_, bytes.data(), take);
    partial_size_ += take;
    i = take;
    if (partial_size_ < kBlockBytes) return;
    mix_block(partial_);
    partial_size_ = 0;
  }
  // The lanes in registers for the bulk of the bytes: four chains the CPU runs side by side.
  uint64_t l0 = lanes_[0], l1 = lanes_[1], l2 = lanes_[2], l3 = lanes_[3];
  for (; i + kBlockBytes <= bytes.size(); i += kBlockBytes) {
    uint64_t w[kLanes];
    std::memcpy(w, bytes.data() + i, kBlockBytes);
    l0 = mix_word(l0, w[0]);
    l1 = mix_word(l1, w[1]);
    l2 = mix_word(l2, w[2]);
    l3 = mix_word(l3, w[3]);
  }
  lanes_[0] = l0, lanes_[1] = l1, lanes_[2] = l2, lanes_[3] = l3;
  partial_size_ = bytes.size() - i;
  std::memcpy(partial_, bytes.data() + i, partial_size_);
}

uint64_t Checksum64::finish() const {
  TEC_INTERNAL_CHECK(seen_ == total_bytes_, {}) << "checksum of " << total_bytes_ << " bytes was given " << seen_;
  Checksum64 last = *this;
  if (partial_size_ > 0) {  // the tail, zero-padded to a block (the length is folded in)
    std::memset(last.partial_ + partial_size_, 0, kBlockBytes - partial_size_);
    last.mix_block(last.partial_);
  }
  uint64_t h = last.lanes_[0];
  for (int j = 1; j < kLanes; ++j) h = mix_word(h, last.lanes_[j]);
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
