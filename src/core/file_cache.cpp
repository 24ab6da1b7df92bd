#include "core/file_cache.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "core/hash.h"

namespace tec {

namespace fs = std::filesystem;

std::string default_cache_dir() {
  if (const char* dir = std::getenv("TEC_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/tec";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/tec";
  return "";
}

std::optional<std::vector<uint8_t>> cache_read(const std::string& dir, const std::string& file) {
  if (dir.empty()) return std::nullopt;
  std::error_code ec;
  const fs::path path = fs::path(dir) / file;
  const auto size = fs::file_size(path, ec);
  if (ec || size < sizeof(uint64_t)) return std::nullopt;
  std::vector<uint8_t> bytes(size);
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size))) return std::nullopt;
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + size - sizeof stored, sizeof stored);
  bytes.resize(size - sizeof stored);
  if (stored != checksum64(bytes)) return std::nullopt;
  return bytes;
}

void cache_write(const std::string& dir, const std::string& file, std::span<const uint8_t> bytes) {
  if (dir.empty()) return;
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path path = fs::path(dir) / file;
  // Unique per process and thread: concurrent te-compiles may fill the same entry.
  const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid()) + "." +
                       std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const uint64_t sum = checksum64(bytes);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    out.write(reinterpret_cast<const char*>(&sum), sizeof sum);
    if (!out) {
      out.close();
      fs::remove(tmp, ec);
      return;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
}

}  // namespace tec
