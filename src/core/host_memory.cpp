#include "core/host_memory.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace tec {

namespace {
std::string gib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / static_cast<double>(uint64_t{1} << 30));
  return text;
}
}  // namespace

uint64_t host_memory_bytes() {
  if (const char* forced = std::getenv("TEC_HOST_MEMORY_BYTES"); forced && *forced) return std::strtoull(forced, nullptr, 10);
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : UINT64_MAX;
}

void require_host_memory(uint64_t bytes, const std::string& what, const ErrorContext& context) {
  const uint64_t have = host_memory_bytes();
  if (bytes <= have) return;
  throw Error(ErrorKind::device, context, what + " takes " + gib(bytes) + ", more than this machine's " + gib(have) + " of memory");
}

}  // namespace tec
