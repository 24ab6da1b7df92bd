// Read-only bytes that either own a vector or map a file. A warm te-compile of mlp.json takes
// its 128 MiB of constants from the compile cache: mapped, they are checksummed and written
// into the plan straight from the page cache, never zero-filled and copied into the heap.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace tec {

class Bytes {
 public:
  Bytes() = default;
  Bytes(std::vector<uint8_t> owned);  // NOLINT(google-explicit-constructor): a vector is bytes
  // The whole file, mapped read-only; nothing when it cannot be opened or mapped. The file
  // must not be truncated while mapped: the compile cache only ever replaces entries by
  // rename, which leaves a mapping of the old file intact.
  static std::optional<Bytes> map_file(const std::filesystem::path& path);

  std::span<const uint8_t> span() const { return view_; }
  size_t size() const { return view_.size(); }
  // The first n bytes, sharing ownership.
  Bytes first(size_t n) const;

 private:
  std::shared_ptr<const void> holder_;
  std::span<const uint8_t> view_;
};

}  // namespace tec
