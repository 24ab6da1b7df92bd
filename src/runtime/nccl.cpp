#include "runtime/nccl.h"

#include <memory>
#include <mutex>

#include "core/error.h"

namespace tec::runtime {

namespace {

std::string version_string(int code) {
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
}

NcclLibrary open_nccl(const std::string& file, const std::string& needed_for) {
  NcclLibrary n{DynamicLibrary::open({file}, needed_for)};
  resolve_symbol(n.library, n.get_version, "ncclGetVersion");
  if (n.get_version(&n.version) != ncclSuccess)
    throw Error(ErrorKind::device, {"runtime", "", "", ""}, n.library.path() + ": ncclGetVersion failed");
  if (n.version < kMinNcclVersion)
    throw Error(ErrorKind::device, {"runtime", "", "", ""},
                n.library.path() + " is NCCL " + version_string(n.version) + "; tec needs " + version_string(kMinNcclVersion) +
                    " or newer (non-blocking communicator init)");
  resolve_symbol(n.library, n.get_error_string, "ncclGetErrorString");
  resolve_symbol(n.library, n.get_unique_id, "ncclGetUniqueId");
  resolve_symbol(n.library, n.comm_init_rank_config, "ncclCommInitRankConfig");
  resolve_symbol(n.library, n.comm_get_async_error, "ncclCommGetAsyncError");
  resolve_symbol(n.library, n.comm_count, "ncclCommCount");
  resolve_symbol(n.library, n.comm_user_rank, "ncclCommUserRank");
  resolve_symbol(n.library, n.comm_finalize, "ncclCommFinalize");
  resolve_symbol(n.library, n.comm_destroy, "ncclCommDestroy");
  resolve_symbol(n.library, n.comm_abort, "ncclCommAbort");
  resolve_symbol(n.library, n.all_gather, "ncclAllGather");
  resolve_symbol(n.library, n.reduce_scatter, "ncclReduceScatter");
  resolve_symbol(n.library, n.all_reduce, "ncclAllReduce");
  resolve_symbol(n.library, n.group_start, "ncclGroupStart");
  resolve_symbol(n.library, n.group_end, "ncclGroupEnd");
  return n;
}

}  // namespace

NcclLibrary load_nccl(const std::string& file) { return open_nccl(file, "NCCL (" + file + ")"); }

const NcclLibrary& nccl(const std::string& needed_for) {
  // Loaded once and kept to the end of the process: communicators may outlive any session.
  static std::mutex mutex;
  static std::unique_ptr<NcclLibrary> loaded;
  std::lock_guard lock(mutex);
  if (!loaded) {
    const LibraryChoice choice = library_from_environment("TEC_NCCL_LIBRARY", "libnccl.so.2", needed_for);
    loaded = std::make_unique<NcclLibrary>(open_nccl(choice.file, choice.needed_for));
  }
  return *loaded;
}

}  // namespace tec::runtime
