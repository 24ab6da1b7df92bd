#include "core/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>

namespace tec {

namespace {

namespace fs = std::filesystem;

ErrorContext located(const ErrorContext& context, const std::string& path) {
  ErrorContext out = context;
  if (out.location.empty()) out.location = path;
  return out;
}

std::string errno_text() { return std::strerror(errno); }

// Closes a descriptor on every path out.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// ---- temporary files of writes in flight, for the signal handler ----
// Fixed slots of plain bytes: the handler may only read memory and call unlink(2).
struct TemporarySlot {
  std::atomic<bool> used{false};
  char path[4096];
};
std::array<TemporarySlot, 32> g_temporaries;

std::mutex& temporaries_mutex() {
  static std::mutex m;
  return m;
}

int register_temporary(const std::string& path) {
  if (path.size() >= sizeof(TemporarySlot::path)) return -1;
  std::lock_guard lock(temporaries_mutex());
  for (size_t i = 0; i < g_temporaries.size(); ++i) {
    TemporarySlot& slot = g_temporaries[i];
    if (slot.used.load(std::memory_order_relaxed)) continue;
    std::memcpy(slot.path, path.c_str(), path.size() + 1);
    slot.used.store(true, std::memory_order_release);
    return static_cast<int>(i);
  }
  return -1;  // more writes in flight than slots: that file is not removed on a signal
}

void unregister_temporary(int slot) {
  if (slot < 0) return;
  std::lock_guard lock(temporaries_mutex());
  g_temporaries[static_cast<size_t>(slot)].used.store(false, std::memory_order_release);
}

extern "C" void remove_temporaries_and_die(int signal_number) {
  for (TemporarySlot& slot : g_temporaries)
    if (slot.used.load(std::memory_order_acquire)) ::unlink(slot.path);
  std::signal(signal_number, SIG_DFL);
  std::raise(signal_number);
}

// A temporary file a killed process left: "<name>.tmp.<pid>[.<n>]" whose process is gone.
bool is_stale_temporary(const std::string& entry, const std::string& name) {
  const std::string prefix = name + ".tmp.";
  if (entry.size() <= prefix.size() || entry.compare(0, prefix.size(), prefix) != 0) return false;
  const std::string rest = entry.substr(prefix.size());
  const size_t dot = rest.find('.');
  const std::string pid_text = rest.substr(0, dot);
  if (pid_text.empty() || pid_text.size() > 9 || pid_text.find_first_not_of("0123456789") != std::string::npos) return false;
  if (dot != std::string::npos && (dot + 1 == rest.size() || rest.find_first_not_of("0123456789", dot + 1) != std::string::npos))
    return false;
  const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
  return pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH;
}

void remove_stale_temporaries(const fs::path& path) {
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  const std::string name = path.filename().string();
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (const dirent* e = ::readdir(d))
    if (is_stale_temporary(e->d_name, name)) ::unlinkat(::dirfd(d), e->d_name, 0);
  ::closedir(d);
}

bool write_all(int fd, std::span<const std::span<const uint8_t>> pieces) {
  for (const auto& piece : pieces) {
    size_t done = 0;
    while (done < piece.size()) {
      const ssize_t n = ::write(fd, piece.data() + done, piece.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
  }
  return true;
}

}  // namespace

uint64_t regular_file_size(const std::string& path, const std::string& what, const ErrorContext& context) {
  const ErrorContext ctx = located(context, path);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error(ErrorKind::io, ctx, "cannot open " + what + ": " + errno_text());
  if (S_ISDIR(st.st_mode)) throw Error(ErrorKind::io, ctx, "cannot read a " + what + ": this path is a directory");
  if (!S_ISREG(st.st_mode))
    throw Error(ErrorKind::io, ctx, "cannot read a " + what + ": this path is not a regular file (a device, pipe or socket)");
  return static_cast<uint64_t>(st.st_size);
}

std::vector<uint8_t> read_file(const std::string& path, const ReadLimits& limits, const std::string& what,
                               const ErrorContext& context) {
  const ErrorContext ctx = located(context, path);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error(ErrorKind::io, ctx, "cannot open " + what + ": " + errno_text());
  const bool pipe = S_ISFIFO(st.st_mode);
  if (!pipe || !limits.allow_pipe) (void)regular_file_size(path, what, ctx);
  if (!pipe && static_cast<uint64_t>(st.st_size) > limits.max_bytes)
    TEC_USER_ERROR(ctx) << "the " << what << " is " << st.st_size << " bytes, over the limit of " << limits.max_bytes;
  Fd in{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) throw Error(ErrorKind::io, ctx, "cannot open " + what + ": " + errno_text());
  std::vector<uint8_t> bytes(pipe ? 0 : static_cast<size_t>(st.st_size));
  size_t done = 0;
  for (;;) {
    if (done == bytes.size()) {
      if (!pipe) {
        // One more byte would mean the file grew since stat: read what is there at the limit.
        uint8_t extra;
        const ssize_t n = ::read(in.fd, &extra, 1);
        if (n == 0) break;
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw Error(ErrorKind::io, ctx, "cannot read " + what + ": " + errno_text());
        throw Error(ErrorKind::io, ctx, "the " + what + " grew while it was read");
      }
      TEC_USER_CHECK(bytes.size() < limits.max_bytes, ctx)
          << "the " << what << " (a pipe) goes on past the limit of " << limits.max_bytes << " bytes";
      bytes.resize(std::min<uint64_t>(limits.max_bytes, std::max<size_t>(bytes.size() * 2, 1 << 16)));
    }
    const ssize_t n = ::read(in.fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(ErrorKind::io, ctx, "cannot read " + what + ": " + errno_text());
    if (n == 0) {
      if (!pipe)
        throw Error(ErrorKind::io, ctx,
                    "read " + std::to_string(done) + " of the " + what + "'s " + std::to_string(bytes.size()) + " bytes: it shrank while it was read");
      bytes.resize(done);
      break;
    }
    done += static_cast<size_t>(n);
  }
  return bytes;
}

void write_file_atomically(const std::string& path, std::span<const std::span<const uint8_t>> pieces) {
  const ErrorContext ctx{"", "", "", path};
  auto fail = [&](const std::string& what) { throw Error(ErrorKind::io, ctx, what + ": " + errno_text()); };
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) throw Error(ErrorKind::io, ctx, "cannot write: this path is a directory");
  if (path == "-" || (exists && !S_ISREG(st.st_mode))) {
    Fd out{path == "-" ? ::dup(STDOUT_FILENO) : ::open(path.c_str(), O_WRONLY | O_CLOEXEC)};
    if (out.fd < 0) fail("cannot open for writing");
    if (!write_all(out.fd, pieces)) fail("write failed");
    return;
  }
  remove_stale_temporaries(path);
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  const int slot = register_temporary(tmp);
  struct Unregister {
    int slot;
    ~Unregister() { unregister_temporary(slot); }
  } unregister{slot};
  // O_EXCL: never write through a link someone left under the temporary name.
  Fd out{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666)};
  if (out.fd < 0) fail("cannot create " + tmp);
  const bool ok = write_all(out.fd, pieces) && ::fsync(out.fd) == 0;
  const int write_errno = errno;
  ::close(out.fd);
  out.fd = -1;
  if (!ok) {
    ::unlink(tmp.c_str());
    errno = write_errno;
    fail("write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    ::unlink(tmp.c_str());
    errno = rename_errno;
    fail("cannot rename " + tmp);
  }
}

void write_file_atomically(const std::string& path, std::span<const uint8_t> bytes) {
  write_file_atomically(path, std::span(&bytes, 1));
}

void write_text_file(const std::string& path, const std::string& text) {
  write_file_atomically(path, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

void create_output_folder(const std::string& dir, const std::string& option) {
  const ErrorContext ctx{"", "", "", option + " " + dir};
  std::error_code ec;
  const bool made = fs::create_directories(dir, ec);
  if (ec) throw Error(ErrorKind::io, ctx, "cannot create the folder: " + ec.message());
  if (!made && !fs::is_directory(dir, ec)) throw Error(ErrorKind::io, ctx, "this path exists and is not a folder");
}

void remove_temporary_files_on_signals() {
  for (int signal_number : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction current {};
    if (::sigaction(signal_number, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) continue;
    struct sigaction action {};
    action.sa_handler = remove_temporaries_and_die;
    sigemptyset(&action.sa_mask);
    ::sigaction(signal_number, &action, nullptr);
  }
}

std::string file_name_for(const std::string& name, const std::string& suffix) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    const bool plain = std::isalnum(c) || std::strchr("_+=@,-", c) != nullptr || (c == '.' && i > 0);
    if (plain && c != '\0') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (out.empty()) out = "%";  // an empty name still gets a file of its own
  out += suffix;
  TEC_USER_CHECK(out.size() <= kMaxFileNameBytes, (ErrorContext{"", name.substr(0, 64) + (name.size() > 64 ? "..." : ""), "", ""}))
      << "this name of " << name.size() << " bytes makes a file name of " << out.size() << " bytes; tec writes at most "
      << kMaxFileNameBytes;
  return out;
}

}  // namespace tec
