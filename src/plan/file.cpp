#include "plan/file.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>

#include "core/error.h"
#include "core/shape.h"
#include "plan/format.h"

namespace tec::plan {

namespace {

// The container (plan/format.h) with the manifest in place and room for a blob section of
// `section_size` bytes; seal_plan fills in the checksum once the blobs are copied in.
std::vector<uint8_t> plan_container(const std::string& text, uint64_t section_size, uint64_t& blobs_offset) {
  FileHeader header{};
  std::memcpy(header.magic, kMagic, 8);
  header.version = kFormatVersion;
  header.manifest_offset = kBlobAlignment;
  header.manifest_size = text.size();
  header.blobs_offset = static_cast<uint64_t>(round_up(static_cast<int64_t>(kBlobAlignment + text.size()), kBlobAlignment));
  header.blobs_size = section_size;
  header.file_size = header.blobs_offset + header.blobs_size + kTrailerBytes;
  std::vector<uint8_t> out(header.file_size, 0);
  std::memcpy(out.data(), &header, sizeof header);
  std::memcpy(out.data() + header.manifest_offset, text.data(), text.size());
  blobs_offset = header.blobs_offset;
  return out;
}

void seal_plan(std::vector<uint8_t>& out) {
  Trailer trailer{};
  std::memcpy(trailer.magic, kTrailerMagic, 8);
  trailer.checksum = checksum64(std::span(out.data(), out.size() - kTrailerBytes));
  std::memcpy(out.data() + out.size() - kTrailerBytes, &trailer, sizeof trailer);
}

}  // namespace

std::vector<uint8_t> serialize_plan(nlohmann::json manifest, const std::vector<Blob>& blobs) {
  uint64_t offset = 0;
  nlohmann::json index = nlohmann::json::array();
  for (const Blob& b : blobs) {
    index.push_back({{"name", b.name}, {"offset", offset}, {"size", b.bytes.size()}});
    offset = static_cast<uint64_t>(round_up(static_cast<int64_t>(offset + b.bytes.size()), kBlobAlignment));
  }
  manifest["blobs"] = index;
  // One copy of the blobs, straight into the file image (a plan is mostly its 100+ MB of
  // constants).
  uint64_t blobs_offset = 0;
  std::vector<uint8_t> out = plan_container(manifest.dump(), offset, blobs_offset);
  for (size_t i = 0; i < blobs.size(); ++i)
    if (!blobs[i].bytes.empty())
      std::memcpy(out.data() + blobs_offset + index[i]["offset"].get<uint64_t>(), blobs[i].bytes.data(), blobs[i].bytes.size());
  seal_plan(out);
  return out;
}

std::vector<uint8_t> assemble_plan(const std::string& text, std::span<const uint8_t> section) {
  uint64_t blobs_offset = 0;
  std::vector<uint8_t> out = plan_container(text, section.size(), blobs_offset);
  if (!section.empty()) std::memcpy(out.data() + blobs_offset, section.data(), section.size());
  seal_plan(out);
  return out;
}

void write_file_atomically(const std::string& path, std::span<const uint8_t> bytes) {
  auto fail = [&](const std::string& what) {
    throw Error(ErrorKind::io, ErrorContext{"plan", "", "", path}, what + ": " + std::strerror(errno));
  };
  struct stat st {};
  const bool special = path == "-" || (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode));
  if (special) {
    std::FILE* f = path == "-" ? stdout : std::fopen(path.c_str(), "wb");
    if (!f) fail("cannot open for writing");
    const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size() && std::fflush(f) == 0;
    if (f != stdout) std::fclose(f);
    if (!ok) fail("write failed");
    return;
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("cannot create " + tmp);
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size() && std::fflush(f) == 0 &&
                  ::fsync(::fileno(f)) == 0;
  std::fclose(f);
  if (!ok) {
    std::remove(tmp.c_str());
    fail("write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail("cannot rename " + tmp);
  }
}

std::vector<uint8_t> read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::io, ErrorContext{"plan", "", "", path}, "cannot open plan file: " + std::string(std::strerror(errno)));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return bytes;
}

PlanFile parse_plan_file(std::span<const uint8_t> bytes, const std::string& name) {
  const ErrorContext ctx{"plan", "", "", name};
  TEC_USER_CHECK(bytes.size() >= kHeaderBytes + kTrailerBytes, ctx)
      << "not a tec plan: " << bytes.size() << " bytes is shorter than a header and trailer";
  TEC_USER_CHECK(bytes.size() <= kMaxPlanBytes, ctx) << "plan of " << bytes.size() << " bytes exceeds the limit";
  FileHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  TEC_USER_CHECK(std::memcmp(h.magic, kMagic, 8) == 0, ctx) << "not a tec plan (wrong magic)";
  TEC_USER_CHECK(h.version == kFormatVersion, ctx)
      << "plan format version " << h.version << " is not supported; this build reads version " << kFormatVersion
      << (h.version > kFormatVersion ? " (the plan is newer than this tec)" : "");
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
  file.manifest = nlohmann::json::parse(text, text + h.manifest_size, nullptr, /*allow_exceptions=*/false);
  TEC_USER_CHECK(file.manifest.is_object(), ctx) << "plan manifest is not a JSON object";
  file.blobs = bytes.subspan(h.blobs_offset, h.blobs_size);
  return file;
}

}  // namespace tec::plan
