#include "runtime/nccl.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "runtime/session.h"

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
  resolve_symbol(n.library, n.reduce, "ncclReduce");
  resolve_symbol(n.library, n.send, "ncclSend");
  resolve_symbol(n.library, n.recv, "ncclRecv");
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

namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

[[noreturn]] void throw_nccl(const NcclLibrary& nccl, ncclResult_t result, const std::string& call, const std::string& step) {
  throw Error(ErrorKind::device, {"runtime", step, "", ""}, call + " failed: " + nccl.get_error_string(result));
}

// Polls a non-blocking communicator until its last call is done; false on timeout.
bool settle(const NcclLibrary& nccl, ncclComm_t comm, ncclResult_t& result, Clock::time_point deadline) {
  while (result == ncclInProgress) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (nccl.comm_get_async_error(comm, &result) != ncclSuccess) result = ncclInternalError;
  }
  return true;
}

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", s);
  return text;
}

}  // namespace

void check_nccl(const NcclLibrary& nccl, ncclComm_t comm, ncclResult_t result, const char* call, const std::string& step,
                double timeout_seconds) {
  if (!settle(nccl, comm, result, deadline_after(timeout_seconds))) {
    nccl.comm_abort(comm);
    throw Error(ErrorKind::device, {"runtime", step, "", ""},
                std::string(call) + " did not finish within " + seconds(timeout_seconds) +
                    " (a rank that never joined?); the communicator was aborted");
  }
  if (result != ncclSuccess) throw_nccl(nccl, result, call, step);
}

ncclComm_t init_communicator(const NcclLibrary& nccl, const ncclUniqueId& id, int size, int rank, double timeout_seconds) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t result = nccl.comm_init_rank_config(&comm, size, id, rank, &config);
  const std::string what = "rank " + std::to_string(rank) + " of " + std::to_string(size);
  if (result != ncclSuccess && result != ncclInProgress) {
    if (comm) nccl.comm_abort(comm);
    throw_nccl(nccl, result, "ncclCommInitRankConfig (" + what + ")", "");
  }
  if (!settle(nccl, comm, result, deadline_after(timeout_seconds))) {
    nccl.comm_abort(comm);
    throw Error(ErrorKind::device, {"runtime", "", "", ""},
                "NCCL communicator init (" + what + ") did not complete within " + seconds(timeout_seconds) +
                    ": not every rank joined");
  }
  if (result != ncclSuccess) {
    nccl.comm_abort(comm);
    throw_nccl(nccl, result, "NCCL communicator init (" + what + ")", "");
  }
  return comm;
}

void wait_for_collectives(const NcclLibrary& nccl, ncclComm_t comm, cudaStream_t stream, double timeout_seconds,
                          const std::string& what) {
  const Clock::time_point deadline = deadline_after(timeout_seconds);
  for (;;) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) check_cuda(e, "cudaStreamQuery", what);
    ncclResult_t async = ncclSuccess;
    nccl.comm_get_async_error(comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      nccl.comm_abort(comm);
      throw_nccl(nccl, async, what, "");
    }
    if (Clock::now() > deadline) {
      nccl.comm_abort(comm);
      throw Error(ErrorKind::device, {"runtime", "", "", ""},
                  what + " did not finish within " + seconds(timeout_seconds) +
                      ": a collective waits for a rank that is not running the same plan; the communicator was aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace tec::runtime
