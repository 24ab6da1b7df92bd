#include "core/bytes.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tec {

Bytes::Bytes(std::vector<uint8_t> owned) {
  auto vector = std::make_shared<const std::vector<uint8_t>>(std::move(owned));
  view_ = std::span(*vector);
  holder_ = std::move(vector);
}

std::optional<Bytes> Bytes::map_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return std::nullopt;
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return Bytes();
  }
  void* address = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file
  if (address == MAP_FAILED) return std::nullopt;
  Bytes bytes;
  bytes.holder_ = std::shared_ptr<const void>(address, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
  bytes.view_ = std::span(static_cast<const uint8_t*>(address), size);
  return bytes;
}

Bytes Bytes::first(size_t n) const {
  Bytes out = *this;
  out.view_ = view_.first(n);
  return out;
}

}  // namespace tec
