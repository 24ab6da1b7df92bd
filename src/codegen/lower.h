// GPU lowering (ARCHITECTURE.md §6): each step of a schedule becomes launches, i.e. row
// kernels specialised from kernels/row.cu, cuBLASLt GEMMs and memsets, which reference
// buffers by the names memory_plan gives them. Runs before memory_plan, because it adds
// the workspaces it needs to the steps.
#pragma once

#include <array>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "codegen/nvrtc.h"
#include "passes/schedule.h"

namespace tec::codegen {

// One argument slot of a kernel: a buffer's device address, an integer, the address of the
// session's status word (kernels/status.h; `value` is the bit the kernel may set), or null.
struct LaunchArg {
  enum class Kind : uint8_t { none, buffer, value, status } kind = Kind::none;
  std::string buffer;
  int64_t value = 0;
};

// A TMA tensor map over a kernel's buffer (plan::TensorMap): `rows` rows of `row_bytes`, read in
// boxes of `box_rows` rows x 128 bytes.
struct TensorMapArg {
  std::string buffer;
  int64_t rows = 0, row_bytes = 0, box_rows = 0;
};

struct GemmOperand {
  std::string buffer;
  DType type = DType::bf16;
  std::string scale_inv;   // "" when unscaled
  std::string scale_mode;  // none, tensor, vec128 (1x128), blk128x128
  // The buffer holds the operand's transpose, row-major: a 16-bit backward GEMM reads dy, x
  // and W as they are (cuBLASLt transposes 16-bit operands itself; FP8 ones must be TN on
  // Hopper, so FP8 backward GEMMs read columnwise copies instead).
  bool transposed = false;
};

// Where a GEMM's rows start inside its buffers: `fixed` + ((rank + shift) % tp_size) x
// `per_rank` rows. A GEMM split into row blocks to overlap a collective (overlap_collectives)
// computes one block: the block of a destination rank (fixed), or this rank's own or a peer's
// (per_rank, a tensor-parallel plan's rank known only to the session).
struct RowOffset {
  int64_t fixed = 0, per_rank = 0;
  int shift = 0;
  bool any() const { return fixed != 0 || per_rank != 0; }
};

// y[m, n] = x[m, k] . w[n, k]^T (+ bias) (act) (+ beta C), as a TN cuBLASLt matmul with
// A = w and B = x (NN / TT where an operand is stored transposed).
struct GemmLaunch {
  int64_t m = 0, n = 0, k = 0;
  GemmOperand a, b;
  std::string bias;  // "" for none
  DType bias_type = DType::bf16;
  std::string epilogue = "default";  // default, bias, gelu, gelu_bias, relu, relu_bias
  std::string c;                     // the residual, with beta = 1; "" for none
  std::string d;
  DType d_type = DType::bf16;
  std::string d_scale, amax_d;  // FP8 output (delayed scaling): its scale, and where its amax goes
  // FP8 accumulation without cuBLASLt's periodic promotion to fp32: TE's forward GEMM default
  // for per-tensor scaling (use_split_accumulator=False); block scaling always splits.
  bool fast_accum = false;
  RowOffset x_rows, d_rows;  // where B = x and C, D start (row-major, untransposed only)
  // A strided batch of `batch` GEMMs (a general matmul's batch dims): A and B advance these
  // many elements per GEMM, D by m x n. Unscaled 16- and 32-bit operands only.
  int64_t batch = 1, batch_stride_a = 0, batch_stride_b = 0;
};

// A collective over the plan's ranks on the session's NCCL communicator (plan::Collective
// says how `count` is meant).
struct CollectiveLaunch {
  // all_gather, reduce_scatter, all_reduce, reduce (to `root`), copy, ring_exchange: `count`
  // elements sent to rank + 1 and as many received from rank - 1 (mod the ranks), one NCCL
  // group of a send and a recv; the steps of the ring reduce-scatter overlap_collectives makes.
  std::string op;
  std::string reduce = "sum";  // sum, max
  std::string send, recv;
  int64_t count = 0;
  DType dtype = DType::bf16;
  int64_t send_offset = 0;  // elements into `send`
  int64_t recv_offset = 0;  // elements into `recv` (ring_exchange)
  int root = 0;             // reduce
};

// Scaled dot-product attention through cuDNN (the runtime builds one SDPA graph per launch at
// session creation; src/runtime/attention.h): q [B, S, heads x head_dim] (or [S, B, ...]
// under sbhd), k and v [B, S_kv, kv_heads x ...], o like q with v_head_dim; with `stats`, the
// softmax's log-sum-exp [B, heads, S] fp32 (train plans save it for the backward). With
// `backward`, cuDNN's SDPA backward: it reads q, k, v, o and stats (the forward's, saved) and d_o,
// and writes dq, dk and dv, each shaped as its forward tensor.
struct AttentionLaunch {
  int64_t batch = 0, seq_q = 0, seq_kv = 0, heads = 0, kv_heads = 0, head_dim = 0, v_head_dim = 0;
  bool causal = false, sbhd = false;
  double scale = 1.0;
  DType dtype = DType::bf16;  // q, k, v, o (and the additive mask)
  std::string q, k, v, o, stats;
  std::string seq_lens;  // padding: int32 [B], each sequence's valid length ("" for none)
  std::string bias;      // an additive mask broadcast from bias_dims to [B, heads, S, S_kv] ("" for none)
  std::array<int64_t, 4> bias_dims{1, 1, 1, 1};
  bool backward = false;
  std::string d_o, dq, dk, dv;  // backward only
};

// A row kernel that adds only a bias row and a residual to `input` (a step [bias, add] after a
// row-parallel GEMM's reduce-scatter): overlap_collectives may fold it into the ring's last
// sum. In memory only; a plan does not hold it.
struct RowAdds {
  std::string input, bias, residual, output;  // residual: "" for none
  DType type = DType::bf16, bias_type = DType::bf16, residual_type = DType::bf16;  // type: input's and output's
  int64_t cols = 0;                                                                // the bias's length
};

struct Launch {
  // fork: the side stream waits for the work so far on the main stream; join: the main stream
  // waits for the side stream's. Inside the CUDA graph they are its edges.
  enum class Kind : uint8_t { kernel, gemm, memset, delayed_scale_inv, delayed_update, collective, fork, join, attention } kind = Kind::kernel;
  int stream = 0;  // 0: the run's stream; 1: the session's side stream (collectives overlapped with GEMMs)
  int step = -1;  // -1: run-level (delayed scaling bookkeeping)
  int module = -1;
  std::string entry;
  std::array<int64_t, 3> grid{1, 1, 1}, block{1, 1, 1};
  int64_t shared_bytes = 0;  // dynamic shared memory of a kernel
  // The kernel waits for the previous kernel in-kernel (kernels/common.cuh), so the runtime may
  // launch it before that one has finished (programmatic dependent launch).
  bool early_launch = false;
  // The kernel strides over its work by gridDim.x, so the runtime launches only as many of the
  // grid's blocks as the GPU holds at once (kernels/grouped_gemm.cu).
  bool persistent = false;
  // Makes a copy of constants kept across runs (Workspace::kept_across_runs): the runtime runs
  // it on a session's first run and after its arena is restored, as train plans' weight copies.
  bool constant_copy = false;
  std::vector<LaunchArg> args;
  std::vector<TensorMapArg> tensor_maps;  // the kernel's second parameter (kernels/hopper.cuh TecTensorMaps)
  GemmLaunch gemm;
  std::string buffer;  // memset: zeroed
  CollectiveLaunch collective;
  AttentionLaunch attention;
  std::optional<RowAdds> adds;
};
std::string_view to_string(Launch::Kind kind);

// The kernels' dtype codes (row.cu's TEC_IN_DTYPE, TEC_PARAM_DTYPE, TEC_OUT; accumulate.cu's
// TEC_DTYPE): bf16 0, fp16 1, fp32 2; -1 for a type they do not take.
int kernel_dtype_code(DType d);

struct GpuLowering {
  bool supported = false;
  std::string reason = "not lowered";  // why not, naming the step and op
  std::string step, node, op;          // unsupported: the step the lowering stopped at, its first node and op
  std::vector<Launch> launches;
  std::vector<std::string> small_m_weights;  // data buffers of weights some small-M GEMM reads as W
  std::vector<std::string> mid_m_weights;    // ... that a mid-M GEMM could read, given its device layout
};

// The modules (kernel sources with their defines) that every profile's launches share.
class ModuleTable {
 public:
  int add(const KernelRequest& request);  // deduplicated; the index
  const std::vector<KernelRequest>& requests() const { return requests_; }

 private:
  std::vector<KernelRequest> requests_;
};

// Weight data buffer -> the device layout it lives in on the GPU ("small_m_tiles",
// "mid_m_tiles"; plan Buffer::device_layout). Weights not named are row-major.
using WeightLayouts = std::map<std::string, std::string>;

// te-compile --tp-overlap auto: GEMMs of fewer rows keep their collectives between them.
// Measured on two H100s (NVLink) at h=8192, ffn=32768 (bench/tp_bench.py, docs/tensor-parallel.md): at 8192
// tokens the overlap saved 200 us (bf16) and 25 us (fp8-current) of 7.3 and 4.4 ms; at 2048
// the row blocks and the collectives' share of the SMs cost 46-50 us more than it hid.
inline constexpr int64_t kOverlapMinRows = 4096;

// What the GPU code is for, and which of tec's own kernels it may use.
struct LoweringTarget {
  std::vector<std::string> archs;  // "sm_90", ...
  // tec's mid-M GEMM kernel (kernels/gemm_mid_m.cu), experimental: te-compile --mid-m-gemm.
  // Correct on the H100, but in the CUDA graph at mlp.json T=128 not yet faster than cuBLASLt.
  bool mid_m_gemm = false;
  // fp8-block MoE experts multiplied in FP8 by tec's grouped GEMM, scaling each 128-deep step
  // of K by its blocks' scales (kernels/grouped_gemm.cu TEC_BLOCK_SCALES). false: through a
  // bf16 copy of the weights (te-compile --no-grouped-block-scales), slower and bigger.
  bool grouped_block_scales = true;
  // Tensor parallel: overlap the all-gather before a GEMM and the reduce-scatter after one with
  // that GEMM's row blocks (overlap_collectives) when the GEMM has at least this many rows;
  // -1: never (te-compile --tp-overlap off), 0: always (on).
  int64_t overlap_min_rows = kOverlapMinRows;
};


// Tensor parallel over `tp_size` ranks: rewrites `launches` so that collectives run on the
// side stream while GEMMs compute. An all-gather that a GEMM reads next: the GEMM's block of
// this rank's own rows (from the rank's unsent input) runs during the gather, the peers'
// blocks after it. A reduce-scatter (a sum) of a GEMM's output: a ring, the GEMM in one block
// per rank, each block's running sum sent on to the next rank (ring_exchange: a send and a
// recv) while the next block computes, and added (kernels/accumulate.cu) into that rank's own.
// Outputs are the same bytes as without for two ranks (the blocks are the same rows; each sum
// adds the same two values, rounded once as NCCL does). GEMMs with block scales along M,
// transposed operands, a C operand or an FP8 output are left whole.
// Records in `schedule` the steps each buffer is used in, now that side-stream work runs
// beside later steps, for memory_plan.
void overlap_collectives(std::vector<Launch>& launches, int64_t tp_size, int64_t min_rows, Schedule& schedule, ModuleTable& modules);

// Lowers every step of one profile for `target`. Adds workspaces to
// `schedule` and fusion notes saying which path each GEMM takes. A step with no GPU
// implementation yet makes the lowering unsupported (with the reason), not an error: the plan
// still runs on the CPU reference. `layouts` says which weights tec's GEMM kernels read in
// their own device layouts; null for a scratch lowering, which only finds the candidates
// (GpuLowering::small_m_weights / mid_m_weights) and assumes the mid-M kernel gets its layout.
GpuLowering lower_for_gpu(const Graph& graph, Schedule& schedule, ModuleTable& modules, const LoweringTarget& target,
                          const WeightLayouts* layouts = nullptr);

// The device layouts of the weights, from the scratch lowerings of every profile: a weight that
// every launch of every profile reads only as W of small-M GEMMs gets "small_m_tiles", only as
// W of mid-M GEMMs "mid_m_tiles". Profiles share the constants, so any other reader (cuBLASLt
// at another T, a dequantize kernel, the other kernel) keeps a weight row-major for all of
// them; a mid-M GEMM whose weight is row-major then runs on cuBLASLt.
WeightLayouts weight_device_layouts(const std::vector<GpuLowering>& profiles);

// Per-tensor FP8 GEMMs with at most this many rows (tokens) run tec's small-M kernel
// (kernels/gemm_small_m.cu) instead of cuBLASLt, on archs with FP8 mma (sm_89 and newer).
// Measured on the H100 at mlp.json's shapes: 27 us per 64 MB weight at M = 16 and 30 us at
// M = 32 (2.2-2.5 TB/s), where cuBLASLt's best took 31-32 us at M = 16; at M = 64 its
// accumulators no longer fit in registers.
inline constexpr int64_t kSmallGemmMaxRows = 32;

// With LoweringTarget::mid_m_gemm, per-tensor FP8 GEMMs with 33 to kMidGemmMaxRows rows and
// N >= kMidGemmMinN run tec's mid-M kernel (kernels/gemm_mid_m.cu, wgmma) when every target
// arch is sm_90 and the output is FP8 with current scaling (lower.cpp: mid_gemm_fits says why).
inline constexpr int64_t kMidGemmMaxRows = 128;
inline constexpr int64_t kMidGemmMinN = 16384;

}  // namespace tec::codegen
