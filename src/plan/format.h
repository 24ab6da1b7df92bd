// The .teplan file (ARCHITECTURE.md §7), little-endian:
//
//   FileHeader (64 bytes)  magic "TECPLAN\0", format version, flags, section offsets/sizes
//   manifest               UTF-8 JSON (schemas/plan.schema.json), at offset 256
//   blobs                  each 256-aligned; the manifest's "blobs" gives name, offset, size
//   Trailer (16 bytes)     "TECEND\0\0" and checksum64 of every byte before the trailer
//
// The checksum guards integrity, not authenticity: a plan carries GPU code, so load only
// plans you trust.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/hash.h"

namespace tec::plan {

inline constexpr char kMagic[8] = {'T', 'E', 'C', 'P', 'L', 'A', 'N', '\0'};
inline constexpr char kTrailerMagic[8] = {'T', 'E', 'C', 'E', 'N', 'D', '\0', '\0'};
// The newest version this build writes and reads: 2 the four-lane checksum64, 3 device_layout, 4
// shared_bytes, 5 tensor_maps, 6 a GEMM launch's strided `batch`. A plan is written with the
// oldest version that holds what it uses (one without a batched GEMM is a version 5 file, which
// readers since 5 read), so that an older reader refuses, by version, a plan it would misread.
inline constexpr uint32_t kFormatVersion = 6;
inline constexpr uint32_t kOldestFormatVersion = 5;
inline constexpr uint64_t kBlobAlignment = 256;
inline constexpr uint64_t kHeaderBytes = 64;
inline constexpr uint64_t kTrailerBytes = 16;
// Limits the reader enforces before allocating anything.
inline constexpr uint64_t kMaxManifestBytes = uint64_t{64} << 20;
inline constexpr uint64_t kMaxPlanBytes = uint64_t{64} << 30;

struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t flags;  // 0; reserved
  uint64_t manifest_offset;
  uint64_t manifest_size;
  uint64_t blobs_offset;
  uint64_t blobs_size;
  uint64_t file_size;
  uint64_t reserved;
};
static_assert(sizeof(FileHeader) == kHeaderBytes);

struct Trailer {
  char magic[8];
  uint64_t checksum;
};
static_assert(sizeof(Trailer) == kTrailerBytes);

using tec::checksum64;  // core/hash.h: over every byte before the trailer

}  // namespace tec::plan
