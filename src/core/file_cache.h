// The on-disk cache te-compile keeps between runs (NVRTC cubins, pre-quantized constants).
// Entries are content-addressed by the caller's key, written through a temporary file and a
// rename, and end in a checksum of their bytes: a damaged, truncated or half-written entry
// reads as a miss, never as data.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/bytes.h"

namespace tec {

// $TEC_CACHE_DIR, else $XDG_CACHE_HOME/tec, else ~/.cache/tec ("" when none is set).
std::string default_cache_dir();

// The entry `file` in `dir` (mapped, not read), or nothing when it is missing or damaged. An
// empty dir is a disabled cache.
std::optional<Bytes> cache_read(const std::string& dir, const std::string& file);
// Best effort: a cache that cannot be written only makes the next run slower.
void cache_write(const std::string& dir, const std::string& file, std::span<const uint8_t> bytes);

}  // namespace tec
