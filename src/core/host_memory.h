// Sizes checked against the machine before a large host allocation (issue 51: a model with
// F = 2^31 died of std::bad_alloc, exit 70). Over the machine's memory is a clear error, exit 7
// as for a GPU out of memory; std::bad_alloc that still happens is reported the same way.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.h"

namespace tec {

// The machine's physical memory in bytes ($TEC_HOST_MEMORY_BYTES overrides it, for tests).
uint64_t host_memory_bytes();

// Throws Error(device) naming `what` when `bytes` exceed host_memory_bytes().
void require_host_memory(uint64_t bytes, const std::string& what, const ErrorContext& context);

}  // namespace tec
