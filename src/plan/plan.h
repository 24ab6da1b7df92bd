// A loaded plan: the manifest parsed into typed structs and validated in full, so that the
// executors can trust every offset, size and reference in it (ARCHITECTURE.md §7).
#pragma once

#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/graph.h"

namespace tec::plan {

struct Buffer {
  std::string name;
  std::string tensor;
  BufferRole role = BufferRole::data;
  std::string state;   // "" or "scale" / "amax_history", or "init" (a state tensor's starting values)
  std::string region;  // constants, state, workspace, input, output, scratch
  DType dtype = DType::uint8;
  Shape shape;
  int64_t offset = 0;  // in the constants blob, or in the arena
  int64_t bytes = 0;
  int first_step = 0, last_step = 0;
  // Constants: "" (the device holds the plan's bytes), "small_m_tiles" or "mid_m_tiles" (an FP8
  // [N, K] weight the runtime permutes at upload into kernels/small_m_layout.h's or
  // kernels/mid_m_layout.h's layout).
  std::string device_layout;
};

struct Tensor {
  std::string name;
  std::string kind;  // input, activation, weight, state
  TensorProto proto;
  std::map<BufferRole, int> buffers;  // role -> index into Profile::buffers; empty: lives inside one step
  std::map<std::string, int> state;   // delayed scaling: "scale", "amax_history"; state tensors: "init"
  std::string storage;  // a later version of this state tensor, in its buffers; "" for none
};

struct Op {
  std::string node;
  std::string op;
  Attributes attrs;
  std::vector<std::string> inputs, outputs;
  // A backward op (train plans): computes the gradients of forward input slots
  // `gradient_slots`, one per output, with the op's backward reference.
  bool backward = false;
  std::vector<int> gradient_slots;
  std::vector<bool> columnwise_inputs;  // per input: read the columnwise copy
};

struct Step {
  std::string name;
  std::string kind;  // gemm, kernel, collective (one op, over every rank)
  Phase phase = Phase::forward;
  std::vector<Op> ops;
  std::vector<int> deps;
  std::vector<std::string> fusions;
};

// GPU launches (src/codegen/lower.h), with buffer references resolved to indices into the
// profile's buffers; -1 for none.
struct GemmOperand {
  int buffer = -1;
  DType type = DType::bf16;
  int scale_inv = -1;
  std::string scale_mode;  // none, tensor, vec128, blk128x128
  bool transposed = false;  // the buffer holds the operand's transpose, row-major
};

// codegen::RowOffset: fixed + ((rank + shift) % tp_size) x per_rank rows into a buffer.
struct RowOffset {
  int64_t fixed = 0, per_rank = 0;
  int shift = 0;
  int64_t rows(int64_t rank, int64_t tp_size) const { return fixed + (rank + shift) % tp_size * per_rank; }
  int64_t most_rows(int64_t tp_size) const { return fixed + (tp_size - 1) * per_rank; }
};

struct Gemm {
  int64_t m = 0, n = 0, k = 0;
  GemmOperand a, b;
  int bias = -1;
  DType bias_type = DType::bf16;
  std::string epilogue;  // default, bias, gelu, gelu_bias, relu, relu_bias
  int c = -1;
  int d = -1;
  DType d_type = DType::bf16;
  int d_scale = -1, amax_d = -1;
  bool fast_accum = false;  // FP8 fast accumulation (TE's forward default for per-tensor scaling)
  RowOffset x_rows, d_rows;  // where B = x, and C and D, start: a row block of a split GEMM
  int64_t batch = 1, batch_stride_a = 0, batch_stride_b = 0;  // a strided batch (codegen::GemmLaunch)
  // "heuristic": ask cuBLASLt at load time; "tuned": te-compile --tune's timed winner, valid
  // for that cuBLASLt version and GPU (else the runtime warns and falls back).
  std::string algo_source = "heuristic";
  std::vector<uint8_t> algo;  // cublasLtMatmulAlgo_t, 64 bytes
  std::string algo_cublaslt, algo_gpu;
};

// Argument slots of one kernel launch: the runtime passes them as one struct of 64-bit words
// (kernels/adamw.cu takes the most, four per parameter).
inline constexpr size_t kMaxKernelArgs = 64;

struct KernelArg {
  // status: the session's status word, where the kernel may set bit `value` (kernels/status.h).
  enum class Kind : uint8_t { none, buffer, value, status } kind = Kind::none;
  int buffer = -1;
  int64_t value = 0;
};

// A TMA tensor map the runtime encodes over a kernel's buffer when the session is created
// (cuTensorMapEncodeTiled): the buffer as `rows` rows of `row_bytes` bytes, read in boxes of
// `box_rows` rows x 128 bytes in the 128-byte swizzle (kernels/hopper.cuh TecTensorMaps). The
// kernel takes them as a second parameter, after its argument slots.
inline constexpr size_t kMaxTensorMaps = 2;
struct TensorMap {
  int buffer = -1;
  int64_t rows = 0, row_bytes = 0, box_rows = 0;
};

// A collective over the plan's ranks (NCCL, on the session's communicator): `count` elements
// of `dtype` per rank, as NCCL counts them (all_gather: each rank's part; reduce_scatter: each
// rank's result; all_reduce and copy: the whole buffer). all_reduce sums, or takes the
// maximum (`max`: FP8 current scaling's group-wide amax); copy is the identity half of an
// all_reduce whose sum is in the other direction.
struct Collective {
  // all_gather, reduce_scatter, all_reduce, reduce (to `root` only), copy, ring_exchange (send
  // `count` elements to the next rank, receive as many from the previous one: a step of a ring
  // reduce-scatter, codegen::CollectiveLaunch)
  std::string op;
  std::string reduce = "sum";  // sum, max (all_reduce, reduce_scatter)
  int send = -1, recv = -1;  // buffers; recv == send: in place (or, ring_exchange, disjoint parts of one buffer)
  int64_t count = 0;
  DType dtype = DType::bf16;
  int64_t send_offset = 0;  // elements into `send`
  int64_t recv_offset = 0;  // elements into `recv` (ring_exchange)
  int root = 0;             // reduce
};

// Scaled dot-product attention, one cuDNN SDPA graph (codegen::AttentionLaunch says what each
// field means); buffers are indices, -1 for none.
struct Attention {
  int64_t batch = 0, seq_q = 0, seq_kv = 0, heads = 0, kv_heads = 0, head_dim = 0, v_head_dim = 0;
  bool causal = false, sbhd = false;
  double scale = 1.0;
  DType dtype = DType::bf16;
  int q = -1, k = -1, v = -1, o = -1, stats = -1, seq_lens = -1, bias = -1;
  std::array<int64_t, 4> bias_dims{1, 1, 1, 1};
  bool backward = false;
  int d_o = -1, dq = -1, dk = -1, dv = -1;  // backward only
};

struct Launch {
  std::string kind;  // kernel, gemm, memset, delayed_scale_inv, delayed_update, collective, fork, join, attention
  int stream = 0;    // 0: the run's stream; 1: the side stream (a collective between a fork and a join)
  int step = -1;     // -1: run-level
  int module = -1;
  std::string entry;
  std::array<int64_t, 3> grid{1, 1, 1}, block{1, 1, 1};
  int64_t shared_bytes = 0;  // dynamic shared memory of a kernel
  bool early_launch = false;  // waits for the previous kernel itself (codegen::Launch)
  bool persistent = false;    // grid.x is an upper bound: launched as at most the resident blocks (codegen::Launch)
  bool constant_copy = false;  // runs only when the session's weight copies are stale (codegen::Launch)
  std::vector<KernelArg> args;
  std::vector<TensorMap> tensor_maps;  // a kernel's, at most kMaxTensorMaps
  Gemm gemm;
  int buffer = -1;  // memset
  Collective collective;
  Attention attention;
};

struct Module {
  std::string source;
  std::vector<std::string> defines;
  std::map<std::string, std::vector<uint8_t>> cubins;  // arch -> cubin
};

struct Profile {
  std::map<std::string, int64_t> dims;
  int64_t arena_bytes = 0, scratch_peak_bytes = 0, scratch_naive_bytes = 0, naive_bytes = 0;
  std::vector<Buffer> buffers;
  std::map<std::string, Tensor> tensors;
  std::vector<Step> steps;
  std::vector<std::string> inputs, outputs;
  std::vector<std::string> delayed;  // tensors whose delayed-scaling state is updated after a run
  // Tensor-parallel plans: how each input and output is spread over the ranks (a caller
  // shards inputs and gathers outputs by it); a weight gradient, a rank's own, has none.
  std::map<std::string, TpLayout> tp_layouts;
  // Train plans: what the step does beside forward and backward, and the state tensors the
  // caller may set between runs (the optimizer's hyperparameters, first_microbatch).
  bool train = false;
  std::string optimizer, wgrad;
  std::vector<std::string> runtime_scalars;
  bool gpu_supported = false;
  std::string gpu_reason;  // why not
  std::vector<Launch> launches;
};

struct Plan {
  Plan() = default;
  Plan(Plan&&) = default;
  Plan(const Plan&) = default;
  Plan& operator=(Plan&&) = default;
  Plan& operator=(const Plan&) = default;
  // Empties the manifest without allocating: nlohmann::json's own destructor allocates
  // (nlohmann/json#4653), and a bad_alloc there would terminate a service freeing a plan
  // under memory pressure.
  ~Plan();

  nlohmann::json manifest;
  std::string name, recipe, mode;
  Target target;
  int64_t arena_bytes = 0;
  // Rank 0's constants; a tensor-parallel plan (tp_size > 1) holds every rank's shards of the
  // weights, in one layout (constants_of).
  std::vector<uint8_t> constants;
  int64_t tp_size = 1;
  std::vector<std::vector<uint8_t>> other_rank_constants;  // ranks 1 .. tp_size-1
  std::vector<std::string> archs;  // the cubins' archs
  std::vector<Module> modules;
  std::vector<Profile> profiles;

  const std::vector<uint8_t>& constants_of(int64_t rank) const {
    return rank == 0 ? constants : other_rank_constants.at(static_cast<size_t>(rank - 1));
  }

  // Throws Error(invalid_input, stage "plan") for any inconsistency.
  static Plan load(std::span<const uint8_t> bytes, const std::string& name);
  static Plan load_file(const std::string& path);
  // The profile whose dims match exactly; the error lists the profiles there are.
  const Profile& profile(const std::map<std::string, int64_t>& dims) const;
};

// Limits on a manifest's contents, checked before anything is allocated from them.
inline constexpr int64_t kMaxArenaBytes = int64_t{1} << 40;
inline constexpr int64_t kMaxTpSize = 1024;

}  // namespace tec::plan
