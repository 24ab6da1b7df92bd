#include "runtime/attention.h"

#include "core/error.h"

#if TEC_HAVE_CUDNN_FRONTEND
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#include <cudnn_frontend.h>

#include "runtime/cudnn.h"

// The frontend, built with NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING, resolves every cuDNN call
// from this handle: runtime/cudnn.h's library, set before the first graph is built.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}
#endif

namespace tec::runtime {

namespace {
ErrorContext ctx(const std::string& step) { return ErrorContext{"runtime", "", "", step.empty() ? "" : "step '" + step + "'"}; }
}  // namespace

#if TEC_HAVE_CUDNN_FRONTEND

namespace fe = cudnn_frontend;

namespace {

// The variant pack's tensor ids.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kSeqLensQ, kSeqLensKv, kBias, kDO, kDQ, kDK, kDV };

// What makes two launches the same cuDNN graph.
using GraphKey = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, double, int, bool, bool, bool,
                            std::array<int64_t, 4>, bool>;

GraphKey key_of(int device, const plan::Attention& a) {
  return {device,     a.batch, a.seq_q,  a.seq_kv,          a.heads,        a.kv_heads,     a.head_dim,  a.v_head_dim, a.causal,
          a.sbhd,     a.scale, static_cast<int>(a.dtype), a.stats >= 0, a.seq_lens >= 0, a.bias >= 0, a.bias_dims, a.backward};
}

void check_fe(fe::error_t status, const char* what, const std::string& step) {
  if (status.is_bad())
    throw Error(ErrorKind::unsupported, ctx(step), std::string("cuDNN ") + what + ": " + status.get_message());
}

// The cuDNN library for the frontend, loaded once (runtime/cudnn.h names it in errors).
void load_cudnn_for(const std::string& step) {
  const CudnnLibrary& library = cudnn("attention (step '" + step + "')");
  static std::once_flag once;
  std::call_once(once, [&] { fe::cudnn_dlhandle = library.library.handle(); });
}

// One built graph, shared by every session of its shape on its device. execute() is guarded:
// the frontend does not promise that one graph may execute on two threads at once.
struct CachedGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace_bytes = 0;
  std::mutex execute_mutex;
};

// q, k, v and o as cuDNN's [B, heads, S, D] views of tec's [B, S, heads x D] (bshd) or
// [S, B, heads x D] (sbhd) row-major tensors.
std::vector<int64_t> strides_of(const plan::Attention& a, int64_t seq, int64_t heads, int64_t dim) {
  const int64_t row = heads * dim;
  if (a.sbhd) return {row, dim, a.batch * row, 1};
  return {seq * row, dim, row, 1};
}

bool autotuned();

std::unordered_map<int64_t, void*> variant_pack(const AttentionPointers& p) {
  std::unordered_map<int64_t, void*> pack{{kQ, p.q}, {kK, p.k}, {kV, p.v}, {kO, p.o}};
  if (p.stats) pack[kStats] = p.stats;
  if (p.seq_lens) pack[kSeqLensQ] = pack[kSeqLensKv] = p.seq_lens;
  if (p.bias) pack[kBias] = p.bias;
  if (p.d_o) pack[kDO] = p.d_o, pack[kDQ] = p.dq, pack[kDK] = p.dk, pack[kDV] = p.dv;
  return pack;
}

// The masks and the causal band, which the forward's and the backward's attributes set alike.
template <typename Options, typename Tensor>
void set_masks(Options& options, const plan::Attention& a, fe::graph::Graph& graph, Tensor tensor) {
  if (a.causal) options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
  if (a.seq_lens >= 0) {
    auto lengths = [&](const char* name, Uid uid) {
      return graph.tensor(fe::graph::Tensor_attributes()
                              .set_name(name)
                              .set_uid(uid)
                              .set_dim({a.batch, 1, 1, 1})
                              .set_stride({1, 1, 1, 1})
                              .set_data_type(fe::DataType_t::INT32));
    };
    options.set_padding_mask(true).set_seq_len_q(lengths("seq_len_q", kSeqLensQ)).set_seq_len_kv(lengths("seq_len_kv", kSeqLensKv));
  }
  if (a.bias >= 0) {
    const auto& d = a.bias_dims;
    options.set_bias(tensor("bias", kBias, {d[0], d[1], d[2], d[3]}, {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}));
  }
}

std::shared_ptr<CachedGraph> build_graph(const plan::Attention& a, cudnnHandle_t handle, const std::string& step) {
  auto cached = std::make_shared<CachedGraph>();
  auto graph = std::make_shared<fe::graph::Graph>();
  const fe::DataType_t io = a.dtype == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
  graph->set_io_data_type(io).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(fe::DataType_t::FLOAT);
  auto tensor = [&](const char* name, Uid uid, std::vector<int64_t> dims, std::vector<int64_t> strides) {
    return graph->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(std::move(dims)).set_stride(std::move(strides)));
  };
  const std::vector<int64_t> q_dims{a.batch, a.heads, a.seq_q, a.head_dim}, k_dims{a.batch, a.kv_heads, a.seq_kv, a.head_dim},
      v_dims{a.batch, a.kv_heads, a.seq_kv, a.v_head_dim}, o_dims{a.batch, a.heads, a.seq_q, a.v_head_dim};
  const std::vector<int64_t> q_strides = strides_of(a, a.seq_q, a.heads, a.head_dim), k_strides = strides_of(a, a.seq_kv, a.kv_heads, a.head_dim),
                             v_strides = strides_of(a, a.seq_kv, a.kv_heads, a.v_head_dim), o_strides = strides_of(a, a.seq_q, a.heads, a.v_head_dim);
  const std::vector<int64_t> stats_dims{a.batch, a.heads, a.seq_q, 1}, stats_strides{a.heads * a.seq_q, a.seq_q, 1, 1};
  auto q = tensor("q", kQ, q_dims, q_strides);
  auto k = tensor("k", kK, k_dims, k_strides);
  auto v = tensor("v", kV, v_dims, v_strides);
  if (!a.backward) {
    auto options = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(a.stats >= 0).set_attn_scale(static_cast<float>(a.scale));
    set_masks(options, a, *graph, tensor);
    auto [o, stats] = graph->sdpa(q, k, v, options);
    o->set_output(true).set_uid(kO).set_dim(o_dims).set_stride(o_strides);
    if (a.stats >= 0) stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim(stats_dims).set_stride(stats_strides);
  } else {
    // Deterministic: cuDNN's default backward sums dq over its key blocks with atomics, and
    // tec's replays promise the same bytes every run.
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("attention_backward")
                       .set_attn_scale(static_cast<float>(a.scale))
                       .set_deterministic_algorithm(true);
    set_masks(options, a, *graph, tensor);
    auto o = tensor("o", kO, o_dims, o_strides);
    auto d_o = tensor("d_o", kDO, o_dims, o_strides);
    auto stats = graph->tensor(fe::graph::Tensor_attributes()
                                   .set_name("stats")
                                   .set_uid(kStats)
                                   .set_dim(stats_dims)
                                   .set_stride(stats_strides)
                                   .set_data_type(fe::DataType_t::FLOAT));
    auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, o, d_o, stats, options);
    dq->set_output(true).set_uid(kDQ).set_dim(q_dims).set_stride(q_strides);
    dk->set_output(true).set_uid(kDK).set_dim(k_dims).set_stride(k_strides);
    dv->set_output(true).set_uid(kDV).set_dim(v_dims).set_stride(v_strides);
  }
  check_fe(graph->validate(), "rejects the attention graph", step);
  check_fe(graph->build_operation_graph(handle), "cannot build the attention graph", step);
  check_fe(graph->create_execution_plans({fe::HeurMode_t::A}), "has no execution plan for the attention", step);
  check_fe(graph->check_support(handle), "supports no engine for this attention (its head dims, dtype or masks)", step);
  check_fe(graph->build_plans(handle, autotuned() ? fe::BuildPlanPolicy_t::ALL : fe::BuildPlanPolicy_t::HEURISTICS_CHOICE),
           "cannot build the attention's plan", step);
  cached->graph = std::move(graph);
  return cached;
}

// cuDNN's heuristic picks the first engine config it ranks. TEC_CUDNN_AUTOTUNE=1 times every
// candidate once per process and shape and keeps the fastest. Off by default: on the H100 (bench/
// llama_bench.py, Llama's attention alone as a graph, 2026-11-26) it moved 87 / 272 / 1026 us at
// B x T = 1 x 2048 / 4 x 2048 / 1 x 8192 to 87 / 293 / 970 us, no gain beyond noise, for a slower
// first session.
bool autotuned() {
  const char* v = std::getenv("TEC_CUDNN_AUTOTUNE");
  return v && std::string(v) == "1";
}

// Times the graph's candidate plans on `p` (the session's own buffers: at creation nothing in
// them is live yet) and keeps the fastest; then its workspace size is the graph's.
void autotune(CachedGraph& g, cudnnHandle_t handle, const AttentionPointers& p, const std::string& step) {
  if (autotuned() && g.graph->get_execution_plan_count() > 1) {
    void* scratch = nullptr;
    const int64_t bytes = g.graph->get_autotune_workspace_size();
    if (bytes > 0 && cudaMalloc(&scratch, static_cast<size_t>(bytes)) != cudaSuccess) {
      cudaGetLastError();
      throw Error(ErrorKind::device, ctx(step), "cannot allocate " + std::to_string(bytes) + " bytes to time cuDNN's attention plans");
    }
    std::unordered_map<int64_t, void*> pack = variant_pack(p);
    const fe::error_t status = g.graph->autotune(handle, pack, scratch);
    cudaFree(scratch);
    check_fe(status, "cannot time the attention's plans", step);
  }
  int64_t workspace = 0;
  check_fe(g.graph->get_workspace_size(workspace), "workspace size", step);
  g.workspace_bytes = workspace;
}

// The process's graphs; building one takes milliseconds to seconds (cuDNN compiles kernels at
// run time), so sessions of one shape share it. Graphs outlive the session that first needed
// them, so they are built with a handle of the cache's own, one per device (the plans cuDNN
// builds refer to it); each session executes with its own. The cache lives while any session
// with attention does: when the last one goes, its graphs and handles go too, so that a process
// ends with nothing of cuDNN's left allocated (compute-sanitizer's leak check).
struct ProcessCache {
  std::mutex mutex;
  std::map<GraphKey, std::shared_ptr<CachedGraph>> graphs;
  std::map<int, cudnnHandle_t> build_handles;
  int sessions = 0;
};

ProcessCache& process_cache() {
  static ProcessCache cache;
  return cache;
}

void cache_user_arrives() {
  ProcessCache& c = process_cache();
  std::lock_guard lock(c.mutex);
  ++c.sessions;
}

void cache_user_leaves() {
  ProcessCache& c = process_cache();
  std::lock_guard lock(c.mutex);
  if (--c.sessions > 0) return;
  c.graphs.clear();
  for (auto& [device, handle] : c.build_handles) {
    int current = 0;
    cudaGetDevice(&current);
    cudaSetDevice(device);
    fe::detail::destroy_handle(handle);
    cudaSetDevice(current);
  }
  c.build_handles.clear();
}

std::shared_ptr<CachedGraph> graph_for(const plan::Attention& a, int device, const AttentionPointers& p, const std::string& step) {
  ProcessCache& c = process_cache();
  std::lock_guard lock(c.mutex);
  auto& entry = c.graphs[key_of(device, a)];
  if (!entry) {
    cudnnHandle_t& handle = c.build_handles[device];
    if (!handle && fe::detail::create_handle(&handle) != CUDNN_STATUS_SUCCESS) {
      c.build_handles.erase(device);
      throw Error(ErrorKind::device, ctx(step), "cudnnCreate failed (out of device memory?)");
    }
    auto built = build_graph(a, handle, step);
    autotune(*built, handle, p, step);
    entry = std::move(built);  // cached only once complete: a failure is retried by the next session
  }
  return entry;
}

}  // namespace

struct AttentionRunner::Impl {
  cudnnHandle_t handle = nullptr;
  std::map<size_t, std::shared_ptr<CachedGraph>> graphs;  // by launch
  std::map<size_t, std::string> where;
  size_t workspace_bytes = 0;
  bool uses_cache = false;
  ~Impl() {
    graphs.clear();
    if (handle) fe::detail::destroy_handle(handle);
    if (uses_cache) cache_user_leaves();
  }
};

AttentionRunner::AttentionRunner(const plan::Profile& profile, const std::vector<size_t>& launches, const std::vector<std::string>& where,
                                 const std::function<AttentionPointers(size_t launch)>& pointers)
    : impl_(std::make_unique<Impl>()) {
  if (launches.empty()) return;
  const std::string& first_step = where.at(launches.front());
  load_cudnn_for(first_step);
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) throw Error(ErrorKind::device, ctx(first_step), "cudaGetDevice failed");
  cache_user_arrives();
  impl_->uses_cache = true;
  try {
    if (fe::detail::create_handle(&impl_->handle) != CUDNN_STATUS_SUCCESS)
      throw Error(ErrorKind::device, ctx(first_step), "cudnnCreate failed (out of device memory?)");
    for (size_t i : launches) {
      auto graph = graph_for(profile.launches.at(i).attention, device, pointers(i), where.at(i));
      impl_->workspace_bytes = std::max(impl_->workspace_bytes, static_cast<size_t>(graph->workspace_bytes));
      impl_->graphs[i] = std::move(graph);
      impl_->where[i] = where.at(i);
    }
  } catch (const std::runtime_error& e) {  // the frontend's own: a symbol missing from the loaded cuDNN, say
    if (dynamic_cast<const Error*>(&e)) throw;
    throw Error(ErrorKind::device, ctx(first_step), std::string("cuDNN frontend: ") + e.what());
  }
}

AttentionRunner::~AttentionRunner() = default;

size_t AttentionRunner::workspace_bytes() const { return impl_->workspace_bytes; }

void AttentionRunner::enqueue(size_t launch, const AttentionPointers& p, void* workspace, cudaStream_t stream) const {
  CachedGraph& g = *impl_->graphs.at(launch);
  const std::string& step = impl_->where.at(launch);
  std::unordered_map<int64_t, void*> pack = variant_pack(p);
  if (fe::detail::set_stream(impl_->handle, stream) != CUDNN_STATUS_SUCCESS)
    throw Error(ErrorKind::device, ctx(step), "cudnnSetStream failed");
  std::lock_guard lock(g.execute_mutex);
  fe::error_t status = g.graph->execute(impl_->handle, pack, workspace);
  if (status.is_bad()) throw Error(ErrorKind::device, ctx(step), "cuDNN's attention failed to launch: " + status.get_message());
}

bool attention_available() { return true; }

#else  // no cuDNN frontend headers at configure time

struct AttentionRunner::Impl {};

AttentionRunner::AttentionRunner(const plan::Profile&, const std::vector<size_t>& launches, const std::vector<std::string>& where,
                                 const std::function<AttentionPointers(size_t)>&) {
  if (!launches.empty())
    throw Error(ErrorKind::unsupported, ctx(where.at(launches.front())),
                "this build of tec has no cuDNN frontend, so it cannot run attention: install it (pip install nvidia-cudnn-frontend, "
                "or .ci/install-deps.sh) and configure again, or run the plan with --backend cpu");
}
AttentionRunner::~AttentionRunner() = default;
size_t AttentionRunner::workspace_bytes() const { return 0; }
void AttentionRunner::enqueue(size_t, const AttentionPointers&, void*, cudaStream_t) const {}
bool attention_available() { return false; }

#endif

}  // namespace tec::runtime
