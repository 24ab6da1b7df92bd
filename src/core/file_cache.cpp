#include "core/file_cache.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/file_io.h"
#include "core/hash.h"

namespace tec {

namespace fs = std::filesystem;

std::string default_cache_dir() {
  if (const char* dir = std::getenv("TEC_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/tec";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/tec";
  return "";
}

std::optional<Bytes> cache_read(const std::string& dir, const std::string& file) {
  if (dir.empty()) return std::nullopt;
  const std::optional<Bytes> entry = Bytes::map_file(fs::path(dir) / file);
  if (!entry || entry->size() < sizeof(uint64_t)) return std::nullopt;
  const size_t size = entry->size() - sizeof(uint64_t);
  uint64_t stored = 0;
  std::memcpy(&stored, entry->span().data() + size, sizeof stored);
  if (stored != checksum64(entry->span().first(size))) return std::nullopt;
  return entry->first(size);
}

void cache_write(const std::string& dir, const std::string& file, std::span<const uint8_t> bytes) {
  if (dir.empty()) return;
  std::error_code ec;
  fs::create_directories(dir, ec);
  const uint64_t sum = checksum64(bytes);
  const std::span<const uint8_t> pieces[] = {bytes, std::span(reinterpret_cast<const uint8_t*>(&sum), sizeof sum)};
  try {
    // A temporary file unique per write, renamed (and removed on a signal): concurrent
    // te-compiles may fill the same entry.
    write_file_atomically((fs::path(dir) / file).string(), pieces);
  } catch (const Error&) {
  }
}

}  // namespace tec
