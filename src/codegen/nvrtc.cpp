#include "codegen/nvrtc.h"

#include <nvrtc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "codegen/kernel_sources.h"
#include "core/error.h"
#include "core/file_cache.h"
#include "core/hash.h"

namespace tec::codegen {

namespace {

namespace fs = std::filesystem;

void check_nvrtc(nvrtcResult result, const char* call, const std::string& kernel) {
  if (result != NVRTC_SUCCESS)
    throw Error(ErrorKind::compile, ErrorContext{"codegen", kernel, "", ""},
                std::string(call) + " failed: " + nvrtcGetErrorString(result));
}

std::vector<std::string> options_for(const KernelRequest& r) {
  std::vector<std::string> options = {"--gpu-architecture=" + r.arch + (r.arch_specific ? "a" : ""), "--std=c++17", "-default-device",
                                      "--fmad=false", "--ptxas-options=--warn-on-spills"};
  for (const auto& d : r.defines) options.push_back("-D" + d);
  return options;
}

// The lines of an NVRTC log in which ptxas reports spilled registers.
std::string spill_lines(const std::string& log) {
  std::string out;
  size_t start = 0;
  while (start < log.size()) {
    size_t end = log.find('\n', start);
    if (end == std::string::npos) end = log.size();
    const std::string line = log.substr(start, end - start);
    if (line.find("spilled to local memory") != std::string::npos) out += line + "\n";
    start = end + 1;
  }
  return out;
}

bool looks_like_cubin(std::span<const uint8_t> bytes) {
  return bytes.size() > 4 && std::memcmp(bytes.data(), "\x7f" "ELF", 4) == 0;
}

// For the source of a failed compile, kept for the user to open.
void write_text(const fs::path& path, const std::string& text) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

}  // namespace

std::string nvrtc_version() {
  int major = 0, minor = 0;
  check_nvrtc(nvrtcVersion(&major, &minor), "nvrtcVersion", "");
  return std::to_string(major) + "." + std::to_string(minor);
}

KernelCompiler::KernelCompiler(std::string cache_dir) : cache_dir_(std::move(cache_dir)) {}

CompiledKernel KernelCompiler::compile_one(const KernelRequest& request) const {
  const auto& sources = kernel_sources();
  auto main = std::find_if(sources.begin(), sources.end(), [&](const KernelSource& s) { return s.name == request.source; });
  TEC_INTERNAL_CHECK(main != sources.end(), {}) << "no kernel source '" << request.source << "'";
  const std::vector<std::string> options = options_for(request);
  // Key: everything that can change the cubin.
  std::string key_text = "nvrtc " + nvrtc_version() + "\n";
  for (const auto& o : options) key_text += o + "\n";
  for (const auto& s : sources) key_text += s.name + "\n" + s.text + "\n";
  CompiledKernel out;
  out.cache_key = hex64(checksum64(key_text));
  const std::string name = request.source.substr(0, request.source.find('.'));
  const std::string cached = name + "-" + out.cache_key + ".cubin";
  // ptxas's spill warnings beside the cubin (an empty file: none), so that a hit reports them too.
  const std::string cached_spills = name + "-" + out.cache_key + ".spills";
  auto hit = cache_read(cache_dir_, cached);
  auto hit_spills = cache_read(cache_dir_, cached_spills);
  if (hit && hit_spills && looks_like_cubin(hit->span())) {
    out.cubin.assign(hit->span().begin(), hit->span().end());
    out.spills.assign(hit_spills->span().begin(), hit_spills->span().end());
    out.cache_hit = true;
    return out;
  }  // else missing or damaged: compile again and overwrite it

  const auto start = std::chrono::steady_clock::now();
  std::vector<const char*> header_texts, header_names;
  for (const auto& s : sources)
    if (s.name != request.source) {
      header_texts.push_back(s.text.c_str());
      header_names.push_back(s.name.c_str());
    }
  nvrtcProgram program = nullptr;
  check_nvrtc(nvrtcCreateProgram(&program, main->text.c_str(), main->name.c_str(), static_cast<int>(header_texts.size()),
                                 header_texts.data(), header_names.data()),
              "nvrtcCreateProgram", name);
  std::vector<const char*> option_ptrs;
  for (const auto& o : options) option_ptrs.push_back(o.c_str());
  const nvrtcResult result = nvrtcCompileProgram(program, static_cast<int>(option_ptrs.size()), option_ptrs.data());
  size_t log_size = 0;
  nvrtcGetProgramLogSize(program, &log_size);
  std::string log(log_size, '\0');
  if (log_size) nvrtcGetProgramLog(program, log.data());
  if (result != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&program);
    // Keep the generated source so that the log's file:line can be opened.
    std::string generated = "// " + request.source + " with:";
    for (const auto& o : options) generated += " " + o;
    generated += "\n#line 1 \"" + request.source + "\"\n" + main->text;
    fs::path kept = (cache_dir_.empty() ? fs::temp_directory_path() : fs::path(cache_dir_)) / "failed" / (name + "-" + out.cache_key + ".cu");
    write_text(kept, generated);
    throw Error(ErrorKind::compile, ErrorContext{"codegen", name, "", request.source},
                "NVRTC " + nvrtc_version() + " could not compile " + request.source + " for " + request.arch + " (" +
                    nvrtcGetErrorString(result) + "; generated source kept at " + kept.string() + "):\n" + log);
  }
  size_t cubin_size = 0;
  check_nvrtc(nvrtcGetCUBINSize(program, &cubin_size), "nvrtcGetCUBINSize", name);
  out.cubin.resize(cubin_size);
  check_nvrtc(nvrtcGetCUBIN(program, reinterpret_cast<char*>(out.cubin.data())), "nvrtcGetCUBIN", name);
  nvrtcDestroyProgram(&program);
  out.milliseconds = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  out.spills = spill_lines(log);
  cache_write(cache_dir_, cached_spills, std::span(reinterpret_cast<const uint8_t*>(out.spills.data()), out.spills.size()));
  cache_write(cache_dir_, cached, out.cubin);
  return out;
}

std::vector<CompiledKernel> KernelCompiler::compile(const std::vector<KernelRequest>& requests) const {
  std::vector<CompiledKernel> results(requests.size());
  std::vector<std::exception_ptr> errors(requests.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < requests.size(); i = next++) {
      try {
        results[i] = compile_one(requests[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, std::max<size_t>(1, requests.size()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return results;
}

}  // namespace tec::codegen
