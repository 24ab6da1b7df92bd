// NCCL loaded at run time (ARCHITECTURE.md §14-15): the entry points tec's collectives call,
// resolved from libnccl.so.2 the first time a plan with collectives needs them. Only the
// types come from nccl.h (the CUDA toolkit's, at build time); nothing links NCCL, so a plan
// without collectives runs where there is no NCCL.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "runtime/dynamic_library.h"

namespace tec::runtime {

struct NcclLibrary {
  DynamicLibrary library;
  int version = 0;  // ncclGetVersion: major * 10000 + minor * 100 + patch (2.28.9: 22809)

  ncclResult_t (*get_version)(int*) = nullptr;
  const char* (*get_error_string)(ncclResult_t) = nullptr;
  ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
  ncclResult_t (*comm_init_rank_config)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*) = nullptr;
  ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t*) = nullptr;
  ncclResult_t (*comm_count)(const ncclComm_t, int*) = nullptr;
  ncclResult_t (*comm_user_rank)(const ncclComm_t, int*) = nullptr;
  ncclResult_t (*comm_finalize)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_abort)(ncclComm_t) = nullptr;
  ncclResult_t (*all_gather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*reduce_scatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*group_start)() = nullptr;
  ncclResult_t (*group_end)() = nullptr;
};

// The oldest NCCL tec takes: ncclCommInitRankConfig's non-blocking init and ncclCommFinalize
// (2.14), and reduce-scatter and all-gather captured into CUDA graphs.
constexpr int kMinNcclVersion = 21400;

// Opens `file` (a path or a soname) and resolves every entry point; throws Error(device)
// naming the file when it is missing, lacks an entry point, or is older than kMinNcclVersion.
NcclLibrary load_nccl(const std::string& file);

// The process's NCCL, loaded once on first use: $TEC_NCCL_LIBRARY if set (e.g. the
// nvidia-nccl-cu13 wheel's lib/libnccl.so.2), else libnccl.so.2 by the loader's search.
// `needed_for` names what needs it, for the error ("plan 'mlp_tp2.teplan' (all_gather
// 'fc1.gather')"); a failed load is retried on the next call.
const NcclLibrary& nccl(const std::string& needed_for);

// A rank's place in its tensor-parallel group: the communicator (the caller's: a service makes
// it from the ncclUniqueId it distributes; te-run --tp makes one per GPU) and this rank.
struct Communicator {
  ncclComm_t comm = nullptr;
  int rank = 0;
};

// Throws Error(device) for a failed NCCL call, naming `call`, `step` and NCCL's reason. On a
// non-blocking communicator a call may return ncclInProgress: waits for it, up to
// `timeout_seconds`, then aborts the communicator (so no rank hangs on it) and throws.
void check_nccl(const NcclLibrary& nccl, ncclComm_t comm, ncclResult_t result, const char* call, const std::string& step,
                double timeout_seconds);

// Rank `rank` of a new group of `size` from `id`, made non-blocking: a rank that never joins
// gives an error after `timeout_seconds` instead of a hang. The device is the current one.
ncclComm_t init_communicator(const NcclLibrary& nccl, const ncclUniqueId& id, int size, int rank, double timeout_seconds);

// Waits for `stream`, whose work includes collectives on `comm`, up to `timeout_seconds`;
// throws Error(device) on NCCL's asynchronous error or the timeout, after aborting `comm`,
// since a collective that never completes (a rank gone, a mismatched plan) cannot be cancelled.
void wait_for_collectives(const NcclLibrary& nccl, ncclComm_t comm, cudaStream_t stream, double timeout_seconds,
                          const std::string& what);

}  // namespace tec::runtime
