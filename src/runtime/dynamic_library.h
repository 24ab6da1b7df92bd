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
  // The dlopen handle, for a library's own loader (the cuDNN frontend resolves its calls from it).
  void* handle() const { return handle_; }

 private:
  DynamicLibrary(void* handle, std::string name) : handle_(handle), name_(std::move(name)) {}
  void* handle_ = nullptr;
  std::string name_;
};

// `entry` = the address of `symbol` in `library`, as the function pointer type it is.
template <class F>
void resolve_symbol(const DynamicLibrary& library, F& entry, const char* symbol) {
  entry = reinterpret_cast<F>(library.symbol(symbol));
}

// Which file a process loads for a library: $`variable` when it is set (a path, e.g. a pip
// wheel's copy), else `soname` by the loader's search; and `needed_for` saying which.
struct LibraryChoice {
  std::string file;
  std::string needed_for;
};
LibraryChoice library_from_environment(const char* variable, const char* soname, const std::string& needed_for);

}  // namespace tec::runtime
