// Writing and reading the .teplan container (plan/format.h). The reader validates the
// container (magic, version, sizes, offsets, checksum) and the manifest's JSON syntax; the
// manifest's meaning is validated by plan/plan.h.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "core/bytes.h"

namespace tec::plan {

struct Blob {
  std::string name;
  Bytes bytes;  // owned, or mapped from the compile cache
};

// The whole file. The manifest gets a "blobs" array of {name, offset, size} (offsets
// relative to the blob section). Same inputs give the same bytes.
std::vector<uint8_t> serialize_plan(nlohmann::json manifest, const std::vector<Blob>& blobs);
// The same bytes, written to `path` as write_file_atomically does, straight from the blobs
// (no in-memory image of the file). Returns the file's size.
uint64_t write_plan_file(const std::string& path, nlohmann::json manifest, const std::vector<Blob>& blobs);

// The container around a manifest text and a blob section (already laid out): header,
// padding, trailer and checksum. serialize_plan uses it; tests use it to build hostile files.
std::vector<uint8_t> assemble_plan(const std::string& manifest_text, std::span<const uint8_t> blob_section);

struct PlanFile {
  nlohmann::json manifest;
  std::span<const uint8_t> blobs;  // the blob section, inside the caller's bytes
};

// Throws Error(invalid_input, stage "plan") naming what is wrong; never reads out of bounds.
PlanFile parse_plan_file(std::span<const uint8_t> bytes, const std::string& name);
// A plan file's bytes: a regular file of at most kMaxPlanBytes (core/file_io.h).
std::vector<uint8_t> read_plan_file(const std::string& path);

}  // namespace tec::plan
