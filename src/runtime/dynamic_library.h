// Libraries loaded at run time (ARCHITECTURE.md §15): NCCL (and, with attention, cuDNN) are
// opened only when a plan needs them, so plans without collectives run on machines without
// NCCL, and a plan that needs a missing library names it: Error(device), exit 7.
#pragma once

#include <string>
#include <vector>

namespace tec::runtime {

class DynamicLibrary {
 public:
  // The first of `names` that dlopen finds (a path, or a soname searched the loader's way:
  // LD_LIBRARY_PATH, the ldconfig cache). `needed_for` says what needs it, for the error.
  static DynamicLibrary open(const std::vector<std::string>& names, const std::string& needed_for);

  DynamicLibrary(DynamicLibrary&& other) noexcept;
  DynamicLibrary& operator=(DynamicLibrary&& other) noexcept;
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;
  ~DynamicLibrary();

  // The address of `symbol`; throws Error(device) naming the library and the symbol (a
  // library older than the entry point).
  void* symbol(const char* symbol) const;
  // The name it was opened by, and the file the loader resolved it to.
  const std::string& name() const { return name_; }
  std::string path() const;

 private:
  DynamicLibrary(void* handle, std::string name) : handle_(handle), name_(std::move(name)) {}
  void* handle_ = nullptr;
  std::string name_;
};

}  // namespace tec::runtime
