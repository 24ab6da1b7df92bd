#include "runtime/dynamic_library.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <utility>

#include "core/error.h"

namespace tec::runtime {

DynamicLibrary DynamicLibrary::open(const std::vector<std::string>& names, const std::string& needed_for) {
  std::string tried;
  for (const std::string& name : names) {
    // RTLD_LOCAL: its symbols stay out of the global namespace (a service may load another copy).
    if (void* handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return DynamicLibrary(handle, name);
    const char* why = ::dlerror();
    tried += "\n  " + name + ": " + (why ? why : "not found");
  }
  throw Error(ErrorKind::device, {"runtime", "", "", ""},
              needed_for + " needs " + (names.empty() ? std::string("a library") : names.back()) + ", which could not be loaded:" + tried +
                  "\n(install it, or put its folder on LD_LIBRARY_PATH)");
}

DynamicLibrary::DynamicLibrary(DynamicLibrary&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), name_(std::move(other.name_)) {}

DynamicLibrary& DynamicLibrary::operator=(DynamicLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_) ::dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    name_ = std::move(other.name_);
  }
  return *this;
}

DynamicLibrary::~DynamicLibrary() {
  if (handle_) ::dlclose(handle_);
}

void* DynamicLibrary::symbol(const char* symbol) const {
  ::dlerror();  // clear: a null symbol is only an error when dlerror says so
  void* address = ::dlsym(handle_, symbol);
  const char* why = ::dlerror();
  if (why || !address)
    throw Error(ErrorKind::device, {"runtime", "", "", ""},
                name_ + " (" + path() + ") has no entry point " + symbol + (why ? std::string(": ") + why : std::string()) +
                    "; it is older than tec needs");
  return address;
}

LibraryChoice library_from_environment(const char* variable, const char* soname, const std::string& needed_for) {
  const char* file = std::getenv(variable);
  if (file && *file) return {file, needed_for + " (" + variable + ")"};
  return {soname, needed_for};
}

std::string DynamicLibrary::path() const {
  const link_map* map = nullptr;
  if (::dlinfo(handle_, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name) return map->l_name;
  return name_;
}

}  // namespace tec::runtime
