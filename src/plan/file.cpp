#include "plan/file.h"

#include <cstring>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_text.h"
#include "core/hash.h"
#include "core/shape.h"
#include "plan/format.h"

namespace tec::plan {

namespace {

// The plan file as byte ranges in order - header and manifest, the blob section's pieces,
// the trailer - so that a 100+ MB plan is written and checksummed straight from its blobs,
// never copied into one image. `pieces` points into head, tail and the caller's section.
struct PlanImage {
  std::vector<uint8_t> head, tail;
  std::vector<std::span<const uint8_t>> pieces;
  uint64_t size = 0;
};

// The oldest format version that holds what the manifest uses (format.h).
uint32_t version_needed(const nlohmann::json& manifest) {
  if (!manifest.is_object() || !manifest.contains("profiles") || !manifest["profiles"].is_array()) return kOldestFormatVersion;
  for (const auto& profile : manifest["profiles"]) {
    if (!profile.is_object() || !profile.contains("gpu") || !profile["gpu"].is_object() || !profile["gpu"].contains("launches")) continue;
    for (const auto& launch : profile["gpu"]["launches"])
      if (launch.is_object() && launch.contains("gemm") && launch["gemm"].is_object() && launch["gemm"].contains("batch")) return 6;
  }
  return kOldestFormatVersion;
}

PlanImage plan_image(const std::string& text, const std::vector<std::span<const uint8_t>>& section, uint32_t version) {
  uint64_t section_size = 0;
  for (const auto& piece : section) section_size += piece.size();
  FileHeader header{};
  std::memcpy(header.magic, kMagic, 8);
  header.version = version;
  header.manifest_offset = kBlobAlignment;
  header.manifest_size = text.size();
  header.blobs_offset = static_cast<uint64_t>(round_up(static_cast<int64_t>(kBlobAlignment + text.size()), kBlobAlignment));
  header.blobs_size = section_size;
  header.file_size = header.blobs_offset + header.blobs_size + kTrailerBytes;
  PlanImage image;
  image.head.assign(header.blobs_offset, 0);
  std::memcpy(image.head.data(), &header, sizeof header);
  std::memcpy(image.head.data() + header.manifest_offset, text.data(), text.size());
  image.pieces.push_back(image.head);
  image.pieces.insert(image.pieces.end(), section.begin(), section.end());
  Checksum64 sum(header.file_size - kTrailerBytes);
  for (const auto& piece : image.pieces) sum.update(piece);
  Trailer trailer{};
  std::memcpy(trailer.magic, kTrailerMagic, 8);
  trailer.checksum = sum.finish();
  image.tail.resize(sizeof trailer);
  std::memcpy(image.tail.data(), &trailer, sizeof trailer);
  image.pieces.push_back(image.tail);
  image.size = header.file_size;
  return image;
}

std::vector<uint8_t> concatenate(const PlanImage& image) {
  std::vector<uint8_t> out;
  out.reserve(image.size);
  for (const auto& piece : image.pieces) out.insert(out.end(), piece.begin(), piece.end());
  return out;
}

// Lays the blobs out (each at a multiple of kBlobAlignment, zero padding between), records
// the index in the manifest's "blobs" array and returns the blob section as pieces.
std::vector<std::span<const uint8_t>> lay_out_blobs(nlohmann::json& manifest, const std::vector<Blob>& blobs) {
  static const std::vector<uint8_t> zeros(kBlobAlignment, 0);
  std::vector<std::span<const uint8_t>> section;
  uint64_t offset = 0;
  nlohmann::json index = nlohmann::json::array();
  for (const Blob& b : blobs) {
    index.push_back({{"name", b.name}, {"offset", offset}, {"size", b.bytes.size()}});
    const auto end = static_cast<uint64_t>(round_up(static_cast<int64_t>(offset + b.bytes.size()), kBlobAlignment));
    section.push_back(b.bytes.span());
    section.push_back(std::span(zeros).first(end - offset - b.bytes.size()));
    offset = end;
  }
  manifest["blobs"] = index;
  return section;
}

}  // namespace

std::vector<uint8_t> serialize_plan(nlohmann::json manifest, const std::vector<Blob>& blobs) {
  const auto section = lay_out_blobs(manifest, blobs);
  return concatenate(plan_image(manifest.dump(), section, version_needed(manifest)));
}

std::vector<uint8_t> assemble_plan(const std::string& text, std::span<const uint8_t> section) {
  return concatenate(plan_image(text, {section}, version_needed(nlohmann::json::parse(text, nullptr, false))));
}

uint64_t write_plan_file(const std::string& path, nlohmann::json manifest, const std::vector<Blob>& blobs) {
  const auto section = lay_out_blobs(manifest, blobs);
  const PlanImage image = plan_image(manifest.dump(), section, version_needed(manifest));
  write_file_atomically(path, image.pieces);
  return image.size;
}

PlanFile parse_plan_file(std::span<const uint8_t> bytes, const std::string& name) {
  const ErrorContext ctx{"plan", "", "", name};
  TEC_USER_CHECK(bytes.size() >= kHeaderBytes + kTrailerBytes, ctx)
      << "not a tec plan: " << bytes.size() << " bytes is shorter than a header and trailer";
  TEC_USER_CHECK(bytes.size() <= kMaxPlanBytes, ctx) << "plan of " << bytes.size() << " bytes exceeds the limit";
  FileHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  TEC_USER_CHECK(std::memcmp(h.magic, kMagic, 8) == 0, ctx) << "not a tec plan (wrong magic)";
  TEC_USER_CHECK(h.version >= kOldestFormatVersion && h.version <= kFormatVersion, ctx)
      << "plan format version " << h.version << " is not supported; this build reads versions " << kOldestFormatVersion << " to "
      << kFormatVersion << (h.version > kFormatVersion ? " (the plan is newer than this tec)" : "");
  TEC_USER_CHECK(h.flags == 0 && h.reserved == 0, ctx) << "plan header has unknown flags";
  TEC_USER_CHECK(h.file_size == bytes.size(), ctx)
      << "plan is truncated or padded: header says " << h.file_size << " bytes, file has " << bytes.size();
  Trailer t;
  std::memcpy(&t, bytes.data() + bytes.size() - kTrailerBytes, sizeof t);
  TEC_USER_CHECK(std::memcmp(t.magic, kTrailerMagic, 8) == 0, ctx) << "plan trailer is missing (truncated file?)";
  TEC_USER_CHECK(t.checksum == checksum64(bytes.first(bytes.size() - kTrailerBytes)), ctx)
      << "plan checksum mismatch: the file is corrupted";
  const uint64_t body_end = bytes.size() - kTrailerBytes;
  TEC_USER_CHECK(h.manifest_offset >= kHeaderBytes && h.manifest_size <= kMaxManifestBytes &&
                     h.manifest_offset <= body_end && h.manifest_size <= body_end - h.manifest_offset,
                 ctx)
      << "manifest section [" << h.manifest_offset << ", +" << h.manifest_size << ") lies outside the file";
  TEC_USER_CHECK(h.blobs_offset % kBlobAlignment == 0 && h.blobs_offset >= h.manifest_offset + h.manifest_size &&
                     h.blobs_offset <= body_end && h.blobs_size == body_end - h.blobs_offset,
                 ctx)
      << "blob section [" << h.blobs_offset << ", +" << h.blobs_size << ") is misplaced";
  PlanFile file;
  const auto* text = reinterpret_cast<const char*>(bytes.data() + h.manifest_offset);
  file.manifest = parse_json_text(std::string_view(text, h.manifest_size), ErrorContext{"plan", "", "", name + " manifest"});
  TEC_USER_CHECK(file.manifest.is_object(), ctx) << "plan manifest is not a JSON object";
  file.blobs = bytes.subspan(h.blobs_offset, h.blobs_size);
  return file;
}

std::vector<uint8_t> read_plan_file(const std::string& path) {
  return read_file(path, ReadLimits{kMaxPlanBytes, false}, "plan file", ErrorContext{"plan", "", "", path});
}

}  // namespace tec::plan
