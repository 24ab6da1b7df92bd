#include "runtime/session.h"

#include <cublasLt.h>
#include <cuda.h>
#include <cudaTypedefs.h>

#include <cmath>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <tuple>
#include <mutex>

#include "core/error.h"
#include "core/hash.h"
#include "mid_m_layout.h"
#include "runtime/attention.h"
#include "runtime/gemm.h"
#include "status.h"
#include "small_m_layout.h"

namespace tec::runtime {

namespace {

ErrorContext ctx(const std::string& step) { return ErrorContext{"runtime", step, "", ""}; }

// CUDA's documentation says of these errors that the process "must be terminated and
// relaunched" to use CUDA again: every later call returns them too.
bool is_sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorContained:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorExternalDevice: return true;
    default: return false;
  }
}

std::mutex g_lost_mutex;
std::map<int, std::string> g_lost;  // device -> the sticky error that made it unusable
std::atomic<bool> g_any_lost{false};  // lets every run skip the mutex until something is lost

[[noreturn]] void throw_lost(int device, const std::string& step, const std::string& first_error) {
  throw Error(ErrorKind::device_lost, ctx(step),
              "GPU " + std::to_string(device) + " is unusable since " + first_error +
                  "; every session on it refuses to run and only a new process can use it (te-run --eager or "
                  "compute-sanitizer finds the faulting kernel)");
}

void refuse_if_lost(int device) {
  if (!g_any_lost.load(std::memory_order_acquire)) return;
  std::string first_error;
  {
    std::lock_guard lock(g_lost_mutex);
    const auto it = g_lost.find(device);
    if (it == g_lost.end()) return;
    first_error = it->second;
  }
  throw_lost(device, "", first_error);
}

void check(cudaError_t e, const char* call, const std::string& step) { check_cuda(e, call, step); }
void check(cublasStatus_t s, const char* call, const std::string& step) { check_cublas(s, call, step); }
#define TEC_CUDA(call, step) check((call), #call, (step))

// Fault injection (fail_device_acquisition_at): counts every acquisition.
std::atomic<int64_t> g_acquisitions{0}, g_fail_acquisition_at{0};
bool injected_failure() { return g_acquisitions.fetch_add(1) + 1 == g_fail_acquisition_at.load(); }
template <typename Status>
Status allocation_failure();
template <>
cudaError_t allocation_failure() { return cudaErrorMemoryAllocation; }
template <>
cublasStatus_t allocation_failure() { return CUBLAS_STATUS_ALLOC_FAILED; }
// A CUDA or cuBLASLt call that acquires a resource, checked like TEC_CUDA.
#define TEC_ACQUIRE(call, step) check(injected_failure() ? allocation_failure<decltype(call)>() : (call), #call, (step))

// cudaMalloc with the bytes needed and free in the error.
void* device_alloc(size_t bytes, const char* what) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t e = injected_failure() ? cudaErrorMemoryAllocation : cudaMalloc(&p, bytes);
  // Nothing may allocate (and so throw) between cudaMalloc and the caller owning p.
  if (e == cudaSuccess) return p;
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    throw Error(ErrorKind::device, ctx(""), std::string("cannot allocate the ") + what + ": " + std::to_string(bytes) +
                                               " bytes needed, " + std::to_string(free_bytes) + " free of " +
                                               std::to_string(total) + " (" + cudaGetErrorString(e) + ")");
  }
  check_cuda(e, "cudaMalloc", what);
  return nullptr;  // not reached: check_cuda throws
}

// The kernel-argument struct of kernels/row.cu (TecArgs) and of the delayed-scaling table.
struct KernelSlots {
  unsigned long long slot[plan::kMaxKernelArgs];
};
// A kernel's TMA tensor maps, its second parameter (kernels/hopper.cuh: TecTensorMaps).
struct TensorMaps {
  CUtensorMap map[plan::kMaxTensorMaps];
};
static_assert(sizeof(CUtensorMap) == 128 && sizeof(TensorMaps) == 128 * plan::kMaxTensorMaps);

// cuTensorMapEncodeTiled from the driver, which cudart finds: tec links no libcuda.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder(const std::string& step) {
  static const auto [encode, status] = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found);
    return std::pair{e == cudaSuccess && found == cudaDriverEntryPointSuccess ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f) : nullptr,
                     e};
  }();
  if (!encode)
    throw Error(ErrorKind::device, ctx(step),
                std::string("the CUDA driver has no cuTensorMapEncodeTiled (") + cudaGetErrorName(status) + "); a driver for CUDA 12 or later is needed");
  return encode;
}

// Encodes `m` over `base`: rows of row_bytes bytes, boxes of box_rows x 128 bytes in the
// 128-byte swizzle, rows past the end read as zeros.
void encode_tensor_map(CUtensorMap& out, const plan::TensorMap& m, void* base, const std::string& buffer, const std::string& step) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(m.row_bytes), static_cast<cuuint64_t>(m.rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(m.row_bytes)};
  const cuuint32_t box[2] = {128, static_cast<cuuint32_t>(m.box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = tensor_map_encoder(step)(&out, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, base, dims, strides, box, element_strides,
                                              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(ErrorKind::device, ctx(step),
                "cuTensorMapEncodeTiled failed (CUresult " + std::to_string(static_cast<int>(r)) + ") for buffer '" + buffer + "': " +
                    std::to_string(m.rows) + " rows of " + std::to_string(m.row_bytes) + " bytes at " +
                    std::to_string(reinterpret_cast<uintptr_t>(base)) + ", boxes of " + std::to_string(m.box_rows) + " rows");
}

struct DelayedEntry {  // kernels/delayed_scaling_update.cu: TecDelayedTensor
  float* history;
  float* scale;
  float* scale_inv;
  float scaled_max;
  int most_recent;
  int history_stride;
};

}  // namespace

void check_cuda(cudaError_t e, const char* call, const std::string& step) {
  if (e == cudaSuccess) return;
  const std::string what = std::string(call) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  if (!is_sticky(e)) throw Error(ErrorKind::device, ctx(step), what);
  int device = 0;
  cudaGetDevice(&device);
  std::string first_error;
  {
    std::lock_guard lock(g_lost_mutex);
    first_error = g_lost.emplace(device, what + (step.empty() ? "" : " in '" + step + "'")).first->second;
    g_any_lost.store(true, std::memory_order_release);
  }
  throw_lost(device, step, first_error);
}

int64_t fail_device_acquisition_at(int64_t k) {
  g_fail_acquisition_at = k;
  return g_acquisitions.exchange(0);
}

namespace {

// The number of CUDA devices; 0, with the reason in `why`, when there is none or the driver
// cannot say.
int device_count(std::string& why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess && count > 0) return count;
  cudaGetLastError();
  why = std::string("no CUDA device: ") + (e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports none");
  return 0;
}

std::string arch_of(const cudaDeviceProp& prop) { return "sm_" + std::to_string(prop.major * 10 + prop.minor); }

}  // namespace

std::string require_device() {
  std::string why;
  if (device_count(why) == 0) throw Error(ErrorKind::device, ctx(""), why + " (run on the CPU reference with --backend cpu)");
  int device = 0;
  TEC_CUDA(cudaGetDevice(&device), "");
  refuse_if_lost(device);
  cudaDeviceProp prop{};
  TEC_CUDA(cudaGetDeviceProperties(&prop, device), "");
  return arch_of(prop);
}

// Constants and modules of one plan on one device, shared by its sessions.
struct DeviceShared {
  int device = 0;
  void* constants = nullptr;
  std::vector<cudaLibrary_t> libraries;
  ~DeviceShared() {
    for (cudaLibrary_t l : libraries)
      if (l) cudaLibraryUnload(l);
    if (constants) cudaFree(constants);
  }
};

namespace {

// Constants with a device_layout, each once (profiles share them; Plan::load checked that
// they agree), permuted on the host and copied over the row-major bytes just uploaded.
void upload_device_layouts(const plan::Plan& plan, const std::vector<uint8_t>& constants, void* device_constants) {
  std::map<int64_t, const plan::Buffer*> tiled;
  for (const plan::Profile& p : plan.profiles)
    for (const plan::Buffer& b : p.buffers)
      if (b.region == "constants" && !b.device_layout.empty()) tiled.emplace(b.offset, &b);
  std::vector<uint8_t> permuted;
  for (const auto& [offset, b] : tiled) {
    const int64_t n_rows = b->shape[0], k = b->shape[1] * storage_bytes(b->dtype);  // row bytes
    const uint8_t* source = constants.data() + offset;
    permuted.resize(static_cast<size_t>(b->bytes));
    const bool small = b->device_layout == "small_m_tiles";  // else mid_m_tiles (Plan::load allows no other)
    // 16-byte runs of a row stay together in both layouts.
    for (int64_t n = 0; n < n_rows; ++n)
      for (int64_t c = 0; c < k; c += 16)
        std::memcpy(permuted.data() + (small ? tec_small_m_tiled_offset(n, c, k) : tec_mid_m_tiled_offset(n, c, k)),
                    source + n * k + c, 16);
    TEC_CUDA(cudaMemcpy(static_cast<char*>(device_constants) + offset, permuted.data(), permuted.size(), cudaMemcpyHostToDevice),
             "constant '" + b->name + "' in its " + b->device_layout + " device layout");
  }
}

std::mutex g_shared_mutex;
// Keyed by plan, device and tensor-parallel rank (ranks hold different weight shards).
std::map<std::tuple<const plan::Plan*, int, int>, std::weak_ptr<DeviceShared>> g_shared;

std::shared_ptr<DeviceShared> shared_for(const plan::Plan& plan, int device, int rank, const std::string& arch) {
  std::lock_guard lock(g_shared_mutex);
  const auto key = std::make_tuple(&plan, device, rank);
  if (const auto it = g_shared.find(key); it != g_shared.end())
    if (auto existing = it->second.lock()) return existing;
  auto shared = std::make_shared<DeviceShared>();
  shared->device = device;
  const std::vector<uint8_t>& constants = plan.constants_of(rank);
  shared->constants = device_alloc(constants.size(), "plan constants");
  if (!constants.empty())
    TEC_CUDA(cudaMemcpy(shared->constants, constants.data(), constants.size(), cudaMemcpyHostToDevice),
             "constants of rank " + std::to_string(rank));
  upload_device_layouts(plan, constants, shared->constants);
  for (size_t m = 0; m < plan.modules.size(); ++m) {
    auto it = plan.modules[m].cubins.find(arch);
    if (it == plan.modules[m].cubins.end()) {
      std::string have;
      for (const auto& [a, c] : plan.modules[m].cubins) have += (have.empty() ? "" : ", ") + a;
      throw Error(ErrorKind::unsupported, ctx(""),
                  "this GPU is " + arch + ", the plan has kernels for " + have + "; recompile with te-compile --arch " + arch);
    }
    // Owned (by shared) before loading: nothing may throw between the load and the owner.
    cudaLibrary_t& lib = shared->libraries.emplace_back(nullptr);
    TEC_ACQUIRE(cudaLibraryLoadData(&lib, it->second.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
                "module " + std::to_string(m) + " (" + plan.modules[m].source + ")");
  }
  g_shared[key] = shared;  // only now: a failure above leaves no entry
  return shared;
}

// Entries whose sessions are all gone go, so that a service loading plans for days does not
// grow the map (and a failed session creation leaves nothing behind).
void forget_unused_shared() noexcept {
  std::lock_guard lock(g_shared_mutex);
  std::erase_if(g_shared, [](const auto& entry) { return entry.second.expired(); });
}

}  // namespace

namespace {

// Every rank of a group must run the same plan and profile: their collectives pair up launch by
// launch, and a rank on another plan (another compile, other weights, another profile) would
// leave the others waiting or mix tensors of other shapes. The ranks' fingerprints of plan and
// profile are all-gathered once, when the sessions are made (all ranks at once, as NCCL needs).
void check_same_plan_on_every_rank(const NcclLibrary& nccl, const Communicator& group, int ranks, uint64_t fingerprint) {
  const auto count = static_cast<size_t>(ranks);
  const std::unique_ptr<void, void (*)(void*)> device(device_alloc((count + 1) * sizeof(uint64_t), "plan fingerprints"),
                                                      [](void* p) { cudaFree(p); });
  auto* slots = static_cast<uint64_t*>(device.get());
  cudaStream_t stream = nullptr;
  TEC_ACQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "plan check");
  const std::unique_ptr<CUstream_st, cudaError_t (*)(cudaStream_t)> stream_owner(stream, cudaStreamDestroy);
  TEC_CUDA(cudaMemcpy(slots + count, &fingerprint, sizeof fingerprint, cudaMemcpyHostToDevice), "plan check");
  const std::string what = "rank " + std::to_string(group.rank) + "'s check that every rank runs this plan";
  check_nccl(nccl, group.comm, nccl.all_gather(slots + count, slots, 1, ncclUint64, group.comm, stream), "ncclAllGather", what, 300);
  wait_for_collectives(nccl, group.comm, stream, 300, what);
  std::vector<uint64_t> every(count);
  TEC_CUDA(cudaMemcpy(every.data(), slots, count * sizeof(uint64_t), cudaMemcpyDeviceToHost), "plan check");
  for (size_t r = 0; r < count; ++r)
    TEC_USER_CHECK(every[r] == fingerprint, (ErrorContext{"runtime", "", "", ""}))
        << "rank " << r << " runs another plan or profile than rank " << group.rank
        << " (their collectives would not pair up): every rank must load the same .teplan file and pick the same profile";
}

}  // namespace

struct Session::Impl {
  std::shared_ptr<DeviceShared> shared;
  void* arena = nullptr;
  void* cublas_workspace = nullptr;
  DelayedEntry* delayed_table = nullptr;
  int delayed_count = 0;
  cublasLtHandle_t lt = nullptr;
  struct GemmState {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    float alpha = 1.0f, beta = 0.0f;
    size_t x_offset = 0, d_offset = 0, c_offset = 0;  // bytes: a row block of a split GEMM (this rank's)
  };
  std::vector<GemmState> gemms;            // per launch (unused entries for non-GEMMs)
  std::vector<cudaKernel_t> kernels;       // per launch
  std::vector<unsigned> grid_x;            // per launch: a persistent kernel's grid is cut to the resident blocks
  std::vector<KernelSlots> slots;          // per launch
  std::vector<TensorMaps> tensor_maps;     // per launch (a kernel's with tensor maps)
  std::vector<std::string> where;          // per launch: the step it belongs to, for errors
  bool early_launch = false;               // programmatic dependent launch for kernels that allow it
  cudaStream_t capture_stream = nullptr;
  // Tensor-parallel overlap: collectives on a second stream, forked from and joined to the
  // run's by one event per fork or join launch.
  cudaStream_t side_stream = nullptr;
  std::vector<cudaEvent_t> events;  // per launch
  struct Graph {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
  };
  std::map<Selection, Graph> graphs;  // one per selection of launches, captured on first use
  // Train plans: the host's copies of the scalars that select a run's steps.
  bool workspace_stale = true;  // no run has made the weights' copies yet, or state was restored
  std::map<std::string, float> selecting_scalars;  // first_microbatch, forward_only, where the plan has them
  // The status word (kernels/status.h) of plans whose kernels check run-time data (MoE routing):
  // zeroed at the start of every run, read when results are read.
  int* status = nullptr;
  std::map<int, std::set<std::string>> status_steps;  // bit -> the steps whose kernels may set it
  // Attention launches: their cuDNN graphs and the workspace they share (launches run in order).
  std::unique_ptr<AttentionRunner> attention;
  void* attention_workspace = nullptr;

  ~Impl() {
    for (auto& [selection, g] : graphs) {
      if (g.exec) cudaGraphExecDestroy(g.exec);
      if (g.graph) cudaGraphDestroy(g.graph);
    }
    if (capture_stream) cudaStreamDestroy(capture_stream);
    for (cudaEvent_t e : events)
      if (e) cudaEventDestroy(e);
    if (side_stream) cudaStreamDestroy(side_stream);
    for (GemmState& g : gemms) {
      if (g.desc) cublasLtMatmulDescDestroy(g.desc);
      for (auto* l : {g.a, g.b, g.c, g.d})
        if (l) cublasLtMatrixLayoutDestroy(l);
    }
    if (lt) cublasLtDestroy(lt);
    if (status) cudaFree(status);
    if (attention_workspace) cudaFree(attention_workspace);
    if (delayed_table) cudaFree(delayed_table);
    if (cublas_workspace) cudaFree(cublas_workspace);
    if (arena) cudaFree(arena);
    if (shared) {
      shared.reset();
      forget_unused_shared();
    }
  }
};

AttentionPointers Session::attention_pointers(size_t launch) const {
  const plan::Attention& a = profile_.launches.at(launch).attention;
  auto at = [&](int buffer) { return buffer < 0 ? nullptr : address(buffer); };
  return {at(a.q), at(a.k), at(a.v), at(a.o), at(a.stats), at(a.seq_lens), at(a.bias), at(a.d_o), at(a.dq), at(a.dk), at(a.dv)};
}

void* Session::address(int buffer) const {
  const plan::Buffer& b = profile_.buffers.at(static_cast<size_t>(buffer));
  char* base = static_cast<char*>(b.region == "constants" ? impl_->shared->constants : impl_->arena);
  return base + b.offset;
}

namespace {
std::string step_name(const plan::Profile& p, int step) {
  return step < 0 ? std::string("delayed scaling") : p.steps.at(static_cast<size_t>(step)).name;
}
}  // namespace

Session::Session(std::shared_ptr<const plan::Plan> plan, const plan::Profile& profile, Communicator group)
    : plan_(std::move(plan)), profile_(profile), impl_(std::make_unique<Impl>()), group_(group) {
  TEC_UNSUPPORTED_CHECK(profile_.gpu_supported, (ErrorContext{"runtime", "", "", ""}))
      << "this plan has no GPU code: " << profile_.gpu_reason << " (run it with --backend cpu)";
  if (plan_->tp_size > 1) {
    const ErrorContext where{"runtime", "", "", plan_->name};
    TEC_USER_CHECK(group.comm != nullptr, where)
        << "the plan is tensor parallel over " << plan_->tp_size
        << " ranks: a session needs the NCCL communicator of its group and its rank (te-run --tp " << plan_->tp_size
        << " runs every rank on its own GPU)";
    nccl_ = &nccl("plan '" + plan_->name + "' (tensor parallel over " + std::to_string(plan_->tp_size) + " ranks)");
    int count = 0, user_rank = -1;
    check_nccl(*nccl_, group.comm, nccl_->comm_count(group.comm, &count), "ncclCommCount", "", 60);
    check_nccl(*nccl_, group.comm, nccl_->comm_user_rank(group.comm, &user_rank), "ncclCommUserRank", "", 60);
    TEC_USER_CHECK(count == plan_->tp_size, where)
        << "the communicator has " << count << " ranks; the plan is tensor parallel over " << plan_->tp_size;
    TEC_USER_CHECK(user_rank == group.rank, where)
        << "the session is for rank " << group.rank << " but the communicator's rank is " << user_rank;
  } else {
    group_ = {};
  }
  const std::string arch = require_device();
  int device = 0;
  TEC_CUDA(cudaGetDevice(&device), "");
  cudaDeviceProp prop{};
  TEC_CUDA(cudaGetDeviceProperties(&prop, device), "");
  device_name_ = prop.name;
  Impl& s = *impl_;
  // Hopper and later; TEC_DISABLE_EARLY_LAUNCH=1 turns it off, for measuring what it gains.
  const char* no_early = std::getenv("TEC_DISABLE_EARLY_LAUNCH");
  s.early_launch = prop.major >= 9 && !(no_early && std::string(no_early) == "1");
  s.shared = shared_for(*plan_, device, group_.rank, arch);
  if (nccl_) {
    std::string dims;
    for (const auto& [dim, size] : profile_.dims) dims += dim + "=" + std::to_string(size) + ";";
    check_same_plan_on_every_rank(*nccl_, group_, static_cast<int>(plan_->tp_size), checksum64(plan_->manifest.dump() + dims));
  }
  s.arena = device_alloc(static_cast<size_t>(plan_->arena_bytes), "arena");
  if (plan_->arena_bytes) TEC_CUDA(cudaMemset(s.arena, 0, static_cast<size_t>(plan_->arena_bytes)), "arena");
  s.cublas_workspace = device_alloc(kCublasWorkspaceBytes, "cuBLASLt workspace");
  // cuBLASLt's split-K reduction reads parts of the workspace that no kernel of this run wrote
  // (compute-sanitizer initcheck on mlp.json): zeroed once, whatever it reads is deterministic.
  TEC_CUDA(cudaMemset(s.cublas_workspace, 0, kCublasWorkspaceBytes), "cuBLASLt workspace");
  TEC_ACQUIRE(cublasLtCreate(&s.lt), "");

  // Delayed scaling: scales start at 1, and one table drives both bookkeeping kernels.
  std::vector<DelayedEntry> table;
  for (const std::string& name : profile_.delayed) {
    const plan::Tensor& t = profile_.tensors.at(name);
    const Quantizer& q = *t.proto.quantizer;
    // A grouped tensor (an MoE train plan's expert weights) has an entry per member: its
    // history is column m of [L, members], its scale and scale_inv element m (the lowering
    // checks that the members' scale_inv are packed).
    const int64_t members = t.proto.is_grouped() ? t.proto.group_members : 1;
    const std::vector<float> ones(static_cast<size_t>(members), 1.0f);
    upload(t.state.at("scale"), ones.data(), ones.size() * 4, nullptr);
    for (int64_t m = 0; m < members; ++m) {
      DelayedEntry e{};
      e.history = static_cast<float*>(address(t.state.at("amax_history"))) + m;
      e.scale = static_cast<float*>(address(t.state.at("scale"))) + m;
      e.scale_inv = static_cast<float*>(address(t.buffers.at(BufferRole::scale_inv))) + m;
      e.scaled_max = max_finite(q.dtype) * std::ldexp(1.0f, -q.margin);
      e.most_recent = q.amax_algo == AmaxAlgo::most_recent ? 1 : 0;
      e.history_stride = static_cast<int>(members);
      table.push_back(e);
    }
  }
  // Train plans: masters and hyperparameters start from the plan's constants.
  for (const auto& [name, t] : profile_.tensors) {
    const auto init = t.state.find("init");
    if (init == t.state.end()) continue;
    const int data = t.buffers.at(BufferRole::data);
    const plan::Buffer& from = profile_.buffers.at(static_cast<size_t>(init->second));
    TEC_CUDA(cudaMemcpy(address(data), address(init->second), static_cast<size_t>(from.bytes), cudaMemcpyDeviceToDevice),
             "state '" + name + "'");
    if ((name == "first_microbatch" || name == "forward_only") && from.bytes == 4) {
      float value = 0;
      std::memcpy(&value, plan_->constants.data() + from.offset, 4);
      s.selecting_scalars[name] = value;
    }
  }
  s.delayed_count = static_cast<int>(table.size());
  if (!table.empty()) {
    s.delayed_table = static_cast<DelayedEntry*>(device_alloc(table.size() * sizeof(DelayedEntry), "delayed-scaling table"));
    TEC_CUDA(cudaMemcpy(s.delayed_table, table.data(), table.size() * sizeof(DelayedEntry), cudaMemcpyHostToDevice), "");
  }

  // Kernels, argument slots and GEMM descriptors, once.
  const size_t n = profile_.launches.size();
  s.gemms.resize(n);
  s.kernels.assign(n, nullptr);
  s.grid_x.assign(n, 0);
  s.slots.resize(n);
  s.tensor_maps.resize(n);
  for (size_t i = 0; i < n; ++i) s.where.push_back(step_name(profile_, profile_.launches[i].step));
  for (size_t i = 0; i < n; ++i) {
    const plan::Launch& l = profile_.launches[i];
    const std::string& where = s.where[i];
    if (l.module >= 0)
      TEC_CUDA(cudaLibraryGetKernel(&s.kernels[i], s.shared->libraries.at(static_cast<size_t>(l.module)), l.entry.c_str()),
               where);
    if (l.shared_bytes > 48 * 1024) {  // past the default, a kernel has to opt in
      int most = 0;
      TEC_CUDA(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, s.shared->device), where);
      if (l.shared_bytes > most)
        throw Error(ErrorKind::unsupported, ctx(where),
                    "kernel " + l.entry + " needs " + std::to_string(l.shared_bytes) + " bytes of shared memory per block; this GPU allows " +
                        std::to_string(most) + " (recompile with te-compile --arch for this GPU)");
      TEC_CUDA(cudaKernelSetAttributeForDevice(s.kernels[i], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(l.shared_bytes), s.shared->device),
               where);
    }
    if (l.kind == "kernel") {
      s.grid_x[i] = static_cast<unsigned>(l.grid[0]);
      if (l.persistent) {
        int per_sm = 0, sms = 0;
        TEC_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reinterpret_cast<const void*>(s.kernels[i]),
                                                               static_cast<int>(l.block[0] * l.block[1] * l.block[2]),
                                                               static_cast<size_t>(l.shared_bytes)),
                 where);
        TEC_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, s.shared->device), where);
        if (per_sm < 1)
          throw Error(ErrorKind::unsupported, ctx(where), "kernel " + l.entry + " fits no SM of this GPU (its block or shared memory is too large)");
        s.grid_x[i] = static_cast<unsigned>(std::min<int64_t>(l.grid[0], static_cast<int64_t>(per_sm) * sms));
      }
      std::memset(&s.slots[i], 0, sizeof(KernelSlots));
      for (size_t a = 0; a < l.args.size(); ++a) {
        const plan::KernelArg& arg = l.args[a];
        if (arg.kind == plan::KernelArg::Kind::buffer)
          s.slots[i].slot[a] = reinterpret_cast<unsigned long long>(address(arg.buffer));
        else if (arg.kind == plan::KernelArg::Kind::value)
          s.slots[i].slot[a] = static_cast<unsigned long long>(arg.value);
        else if (arg.kind == plan::KernelArg::Kind::status) {
          if (!s.status) {
            s.status = static_cast<int*>(device_alloc(sizeof(int), "status word"));
            TEC_CUDA(cudaMemset(s.status, 0, sizeof(int)), "status word");
          }
          s.slots[i].slot[a] = reinterpret_cast<unsigned long long>(s.status);
          s.status_steps[static_cast<int>(arg.value)].insert(where);
        }
      }
      std::memset(&s.tensor_maps[i], 0, sizeof(TensorMaps));
      for (size_t m = 0; m < l.tensor_maps.size(); ++m)
        encode_tensor_map(s.tensor_maps[i].map[m], l.tensor_maps[m], address(l.tensor_maps[m].buffer),
                          profile_.buffers.at(static_cast<size_t>(l.tensor_maps[m].buffer)).name, where);
    }
    if (l.kind != "gemm") continue;
    const plan::Gemm& g = l.gemm;
    Impl::GemmState& st = s.gemms[i];
    TEC_ACQUIRE(cublasLtMatmulDescCreate(&st.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), where);
    // Column-major, A = w is [k, n] read transposed and B = x is [k, m]; an operand stored
    // transposed (16-bit backward GEMMs) is read as it is instead.
    const cublasOperation_t transa = g.a.transposed ? CUBLAS_OP_N : CUBLAS_OP_T;
    const cublasOperation_t transb = g.b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* value, size_t size) {
      TEC_CUDA(cublasLtMatmulDescSetAttribute(st.desc, attr, value, size), where);
    };
    set(CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa);
    set(CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb);
    auto set_scale = [&](const plan::GemmOperand& o, cublasLtMatmulDescAttributes_t pointer_attr,
                         cublasLtMatmulDescAttributes_t mode_attr) {
      if (o.scale_inv < 0) return;
      const void* p = address(o.scale_inv);
      set(pointer_attr, &p, sizeof p);
      int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
      if (o.scale_mode == "vec128") mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
      if (o.scale_mode == "blk128x128") mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
      if (mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F) set(mode_attr, &mode, sizeof mode);
    };
    set_scale(g.a, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, CUBLASLT_MATMUL_DESC_A_SCALE_MODE);
    set_scale(g.b, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, CUBLASLT_MATMUL_DESC_B_SCALE_MODE);
    if (g.d_scale >= 0) {
      const void* p = address(g.d_scale);
      set(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &p, sizeof p);
    }
    if (g.amax_d >= 0) {
      const void* p = address(g.amax_d);
      set(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &p, sizeof p);
    }
    if (g.fast_accum) {
      const int8_t fast = 1;
      set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
    }
    const cublasLtEpilogue_t epilogue = epilogue_of(g.epilogue);
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
    if (g.bias >= 0) {
      const void* p = address(g.bias);
      set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof p);
      const cudaDataType_t bias_type = cuda_type(g.bias_type);
      set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type);
    }
    // Row-major y[m, n] = x[m, k] w[n, k]^T is column-major y^T[n, m] = w^T . x: A = w, B = x.
    const cudaDataType_t c_type = c_type_of(g);
    const auto rows_m = static_cast<uint64_t>(g.m), cols_n = static_cast<uint64_t>(g.n), inner_k = static_cast<uint64_t>(g.k);
    TEC_ACQUIRE(g.a.transposed ? cublasLtMatrixLayoutCreate(&st.a, cuda_type(g.a.type), cols_n, inner_k, g.n)
                               : cublasLtMatrixLayoutCreate(&st.a, cuda_type(g.a.type), inner_k, cols_n, g.k),
                where);
    TEC_ACQUIRE(g.b.transposed ? cublasLtMatrixLayoutCreate(&st.b, cuda_type(g.b.type), rows_m, inner_k, g.m)
                               : cublasLtMatrixLayoutCreate(&st.b, cuda_type(g.b.type), inner_k, rows_m, g.k),
                where);
    TEC_ACQUIRE(cublasLtMatrixLayoutCreate(&st.c, c_type, static_cast<uint64_t>(g.n), static_cast<uint64_t>(g.m), g.n), where);
    TEC_ACQUIRE(cublasLtMatrixLayoutCreate(&st.d, cuda_type(g.d_type), static_cast<uint64_t>(g.n), static_cast<uint64_t>(g.m), g.n), where);
    if (g.batch > 1) set_strided_batch(g, {st.a, st.b, st.c, st.d}, where);  // (Plan::load checked the buffers hold it)
    st.beta = g.c >= 0 ? 1.0f : 0.0f;
    st.x_offset = static_cast<size_t>(g.x_rows.rows(group_.rank, plan_->tp_size) * g.k * storage_bytes(g.b.type));
    st.d_offset = static_cast<size_t>(g.d_rows.rows(group_.rank, plan_->tp_size) * g.n * storage_bytes(g.d_type));
    st.c_offset = st.d_offset;  // C has D's type (Plan::load: no row offsets with an FP8 D)
    if (g.algo_source == "tuned") {
      std::string why;
      if (g.algo_cublaslt != cublaslt_version() || g.algo_gpu != device_name_) {
        why = "tuned for cuBLASLt " + g.algo_cublaslt + " on " + g.algo_gpu + ", this is cuBLASLt " + cublaslt_version() +
              " on " + device_name_;
      } else {
        std::memcpy(&st.algo, g.algo.data(), std::min(g.algo.size(), sizeof st.algo));
        cublasLtMatmulHeuristicResult_t check{};
        if (cublasLtMatmulAlgoCheck(s.lt, st.desc, st.a, st.b, st.c, st.d, &st.algo, &check) == CUBLAS_STATUS_SUCCESS &&
            check.workspaceSize <= kCublasWorkspaceBytes)
          continue;
        why = "cuBLASLt rejects the tuned algorithm";
      }
      if (tuning_warning_.empty()) tuning_warning_ = "step '" + where + "': " + why + "; using the heuristic";
    }
    cublasLtMatmulPreference_t pref = nullptr;
    TEC_ACQUIRE(cublasLtMatmulPreferenceCreate(&pref), where);
    const size_t workspace = kCublasWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(s.lt, st.desc, st.a, st.b, st.c, st.d, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0)
      throw Error(ErrorKind::device, ctx(where),
                  "cuBLASLt has no algorithm for this GEMM (m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) +
                      " k=" + std::to_string(g.k) + ", A " + std::string(to_string(g.a.type)) + " " + g.a.scale_mode + ", B " +
                      std::string(to_string(g.b.type)) + " " + g.b.scale_mode + ", D " + std::string(to_string(g.d_type)) +
                      ", epilogue " + g.epilogue + (g.c >= 0 ? ", C" : "") + "): " + cublasLtGetStatusString(status));
    st.algo = result.algo;
  }

  if (!tuning_warning_.empty()) std::fprintf(stderr, "tec: warning: %s\n", tuning_warning_.c_str());

  s.events.assign(n, nullptr);
  for (size_t i = 0; i < n; ++i) {
    const plan::Launch& l = profile_.launches[i];
    if (l.kind != "fork" && l.kind != "join") continue;
    if (!s.side_stream) TEC_ACQUIRE(cudaStreamCreateWithFlags(&s.side_stream, cudaStreamNonBlocking), "side stream");
    TEC_ACQUIRE(cudaEventCreateWithFlags(&s.events[i], cudaEventDisableTiming), s.where[i]);
  }

  std::vector<size_t> attention_launches;
  for (size_t i = 0; i < n; ++i)
    if (profile_.launches[i].kind == "attention") attention_launches.push_back(i);
  if (!attention_launches.empty()) {
    s.attention = std::make_unique<AttentionRunner>(profile_, attention_launches, s.where, [&](size_t i) { return attention_pointers(i); });
    s.attention_workspace = device_alloc(s.attention->workspace_bytes(), "cuDNN attention workspace");
  }

  // The graph of a full run, captured now, so that a session that cannot capture fails here.
  TEC_ACQUIRE(cudaStreamCreateWithFlags(&s.capture_stream, cudaStreamNonBlocking), "");
  graph_for(Selection{});
  TEC_CUDA(cudaDeviceSynchronize(), "session setup");
}

cudaGraphExec_t Session::graph_for(Selection selection) {
  Impl& s = *impl_;
  if (const auto it = s.graphs.find(selection); it != s.graphs.end()) return it->second.exec;
  Impl::Graph g;
  TEC_CUDA(cudaStreamBeginCapture(s.capture_stream, cudaStreamCaptureModeThreadLocal), "graph capture");
  try {
    enqueue(s.capture_stream, launches_of(selection), {});
  } catch (...) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(s.capture_stream, &broken);
    if (broken) cudaGraphDestroy(broken);
    throw;
  }
  TEC_CUDA(cudaStreamEndCapture(s.capture_stream, &g.graph), "graph capture");
  try {
    TEC_ACQUIRE(cudaGraphInstantiate(&g.exec, g.graph, 0), "graph instantiate");
  } catch (...) {
    cudaGraphDestroy(g.graph);
    throw;
  }
  s.graphs[selection] = g;  // only a complete graph: the map owns (and destroys) it from here on
  return g.exec;
}

Session::Selection Session::next_selection() {
  Impl& s = *impl_;
  const auto first = s.selecting_scalars.find("first_microbatch");
  const auto forward_only = s.selecting_scalars.find("forward_only");
  Selection selection;
  // Plans without first_microbatch (inference) keep their copies of constants until a restore.
  selection.weight_workspace = s.workspace_stale || (first != s.selecting_scalars.end() && first->second != 0.0f);
  selection.forward_only = forward_only != s.selecting_scalars.end() && forward_only->second != 0.0f;
  s.workspace_stale = false;
  return selection;
}

// As the reference executor's run(): weight workspace steps only when selected, forward_only
// runs the weight workspace and the forward alone, without the delayed-scaling update.
std::vector<size_t> Session::launches_of(Selection selection) const {
  std::vector<size_t> out;
  for (size_t i = 0; i < profile_.launches.size(); ++i) {
    const plan::Launch& l = profile_.launches[i];
    if (l.step < 0) {
      if (!(selection.forward_only && l.kind == "delayed_update")) out.push_back(i);
      continue;
    }
    const Phase phase = profile_.steps.at(static_cast<size_t>(l.step)).phase;
    if ((phase == Phase::weight_workspace || l.constant_copy) && !selection.weight_workspace) continue;
    if (selection.forward_only && phase != Phase::weight_workspace && phase != Phase::forward) continue;
    out.push_back(i);
  }
  return out;
}

void Session::set_scalar(const std::string& name, float value, cudaStream_t stream) {
  upload(profile_.tensors.at(name).buffers.at(BufferRole::data), &value, 4, stream);
  if (auto it = impl_->selecting_scalars.find(name); it != impl_->selecting_scalars.end()) it->second = value;
}

void Session::remake_weight_workspace(cudaStream_t stream) {
  impl_->workspace_stale = true;
  for (auto& [name, value] : impl_->selecting_scalars) download(profile_.tensors.at(name).buffers.at(BufferRole::data), &value, 4, stream);
}

Session::~Session() = default;

int Session::launch_count() const { return static_cast<int>(profile_.launches.size()); }

int Session::early_launch_count() const {
  const std::vector<size_t> all = launches_of(Selection{});
  int count = 0;
  for (size_t i = 1; i < all.size(); ++i) count += launches_early(all, i, false);
  return count;
}

// A kernel may start before the one ahead of it ends when it waits for it itself (the plan
// says so) and that one is early_launch too: programmatic edges join kernel nodes, cuBLASLt's
// launches are not ours to vouch for, and the plan leaves out kernels measured to lose by it.
// Not across an `after_step` hook (--profile times steps apart).
bool Session::launches_early(const std::vector<size_t>& run, size_t position, bool step_hooks) const {
  if (position == 0) return false;
  const plan::Launch& l = profile_.launches[run[position]];
  const plan::Launch& before = profile_.launches[run[position - 1]];
  return impl_->early_launch && l.kind == "kernel" && l.early_launch && before.kind == "kernel" && before.early_launch &&
         (!step_hooks || before.step == l.step);
}

std::vector<Session::TunedGemm> Session::tune_gemms(int candidates, int iterations) {
  Impl& s = *impl_;
  std::vector<TunedGemm> out;
  cudaStream_t stream = s.capture_stream;
  cudaEvent_t start, stop;
  TEC_CUDA(cudaEventCreate(&start), "tune");
  TEC_CUDA(cudaEventCreate(&stop), "tune");
  // Each timing starts with a cold L2, as in a run, where the other GEMMs' weights have pushed
  // this one's out. Timed back to back, a candidate can find part of a 64 MB weight still in
  // the 50 MB L2; --tune once picked for mlp.json fp8-block at T=16 algorithms whose graph took
  // 104.3 us on the H100, against 86-87 us with the heuristic's.
  int l2_bytes = 0;
  TEC_CUDA(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, s.shared->device), "tune");
  const size_t flush_bytes = 2 * static_cast<size_t>(std::max(l2_bytes, 1));
  const std::unique_ptr<void, cudaError_t (*)(void*)> flush(device_alloc(flush_bytes, "tune: L2 flush buffer"), cudaFree);
  for (size_t i = 0; i < profile_.launches.size(); ++i) {
    const plan::Launch& l = profile_.launches[i];
    if (l.kind != "gemm") continue;
    const std::string& where = s.where[i];
    Impl::GemmState& st = s.gemms[i];
    cublasLtMatmulPreference_t pref = nullptr;
    TEC_CUDA(cublasLtMatmulPreferenceCreate(&pref), where);
    const size_t workspace = kCublasWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
    std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(candidates));
    int found = 0;
    TEC_CUDA(cublasLtMatmulAlgoGetHeuristic(s.lt, st.desc, st.a, st.b, st.c, st.d, pref, candidates, results.data(), &found), where);
    cublasLtMatmulPreferenceDestroy(pref);
    const plan::Gemm& g = l.gemm;
    void* d = address(g.d);
    const void* c = g.c >= 0 ? address(g.c) : is_fp8(g.d_type) ? nullptr : d;
    TunedGemm best{static_cast<int>(i), {}, 1e30, 0};
    for (int r = 0; r < found; ++r) {
      auto once = [&] {
        return cublasLtMatmul(s.lt, st.desc, &st.alpha, address(g.a.buffer), st.a, address(g.b.buffer), st.b, &st.beta, c, st.c, d,
                              st.d, &results[static_cast<size_t>(r)].algo, s.cublas_workspace, kCublasWorkspaceBytes, stream);
      };
      if (once() != CUBLAS_STATUS_SUCCESS) continue;  // a candidate that cannot run here is skipped
      std::vector<float> times;
      for (int it = 0; it < iterations; ++it) {
        TEC_CUDA(cudaMemsetAsync(flush.get(), it & 0xFF, flush_bytes, stream), where);
        TEC_CUDA(cudaEventRecord(start, stream), where);
        once();
        TEC_CUDA(cudaEventRecord(stop, stream), where);
        TEC_CUDA(cudaEventSynchronize(stop), where);
        float ms = 0;
        TEC_CUDA(cudaEventElapsedTime(&ms, start, stop), where);
        times.push_back(ms);
      }
      std::sort(times.begin(), times.end());
      const double us = times[times.size() / 2] * 1000.0;
      if (r == 0) best.heuristic_microseconds = us;
      if (us < best.microseconds) {
        best.microseconds = us;
        const auto* bytes = reinterpret_cast<const uint8_t*>(&results[static_cast<size_t>(r)].algo);
        best.algo.assign(bytes, bytes + sizeof(cublasLtMatmulAlgo_t));
      }
    }
    if (!best.algo.empty()) out.push_back(std::move(best));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  TEC_CUDA(cudaStreamSynchronize(stream), "tune");
  return out;
}

void Session::run(cudaStream_t stream) {
  refuse_if_lost(impl_->shared->device);
  TEC_CUDA(cudaGraphLaunch(graph_for(next_selection()), stream), "graph launch");
}

void Session::run_eager(cudaStream_t stream, const std::function<void(int)>& after_step) {
  refuse_if_lost(impl_->shared->device);
  enqueue(stream, launches_of(next_selection()), after_step);
}

void Session::enqueue(cudaStream_t stream, const std::vector<size_t>& run, const std::function<void(int)>& after_step) {
  Impl& s = *impl_;
  if (s.status) TEC_CUDA(cudaMemsetAsync(s.status, 0, sizeof(int), stream), "status word");
  for (size_t position = 0; position < run.size(); ++position) {
    const size_t i = run[position];
    const plan::Launch& l = profile_.launches[i];
    const std::string& where = s.where[i];
    if (l.kind == "memset") {
      const plan::Buffer& b = profile_.buffers.at(static_cast<size_t>(l.buffer));
      TEC_CUDA(cudaMemsetAsync(address(l.buffer), 0, static_cast<size_t>(b.bytes), stream), where);
    } else if (l.kind == "kernel") {
      void* args[] = {&s.slots[i], &s.tensor_maps[i]};  // a kernel without tensor maps has one parameter
      cudaLaunchConfig_t config{};
      config.gridDim = dim3(s.grid_x[i], static_cast<unsigned>(l.grid[1]), static_cast<unsigned>(l.grid[2]));
      config.blockDim = dim3(static_cast<unsigned>(l.block[0]), static_cast<unsigned>(l.block[1]), static_cast<unsigned>(l.block[2]));
      config.dynamicSmemBytes = static_cast<size_t>(l.shared_bytes);
      config.stream = stream;
      cudaLaunchAttribute early{};
      early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      early.val.programmaticStreamSerializationAllowed = 1;
      if (launches_early(run, position, static_cast<bool>(after_step))) {
        config.attrs = &early;
        config.numAttrs = 1;
      }
      TEC_CUDA(cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(s.kernels[i]), args), where);
    } else if (l.kind == "collective") {
      enqueue_collective(l.collective, l.stream == 1 ? s.side_stream : stream, where);
    } else if (l.kind == "fork") {
      TEC_CUDA(cudaEventRecord(s.events[i], stream), where);
      TEC_CUDA(cudaStreamWaitEvent(s.side_stream, s.events[i], 0), where);
    } else if (l.kind == "join") {
      TEC_CUDA(cudaEventRecord(s.events[i], s.side_stream), where);
      TEC_CUDA(cudaStreamWaitEvent(stream, s.events[i], 0), where);
    } else if (l.kind == "attention") {
      s.attention->enqueue(i, attention_pointers(i), s.attention_workspace, stream);
    } else if (l.kind == "delayed_scale_inv" || l.kind == "delayed_update") {
      if (s.delayed_count > 0) {
        void* args[] = {&s.delayed_table, &s.delayed_count};
        const bool update = l.kind == "delayed_update";
        const unsigned blocks = update ? static_cast<unsigned>(s.delayed_count) : static_cast<unsigned>((s.delayed_count + 255) / 256);
        TEC_CUDA(cudaLaunchKernel(reinterpret_cast<const void*>(s.kernels[i]), dim3(blocks), dim3(256), args, 0, stream), where);
      }
    } else {
      const plan::Gemm& g = l.gemm;
      Impl::GemmState& st = s.gemms[i];
      void* d = static_cast<char*>(address(g.d)) + st.d_offset;
      // Without a residual C is not read (beta = 0); an FP8 D has a bf16 C layout, so it gets
      // no pointer rather than D's.
      const void* c = g.c >= 0 ? static_cast<char*>(address(g.c)) + st.c_offset : is_fp8(g.d_type) ? nullptr : d;
      const void* x = static_cast<char*>(address(g.b.buffer)) + st.x_offset;
      TEC_CUDA(cublasLtMatmul(s.lt, st.desc, &st.alpha, address(g.a.buffer), st.a, x, st.b, &st.beta, c, st.c, d, st.d, &st.algo,
                              s.cublas_workspace, kCublasWorkspaceBytes, stream),
               where);
    }
    const bool last_of_step = position + 1 == run.size() || profile_.launches[run[position + 1]].step != l.step;
    if (after_step && last_of_step) after_step(l.step);
  }
}

void Session::enqueue_collective(const plan::Collective& c, cudaStream_t stream, const std::string& where) {
  void* send = static_cast<char*>(address(c.send)) + c.send_offset * storage_bytes(c.dtype);
  void* recv = static_cast<char*>(address(c.recv)) + c.recv_offset * storage_bytes(c.dtype);
  const auto count = static_cast<size_t>(c.count);
  if (c.op == "copy") {
    TEC_CUDA(cudaMemcpyAsync(recv, send, count * static_cast<size_t>(storage_bytes(c.dtype)), cudaMemcpyDeviceToDevice, stream),
             where);
    return;
  }
  // FP8 codes are gathered as bytes: NCCL's FP8 types exist only from 2.24 on, and a gather
  // does no arithmetic on them.
  const ncclDataType_t type = c.dtype == DType::bf16   ? ncclBfloat16
                              : c.dtype == DType::fp16 ? ncclFloat16
                              : c.dtype == DType::fp32 ? ncclFloat32
                                                       : ncclUint8;
  const ncclRedOp_t reduce = c.reduce == "max" ? ncclMax : ncclSum;
  const NcclLibrary& n = *nccl_;
  constexpr double kEnqueueSeconds = 300;  // a first call may connect the ranks
  if (c.op == "all_gather")
    check_nccl(n, group_.comm, n.all_gather(send, recv, count, type, group_.comm, stream), "ncclAllGather", where, kEnqueueSeconds);
  else if (c.op == "reduce")
    check_nccl(n, group_.comm, n.reduce(send, recv, count, type, reduce, c.root, group_.comm, stream), "ncclReduce", where,
               kEnqueueSeconds);
  else if (c.op == "ring_exchange") {
    // One group, so that every rank's send meets its neighbour's recv whatever the order.
    const int ranks = static_cast<int>(plan_->tp_size), rank = group_.rank;
    check_nccl(n, group_.comm, n.group_start(), "ncclGroupStart", where, kEnqueueSeconds);
    check_nccl(n, group_.comm, n.send(send, count, type, (rank + 1) % ranks, group_.comm, stream), "ncclSend", where, kEnqueueSeconds);
    check_nccl(n, group_.comm, n.recv(recv, count, type, (rank + ranks - 1) % ranks, group_.comm, stream), "ncclRecv", where,
               kEnqueueSeconds);
    check_nccl(n, group_.comm, n.group_end(), "ncclGroupEnd", where, kEnqueueSeconds);
  } else if (c.op == "reduce_scatter")
    check_nccl(n, group_.comm, n.reduce_scatter(send, recv, count, type, reduce, group_.comm, stream), "ncclReduceScatter", where,
               kEnqueueSeconds);
  else
    check_nccl(n, group_.comm, n.all_reduce(send, recv, count, type, reduce, group_.comm, stream), "ncclAllReduce", where,
               kEnqueueSeconds);
}

void Session::wait(cudaStream_t stream, double timeout_seconds) const {
  if (!nccl_) {
    TEC_CUDA(cudaStreamSynchronize(stream), "run");
    return;
  }
  wait_for_collectives(*nccl_, group_.comm, stream, timeout_seconds, "rank " + std::to_string(group_.rank) + "'s run");
}

tec::Preflight preflight(const plan::Plan& plan, int device) {
  tec::Preflight out;
  out.plan_archs = plan.archs;
  out.cublaslt_version = cublaslt_version();
  int64_t arena = 0;
  for (const auto& p : plan.profiles) arena = std::max(arena, p.arena_bytes);
  out.bytes_needed = static_cast<int64_t>(plan.constants.size()) + arena + static_cast<int64_t>(kCublasWorkspaceBytes);
  const int count = device_count(out.reason);
  if (count == 0) return out;
  if (device < 0 || device >= count) {
    out.reason = "no CUDA device " + std::to_string(device) + " (there are " + std::to_string(count) + ")";
    return out;
  }
  cudaDeviceProp prop{};
  TEC_CUDA(cudaGetDeviceProperties(&prop, device), "");
  out.device = prop.name;
  out.arch = arch_of(prop);
  int previous = 0;
  TEC_CUDA(cudaGetDevice(&previous), "");
  TEC_CUDA(cudaSetDevice(device), "");
  size_t free_bytes = 0, total = 0;
  const cudaError_t mem = cudaMemGetInfo(&free_bytes, &total);
  cudaSetDevice(previous);
  TEC_CUDA(mem, "");
  out.bytes_free = static_cast<int64_t>(free_bytes);
  const auto gpu_less = std::find_if(plan.profiles.begin(), plan.profiles.end(), [](const plan::Profile& p) { return !p.gpu_supported; });
  if (gpu_less != plan.profiles.end())
    out.reason = "the plan has no GPU code: " + gpu_less->gpu_reason;
  else if (!plan.modules.empty() && std::find(plan.archs.begin(), plan.archs.end(), out.arch) == plan.archs.end())
    out.reason = "this GPU is " + out.arch + " and the plan has no kernels for it; recompile with te-compile --arch " + out.arch;
  else if (out.bytes_needed > out.bytes_free)
    out.reason = "not enough free device memory: " + std::to_string(out.bytes_needed) + " bytes needed, " +
                 std::to_string(out.bytes_free) + " free";
  out.ok = out.reason.empty();
  return out;
}

void Session::upload(int buffer, const void* host, size_t bytes, cudaStream_t stream) {
  const plan::Buffer& b = profile_.buffers.at(static_cast<size_t>(buffer));
  TEC_USER_CHECK(b.region != "constants" && bytes <= static_cast<size_t>(b.bytes), ctx(b.name)) << "cannot write " << bytes << " bytes to " << b.name;
  TEC_CUDA(cudaMemcpyAsync(address(buffer), host, bytes, cudaMemcpyHostToDevice, stream), b.name);
  TEC_CUDA(cudaStreamSynchronize(stream), b.name);
}

void Session::download(int buffer, void* host, size_t bytes, cudaStream_t stream) const {
  const plan::Buffer& b = profile_.buffers.at(static_cast<size_t>(buffer));
  TEC_USER_CHECK(bytes <= static_cast<size_t>(b.bytes), ctx(b.name)) << "cannot read " << bytes << " bytes from " << b.name;
  TEC_CUDA(cudaMemcpyAsync(host, const_cast<Session*>(this)->address(buffer), bytes, cudaMemcpyDeviceToHost, stream), b.name);
  TEC_CUDA(cudaStreamSynchronize(stream), b.name);
  check_status(stream);
}

void Session::check_status(cudaStream_t stream) const {
  const Impl& s = *impl_;
  if (!s.status) return;
  int bits = 0;
  TEC_CUDA(cudaMemcpyAsync(&bits, s.status, sizeof bits, cudaMemcpyDeviceToHost, stream), "status word");
  TEC_CUDA(cudaStreamSynchronize(stream), "status word");
  if (bits == 0) return;
  static const std::pair<int, const char*> kMeaning[] = {
      {TEC_STATUS_BAD_EXPERT, "an expert index outside [0, num_experts)"},
      {TEC_STATUS_BAD_SPLITS, "m_splits negative or not summing to the rows"},
      {TEC_STATUS_BAD_ROW_MAP, "a row map entry outside the expert outputs' rows"},
      {TEC_STATUS_BAD_TOKEN_ID, "a token id outside the embedding table's rows (its output rows are zeros)"},
      {TEC_STATUS_BAD_PADDING, "a padding mask row that is not ones then zeros (tec's attention takes right-padded sequences)"},
      {TEC_STATUS_BAD_INDEX, "an index outside the axis a gather picks from (its output elements are zeros)"}};
  std::string what;
  for (const auto& [bit, meaning] : kMeaning) {
    if (!(bits & bit)) continue;
    std::string steps;
    if (const auto it = s.status_steps.find(bit); it != s.status_steps.end())
      for (const std::string& step : it->second) steps += (steps.empty() ? "" : ", ") + ("'" + step + "'");
    what += (what.empty() ? "" : "; ") + std::string(meaning) + " (step " + steps + ")";
  }
  throw Error(ErrorKind::invalid_input, ctx("run"),
              "the last run read index data out of range, so its results are not valid: " + what +
                  ". The kernels read and wrote nothing out of bounds; fix the inputs (routing, token ids, padding masks) and run again");
}

std::vector<uint8_t> Session::download_arena(cudaStream_t stream) const {
  std::vector<uint8_t> out(static_cast<size_t>(plan_->arena_bytes));
  for (size_t i = 0; i < profile_.buffers.size(); ++i) {
    const plan::Buffer& b = profile_.buffers[i];
    if (b.region != "constants" && b.bytes > 0) download(static_cast<int>(i), out.data() + b.offset, static_cast<size_t>(b.bytes), stream);
  }
  return out;
}

void Session::poison(cudaStream_t stream) {
  for (size_t i = 0; i < profile_.buffers.size(); ++i) {
    const plan::Buffer& b = profile_.buffers[i];
    if (b.region == "scratch" || b.region == "output")
      TEC_CUDA(cudaMemsetAsync(address(static_cast<int>(i)), 0xFF, static_cast<size_t>(b.bytes), stream), "poison");
  }
}

}  // namespace tec::runtime
