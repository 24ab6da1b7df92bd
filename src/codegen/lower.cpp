#include "codegen/lower.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>

#include "codegen/general.h"
#include "codegen/quantize_kernels.h"
#include "core/error.h"
#include "ir/grouped_tensor.h"
#include "grouped_schedule.h"
#include "grouped_wgrad_sm90_layout.h"
#include "mid_m_layout.h"
#include "row_producers.h"
#include "status.h"
#include "ops/common.h"
#include "passes/memory_plan.h"
#include "plan/plan.h"

namespace tec::codegen {

namespace {

// Thrown inside the lowering for a step it cannot lower yet; becomes GpuLowering::reason.
struct NotLowered {
  std::string reason;
};

// The define that picks a row-kernel producer (kernels/row_producers.h).
std::string row_producer(int producer) { return "TEC_PRODUCER=" + std::to_string(producer); }

std::string float_literal(double v) {
  char text[48];
  std::snprintf(text, sizeof text, "%.9ef", static_cast<double>(static_cast<float>(v)));
  return text;
}

// kernel_dtype_code, or NotLowered naming `what`.
int dtype_code(DType d, const std::string& what) {
  const int code = kernel_dtype_code(d);
  if (code < 0) throw NotLowered{what + " is " + std::string(to_string(d)) + "; the GPU kernels take bf16, fp16 or fp32"};
  return code;
}

// A list of integers as a C array initializer for a define: "2LL,16LL,128LL".
std::string int_list(const std::vector<int64_t>& values) {
  std::string text;
  for (size_t i = 0; i < values.size(); ++i) text += (i ? "," : "") + std::to_string(values[i]) + "LL";
  return text;
}

LaunchArg buf(std::string name) { return {LaunchArg::Kind::buffer, std::move(name), 0}; }

// kernels/row.cu's activation codes (TEC_ACT), for an activation op or its backward.
int activation_code(const Node& n) {
  if (n.op == "gelu") return n.attrs.get_string("approximate", "tanh") == "tanh" ? 1 : 2;
  if (n.op == "geglu") return 1;
  if (n.op == "relu") return 3;
  return 4;  // silu, swiglu
}
bool is_activation(const std::string& op) { return op == "gelu" || op == "relu" || op == "silu" || op == "swiglu" || op == "geglu"; }
bool is_gated(const std::string& op) { return op == "swiglu" || op == "geglu"; }

// The defines and argument slots of tec's GEMM kernels (kernels/gemm_epilogue.cuh).
std::vector<std::string> gemm_kernel_defines(const GemmLaunch& gemm, DType residual_type) {
  auto code = [](DType d) { return std::to_string(d == DType::fp32 ? 2 : 1); };
  int out_code = 0;
  if (is_float8(gemm.d_type)) out_code = 11;
  else if (!gemm.amax_d.empty()) out_code = 20;
  else if (gemm.d_type == DType::fp32) out_code = 2;
  return {"TEC_M=" + std::to_string(gemm.m), "TEC_N=" + std::to_string(gemm.n) + "LL", "TEC_K=" + std::to_string(gemm.k) + "LL",
          "TEC_A_E4M3=" + std::string(gemm.a.type == DType::fp8_e4m3 ? "1" : "0"),
          "TEC_B_E4M3=" + std::string(gemm.b.type == DType::fp8_e4m3 ? "1" : "0"),
          "TEC_BIAS=" + (gemm.bias.empty() ? std::string("0") : code(gemm.bias_type)),
          "TEC_ACT=" + std::string(gemm.epilogue.starts_with("gelu") ? "1" : gemm.epilogue.starts_with("relu") ? "3" : "0"),
          "TEC_RESIDUAL=" + (gemm.c.empty() ? std::string("0") : code(residual_type)),
          "TEC_OUT=" + std::to_string(out_code),
          "TEC_FP8_E4M3=" + std::string(gemm.d_type == DType::fp8_e4m3 ? "1" : "0")};
}
std::vector<LaunchArg> gemm_kernel_args(const GemmLaunch& gemm) {
  auto opt = [](const std::string& b) { return b.empty() ? LaunchArg{} : buf(b); };
  return {buf(gemm.a.buffer), buf(gemm.a.scale_inv), buf(gemm.b.buffer), buf(gemm.b.scale_inv), opt(gemm.bias),
          opt(gemm.c),        buf(gemm.d),           opt(gemm.d_scale),  opt(gemm.amax_d)};
}

class StepLowering {
 public:
  StepLowering(const Graph& g, Step& step, int index, ModuleTable& modules, GpuLowering& out, bool fp8_mma, bool hopper, bool mid_m,
               bool grouped_block_scales, const WeightLayouts* layouts)
      : g_(g), step_(step), index_(index), modules_(modules), out_(out.launches), small_m_weights_(out.small_m_weights),
        mid_m_weights_(out.mid_m_weights), fp8_mma_(fp8_mma), hopper_(hopper), mid_m_(mid_m),
        grouped_block_scales_(grouped_block_scales), layouts_(layouts) {}

  void lower() {
    if (step_.kind == StepKind::gemm)
      lower_gemm();
    else if (step_.kind == StepKind::collective)
      lower_collective();
    else
      lower_kernel();
  }

 private:
  // A value's buffers; an in-place update (autodiff's SSA versions of state) lives in its
  // state value's.
  const Value& stored(const Value& v) const { return v.storage ? g_.value(*v.storage) : v; }
  std::string data(const Value& v) const { return value_buffer_name(stored(v).name, BufferRole::data); }
  std::string role(const Value& v, BufferRole r) const { return value_buffer_name(stored(v).name, r); }

  void push_collective(std::string op, std::string reduce, std::string send, std::string recv, int64_t count, DType dtype) {
    Launch l;
    l.kind = Launch::Kind::collective;
    l.step = index_;
    l.collective = {std::move(op), std::move(reduce), std::move(send), std::move(recv), count, dtype};
    out_.push_back(std::move(l));
  }

  // A collective step (tensor parallel) on the session's NCCL communicator. A backward node
  // runs its forward's transpose: all_gather's gradient is reduce-scattered, reduce_scatter's
  // gathered, and an all_reduce sums in the direction its reduce_in names (copies in the other).
  void lower_collective() {
    const Node& n = node(0);
    const Value& x = input(n, 0);
    const Value& y = output(n);
    std::string op = n.op;
    if (n.computes_backward && op == "all_gather") op = "reduce_scatter";
    else if (n.computes_backward && op == "reduce_scatter") op = "all_gather";
    else if (op == "all_reduce" && n.computes_backward != (n.attrs.get_string("reduce_in", "forward") == "backward")) op = "copy";
    if (x.proto.quantizer)
      throw NotLowered{"collective '" + n.name + "' reads quantized '" + x.name + "'; the GPU moves unquantized tensors, or gathers what it quantized itself"};
    const int64_t count = op == "all_gather" ? x.proto.shape.numel() : y.proto.shape.numel();
    if (!y.proto.quantizer) return push_collective(op, "sum", data(x), data(y), count, x.proto.dtype);
    if (op != "all_gather")
      throw NotLowered{"collective '" + n.name + "': its " + op + " result '" + y.name + "' is quantized; the GPU quantizes only all-gathered tensors"};
    gather_quantized(x, y);
  }

  // TE's FP8 all-gather: each rank quantizes its own rows with the scale the whole tensor gets
  // (current scaling: from the group's amax, all-reduced as a maximum; delayed scaling: the
  // state's scale, its amax record maxed over the group afterwards), then the FP8 codes are
  // gathered, half the bytes of bf16. Every rank computes the same scale_inv, so it is not
  // sent; the codes are the reference's, which quantizes the gathered tensor as one.
  void gather_quantized(const Value& x, const Value& y) {
    const Quantizer& q = *y.proto.quantizer;
    if (q.kind != QuantizerKind::fp8_current && q.kind != QuantizerKind::fp8_delayed) {
      // Block scales (fp8-block, MXFP8, NVFP4) are laid out over the whole tensor's rows, padded:
      // the ranks' parts do not concatenate into it, so the unquantized rows are gathered and
      // quantized after.
      step_.fusions.push_back("gpu: '" + y.name + "' is gathered in " + std::string(tec::to_string(x.proto.dtype)) +
                              " and quantized after the gather: its " + std::string(tec::to_string(q.kind)) +
                              " block scales do not concatenate by rank");
      const std::string gathered = add_workspace(y.name + ".gathered", TensorProto::dense(y.proto.shape, x.proto.dtype));
      push_collective("all_gather", "sum", data(x), gathered, x.proto.shape.numel(), x.proto.dtype);
      return emit_row(load(gathered, x.proto.dtype, "gathered '" + y.name + "'"), y);
    }
    const int64_t rows = x.proto.shape.rows(), cols = x.proto.shape.cols();
    const std::string local = add_workspace(y.name + ".local_codes", TensorProto::dense(Shape{rows, cols}, DType::uint8));
    std::vector<std::string> defines = load(data(x), x.proto.dtype, "input '" + x.name + "'").defines;
    defines.insert(defines.end(), {"TEC_N=" + std::to_string(cols) + "LL", "TEC_FP8_E4M3=" + std::string(q.dtype == DType::fp8_e4m3 ? "1" : "0"),
                                   "TEC_POW2_SCALES=" + std::string(q.force_pow2_scales ? "1" : "0"),
                                   "TEC_AMAX_EPSILON=" + float_literal(q.amax_epsilon)});
    std::array<LaunchArg, 12> slots{};
    slots[0] = buf(data(x));
    slots[3] = buf(local);
    slots[4] = buf(role(y, BufferRole::scale_inv));
    slots[7] = {LaunchArg::Kind::value, "", rows};
    auto pass = [&](const std::string& out, int number) {
      std::vector<std::string> d = defines;
      d.push_back("TEC_OUT=" + out);
      d.push_back("TEC_PASS=" + std::to_string(number));
      push_row_launch(std::move(d), slots, rows, cols, row_chunks(rows, cols));
    };
    if (q.kind == QuantizerKind::fp8_current) {
      slots[5] = buf(add_workspace(y.name + ".group_amax", TensorProto::dense(Shape{1}, DType::fp32)));
      memset(slots[5].buffer);
      pass("10", 1);
      push_collective("all_reduce", "max", slots[5].buffer, slots[5].buffer, 1, DType::fp32);
      pass("10", 2);
    } else {
      slots[5] = buf(state_buffer_name(y.name, "amax_history"));
      slots[6] = buf(state_buffer_name(y.name, "scale"));
      pass("11", 0);
      push_collective("all_reduce", "max", slots[5].buffer, slots[5].buffer, 1, DType::fp32);
    }
    push_collective("all_gather", "sum", local, data(y), rows * cols, q.dtype);
    if (y.proto.usage.columnwise) push_transpose(data(y), role(y, BufferRole::columnwise_data), y.proto.shape.rows(), cols);
  }

  // Row kernel producer: its defines and its input slots 0-2.
  struct Producer {
    std::vector<std::string> defines;
    std::array<LaunchArg, 3> inputs;
    std::array<LaunchArg, 4> more;  // slots 8-11: the norms' backward inputs, their saved statistics
    bool per_element = true;  // false for norms: an element needs its row's statistics
    int64_t rows = 0, cols = 0;  // the output's [rows, cols] view when not the value's own (reductions)
  };

  const Node& node(size_t i) const { return g_.node(step_.nodes.at(i)); }
  const Value& input(const Node& n, size_t slot) const { return g_.value(n.inputs.at(slot)); }
  const Value& output(const Node& n) const { return g_.value(n.outputs.at(0)); }

  std::string add_workspace(const std::string& name, TensorProto proto, bool kept_across_runs = false) {
    step_.workspaces.push_back({name, std::move(proto), kept_across_runs});
    return workspace_buffer_name(step_.name, name, BufferRole::data);
  }

  void memset(std::string buffer) {
    Launch l;
    l.kind = Launch::Kind::memset;
    l.step = index_;
    l.buffer = std::move(buffer);
    out_.push_back(std::move(l));
  }

  // Per-block amaxes (TEC_AMAX_PARTIALS in kernels/row.cu) for a current-scaling output, as
  // the amax pass or a GEMM epilogue leaves them for the cast pass.
  struct AmaxPartials {
    std::string buffer;
    int64_t count = 0;
  };
  // Every cast-pass block reads all the partials; past this many (layernorm at T > 1024), one
  // float maxed atomically after a memset is cheaper.
  static constexpr int64_t kMaxAmaxPartials = 1024;

  // What emit_row writes of a quantized value: every copy it has, only the rowwise one (the
  // columnwise one made apart), or for NVFP4 only the tensor's amax (a weight's 16x16 tiles
  // are written by kernels/nvfp4_columns.cu, both ways).
  enum class Copies { all, rowwise, amax };

  // The row kernel over `rows` rows of `v`, from `producer`, storing or quantizing into v's
  // buffers: one launch, or amax pass + cast pass for whole-tensor-amax quantizers. With
  // `amax_done` (current scaling), the producer's kernel already left v's amax partials, and
  // only the cast pass runs.
  void emit_row(const Producer& producer, const Value& v, const AmaxPartials* amax_done = nullptr, Copies copies = Copies::all) {
    const bool rowwise_only = copies != Copies::all;
    const int64_t rows = producer.rows ? producer.rows : v.proto.shape.rows();
    const int64_t cols = producer.cols ? producer.cols : v.proto.shape.cols();
    const Quantizer* block = v.proto.quantizer && v.proto.quantizer->kind == QuantizerKind::fp8_block ? &*v.proto.quantizer : nullptr;
    if (block && !rowwise_only && (block->block_rows == 128 || v.proto.usage.columnwise))
      return emit_block_copies(producer, v, rows, cols);
    if (v.proto.quantizer && v.proto.quantizer->kind == QuantizerKind::mxfp8 && v.proto.usage.columnwise && !rowwise_only)
      return emit_mxfp8_copies(producer, v, rows, cols);
    if (v.proto.quantizer && v.proto.quantizer->kind == QuantizerKind::nvfp4 && !rowwise_only &&
        (v.proto.usage.columnwise || v.proto.quantizer->block_rows == 16))
      return emit_nvfp4_copies(producer, v, rows, cols);
    // A columnwise copy (training: wgrad's x and dy, dgrad's W) of a per-tensor FP8 tensor is
    // its rowwise codes transposed (LAYOUTS.md 1.1), made by a transpose kernel afterwards.
    const bool transposed_copy = v.proto.quantizer && v.proto.usage.columnwise && !rowwise_only;
    if (transposed_copy) {
      const QuantizerKind kind = v.proto.quantizer->kind;
      if (kind != QuantizerKind::fp8_current && kind != QuantizerKind::fp8_delayed)
        throw NotLowered{"'" + v.name + "' needs a columnwise " + std::string(tec::to_string(kind)) +
                         " copy (training); the GPU makes columnwise copies of FP8 per tensor, in blocks, MXFP8 and NVFP4 only"};
      if (!v.proto.usage.rowwise) throw NotLowered{"'" + v.name + "' has a columnwise FP8 copy without a rowwise one"};
    }
    // A grouped tensor made on the GPU (a train plan's expert weights, from their masters) is
    // quantized per member: each its own amax and scale_inv, its own columnwise transpose.
    const int64_t members = v.proto.is_grouped() && v.proto.quantizer ? v.proto.group_members : 1;
    if (members > 1) {
      const QuantizerKind kind = v.proto.quantizer->kind;
      const bool per_tensor = kind == QuantizerKind::fp8_current || kind == QuantizerKind::fp8_delayed;
      const bool nvfp4_amax = kind == QuantizerKind::nvfp4 && copies == Copies::amax;  // each member's, before its tiles
      if ((!per_tensor && !nvfp4_amax && !mxfp8_members_as_one(v, rows)) || amax_done)
        throw NotLowered{"'" + v.name + "' is a grouped " + std::string(tec::to_string(kind)) +
                         " tensor made every run (a train plan's expert weights); the GPU quantizes those per member under "
                         "fp8-current and fp8-delayed, in 128x128 blocks under fp8-block, under mxfp8 when each member's "
                         "rows are a multiple of 128, and in 16x16 tiles under nvfp4, so far"};
      for (BufferRole r : {BufferRole::data, BufferRole::scale_inv}) (void)packed_member_bytes(v, r);
      if (transposed_copy) (void)packed_member_bytes(v, BufferRole::columnwise_data);
    }
    std::vector<std::string> defines = producer.defines;
    defines.push_back("TEC_N=" + std::to_string(cols) + "LL");
    std::array<LaunchArg, 12> slots{};
    for (size_t i = 0; i < 3; ++i) slots[i] = producer.inputs[i];
    for (size_t i = 0; i < 4; ++i) slots[8 + i] = producer.more[i];
    slots[7] = {LaunchArg::Kind::value, "", rows};
    std::vector<int> passes{0};
    // Per-tensor outputs can split a row across blocks; block-scaled ones keep a row per block.
    bool split_rows = producer.per_element;
    if (!v.proto.quantizer) {
      defines.push_back("TEC_OUT=" + std::to_string(dtype_code(v.proto.dtype, "output '" + v.name + "'")));
      slots[3] = buf(data(v));
    } else {
      const Quantizer& q = *v.proto.quantizer;
      defines.push_back("TEC_FP8_E4M3=" + std::string(q.dtype == DType::fp8_e4m3 ? "1" : "0"));
      defines.push_back("TEC_POW2_SCALES=" + std::string(q.force_pow2_scales ? "1" : "0"));
      defines.push_back("TEC_AMAX_EPSILON=" + float_literal(q.amax_epsilon));
      slots[3] = buf(data(v));
      switch (q.kind) {
        case QuantizerKind::fp8_current: {
          defines.push_back("TEC_OUT=10");
          slots[4] = buf(role(v, BufferRole::scale_inv));
          if (amax_done) {
            slots[5] = buf(amax_done->buffer);
            defines.push_back("TEC_AMAX_PARTIALS=" + std::to_string(amax_done->count));
            passes = {2};
            break;
          }
          passes = {1, 2};
          if (members > 1) {
            defines.push_back("TEC_MEMBER_ROWS=" + std::to_string(rows / members) + "LL");
            slots[5] = buf(add_workspace(v.name + ".member_amax", TensorProto::dense(Shape{members}, DType::fp32)));
            memset(slots[5].buffer);
            break;
          }
          if (const int64_t blocks = rows * (split_rows ? row_chunks(rows, cols) : 1); blocks <= kMaxAmaxPartials) {
            slots[5] = buf(add_workspace(v.name + ".amax_partials", TensorProto::dense(Shape{blocks}, DType::fp32)));
            defines.push_back("TEC_AMAX_PARTIALS=" + std::to_string(blocks));
            break;
          }
          slots[5] = buf(add_workspace(v.name + ".amax", TensorProto::dense(Shape{1}, DType::fp32)));
          memset(slots[5].buffer);
          break;
        }
        case QuantizerKind::fp8_delayed:
          defines.push_back("TEC_OUT=11");
          if (members > 1) defines.push_back("TEC_MEMBER_ROWS=" + std::to_string(rows / members) + "LL");
          slots[4] = buf(role(v, BufferRole::scale_inv));
          slots[5] = buf(state_buffer_name(v.name, "amax_history"));
          slots[6] = buf(state_buffer_name(v.name, "scale"));
          break;
        case QuantizerKind::fp8_block:
          defines.push_back("TEC_OUT=12");
          split_rows = false;
          defines.push_back("TEC_OVERFLOW=" + std::string(v.proto.dtype == DType::bf16 ? "3.38953139e38f" : "3.402823466e38f"));
          slots[4] = buf(role(v, BufferRole::scale_inv));
          memset(slots[4].buffer);  // the padding rows are zero, as the reference writes them
          break;
        case QuantizerKind::mxfp8:
          if (q.block_rows != 1) throw NotLowered{"'" + v.name + "' uses 2-D MXFP8, which only constant weights get"};
          defines.push_back("TEC_OUT=13");
          split_rows = false;
          slots[4] = buf(role(v, BufferRole::scale_inv));
          memset(slots[4].buffer);
          break;
        case QuantizerKind::fp8_static:
          if (q.static_scale_inv <= 0.0f)
            throw NotLowered{"'" + v.name + "' has per-row or block static scales, which only constant weights get"};
          defines.push_back("TEC_OUT=15");
          defines.push_back("TEC_STATIC_SCALE_INV=" + float_literal(q.static_scale_inv));
          slots[4] = buf(role(v, BufferRole::scale_inv));
          break;
        case QuantizerKind::nvfp4:
          if (q.block_rows != 1 && copies != Copies::amax)
            throw NotLowered{"'" + v.name + "' uses 2-D NVFP4, whose tiles kernels/nvfp4_columns.cu writes"};
          defines.push_back("TEC_OUT=14");
          if (members > 1) defines.push_back("TEC_MEMBER_ROWS=" + std::to_string(rows / members) + "LL");
          split_rows = false;
          slots[4] = buf(role(v, BufferRole::scale_inv));
          slots[5] = buf(role(v, BufferRole::amax));
          memset(slots[4].buffer);
          memset(slots[5].buffer);
          passes = copies == Copies::amax ? std::vector<int>{1} : std::vector<int>{1, 2};
          break;
      }
    }
    for (int pass : passes) {
      std::vector<std::string> d = defines;
      d.push_back("TEC_PASS=" + std::to_string(pass));
      push_row_launch(std::move(d), slots, rows, cols, split_rows ? row_chunks(rows, cols) : 1);
    }
    if (transposed_copy) push_transpose(data(v), role(v, BufferRole::columnwise_data), rows / members, cols, members);
  }

  // FP8 block scaling's copies the row kernel does not write (kernels/block_quantize.cu):
  // 128x128 tiles in both directions (a train plan's weights, from their fp32 masters), and
  // the 1x128 columnwise copy (wgrad's x and dy), from the producer's values in fp32 - what the
  // reference quantizes, unrounded - with the 1x128 rowwise copy by the row kernel from them.
  void emit_block_copies(const Producer& producer, const Value& v, int64_t rows, int64_t cols) {
    const Quantizer& q = *v.proto.quantizer;
    // A grouped weight's members are quantized one by one (grid z), each transposed on its own.
    const int64_t members = v.proto.is_grouped() ? v.proto.group_members : 1;
    if (members > 1 && (q.block_rows != 128 || rows % members != 0))
      throw NotLowered{"grouped '" + v.name + "' in " + q.str() + ": the GPU quantizes grouped tensors in 128x128 blocks only"};
    const std::string source = fp32_values(producer, v, rows, cols);
    const bool rowwise = v.proto.usage.rowwise, columnwise = v.proto.usage.columnwise;
    std::vector<std::string> defines = {
        "TEC_ROWS=" + std::to_string(rows / members) + "LL", "TEC_COLS=" + std::to_string(cols) + "LL",
        "TEC_FP8_E4M3=" + std::string(q.dtype == DType::fp8_e4m3 ? "1" : "0"),
        "TEC_POW2_SCALES=" + std::string(q.force_pow2_scales ? "1" : "0"), "TEC_AMAX_EPSILON=" + float_literal(q.amax_epsilon),
        "TEC_OVERFLOW=" + std::string(v.proto.dtype == DType::bf16 ? "3.38953139e38f" : "3.402823466e38f"),
        "TEC_ROWWISE=" + std::string(rowwise ? "1" : "0"), "TEC_COLUMNWISE=" + std::string(columnwise ? "1" : "0")};
    if (members > 1) {  // 128x128 tiles, checked above
      for (const auto& [present, r] : {std::pair{rowwise, BufferRole::data}, std::pair{columnwise, BufferRole::columnwise_data}})
        if (present && packed_member_bytes(v, r) != rows / members * cols)
          throw NotLowered{"grouped '" + v.name + "': its members' codes are not packed back to back"};
      defines.push_back("TEC_MEMBER_SCALES=" + std::to_string(rowwise ? packed_member_bytes(v, BufferRole::scale_inv) / 4 : 0) + "LL");
      defines.push_back("TEC_MEMBER_COLUMNWISE_SCALES=" +
                        std::to_string(columnwise ? packed_member_bytes(v, BufferRole::columnwise_scale_inv) / 4 : 0) + "LL");
    }
    constexpr int64_t kBlock = 128, kThreads = 256;
    auto opt = [&](bool present, BufferRole r) { return present ? buf(role(v, r)) : LaunchArg{}; };
    Launch l;
    l.kind = Launch::Kind::kernel;
    l.step = index_;
    l.module = modules_.add(KernelRequest{"block_quantize.cu", defines, ""});
    l.block = {kThreads, 1, 1};
    l.early_launch = true;
    if (q.block_rows == 128) {
      if (rowwise) memset(role(v, BufferRole::scale_inv));  // the padding, zero as the reference leaves it
      if (columnwise) memset(role(v, BufferRole::columnwise_scale_inv));
      l.entry = "tec_block_quantize_2d";
      l.grid = {(cols + kBlock - 1) / kBlock, (rows / members + kBlock - 1) / kBlock, members};
      l.args = {buf(source), opt(rowwise, BufferRole::data), opt(rowwise, BufferRole::scale_inv), opt(columnwise, BufferRole::columnwise_data),
                opt(columnwise, BufferRole::columnwise_scale_inv)};
      out_.push_back(std::move(l));
      return;
    }
    if (rowwise) emit_row(load(source, DType::fp32, "staging"), v, nullptr, Copies::rowwise);
    memset(role(v, BufferRole::columnwise_scale_inv));
    l.entry = "tec_block_quantize_columns";
    l.grid = {(cols + kBlock - 1) / kBlock, (rows + kBlock - 1) / kBlock, 1};
    l.args = {buf(source), buf(role(v, BufferRole::columnwise_data)), buf(role(v, BufferRole::columnwise_scale_inv))};
    out_.push_back(std::move(l));
  }

  // A grouped MXFP8 tensor whose members each have a multiple of 128 rows is laid out as one
  // tensor of all their rows: no 32-row column block straddles two members, and each member's
  // padded scale rows (roundup(rows, 128) rowwise, roundup(rows / 32, 4) columnwise) are its
  // own rows exactly. So the whole-tensor kernels write every member's own bytes.
  static bool mxfp8_members_as_one(const Value& v, int64_t rows) {
    const int64_t members = v.proto.group_members;
    if (v.proto.quantizer->kind != QuantizerKind::mxfp8 || rows % members != 0 || (rows / members) % 128 != 0) return false;
    require_packed_members(v);
    return true;
  }

  // The producer's values in fp32, unrounded, as the reference quantizes them: its own source
  // when it is a plain fp32 load (a weight's master), else a workspace the row kernel fills.
  std::string fp32_values(const Producer& producer, const Value& v, int64_t rows, int64_t cols) {
    const bool fp32_load = producer.defines.size() == 2 && producer.defines[0] == row_producer(TEC_ROW_LOAD) && producer.defines[1] == "TEC_IN_DTYPE=2";
    if (fp32_load) return producer.inputs[0].buffer;
    const std::string staged = add_workspace(v.name + ".fp32", TensorProto::dense(Shape{rows, cols}, DType::fp32));
    emit_row_to(producer, rows, cols, staged, DType::fp32);
    return staged;
  }

  // MXFP8's columnwise copy (training: wgrad's x and dy, dgrad's W) is quantized anew down the
  // columns from the values (LAYOUTS.md §2.1: it cannot be derived from the rowwise codes), by
  // kernels/mxfp8_columns.cu; the rowwise copy by the row kernel from the same fp32 values.
  void emit_mxfp8_copies(const Producer& producer, const Value& v, int64_t rows, int64_t cols) {
    const Quantizer& q = *v.proto.quantizer;
    if (v.proto.is_grouped() && v.proto.group_members > 1 && !mxfp8_members_as_one(v, rows))
      throw NotLowered{"'" + v.name + "' is a grouped mxfp8 tensor made every run (a train plan's expert weights) whose members' rows "
                       "are not a multiple of 128; the GPU quantizes it as one tensor, which needs its members' blocks and padded "
                       "scales to fall where each member's own would"};
    if (q.block_rows != 1) throw NotLowered{"'" + v.name + "' uses 2-D MXFP8, which only constant weights get"};
    if (rows % 32 != 0)
      throw NotLowered{"'" + v.name + "' has " + std::to_string(rows) + " rows; MXFP8's columnwise copy needs a multiple of 32"};
    const std::string source = fp32_values(producer, v, rows, cols);
    if (v.proto.usage.rowwise) emit_row(load(source, DType::fp32, "staging"), v, nullptr, Copies::rowwise);
    memset(role(v, BufferRole::columnwise_scale_inv));  // the padding, zero as the reference leaves it
    constexpr int64_t kThreads = 256, kBlockRows = 32;
    Launch l;
    l.kind = Launch::Kind::kernel;
    l.step = index_;
    l.module = modules_.add(KernelRequest{"mxfp8_columns.cu",
                                          {"TEC_ROWS=" + std::to_string(rows) + "LL", "TEC_COLS=" + std::to_string(cols) + "LL",
                                           "TEC_FP8_E4M3=" + std::string(q.dtype == DType::fp8_e4m3 ? "1" : "0")},
                                          ""});
    l.entry = "tec_mxfp8_quantize_columns";
    l.grid = {rows / kBlockRows, (cols + kThreads - 1) / kThreads, 1};  // x: grid x has room for any row count
    l.block = {kThreads, 1, 1};
    l.early_launch = true;
    l.args = {buf(source), buf(role(v, BufferRole::columnwise_data)), buf(role(v, BufferRole::columnwise_scale_inv))};
    out_.push_back(std::move(l));
  }

  // NVFP4's columnwise copy (x^T in 1x16 blocks, packed transposed; training: dgrad's W, wgrad's
  // x and dy) and a weight's 16x16 tiles in both directions, by kernels/nvfp4_columns.cu from the
  // fp32 values, after the row kernel's amax pass (both copies share the tensor's amax: no RHT);
  // a 1x16 rowwise copy by the row kernel's cast pass from the same values.
  void emit_nvfp4_copies(const Producer& producer, const Value& v, int64_t rows, int64_t cols) {
    const Quantizer& q = *v.proto.quantizer;
    // A grouped weight (an MoE layer's experts) is quantized per member, as the reference does:
    // grid z is the member, each with its own amax and its own transposed copy.
    const int64_t members = v.proto.is_grouped() ? v.proto.group_members : 1;
    if (members > 1 && (q.block_rows != 16 || rows % members != 0 || (rows / members) % 128 != 0))
      throw NotLowered{"grouped '" + v.name + "' in " + q.str() + ": the GPU quantizes grouped NVFP4 tensors in 16x16 tiles, members of "
                       "a multiple of 128 rows, only"};
    if (q.block_rows != 1 && q.block_rows != 16) throw NotLowered{"'" + v.name + "' uses NVFP4 in " + q.str() + " blocks"};
    if (!v.proto.usage.rowwise) throw NotLowered{"'" + v.name + "' has a columnwise NVFP4 copy without a rowwise one, whose amax it shares"};
    if (rows % 16 != 0 || cols % 16 != 0)
      throw NotLowered{"'" + v.name + "' is [" + std::to_string(rows) + ", " + std::to_string(cols) + "]; NVFP4's copies need both % 16"};
    const bool two_d = q.block_rows == 16, columnwise = v.proto.usage.columnwise;
    if (members > 1 && (packed_member_bytes(v, BufferRole::amax) != 4 || (columnwise && packed_member_bytes(v, BufferRole::columnwise_amax) != 4)))
      throw NotLowered{"grouped '" + v.name + "': its members' NVFP4 amaxes are not one float each, packed"};
    const std::string source = fp32_values(producer, v, rows, cols);
    emit_row(load(source, DType::fp32, "staging"), v, nullptr, two_d ? Copies::amax : Copies::rowwise);
    if (columnwise) memset(role(v, BufferRole::columnwise_scale_inv));  // the padding, zero as the reference leaves it
    constexpr int64_t kThreads = 256, kBlockRows = 16;
    Launch l;
    l.kind = Launch::Kind::kernel;
    l.step = index_;
    std::vector<std::string> defines = {"TEC_ROWS=" + std::to_string(rows / members) + "LL", "TEC_COLS=" + std::to_string(cols) + "LL",
                                        "TEC_TWO_D=" + std::string(two_d ? "1" : "0"), "TEC_ROWWISE=" + std::string(two_d ? "1" : "0"),
                                        "TEC_COLUMNWISE=" + std::string(columnwise ? "1" : "0")};
    if (members > 1)  // bytes from one member's buffer to the next's, per role
      for (const auto& [present, r, name] : {std::tuple{columnwise, BufferRole::columnwise_data, "TEC_MEMBER_COLUMNWISE_DATA"},
                                             std::tuple{columnwise, BufferRole::columnwise_scale_inv, "TEC_MEMBER_COLUMNWISE_SCALES"},
                                             std::tuple{true, BufferRole::data, "TEC_MEMBER_DATA"},
                                             std::tuple{true, BufferRole::scale_inv, "TEC_MEMBER_SCALES"}})
        if (present) defines.push_back(std::string(name) + "=" + std::to_string(packed_member_bytes(v, r)) + "LL");
    l.module = modules_.add(KernelRequest{"nvfp4_columns.cu", std::move(defines), ""});
    l.entry = "tec_nvfp4_quantize_columns";
    l.grid = {rows / members / kBlockRows, (cols + kThreads - 1) / kThreads, members};  // x: grid x has room for any row count
    l.block = {kThreads, 1, 1};
    l.early_launch = true;
    auto opt = [&](bool present, BufferRole r) { return present ? buf(role(v, r)) : LaunchArg{}; };
    l.args = {buf(source), buf(role(v, BufferRole::amax)), opt(columnwise, BufferRole::columnwise_data),
              opt(columnwise, BufferRole::columnwise_scale_inv), opt(columnwise, BufferRole::columnwise_amax),
              opt(two_d, BufferRole::data), opt(two_d, BufferRole::scale_inv)};
    out_.push_back(std::move(l));
  }

  void push_transpose(const std::string& from, const std::string& to, int64_t rows, int64_t cols, int64_t members = 1) {
    constexpr int64_t kTile = 64;  // TEC_TILE in kernels/transpose.cu
    Launch l;
    l.kind = Launch::Kind::kernel;
    l.step = index_;
    l.module = modules_.add(KernelRequest{"transpose.cu", {"TEC_ROWS=" + std::to_string(rows) + "LL", "TEC_COLS=" + std::to_string(cols) + "LL"}, ""});
    l.entry = "tec_transpose_u8";
    l.grid = {(cols + kTile - 1) / kTile, (rows + kTile - 1) / kTile, members};
    l.block = {256, 1, 1};
    l.early_launch = true;
    l.args = {buf(from), buf(to)};
    out_.push_back(std::move(l));
  }

  // Column sums over `rows` rows of dy [rows, cols] (kernels/column_sum.cu): a linear's dbias
  // into `sums`, or with the norm's x, mean and rsigma its dgamma into `sums` and (layernorm)
  // dbeta into `dy_sums`. Partials per chunk of rows, then their sums, in the order the CPU
  // reference adds them (tec_column_sum_order). With `splits` (an MoE layer's m_splits over
  // `groups` experts), the sums of each expert's rows: `sums` is [groups, cols].
  void push_column_sums(const Value& dy, int64_t rows, int64_t cols, const Value* x, const Value* mean, const Value* rsigma,
                        const Value* sums, const Value* dy_sums, const Value* splits = nullptr, int64_t groups = 0) {
    constexpr int64_t kChunkRows = 64, kThreads = 256;  // TEC_COLUMN_CHUNK_ROWS in kernels/tec_math.h
    // Grouped: every expert's last chunk may be partial, so up to `groups` chunks more.
    const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows + groups, column_blocks = (cols + kThreads - 1) / kThreads;
    std::vector<std::string> defines = {"TEC_COLUMN=" + std::string(x ? "2" : "1"), "TEC_N=" + std::to_string(cols) + "LL",
                                        "TEC_ROWS=" + std::to_string(rows) + "LL",
                                        "TEC_IN_DTYPE=" + std::to_string(dtype_code(dy.proto.dtype, "gradient '" + dy.name + "'")),
                                        "TEC_HAS_MEAN=" + std::string(mean ? "1" : "0"), "TEC_GROUPS=" + std::to_string(splits ? groups : 0)};
    if (x) defines.push_back("TEC_X_DTYPE=" + std::to_string(dtype_code(x->proto.dtype, "input '" + x->name + "'")));
    for (const Value* v : {&dy, x, mean, rsigma})
      if (v && v->proto.quantizer) throw NotLowered{"the column sums of step '" + step_.name + "' read quantized '" + v->name + "'"};
    const std::string partials = add_workspace(dy.name + ".column_partials", TensorProto::dense(Shape{chunks, cols}, DType::fp32));
    const std::string dy_partials =
        mean ? add_workspace(dy.name + ".column_partials_dy", TensorProto::dense(Shape{chunks, cols}, DType::fp32)) : "";
    auto opt = [&](const Value* v) { return v ? buf(data(*v)) : LaunchArg{}; };
    Launch l;
    l.kind = Launch::Kind::kernel;
    l.step = index_;
    l.module = modules_.add(KernelRequest{"column_sum.cu", defines, ""});
    l.entry = "tec_column_partials";
    l.grid = {column_blocks, chunks, 1};
    l.block = {kThreads, 1, 1};
    l.early_launch = true;
    l.args = {buf(data(dy)), opt(x), opt(mean), opt(rsigma), buf(partials), dy_partials.empty() ? LaunchArg{} : buf(dy_partials),
              opt(splits), splits ? status_bit(TEC_STATUS_BAD_SPLITS) : LaunchArg{}};
    out_.push_back(l);
    for (const auto& [out, from] : {std::pair{sums, partials}, std::pair{dy_sums, dy_partials}}) {
      if (!out) continue;
      if (out->proto.quantizer) throw NotLowered{"column sum '" + out->name + "' is quantized"};
      std::vector<std::string> d = defines;
      d.push_back("TEC_OUT=" + std::to_string(dtype_code(out->proto.dtype, "'" + out->name + "'")));
      Launch f = l;
      f.module = modules_.add(KernelRequest{"column_sum.cu", std::move(d), ""});
      f.entry = "tec_column_finish";
      f.grid = {column_blocks, splits ? groups : 1, 1};
      f.args = {buf(from), buf(data(*out)), {}, {}, {}, {}, opt(splits), splits ? status_bit(TEC_STATUS_BAD_SPLITS) : LaunchArg{}};
      out_.push_back(std::move(f));
    }
  }

  // Blocks per row for per-element producers: with few rows (T=16) one block per row left
  // most SMs idle: quantizing fc1's 16 x 16384 GELU output still took 16 us on the H100.
  // Enough blocks for two per SM, but at least a full batch (TEC_BATCH = 8) per thread.
  static int64_t row_chunks(int64_t rows, int64_t cols) {
    constexpr int64_t kTargetBlocks = 264, kMinChunk = kRowThreads * 8;
    const int64_t wanted = (kTargetBlocks + rows - 1) / rows;
    return std::clamp<int64_t>(std::min(wanted, cols / kMinChunk), 1, 64);
  }

  // chunks > 1: grid (rows, chunks), block y covers columns [y * chunk, (y + 1) * chunk).
  void push_row_launch(std::vector<std::string> defines, const std::array<LaunchArg, 12>& slots, int64_t rows,
                       int64_t cols, int64_t chunks) {
    int64_t chunk = (cols + chunks - 1) / chunks;
    if (cols % 8 == 0) chunk = (chunk + 7) / 8 * 8;  // row.cu's vector path takes 8 elements at a time
    if (chunks > 1) defines.push_back("TEC_CHUNK=" + std::to_string(chunk) + "LL");
    Launch l;
    l.kind = Launch::Kind::kernel;
    l.step = index_;
    l.module = modules_.add(KernelRequest{"row.cu", std::move(defines), ""});
    l.entry = "tec_row";
    l.grid = {rows, (cols + chunk - 1) / chunk, 1};
    l.block = {kRowThreads, 1, 1};
    l.early_launch = true;
    l.args.assign(slots.begin(), slots.end());
    out_.push_back(std::move(l));
  }
  static constexpr int64_t kRowThreads = 256;  // TEC_ROW_THREADS in kernels/tec_math.h

  Producer load(const std::string& buffer, DType dtype, const std::string& what) {
    return {{row_producer(TEC_ROW_LOAD), "TEC_IN_DTYPE=" + std::to_string(dtype_code(dtype, what))}, {buf(buffer), {}, {}}};
  }

  // Which copy of a quantized value a dequantize reads, and in what shape it writes it: the
  // rowwise copy; the columnwise copy as stored ([M, K] as the value under MXFP8, its transpose
  // [K, M] under NVFP4, each member transposed on its own for a grouped weight: LAYOUTS.md 2.1,
  // 4.1, 5); or the columnwise copy's values in the value's own shape.
  enum class Copy { rowwise, columnwise, columnwise_as_value };

  // A quantized value dequantized into a bf16 (or fp32) workspace, for the GEMMs cuBLASLt cannot take.
  std::string dequantize_to(const Value& v, const std::string& workspace, DType dtype = DType::bf16, Copy copy = Copy::rowwise) {
    const bool nvfp4 = v.proto.quantizer->kind == QuantizerKind::nvfp4;
    const bool transposed = copy == Copy::columnwise && nvfp4;
    const int64_t members = v.proto.is_grouped() ? v.proto.group_members : 1;
    const int64_t rows = v.proto.shape.rows(), cols = v.proto.shape.cols(), member_rows = rows / members;
    Producer p = copy == Copy::rowwise ? dequantize_producer(v) : dequantize_columnwise_producer(v, copy == Copy::columnwise_as_value);
    // Out: [rows, cols], or the members' transposes [members x cols, member_rows].
    const int64_t out_rows = transposed ? members * cols : rows, out_cols = transposed ? member_rows : cols;
    if (transposed && members > 1) {
      // The members' scale rows (roundup(cols, 128) each) concatenate as one tensor's when cols % 128 == 0.
      require_packed_members(v);
      if (cols % 128 != 0) throw NotLowered{"grouped '" + v.name + "': its NVFP4 members' transposes need " + std::to_string(cols) + " % 128 == 0"};
      p.defines.push_back("TEC_DQ_MEMBER_ROWS=" + std::to_string(cols) + "LL");  // each member's own amax
    }
    const std::string out = add_workspace(workspace, TensorProto::dense(Shape{out_rows, out_cols}, dtype));
    emit_row_to(p, out_rows, out_cols, out, dtype);
    return out;
  }

  void emit_row_to(const Producer& producer, int64_t rows, int64_t cols, const std::string& out_buffer, DType dtype) {
    std::vector<std::string> defines = producer.defines;
    defines.push_back("TEC_N=" + std::to_string(cols) + "LL");
    defines.push_back("TEC_OUT=" + std::to_string(dtype_code(dtype, "workspace '" + out_buffer + "'")));
    defines.push_back("TEC_PASS=0");
    push_row_launch(std::move(defines),
                    {producer.inputs[0], producer.inputs[1], producer.inputs[2], buf(out_buffer), {}, {}, {},
                     LaunchArg{LaunchArg::Kind::value, "", rows}, producer.more[0], producer.more[1], producer.more[2], producer.more[3]},
                    rows, cols, producer.per_element ? row_chunks(rows, cols) : 1);
  }

  Producer dequantize_columnwise_producer(const Value& v, bool as_value) {
    const Quantizer& q = *v.proto.quantizer;
    const bool nvfp4 = q.kind == QuantizerKind::nvfp4;
    if (!v.proto.usage.columnwise || !(nvfp4 || (q.kind == QuantizerKind::mxfp8 && q.block_rows == 1)))
      throw NotLowered{"'" + v.name + "': the GPU dequantizes columnwise copies of 1-D MXFP8 and of NVFP4 tensors only"};
    if (nvfp4 && as_value && v.proto.is_grouped() && v.proto.group_members > 1)
      throw NotLowered{"grouped '" + v.name + "': its NVFP4 columnwise copy is read back transposed only"};
    Producer p;
    // NVFP4's copy is x^T quantized as a rowwise copy is, so the rowwise dequantize reads it as
    // stored; TEC_DQ=9 reads it back in x's shape.
    p.defines = {row_producer(TEC_ROW_DEQUANTIZE), "TEC_DQ_FP8_E4M3=" + std::string(q.dtype == DType::fp8_e4m3 ? "1" : "0"),
                 !nvfp4 ? "TEC_DQ=8" : as_value ? "TEC_DQ=9" : "TEC_DQ=5"};
    p.inputs = {buf(role(v, BufferRole::columnwise_data)), buf(role(v, BufferRole::columnwise_scale_inv)),
                nvfp4 ? buf(role(v, BufferRole::columnwise_amax)) : LaunchArg{}};
    return p;
  }

  Producer dequantize_producer(const Value& v) {
    const Quantizer& q = *v.proto.quantizer;
    if (!v.proto.usage.rowwise) throw NotLowered{"'" + v.name + "' has no rowwise copy to dequantize"};
    Producer p;
    p.defines = {row_producer(TEC_ROW_DEQUANTIZE), "TEC_DQ_FP8_E4M3=" + std::string(q.dtype == DType::fp8_e4m3 ? "1" : "0")};
    p.inputs = {buf(data(v)), buf(role(v, BufferRole::scale_inv)), {}};
    switch (q.kind) {
      case QuantizerKind::fp8_current:
      case QuantizerKind::fp8_delayed: p.defines.push_back("TEC_DQ=1"); break;
      case QuantizerKind::mxfp8:
        if (q.block_rows != 1) throw NotLowered{"'" + v.name + "': 2-D MXFP8 has no dequantize kernel yet"};
        p.defines.push_back("TEC_DQ=2");
        break;
      case QuantizerKind::fp8_block: p.defines.push_back(q.block_rows == 128 ? "TEC_DQ=4" : "TEC_DQ=3"); break;
      case QuantizerKind::nvfp4:
        p.defines.push_back("TEC_DQ=5");
        p.inputs[2] = buf(role(v, BufferRole::amax));
        break;
      case QuantizerKind::fp8_static:
        if (q.block_rows == 0) p.defines.push_back("TEC_DQ=1");
        else if (q.block_cols == 0) p.defines.push_back("TEC_DQ=6");
        else p.defines.insert(p.defines.end(), {"TEC_DQ=7", "TEC_DQ_BLOCK=" + std::to_string(q.block_cols) + "LL"});
        break;
    }
    return p;
  }

  // rope (kernels/row.cu producer 21) of x, a [B, S, heads x head_dim] or [S, B, ...] tensor:
  // the pairs' frequencies go to the kernel as exact double literals (%a), the reference's.
  Producer rope_producer(const Node& n, const Value& x, bool inverse) {
    const int64_t head_dim = n.attrs.get_int("head_dim", 0);
    const int64_t rotary_dim = n.attrs.get_int("rotary_dim", 0) == 0 ? head_dim : n.attrs.get_int("rotary_dim", 0);
    std::string frequencies;
    for (double f : rope_inverse_frequencies(n.attrs)) {
      char text[48];
      std::snprintf(text, sizeof text, "%a", f);
      frequencies += (frequencies.empty() ? "" : ",") + std::string(text);
    }
    Producer p;
    p.defines = {row_producer(TEC_ROW_ROPE),
                 "TEC_IN_DTYPE=" + std::to_string(dtype_code(x.proto.dtype, "input '" + x.name + "'")),
                 "TEC_ROPE_HEAD_DIM=" + std::to_string(head_dim) + "LL",
                 "TEC_ROPE_ROTARY=" + std::to_string(rotary_dim) + "LL",
                 "TEC_ROPE_INTERLEAVED=" + std::string(n.attrs.get_string("style", "half") == "interleaved" ? "1" : "0"),
                 "TEC_ROPE_SBHD=" + std::string(n.attrs.get_string("layout", "bshd") == "sbhd" ? "1" : "0"),
                 "TEC_ROPE_INNER=" + std::to_string(x.proto.shape[1]) + "LL",
                 "TEC_ROPE_INVERSE=" + std::string(inverse ? "1" : "0"),
                 "TEC_ROPE_INV_FREQUENCY=" + frequencies};
    p.inputs = {buf(data(x)), {}, {}};
    return p;
  }

  // Attention: one cuDNN SDPA graph (AttentionLaunch), in the model's 16-bit dtype under every
  // recipe: tec quantizes no attention input, since cuDNN's FP8 SDPA gave wrong outputs (docs/status.md).
  // The launch's shape, scale and mask from the forward node's attributes and q and k; the
  // tensors must be unquantized and of one 16-bit dtype.
  AttentionLaunch attention_launch(const Node& n, const std::vector<const Value*>& tensors, const Value* mask) {
    const Value &q = *tensors.at(0), &k = *tensors.at(1);
    for (const Value* t : tensors) {
      if (t->proto.quantizer)
        throw NotLowered{"attention '" + n.name + "': '" + t->name + "' is quantized; cuDNN's SDPA here takes bf16 or fp16"};
      if (t->proto.dtype != q.proto.dtype || (q.proto.dtype != DType::bf16 && q.proto.dtype != DType::fp16))
        throw NotLowered{"attention '" + n.name + "': '" + t->name + "' is " + std::string(to_string(t->proto.dtype)) + " and q is " +
                         std::string(to_string(q.proto.dtype)) + "; cuDNN's SDPA takes all bf16 or all fp16"};
    }
    AttentionLaunch a;
    a.heads = n.attrs.get_int("heads", 0);
    a.kv_heads = n.attrs.get_int("kv_heads", 0) == 0 ? a.heads : n.attrs.get_int("kv_heads", 0);
    a.head_dim = n.attrs.get_int("head_dim", 0);
    a.v_head_dim = n.attrs.get_int("v_head_dim", 0) == 0 ? a.head_dim : n.attrs.get_int("v_head_dim", 0);
    if (a.head_dim % 8 != 0 || a.v_head_dim % 8 != 0)
      throw NotLowered{"attention '" + n.name + "': head dims " + std::to_string(a.head_dim) + " and " + std::to_string(a.v_head_dim) +
                       "; cuDNN's SDPA needs multiples of 8"};
    a.causal = n.attrs.get_bool("causal", false);
    a.sbhd = n.attrs.get_string("layout", "bshd") == "sbhd";
    const double scale = n.attrs.get_float("scale", 0.0);
    a.scale = scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(a.head_dim)) : scale;
    a.dtype = q.proto.dtype;
    a.batch = q.proto.shape[a.sbhd ? 1 : 0];
    a.seq_q = q.proto.shape[a.sbhd ? 0 : 1];
    a.seq_kv = k.proto.shape[a.sbhd ? 0 : 1];
    a.q = data(q);
    a.k = data(k);
    a.v = data(*tensors.at(2));
    if (mask) {
      if (mask->proto.quantizer) throw NotLowered{"attention '" + n.name + "': its mask '" + mask->name + "' is quantized"};
      if (n.attrs.get_string("mask", "padding") == "additive") {
        if (mask->proto.dtype != a.dtype)
          throw NotLowered{"attention '" + n.name + "': the additive mask '" + mask->name + "' is " + std::string(to_string(mask->proto.dtype)) +
                           " and q is " + std::string(to_string(a.dtype)) + "; cuDNN adds a mask of q's dtype (cast it first)"};
        const Shape& m = mask->proto.shape;
        for (size_t d = 0; d < m.rank(); ++d) a.bias_dims[4 - m.rank() + d] = m[d];
        a.bias = data(*mask);
      } else {
        a.seq_lens = data(*mask);
      }
    }
    return a;
  }

  void lower_attention(const Node& n) {
    if (step_.nodes.size() != 1) throw NotLowered{"step '" + step_.name + "' fuses attention '" + n.name + "' with other nodes"};
    const Value &q = input(n, 0), &k = input(n, 1), &v = input(n, 2), &o = output(n);
    if (o.proto.dtype != q.proto.dtype)
      throw NotLowered{"attention '" + n.name + "': its output '" + o.name + "' is " + std::string(to_string(o.proto.dtype)) + " and q is " +
                       std::string(to_string(q.proto.dtype)) + "; cuDNN's SDPA writes q's dtype"};
    AttentionLaunch a = attention_launch(n, {&q, &k, &v}, n.inputs.size() == 4 ? &input(n, 3) : nullptr);
    // A train plan's forward also saves the log-sum-exp and o for the backward (outputs 1 and 2):
    // cuDNN writes o there, and a row kernel copies it into the output, or quantizes it when the
    // output is the next linear's quantized input (FP8 recipes), as it does from a workspace in
    // an inference plan.
    const Value* saved_o = n.outputs.size() > 2 ? &g_.value(n.outputs.at(2)) : nullptr;
    if (n.outputs.size() > 1) a.stats = data(g_.value(n.outputs.at(1)));
    if (saved_o) a.o = data(*saved_o);
    else a.o = o.proto.quantizer ? add_workspace(o.name + ".unquantized", TensorProto::dense(o.proto.shape, q.proto.dtype)) : data(o);
    if (!a.seq_lens.empty()) memset(a.o);  // rows past a sequence's length are zeros, as the reference's
    Launch l;
    l.kind = Launch::Kind::attention;
    l.step = index_;
    if (const NodeId from = q.producer; from >= 0 && g_.node(from).op == "cast" && g_.value(g_.node(from).inputs.at(0)).proto.dtype == DType::fp32)
      step_.fusions.push_back("gpu: attention '" + n.name + "' reads bf16 copies of the model's fp32 q, k and v and its output is cast "
                              "back to fp32 (cuDNN's SDPA takes 16-bit operands; the CPU reference runs the same casts)");
    if (g_.recipe.kind != RecipeKind::bf16)
      step_.fusions.push_back("gpu: attention '" + n.name + "' runs in " + std::string(to_string(a.dtype)) + " through cuDNN's SDPA under " +
                              std::string(to_string(g_.recipe.kind)) +
                              ": cuDNN's FP8 attention is not used (cuDNN 9.19's FP8 SDPA gave o divided by the softmax's row sum "
                              "on the H100; docs/status.md, Ops)" +
                              (o.proto.quantizer ? "; a row kernel quantizes its output for the next linear" : ""));
    const std::string written = a.o;
    const std::string stats = a.stats, seq_lens = a.seq_lens;
    const int64_t heads = a.heads, seq = a.seq_q, stats_rows = a.batch * a.heads * a.seq_q;
    l.attention = std::move(a);
    out_.push_back(std::move(l));
    if (!stats.empty() && !seq_lens.empty()) {  // padded rows' log-sum-exp: 0, as the reference's
      Launch z;
      z.kind = Launch::Kind::kernel;
      z.step = index_;
      z.module = modules_.add(KernelRequest{"attention_stats.cu",
                                            {"TEC_ROWS=" + std::to_string(stats_rows) + "LL", "TEC_HEADS=" + std::to_string(heads) + "LL",
                                             "TEC_SEQ=" + std::to_string(seq) + "LL"},
                                            ""});
      z.entry = "tec_zero_padded_stats";
      z.grid = {(stats_rows + 255) / 256, 1, 1};
      z.block = {256, 1, 1};
      z.args = {buf(stats), buf(seq_lens)};
      out_.push_back(std::move(z));
    }
    if (written != data(o)) emit_row(load(written, q.proto.dtype, "attention '" + n.name + "'s output"), o);
  }

  // cuDNN's SDPA backward. Inputs: the saved q, k, v, [mask], log-sum-exp and o, then do.
  // `gradient(slot)` is where dq, dk or dv goes (null: not needed): cuDNN writes all three, so a
  // gradient nobody reads, or one quantized for the next linear (written in the model dtype
  // first, then quantized by a row kernel), goes through a workspace.
  template <typename Gradient>
  void lower_attention_backward(const Node& n, Gradient gradient) {
    const bool masked = n.inputs.size() == 7;
    const Value &q = input(n, 0), &k = input(n, 1), &v = input(n, 2);
    const Value &o = input(n, masked ? 5 : 4), &d_o = input(n, masked ? 6 : 5), &stats = input(n, masked ? 4 : 3);
    AttentionLaunch a = attention_launch(n, {&q, &k, &v, &o, &d_o}, masked ? &input(n, 3) : nullptr);
    if (stats.proto.quantizer || stats.proto.dtype != DType::fp32)
      throw NotLowered{"attention backward '" + n.name + "': its log-sum-exp '" + stats.name + "' is not fp32"};
    a.backward = true;
    a.o = data(o);
    a.stats = data(stats);
    a.d_o = data(d_o);
    std::vector<std::pair<std::string, const Value*>> to_quantize;
    const Value* forward[3] = {&q, &k, &v};
    std::string* targets[3] = {&a.dq, &a.dk, &a.dv};
    for (int slot = 0; slot < 3; ++slot) {
      const Value* g = gradient(slot);
      if (g && !g->proto.quantizer) {
        *targets[slot] = data(*g);
        continue;
      }
      const char* names[3] = {"dq", "dk", "dv"};
      *targets[slot] = add_workspace(n.name + "." + names[slot], TensorProto::dense(forward[slot]->proto.shape, a.dtype));
      if (g) to_quantize.emplace_back(*targets[slot], g);
    }
    // A padded sequence's rows past its length get no gradient, and cuDNN leaves them.
    if (!a.seq_lens.empty())
      for (const std::string* t : targets) memset(*t);
    Launch l;
    l.kind = Launch::Kind::attention;
    l.step = index_;
    l.attention = std::move(a);
    out_.push_back(std::move(l));
    for (const auto& [written, g] : to_quantize) emit_row(load(written, q.proto.dtype, "attention backward '" + n.name + "'s gradient"), *g);
  }

  void lower_kernel() {
    const Node& first = node(0);
    if (first.computes_backward) return lower_backward_kernel(first);
    if (first.op == "adamw") return lower_adamw(first);
    if (first.op == "moe_router") return lower_moe_router(first);
    if (first.op == "moe_permute") return lower_moe_permute(first);
    if (first.op == "moe_unpermute") return lower_moe_unpermute(first);
    if (first.op == "embedding") return lower_embedding(first);
    if (first.op == "sequence_lengths") return lower_sequence_lengths(first);
    if (first.op == "attention") return lower_attention(first);
    if (builtin_ops().get(first.op).general) return lower_general(first);
    // A bias may carry the residual add after it (the fusion pass's [bias, add]); then a quantize.
    const Node* residual_add = first.op == "bias" && step_.nodes.size() >= 2 && node(1).op == "add" ? &node(1) : nullptr;
    const Value* residual = residual_add ? &input(*residual_add, residual_add->inputs.at(0) == first.outputs.at(0) ? 1 : 0) : nullptr;
    const size_t fused = residual_add ? 2 : 1;
    if (step_.nodes.size() > fused + 1 || (step_.nodes.size() == fused + 1 && node(fused).op != "quantize"))
      throw NotLowered{"step '" + step_.name + "' chains ops the row kernel does not fuse yet"};
    const Value& out = output(g_.node(step_.nodes.back()));
    const Value& x = input(first, 0);
    auto in_dtype = [&] { return "TEC_IN_DTYPE=" + std::to_string(dtype_code(x.proto.dtype, "input '" + x.name + "'")); };
    auto param_dtype = [&](size_t slot) {
      return "TEC_PARAM_DTYPE=" + std::to_string(dtype_code(input(first, slot).proto.dtype, "'" + input(first, slot).name + "'"));
    };
    Producer p;
    const std::string& op = first.op;
    if (op == "layernorm" || op == "rmsnorm") {
      const bool ln = op == "layernorm";
      p.defines = {row_producer(ln ? TEC_ROW_LAYERNORM : TEC_ROW_RMSNORM), in_dtype(), param_dtype(1),
                   "TEC_EPS=" + float_literal(first.attrs.get_float("eps", 1e-5)),
                   "TEC_GAMMA_OFFSET=" + std::string(first.attrs.get_bool("zero_centered_gamma", false) ? "1.0f" : "0.0f")};
      p.inputs = {buf(data(x)), buf(data(input(first, 1))), ln ? buf(data(input(first, 2))) : LaunchArg{}};
      p.per_element = false;
      if (first.outputs.size() > 1) {  // a train plan's forward: the row statistics its backward reads
        p.defines.push_back("TEC_SAVE_STATS=1");
        if (ln) p.more[2] = buf(data(g_.value(first.outputs.at(1))));
        p.more[3] = buf(data(g_.value(first.outputs.at(ln ? 2 : 1))));
      }
    } else if (is_activation(op)) {
      p.defines = {row_producer(is_gated(op) ? TEC_ROW_GATED : TEC_ROW_ACTIVATION), in_dtype(), "TEC_ACT=" + std::to_string(activation_code(first))};
      p.inputs = {buf(data(x)), {}, {}};
    } else if (op == "add") {
      if (input(first, 1).proto.shape != x.proto.shape) throw NotLowered{"add '" + first.name + "' broadcasts"};
      p.defines = {row_producer(TEC_ROW_ADD), in_dtype(), param_dtype(1)};
      p.inputs = {buf(data(x)), buf(data(input(first, 1))), {}};
    } else if (op == "bias") {
      p.defines = {row_producer(TEC_ROW_BIAS), in_dtype(), param_dtype(1)};
      p.inputs = {buf(data(x)), buf(data(input(first, 1))), {}};
      if (residual) {
        if (residual->proto.shape != x.proto.shape) throw NotLowered{"add '" + residual_add->name + "' broadcasts"};
        p.defines.insert(p.defines.end(), {"TEC_RESIDUAL=1", "TEC_RESIDUAL_DTYPE=" + std::to_string(dtype_code(residual->proto.dtype, "residual '" + residual->name + "'"))});
        p.inputs[2] = buf(data(*residual));
      }
    } else if (op == "scale") {
      p.defines = {row_producer(TEC_ROW_SCALE), in_dtype(), "TEC_SCALE=" + float_literal(first.attrs.get_float("scale", 1.0))};
      p.inputs = {buf(data(x)), {}, {}};
    } else if (op == "unary") {
      p.defines = {row_producer(TEC_ROW_UNARY), in_dtype(), "TEC_UNARY=" + std::to_string(unary_function_code(first.attrs.get_string("fn", "")))};
      p.inputs = {buf(data(x)), {}, {}};
    } else if (op == "binary") {
      p = binary_producer(first);
    } else if (op == "l2norm") {
      p.defines = {row_producer(TEC_ROW_L2NORM), in_dtype(), "TEC_EPS=" + float_literal(first.attrs.get_float("eps", 1e-6))};
      p.inputs = {buf(data(x)), {}, {}};
      p.per_element = false;
    } else if (op == "transpose") {
      p = transpose_producer(first);
    } else if (op == "identity" || op == "reshape" || op == "quantize" || op == "cast" || (op == "dropout" && g_.mode == Mode::infer)) {
      if (x.proto.quantizer) throw NotLowered{"'" + first.name + "' copies a quantized tensor"};
      if (kernel_dtype_code(x.proto.dtype) < 0 && step_.nodes.size() == 1) return copy_elements(first, x, out);  // ints, bools
      p = load(data(x), x.proto.dtype, "input '" + x.name + "'");
    } else if (op == "dequantize") {
      p = dequantize_producer(x);
    } else if (op == "rope") {
      p = rope_producer(first, x, false);
    } else {
      throw NotLowered{"op '" + op + "' (node '" + first.name + "') has no GPU kernel yet"};
    }
    const size_t launches_before = out_.size();
    emit_row(p, out);
    if (op == "bias" && !out.proto.quantizer && out.proto.dtype == x.proto.dtype && out_.size() == launches_before + 1)
      out_.back().adds = RowAdds{data(x), p.inputs[1].buffer, p.inputs[2].buffer, data(out), x.proto.dtype, input(first, 1).proto.dtype,
                                 residual ? residual->proto.dtype : x.proto.dtype, x.proto.shape.cols()};
  }

  // A backward node (train plans): its outputs are the gradients of the forward input slots in
  // gradient_slots, one each; its inputs the saved tensors, then the output gradients.
  void lower_backward_kernel(const Node& n) {
    // The fusion pass may append the quantize of the gradient the node makes (in the recipe's
    // gradient format, for the next linear's backward): the kernel writes it quantized.
    const Node* quantize = step_.nodes.size() == 2 && node(1).op == "quantize" ? &node(1) : nullptr;
    if (step_.nodes.size() != 1 && !quantize)
      throw NotLowered{"step '" + step_.name + "' fuses backward node '" + n.name + "' with others; the GPU lowers it alone"};
    auto grad_of = [&](int slot) -> const Value* {
      for (size_t i = 0; i < n.gradient_slots.size(); ++i)
        if (n.gradient_slots[i] == slot) {
          if (quantize && quantize->inputs.at(0) == n.outputs.at(i)) return &output(*quantize);
          return &g_.value(n.outputs.at(i));
        }
      return nullptr;
    };
    auto unquantized = [&](const Value& v) -> const Value& {
      if (v.proto.quantizer) throw NotLowered{"backward node '" + n.name + "' reads quantized '" + v.name + "'"};
      return v;
    };
    auto dtype_define = [&](const char* key, const Value& v) {
      return std::string(key) + "=" + std::to_string(dtype_code(v.proto.dtype, "'" + v.name + "'"));
    };
    if (is_activation(n.op)) {
      const Value& x = unquantized(input(n, 0));
      const Value& dy = unquantized(input(n, 1));
      const Value* dx = grad_of(0);
      if (!dx) return;
      Producer p;
      p.defines = {row_producer(is_gated(n.op) ? TEC_ROW_GATED_BACKWARD : TEC_ROW_ACTIVATION_BACKWARD), dtype_define("TEC_IN_DTYPE", x),
                   dtype_define("TEC_PARAM_DTYPE", dy), "TEC_ACT=" + std::to_string(activation_code(n))};
      if (is_gated(n.op)) p.defines.push_back("TEC_HALF=" + std::to_string(x.proto.shape.cols() / 2) + "LL");
      p.inputs = {buf(data(x)), buf(data(dy)), {}};
      return emit_row(p, *dx);
    }
    if (n.op == "layernorm" || n.op == "rmsnorm") {
      const bool ln = n.op == "layernorm";
      const Value& x = unquantized(input(n, 0));
      const Value& gamma = unquantized(input(n, 1));
      const Value* mean = ln ? &unquantized(input(n, 2)) : nullptr;
      const Value& rsigma = unquantized(input(n, ln ? 3 : 2));
      const Value& dy = unquantized(input(n, ln ? 4 : 3));
      if (const Value* dx = grad_of(0)) {
        if (gamma.proto.dtype != dy.proto.dtype)
          throw NotLowered{"norm backward '" + n.name + "': gamma '" + gamma.name + "' and the gradient differ in dtype"};
        Producer p;
        p.defines = {row_producer(TEC_ROW_NORM_BACKWARD), dtype_define("TEC_IN_DTYPE", x), dtype_define("TEC_PARAM_DTYPE", dy),
                     "TEC_HAS_MEAN=" + std::string(ln ? "1" : "0"),
                     "TEC_GAMMA_OFFSET=" + std::string(n.attrs.get_bool("zero_centered_gamma", false) ? "1.0f" : "0.0f")};
        p.inputs = {buf(data(x)), buf(data(gamma)), buf(data(dy))};
        p.more = {mean ? buf(data(*mean)) : LaunchArg{}, buf(data(rsigma)), {}, {}};
        p.per_element = false;
        emit_row(p, *dx);
      }
      const Value* dgamma = grad_of(1);
      const Value* dbeta = ln ? grad_of(2) : nullptr;
      if (dgamma || dbeta) push_column_sums(dy, x.proto.shape.rows(), x.proto.shape.cols(), &x, mean, &rsigma, dgamma, dbeta);
      return;
    }
    if (n.op == "attention") return lower_attention_backward(n, grad_of);
    if (n.op == "moe_router") return lower_moe_router_backward(n, grad_of(0), grad_of(1));
    if (n.op == "moe_permute") return lower_moe_permute_backward(n, grad_of(0));
    if (n.op == "moe_unpermute") return lower_moe_unpermute_backward(n, grad_of(0), grad_of(2));
    if (n.op == "rope") {  // the turn by the opposite angle; rope saves nothing, its input is dy
      const Value& dy = unquantized(input(n, 0));
      if (const Value* dx = grad_of(0)) emit_row(rope_producer(n, dy, true), *dx);
      return;
    }
    if (n.op == "bias") {  // a row-parallel linear's bias, added after the reduction (tensor parallel)
      const Value& dy = unquantized(input(n, 0));
      if (const Value* dx = grad_of(0)) emit_row(load(data(dy), dy.proto.dtype, "gradient '" + dy.name + "'"), *dx);
      if (const Value* db = grad_of(1)) push_column_sums(dy, dy.proto.shape.rows(), dy.proto.shape.cols(), nullptr, nullptr, nullptr, db, nullptr);
      return;
    }
    throw NotLowered{"the backward of op '" + n.op + "' (node '" + n.name + "') has no GPU kernel yet"};
  }

  // AdamW over every parameter (kernels/adamw.cu): a one-thread launch that advances the step
  // and computes the coefficients, then launches of up to kAdamwParams parameters each.
  void lower_adamw(const Node& n) {
    constexpr size_t kScalars = 6, kPerParameter = 4;  // reference_adamw's inputs (src/ops/optimizer.cpp)
    constexpr size_t kAdamwParams = (plan::kMaxKernelArgs - 1) / kPerParameter;
    if (step_.nodes.size() != 1) throw NotLowered{"step '" + step_.name + "' fuses adamw with other nodes"};
    const std::string coefficients = add_workspace("adamw.coefficients", TensorProto::dense(Shape{8}, DType::fp32));
    std::vector<std::vector<size_t>> groups;
    for (size_t p = kScalars; p + kPerParameter <= n.inputs.size(); p += kPerParameter) {
      if (groups.empty() || groups.back().size() == kAdamwParams) groups.emplace_back();
      groups.back().push_back(p);
    }
    auto module_of = [&](const std::vector<size_t>& group) {
      std::vector<int64_t> numel;
      for (size_t p : group) numel.push_back(input(n, p).proto.shape.numel());
      return modules_.add(KernelRequest{"adamw.cu", {"TEC_ADAMW_NUMEL=" + int_list(numel)}, ""});
    };
    Launch prepare;
    prepare.kind = Launch::Kind::kernel;
    prepare.step = index_;
    prepare.module = module_of(groups.at(0));
    prepare.entry = "tec_adamw_prepare";
    prepare.block = {32, 1, 1};
    prepare.early_launch = true;
    for (size_t i = 0; i < kScalars; ++i) prepare.args.push_back(buf(data(input(n, i))));
    prepare.args.push_back(buf(coefficients));
    out_.push_back(prepare);
    for (const std::vector<size_t>& group : groups) {
      Launch l = prepare;
      l.module = module_of(group);
      l.entry = "tec_adamw";
      int64_t most = 0;
      l.args = {buf(coefficients)};
      for (size_t p : group) {
        most = std::max(most, input(n, p).proto.shape.numel());
        for (size_t j = 0; j < kPerParameter; ++j) l.args.push_back(buf(data(input(n, p + j))));
      }
      // Four elements per thread at least, at most 1024 blocks per parameter.
      l.grid = {std::clamp<int64_t>((most + 1023) / 1024, 1, 1024), static_cast<int64_t>(group.size()), 1};
      l.block = {256, 1, 1};
      out_.push_back(std::move(l));
    }
  }

  // binary's operands broadcast to the output as numpy does: each gets element strides over the
  // output's dims (right-aligned, 0 where the operand's dim is 1 or missing).
  Producer binary_producer(const Node& n) const {
    const Shape& out = output(n).proto.shape;
    std::vector<int64_t> dims = out.dims;
    if (dims.empty()) dims = {1};
    auto strides = [&](const Shape& operand) {
      const std::vector<int64_t> own = operand.contiguous_strides();
      std::vector<int64_t> into(dims.size(), 0);
      const size_t skipped = dims.size() - operand.rank();  // operand dims align to the right
      for (size_t d = skipped; d < dims.size(); ++d)
        if (operand.dims[d - skipped] != 1) into[d] = own[d - skipped];
      return int_list(into);
    };
    const Value &a = input(n, 0), &b = input(n, 1);
    Producer p;
    p.defines = {row_producer(TEC_ROW_BINARY), "TEC_IN_DTYPE=" + std::to_string(dtype_code(a.proto.dtype, "input '" + a.name + "'")),
                 "TEC_PARAM_DTYPE=" + std::to_string(dtype_code(b.proto.dtype, "input '" + b.name + "'")),
                 "TEC_BINARY=" + std::to_string(binary_function_code(n.attrs.get_string("fn", ""))), "TEC_BCAST_DIMS=" + int_list(dims),
                 "TEC_A_STRIDES=" + strides(a.proto.shape), "TEC_B_STRIDES=" + strides(b.proto.shape)};
    for (const Value* operand : {&a, &b})
      if (operand->proto.quantizer) throw NotLowered{"binary '" + n.name + "' reads quantized '" + operand->name + "'"};
    p.inputs = {buf(data(a)), buf(data(b)), {}};
    return p;
  }

  // transpose as a gather: output element (c_0, ..., c_n) reads the input at sum c_d * stride[perm[d]].
  Producer transpose_producer(const Node& n) const {
    const Value& x = input(n, 0);
    const Shape& out = output(n).proto.shape;
    std::vector<int64_t> perm = n.attrs.get_ints("perm");
    if (perm.empty())
      for (size_t d = out.rank(); d-- > 0;) perm.push_back(static_cast<int64_t>(d));
    const std::vector<int64_t> in_strides = x.proto.shape.contiguous_strides();
    std::vector<int64_t> dims = out.dims, strides;
    for (size_t d = 0; d < out.rank(); ++d)
      strides.push_back(in_strides.at(static_cast<size_t>(perm[d] < 0 ? perm[d] + static_cast<int64_t>(out.rank()) : perm[d])));
    if (dims.empty()) dims = {1}, strides = {0};
    if (x.proto.quantizer) throw NotLowered{"transpose '" + n.name + "' reads quantized '" + x.name + "'"};
    Producer p;
    p.defines = {row_producer(TEC_ROW_STRIDED_GATHER), "TEC_IN_DTYPE=" + std::to_string(dtype_code(x.proto.dtype, "input '" + x.name + "'")),
                 "TEC_BCAST_DIMS=" + int_list(dims), "TEC_A_STRIDES=" + int_list(strides)};
    p.inputs = {buf(data(x)), {}, {}};
    return p;
  }

  // The residual a GEMM step's add reads: the add's input that this step did not make.
  const Value& residual_of(const Node& add, const Node& linear, const Node* act) const {
    const ValueId made_here = add.inputs[0] == (act ? act->outputs[0] : linear.outputs[0]) ? 0 : 1;
    const Value& r = g_.value(add.inputs[static_cast<size_t>(1 - made_here)]);
    if (r.proto.quantizer) throw NotLowered{"residual '" + r.name + "' is quantized"};
    return r;
  }

  // Backward node n's output holding the gradient of its forward's input `slot`; null when
  // that input gets none.
  const Value* gradient_output(const Node& n, int slot) const {
    for (size_t i = 0; i < n.gradient_slots.size(); ++i)
      if (n.gradient_slots[i] == slot) return &g_.value(n.outputs.at(i));
    return nullptr;
  }

  // wgrad's add into main_grad, when the step fuses it: {main_grad's new version (what the
  // GEMM writes), the old one (what it adds to)}, else nulls.
  std::pair<const Value*, const Value*> fused_main_grad_add(const Value* dw) const {
    const Value* accumulated = nullptr;
    const Value* main_grad = nullptr;
    for (size_t i = 1; i < step_.nodes.size(); ++i) {
      const Node& add = node(i);
      const int from_gemm = dw && add.op == "add" ? (g_.value(add.inputs.at(0)).name == dw->name ? 0 : g_.value(add.inputs.at(1)).name == dw->name ? 1 : -1) : -1;
      if (from_gemm < 0 || accumulated)
        throw NotLowered{"step '" + step_.name + "' fuses node '" + add.name + "' into a backward GEMM; the GPU fuses only wgrad's add into main_grad"};
      accumulated = &output(add);
      main_grad = &input(add, static_cast<size_t>(1 - from_gemm));
    }
    return {accumulated, main_grad};
  }

  // A linear's backward: dgrad dx = dy W and wgrad dW = dy^T x as TN cuBLASLt GEMMs (FP8
  // operands from the columnwise copies; 16-bit ones read transposed), wgrad added into the
  // fp32 main_grad with beta = 1 when the step fuses that add, dbias by the column kernels.
  void lower_backward_linear(const Node& n) {
    const Value& x = input(n, 0);
    const Value& w = input(n, 1);
    const Value& dy_rows = input(n, 2);
    const Value& dy_cols = input(n, 3);
    auto grad_of = [&](int slot) { return gradient_output(n, slot); };
    const Value* dx = grad_of(0);
    const Value* dw = grad_of(1);
    const Value* db = grad_of(2);
    const auto [accumulated, main_grad] = fused_main_grad_add(dw);
    const int64_t tokens = x.proto.shape.rows(), in_features = x.proto.shape.cols(), out_features = w.proto.shape[0];
    auto is_block = [](const Value& v) { return v.proto.quantizer && v.proto.quantizer->kind == QuantizerKind::fp8_block; };
    auto dequantized = [](const Value& v) { return v.proto.quantizer && multiplied_dequantized(v.proto.quantizer->kind); };
    for (const Value* v : {&x, &w, &dy_rows, &dy_cols})
      if (v->proto.quantizer && !fp8_per_tensor(*v) && !is_block(*v) && !dequantized(*v))
        throw NotLowered{"backward of linear '" + n.name + "' reads " + v->proto.quantizer->str() + " '" + v->name +
                         "'; the GPU's backward GEMMs take FP8 per tensor, in blocks, MXFP8 or NVFP4, or 16-bit operands, so far"};
    for (const Value* v : {&x, &w, &dy_rows})
      if (dequantized(*v)) {
        step_.fusions.push_back("gpu: " + std::string(tec::to_string(v->proto.quantizer->kind)) +
                                " has no cuBLASLt GEMM on sm_90: the backward's operands (dgrad's W and wgrad's x and dy from their "
                                "columnwise copies) dequantized to bf16, bf16 GEMMs");
        break;
      }
    // cuBLASLt's scale mode of a quantized operand: one scale, 1x128 blocks along K (VEC128) or
    // 128x128 tiles (a weight's, either direction).
    auto scale_mode = [&](const Value& v) -> std::string {
      if (!is_block(v)) return "tensor";
      return v.proto.quantizer->block_rows == 128 ? "blk128x128" : "vec128";
    };
    // The operand whose [rows, k] matrix is `v` transposed: an FP8 tensor's columnwise copy (a
    // block-scaled one with its own scales), a 16-bit one read transposed.
    auto transposed = [&](const Value& v) -> GemmOperand {
      // MXFP8's columnwise copy is [M, K] as v, read transposed; NVFP4's holds v^T.
      if (dequantized(v))
        return {dequantize_to(v, v.name + ".columnwise_16bit", DType::bf16, Copy::columnwise), DType::bf16, "", "none",
                v.proto.quantizer->kind == QuantizerKind::mxfp8};
      if (v.proto.quantizer)
        return {role(v, BufferRole::columnwise_data), v.proto.quantizer->dtype,
                role(v, is_block(v) ? BufferRole::columnwise_scale_inv : BufferRole::scale_inv), scale_mode(v), false};
      return {data(v), v.proto.dtype, "", "none", true};
    };
    auto as_is = [&](const Value& v) -> GemmOperand {
      if (dequantized(v)) return {dequantize_to(v, v.name + ".16bit"), DType::bf16, "", "none", false};
      if (v.proto.quantizer) return {data(v), v.proto.quantizer->dtype, role(v, BufferRole::scale_inv), scale_mode(v), false};
      return {data(v), v.proto.dtype, "", "none", false};
    };
    auto check_types = [&](const GemmLaunch& gemm) {
      if (is_float8(gemm.a.type) != is_float8(gemm.b.type) || (!is_float8(gemm.a.type) && gemm.a.type != gemm.b.type))
        throw NotLowered{"backward of linear '" + n.name + "' multiplies " + std::string(tec::to_string(gemm.a.type)) + " by " +
                         std::string(tec::to_string(gemm.b.type)) + "; cuBLASLt takes FP8 with FP8 or one 16-bit type"};
    };
    auto gemm_into = [&](int64_t rows, int64_t cols, int64_t inner, GemmOperand a, GemmOperand b, const Value& d, const char* what) {
      if (d.proto.quantizer) throw NotLowered{std::string(what) + " output '" + d.name + "' is quantized"};
      GemmLaunch gemm;
      gemm.m = rows;
      gemm.n = cols;
      gemm.k = inner;
      gemm.a = std::move(a);
      gemm.b = std::move(b);
      gemm.d = data(d);
      gemm.d_type = d.proto.dtype;
      check_types(gemm);
      return gemm;
    };
    // dgrad: dx[T, K] = dy[T, N] W[N, K], i.e. A = W^T [K, N], B = dy [T, N].
    if (dx) push_gemm(gemm_into(tokens, in_features, out_features, transposed(w), as_is(dy_rows), *dx, "dgrad"));
    if (dw) {  // wgrad: dW[N, K] = dy^T[N, T] x[T, K], i.e. A = x^T [K, T], B = dy^T [N, T]
      const Value& d = accumulated ? *accumulated : *dw;
      GemmLaunch gemm = gemm_into(out_features, in_features, tokens, transposed(x), transposed(dy_cols), d, "wgrad");
      if (main_grad) {
        if (main_grad->proto.dtype != d.proto.dtype)
          throw NotLowered{"'" + main_grad->name + "' and '" + d.name + "' differ in dtype"};
        gemm.c = data(*main_grad);
        step_.fusions.push_back("gpu: wgrad of '" + n.name + "' added into '" + main_grad->name + "' by the GEMM (C = D, beta = 1)");
      }
      push_gemm(gemm);
    }
    if (db) push_column_sums(input(n, 4), tokens, out_features, nullptr, nullptr, nullptr, db, nullptr);
  }

  void lower_gemm() {
    const Node& linear = node(0);
    if (linear.op == "grouped_linear" && linear.computes_backward) return lower_grouped_backward(linear);
    if (linear.op == "grouped_linear") return lower_grouped_gemm(linear);
    if (linear.computes_backward) return lower_backward_linear(linear);
    const Value& x = input(linear, 0);
    const Value& w = input(linear, 1);
    const bool has_bias = linear.attrs.get_bool("bias", true);
    const Node* act = nullptr;
    const Node* residual_add = nullptr;
    for (size_t i = 1; i < step_.nodes.size(); ++i) {
      const Node& n = node(i);
      if (n.op == "add") residual_add = &n;
      else act = &n;
    }
    const Value& out = output(g_.node(step_.nodes.back()));
    if (x.proto.quantizer && x.proto.quantizer->kind == QuantizerKind::fp8_static)
      return lower_static_gemm(linear, has_bias, act, residual_add, out);
    GemmLaunch gemm;
    gemm.m = x.proto.shape.rows();
    gemm.k = x.proto.shape.cols();
    gemm.n = w.proto.shape[0];

    // Operands.
    const auto kind = x.proto.quantizer ? std::optional(x.proto.quantizer->kind) : std::nullopt;
    // An fp16 model's 16-bit GEMMs run in fp16: cuBLASLt takes no bf16 operands with an fp16 D
    // or an fp16 bias (measured on the H100).
    const bool fp16_model =
        (has_bias && input(linear, 2).proto.dtype == DType::fp16) || (!out.proto.quantizer && out.proto.dtype == DType::fp16);
    const DType half = fp16_model ? DType::fp16 : DType::bf16;
    const bool dequantized = kind && multiplied_dequantized(*kind);
    if (dequantized) {
      step_.fusions.push_back("gpu: " + std::string(tec::to_string(*kind)) + " has no cuBLASLt GEMM on sm_90: operands dequantized to " +
                              std::string(tec::to_string(half)) + ", " + std::string(tec::to_string(half)) + " GEMM");
      gemm.a = {dequantize_to(w, "w_16bit", half), half, "", "none"};
      gemm.b = {dequantize_to(x, "x_16bit", half), half, "", "none"};
    } else if (kind) {
      if (!w.proto.quantizer) throw NotLowered{"linear '" + linear.name + "' mixes a quantized input with an unquantized weight"};
      const bool block = *kind == QuantizerKind::fp8_block;
      if (block && (w.proto.quantizer->block_rows != 128 || x.proto.quantizer->block_rows != 1))
        throw NotLowered{"linear '" + linear.name + "': cuBLASLt block scaling takes 1x128 inputs and 128x128 weights"};
      gemm.a = {data(w), w.proto.quantizer->dtype, role(w, BufferRole::scale_inv), block ? "blk128x128" : "tensor"};
      gemm.fast_accum = !block;
      gemm.b = {data(x), x.proto.quantizer->dtype, role(x, BufferRole::scale_inv), block ? "vec128" : "tensor"};
    } else {
      if (w.proto.quantizer) throw NotLowered{"linear '" + linear.name + "' has a quantized weight but an unquantized input"};
      if (w.proto.dtype != x.proto.dtype)
        throw NotLowered{"linear '" + linear.name + "' multiplies " + std::string(tec::to_string(x.proto.dtype)) + " '" + x.name +
                         "' by a " + std::string(tec::to_string(w.proto.dtype)) + " weight; cuBLASLt takes operands of one type"};
      gemm.a = {data(w), w.proto.dtype, "", "none"};
      gemm.b = {data(x), x.proto.dtype, "", "none"};
    }

    // Epilogue.
    if (has_bias) {
      const Value& b = input(linear, 2);
      gemm.bias = data(b);
      gemm.bias_type = b.proto.dtype;
    }
    std::string act_name;
    if (act) act_name = act->op == "gelu" ? "gelu" : "relu";
    gemm.epilogue = act_name.empty() ? (has_bias ? "bias" : "default") : act_name + (has_bias ? "_bias" : "");
    DType residual_type = DType::bf16;
    if (residual_add) {
      const Value& r = residual_of(*residual_add, linear, act);
      gemm.c = data(r);
      residual_type = r.proto.dtype;
      if (r.proto.dtype != (out.proto.quantizer ? DType::bf16 : out.proto.dtype))
        throw NotLowered{"residual '" + r.name + "' and the output of '" + step_.name + "' differ in dtype"};
    }
    const bool small = small_gemm_fits(gemm, x, w, residual_type, out);
    // The mid-M kernel reads W in its own device layout, which a weight has only when no other
    // launch reads it; the first (scratch) lowering, run before that is known, assumes it has.
    const bool mid_candidate = !small && w.kind == ValueKind::weight && mid_gemm_fits(gemm, x, w, residual_type, out);
    const bool mid = mid_candidate && (!layouts_ || layout_of(gemm.a.buffer) == "mid_m_tiles");
    // A GEMM output that a row kernel quantizes afterwards is staged in 16 bits: in fp16 when
    // cuBLASLt's FP8 GEMM adds an fp16 bias (it takes an fp16 bias only with an fp16 D) or the
    // dequantized GEMM runs in fp16 (in fp32 when that GEMM adds an fp32 bias), else bf16.
    const bool cublaslt_fp8 = !small && !mid && is_float8(gemm.a.type);
    DType staging_type = (cublaslt_fp8 && has_bias && gemm.bias_type == DType::fp16) || dequantized ? half : DType::bf16;
    if (dequantized && has_bias && gemm.bias_type == DType::fp32) staging_type = DType::fp32;  // a 16-bit GEMM's fp32 bias needs an fp32 D
    if (cublaslt_fp8 && has_bias) {
      // Measured on the H100 (cuBLASLt 13.1): FP8 GEMMs take a bf16 bias with a bf16, fp32 or FP8
      // D, an fp16 bias with an fp16 D, and no fp32 bias at all. apply_recipe stores an fp32
      // model's bias in bf16 under the FP8 recipes for that reason.
      const DType d16 = out.proto.quantizer ? staging_type : out.proto.dtype;
      const DType wanted = d16 == DType::fp16 ? DType::fp16 : DType::bf16;
      if (gemm.bias_type != wanted)
        throw NotLowered{"linear '" + linear.name + "' has a " + std::string(tec::to_string(gemm.bias_type)) + " bias and a " +
                         std::string(tec::to_string(d16)) + " output; cuBLASLt's FP8 GEMMs take a " +
                         std::string(tec::to_string(wanted)) + " bias there"};
      if (gemm.bias_type == DType::bf16 && input(linear, 2).proto.dtype != out.proto.dtype)
        step_.fusions.push_back("gpu: bias '" + input(linear, 2).name + "' is kept in bf16 for cuBLASLt's FP8 GEMM (the model's is " +
                                std::string(tec::to_string(out.proto.dtype)) + "; apply_recipe rounded it once, at compile time)");
    }
    if (small) {
      step_.fusions.push_back("gpu: " + std::to_string(gemm.m) + " rows (at most " + std::to_string(kSmallGemmMaxRows) +
                              "): tec's small-M FP8 GEMM kernel, with the epilogue, instead of cuBLASLt");
      if (w.kind == ValueKind::weight) small_m_weights_.push_back(gemm.a.buffer);
      if (layout_of(gemm.a.buffer) == "small_m_tiles")
        step_.fusions.push_back("gpu: weight '" + w.name + "' lives on the device in the small-M kernel's tiled layout " +
                                "(its only GPU reader in every profile)");
    }
    if (mid_candidate) mid_m_weights_.push_back(gemm.a.buffer);
    if (mid)
      step_.fusions.push_back("gpu: " + std::to_string(gemm.m) + " rows: tec's mid-M FP8 GEMM kernel (Hopper wgmma), with the " +
                              "epilogue and the output's amax, instead of cuBLASLt; weight '" + w.name +
                              "' in its swizzled device layout (its only GPU reader in every profile)");
    else if (mid_candidate)
      step_.fusions.push_back("gpu: cuBLASLt, not the mid-M kernel: weight '" + w.name +
                              "' has other GPU readers in some profile, so it cannot take that kernel's device layout");
    auto finish = [&] {
      if (small) push_small_gemm(gemm, residual_type);
      else if (mid) push_mid_gemm(gemm, residual_type);
      else push_gemm(gemm);
    };

    // Output: written directly, in FP8 with the delayed scale, or staged in bf16 and quantized.
    if (!out.proto.quantizer) {
      gemm.d = data(out);
      gemm.d_type = out.proto.dtype;
      finish();
      return;
    }
    const Quantizer& q = *out.proto.quantizer;
    if (q.kind == QuantizerKind::fp8_delayed && !out.proto.usage.columnwise && gemm.c.empty()) {
      gemm.d = data(out);
      gemm.d_type = q.dtype;
      gemm.d_scale = state_buffer_name(out.name, "scale");
      gemm.amax_d = state_buffer_name(out.name, "amax_history");
      step_.fusions.push_back("gpu: quantize of '" + out.name + "' fused into the GEMM (FP8 output, D scale and amax)");
      finish();
      return;
    }
    gemm.d = add_workspace("staging", TensorProto::dense(out.proto.shape, staging_type));
    gemm.d_type = staging_type;
    if ((small || mid) && q.kind == QuantizerKind::fp8_current && !out.proto.usage.columnwise) {
      const int64_t blocks = small ? small_gemm_blocks(gemm) : mid_gemm_blocks(gemm);
      const AmaxPartials partials{add_workspace(out.name + ".amax_partials", TensorProto::dense(Shape{blocks}, DType::fp32)), blocks};
      gemm.amax_d = partials.buffer;
      step_.fusions.push_back("gpu: fp8_current output of '" + out.name +
                              "' staged in bf16 with its amax from the GEMM, then cast by a row kernel");
      finish();
      emit_row(load(gemm.d, staging_type, "staging"), out, &partials);
      return;
    }
    const bool whole_tensor_amax = q.kind == QuantizerKind::fp8_current || q.kind == QuantizerKind::nvfp4;
    step_.fusions.push_back("gpu: " + std::string(tec::to_string(q.kind)) + " output of '" + out.name +
                            "' staged in " + std::string(tec::to_string(staging_type)) + ", then quantized by a row kernel (" +
                            (whole_tensor_amax ? "its scale needs the whole output's amax first"
                                               : "cuBLASLt does not write this format") +
                            ")");
    finish();
    emit_row(load(gemm.d, staging_type, "staging"), out);
  }

  // fp8-static: the model fixed every scale, and the aim is onnxruntime's result to the last FP8
  // code of the next layer's input. sm_90's FP8 GEMMs accumulate to about 2^-12 (measured with
  // cuBLASLt 13.1: 2.3e-4 relative at K = 512), which moves ~1 % of those codes; so the operands
  // are dequantized to fp32 (exactly the values of ONNX DequantizeLinear) and multiplied by an
  // fp32 GEMM, and bias, activation, residual and the output's quantize follow in fp32 in one
  // row kernel (the order the CPU reference computes the step in).
  void lower_static_gemm(const Node& linear, bool has_bias, const Node* act, const Node* residual_add, const Value& out) {
    const Value& x = input(linear, 0);
    const Value& w = input(linear, 1);
    GemmLaunch gemm;
    gemm.m = x.proto.shape.rows();
    gemm.k = x.proto.shape.cols();
    gemm.n = w.proto.shape[0];
    if (w.proto.quantizer) {
      if (w.proto.quantizer->kind != QuantizerKind::fp8_static)
        throw NotLowered{"linear '" + linear.name + "' mixes a static FP8 input with a " + w.proto.quantizer->str() + " weight"};
      gemm.a = {dequantize_to(w, "w_fp32", DType::fp32), DType::fp32, "", "none"};
    } else if (w.proto.dtype == DType::fp32) {
      gemm.a = {data(w), DType::fp32, "", "none"};
    } else {  // a 16-bit weight the model did not quantize, widened for the fp32 GEMM
      const std::string wide = add_workspace("w_fp32", TensorProto::dense(w.proto.shape, DType::fp32));
      emit_row_to(load(data(w), w.proto.dtype, "weight '" + w.name + "'"), w.proto.shape.rows(), w.proto.shape.cols(), wide, DType::fp32);
      gemm.a = {wide, DType::fp32, "", "none"};
    }
    if (!w.proto.quantizer)
      step_.fusions.push_back("gpu: fp8-static: weight '" + w.name + "' has no Q/DQ in the model and is multiplied unquantized, "
                              "as the model does");
    gemm.b = {dequantize_to(x, "x_fp32", DType::fp32), DType::fp32, "", "none"};
    gemm.d = add_workspace("product", TensorProto::dense(out.proto.shape, DType::fp32));
    gemm.d_type = DType::fp32;
    push_gemm(gemm);
    Producer p;
    p.defines = {row_producer(TEC_ROW_GEMM_EPILOGUE)};
    p.inputs = {buf(gemm.d), {}, {}};
    std::string epilogue;
    if (has_bias) {
      const Value& b = input(linear, 2);
      p.defines.push_back("TEC_EPI_BIAS=" + std::to_string(dtype_code(b.proto.dtype, "bias '" + b.name + "'")));
      p.inputs[1] = buf(data(b));
      epilogue += ", bias";
    }
    if (act) {
      const bool tanh = act->attrs.get_string("approximate", "tanh") == "tanh";
      p.defines.push_back(std::string("TEC_ACT=") + (act->op == "relu" ? "3" : tanh ? "1" : "2"));
      epilogue += ", " + act->op;
    }
    if (residual_add) {
      const Value& r = residual_of(*residual_add, linear, act);
      p.defines.push_back("TEC_EPI_RESIDUAL=" + std::to_string(dtype_code(r.proto.dtype, "residual '" + r.name + "'")));
      p.inputs[2] = buf(data(r));
      epilogue += ", residual";
    }
    step_.fusions.push_back("gpu: fp8-static: operands dequantized to fp32 (the values of ONNX DequantizeLinear), fp32 "
                            "cuBLASLt GEMM, then one row kernel" + epilogue + (out.proto.quantizer ? ", static quantize" : "") +
                            " in fp32 (FP8 tensor cores accumulate to ~2^-12 on sm_90 and would move the next layer's codes)");
    emit_row(p, out);
  }

  static bool fp8_per_tensor(const Value& v) {
    return v.proto.quantizer &&
           (v.proto.quantizer->kind == QuantizerKind::fp8_current || v.proto.quantizer->kind == QuantizerKind::fp8_delayed);
  }
  static bool bf16_or_fp32(DType d) { return d == DType::bf16 || d == DType::fp32; }

  // Whether kernels/gemm_small_m.cu takes this GEMM: per-tensor FP8 operands, few rows, and
  // the shapes its tiling needs.
  bool small_gemm_fits(const GemmLaunch& gemm, const Value& x, const Value& w, DType residual_type, const Value& out) const {
    return fp8_mma_ && fp8_per_tensor(x) && fp8_per_tensor(w) && gemm.m >= 1 && gemm.m <= kSmallGemmMaxRows && gemm.k % 64 == 0 &&
           gemm.n % 16 == 0 && (gemm.bias.empty() || bf16_or_fp32(gemm.bias_type)) &&
           (gemm.c.empty() || bf16_or_fp32(residual_type)) && (out.proto.quantizer || bf16_or_fp32(out.proto.dtype));
  }

  // Whether kernels/gemm_mid_m.cu takes this GEMM: when asked for, Hopper only (wgmma),
  // per-tensor FP8 operands, 33-128 rows, the shapes of its tiles, and an FP8 current-scaling
  // output (bf16 staging with its amax), where it replaces three kernels (cuBLASLt's GEMM, an
  // amax pass, the cast pass) by two: at mlp.json's fc1 (N = 16384, K = 4096, T = 128) that
  // step took 43.6 against 46.5 us eager on the H100. With an FP8 delayed-scaling output
  // cuBLASLt writes FP8 itself, which is faster still. With fewer than 128 blocks (N < 16384)
  // part of the GPU would not stream W; such shapes stay on cuBLASLt.
  bool mid_gemm_fits(const GemmLaunch& gemm, const Value& x, const Value& w, DType residual_type, const Value& out) const {
    const Quantizer* q = out.proto.quantizer ? &*out.proto.quantizer : nullptr;
    return mid_m_ && gemm.m > kSmallGemmMaxRows && gemm.m <= kMidGemmMaxRows && gemm.n % TEC_MID_M_BLOCK_ROWS == 0 &&
           gemm.n >= kMidGemmMinN && gemm.k % 128 == 0 && fp8_per_tensor(x) && fp8_per_tensor(w) &&
           (gemm.bias.empty() || bf16_or_fp32(gemm.bias_type)) && (gemm.c.empty() || bf16_or_fp32(residual_type)) && q &&
           q->kind == QuantizerKind::fp8_current && !out.proto.usage.columnwise;
  }
  static int64_t mid_gemm_blocks(const GemmLaunch& gemm) { return gemm.n / TEC_MID_M_BLOCK_ROWS; }
  void push_mid_gemm(const GemmLaunch& gemm, DType residual_type) {
    Launch l;
    l.kind = Launch::Kind::kernel;
    l.step = index_;
    KernelRequest request{"gemm_mid_m.cu", gemm_kernel_defines(gemm, residual_type), ""};
    request.arch_specific = true;
    l.module = modules_.add(request);
    l.entry = "tec_gemm_mid_m";
    l.grid = {mid_gemm_blocks(gemm), 1, 1};
    l.block = {128 * (1 + TEC_MID_M_CONSUMERS(gemm.m)), 1, 1};  // a producer warpgroup + one per 64 rows
    l.shared_bytes = tec_mid_m_shared_bytes(gemm.m);
    // Not early_launch (the kernel has no wait), and so no kernel launches early after it
    // either: a version that waited, with the row kernels at either end of an early launch,
    // made mlp.json's T = 128 graph 81.0-82.4 instead of 77.1 us on the H200, however tried
    // (itself launched early or not; its first W copies and an L2 prefetch before the wait, or
    // not; the next kernel let in at the start or after the main loop).
    l.args = gemm_kernel_args(gemm);
    out_.push_back(std::move(l));
  }

  // One block of 8 warps per 16 rows of W, each warp a slice of K (measured best on the H100
  // at mlp.json's shapes, for both N = 16384 and N = 4096).
  static int64_t small_gemm_blocks(const GemmLaunch& gemm) { return gemm.n / 16; }
  void push_small_gemm(const GemmLaunch& gemm, DType residual_type) {
    std::vector<std::string> defines = gemm_kernel_defines(gemm, residual_type);
    defines.push_back("TEC_UNROLL=" + std::string(gemm.m <= 16 ? "2" : "1"));
    defines.push_back("TEC_W_TILED=" + std::string(layout_of(gemm.a.buffer) == "small_m_tiles" ? "1" : "0"));
    Launch l;
    l.kind = Launch::Kind::kernel;
    l.step = index_;
    l.module = modules_.add(KernelRequest{"gemm_small_m.cu", std::move(defines), ""});
    l.entry = "tec_gemm_small_m";
    l.grid = {small_gemm_blocks(gemm), 1, 1};
    l.block = {256, 1, 1};  // TEC_WARPS (8) x 32 in kernels/gemm_small_m.cu
    l.early_launch = true;
    l.args = gemm_kernel_args(gemm);
    out_.push_back(std::move(l));
  }

  void push_gemm(const GemmLaunch& gemm) {
    Launch l;
    l.kind = Launch::Kind::gemm;
    l.step = index_;
    l.gemm = gemm;
    out_.push_back(std::move(l));
  }

  // ---- The MoE layer (kernels/moe.cu, row.cu producers 19-20, grouped_gemm.cu) ----

  static LaunchArg status_bit(int64_t bit) { return {LaunchArg::Kind::status, "", bit}; }

  Launch moe_launch(const std::string& entry, std::vector<std::string> defines, std::vector<LaunchArg> args, int64_t blocks,
                    int64_t threads) {
    Launch l;
    l.kind = Launch::Kind::kernel;
    l.step = index_;
    l.module = modules_.add(KernelRequest{"moe.cu", std::move(defines), ""});
    l.entry = entry;
    l.grid = {blocks, 1, 1};
    l.block = {threads, 1, 1};
    l.early_launch = true;
    l.args = std::move(args);
    return l;
  }

  void require_single_node(const Node& n) {
    if (step_.nodes.size() != 1) throw NotLowered{"step '" + step_.name + "' fuses ops into " + n.op + " '" + n.name + "', which the GPU does not yet"};
  }

  std::vector<std::string> router_defines(const Node& n, const Value& x, const Value& w) const {
    return {"TEC_H=" + std::to_string(n.attrs.get_int("in_features", 0)) + "LL",
            "TEC_E=" + std::to_string(n.attrs.get_int("num_experts", 0)),
            "TEC_K=" + std::to_string(n.attrs.get_int("top_k", 0)),
            "TEC_SCORE=" + std::string(n.attrs.get_string("score_function", "softmax") == "sigmoid" ? "TEC_SCORE_SIGMOID" : "TEC_SCORE_SOFTMAX"),
            "TEC_NORMALIZE=" + std::string(n.attrs.get_bool("normalize_topk", false) ? "1" : "0"),
            "TEC_IN_DTYPE=" + std::to_string(dtype_code(x.proto.dtype, "input '" + x.name + "'")),
            "TEC_PARAM_DTYPE=" + std::to_string(dtype_code(w.proto.dtype, "weight '" + w.name + "'"))};
  }

  // Logits, scores and top-k per token, one block each: moe.cu's tec_moe_router.
  void lower_moe_router(const Node& n) {
    require_single_node(n);
    const Value& x = input(n, 0);
    const Value& w = input(n, 1);
    const int64_t tokens = x.proto.shape.rows();
    out_.push_back(moe_launch("tec_moe_router", router_defines(n, x, w),
                              {buf(data(x)), buf(data(w)), buf(data(g_.value(n.outputs.at(0)))), buf(data(g_.value(n.outputs.at(1))))},
                              tokens, kRowThreads));
  }

  // tec_moe_route: from moe_permute `n`'s indices, m_splits, the row map and each row's source
  // token into these buffers.
  void push_route(const Node& n, const Value& indices, const std::string& m_splits, const std::string& row_map, const std::string& row_source) {
    out_.push_back(moe_launch("tec_moe_route",
                              {"TEC_SLOTS=" + std::to_string(indices.proto.shape.numel()) + "LL",
                               "TEC_E=" + std::to_string(n.attrs.get_int("num_experts", 0)),
                               "TEC_K=" + std::to_string(indices.proto.shape.cols()) + "LL"},
                              {buf(data(indices)), buf(m_splits), buf(row_map), buf(row_source), status_bit(TEC_STATUS_BAD_EXPERT)}, 1, 1024));
  }

  // tec_moe_route (m_splits, the row map, each row's source token), then the row kernel
  // gathering the tokens in expert order (producer 19) and quantizing them as the grouped
  // GEMM wants.
  void lower_moe_permute(const Node& n) {
    require_single_node(n);
    const Value& x = input(n, 0);
    const Value& indices = input(n, 1);
    const Value& permuted = g_.value(n.outputs.at(0));
    const int64_t slots = indices.proto.shape.numel();
    const std::string row_source = add_workspace(permuted.name + ".row_source", TensorProto::dense(Shape{slots}, DType::int32));
    push_route(n, indices, data(g_.value(n.outputs.at(1))), data(g_.value(n.outputs.at(2))), row_source);
    Producer p;
    p.defines = {row_producer(TEC_ROW_PERMUTE), "TEC_IN_DTYPE=" + std::to_string(dtype_code(x.proto.dtype, "input '" + x.name + "'"))};
    p.inputs = {buf(data(x)), buf(row_source), {}};
    emit_row(p, permuted);
  }

  // The table rows the token ids pick: row kernel producer 23 (an id out of range sets the status word).
  void lower_embedding(const Node& n) {
    require_single_node(n);
    const Value& ids = input(n, 0);
    const Value& table = input(n, 1);
    Producer p;
    p.defines = {row_producer(TEC_ROW_EMBEDDING), "TEC_IN_DTYPE=" + std::to_string(dtype_code(table.proto.dtype, "table '" + table.name + "'")),
                 "TEC_TABLE_ROWS=" + std::to_string(table.proto.shape.rows())};
    p.inputs = {buf(data(table)), buf(data(ids)), {}};
    p.more[0] = status_bit(TEC_STATUS_BAD_TOKEN_ID);
    emit_row(p, output(n));
  }

  // An op on the general path (ir/general_kernel.h): its plan's launches (codegen/general.cpp).
  // A quantize fused after it (the output a GEMM reads) quantizes a high-precision workspace
  // the general kernel writes.
  void lower_general(const Node& n) {
    const Node* quantize = step_.nodes.size() == 2 && node(1).op == "quantize" ? &node(1) : nullptr;
    if (step_.nodes.size() != 1 && !quantize) require_single_node(n);
    std::vector<Shape> shapes;
    std::vector<GeneralOperand> inputs;
    for (size_t slot = 0; slot < n.inputs.size(); ++slot) {
      const Value& in = input(n, slot);
      if (in.proto.quantizer) throw NotLowered{"'" + n.name + "' reads quantized '" + in.name + "'"};
      shapes.push_back(in.proto.shape);
      inputs.push_back({data(in), in.proto.dtype});
    }
    const GeneralPlan plan = builtin_ops().get(n.op).general(n.attrs, shapes);
    const Value& y = output(n);
    const Value& stored_value = quantize ? output(*quantize) : y;
    const bool through_workspace = stored_value.proto.quantizer.has_value();
    const GeneralOperand out{through_workspace ? add_workspace(n.name + ".general", TensorProto::dense(y.proto.shape, y.proto.dtype)) : data(y),
                             y.proto.dtype};
    if (auto gemm = plan.kernel == GeneralKernel::matmul ? matmul_gemm(plan, inputs, out) : std::nullopt) {
      push_gemm(*gemm);
      step_.kind = StepKind::gemm;  // (held to the GEMM bound, not bit for bit)
      step_.fusions.push_back("gpu: the matmul as " + describe(*gemm));
    } else {
      push_general(n, plan, inputs, out);
    }
    if (through_workspace) emit_row(load(out.buffer, y.proto.dtype, "'" + n.name + "'s output"), stored_value);
  }

  // A view's elements copied as they are by the general path's copy kernel (integers and bools,
  // which the row kernels do not load).
  void copy_elements(const Node& n, const Value& x, const Value& y) {
    push_general(n, copy_plan(x.proto.shape.numel(), y.proto.shape), {{data(x), x.proto.dtype}}, {data(y), y.proto.dtype});
  }

  // The general path's launches (codegen/general.h) of node n's `plan`, or NotLowered saying why not.
  void push_general(const Node& n, const GeneralPlan& plan, const std::vector<GeneralOperand>& inputs, const GeneralOperand& out) {
    std::string why_not;
    std::vector<Launch> launches = general_launches(plan, inputs, out, index_, modules_, why_not);
    if (launches.empty()) throw NotLowered{n.op + " '" + n.name + "': " + why_not};
    for (Launch& l : launches) out_.push_back(std::move(l));
  }

  // Each sequence's length from a padding mask, a thread per sequence (kernels/attention_stats.cu).
  void lower_sequence_lengths(const Node& n) {
    require_single_node(n);
    const Value& mask = input(n, 0);
    const int64_t batch = mask.proto.shape[0];
    Launch l;
    l.kind = Launch::Kind::kernel;
    l.step = index_;
    l.module = modules_.add(KernelRequest{"attention_stats.cu",
                                          {"TEC_BATCH=" + std::to_string(batch) + "LL", "TEC_SEQ=" + std::to_string(mask.proto.shape[1]) + "LL",
                                           "TEC_ROWS=1LL", "TEC_HEADS=1LL"},
                                          ""});
    l.entry = "tec_sequence_lengths";
    l.grid = {(batch + 255) / 256, 1, 1};
    l.block = {256, 1, 1};
    l.args = {buf(data(mask)), buf(data(output(n))), status_bit(TEC_STATUS_BAD_PADDING)};
    out_.push_back(std::move(l));
  }

  // The router-weighted sum of each token's k expert rows: row kernel producer 20.
  void lower_moe_unpermute(const Node& n) {
    require_single_node(n);
    const Value& y = input(n, 0);
    const Value& weights = input(n, 2);
    Producer p;
    p.defines = {row_producer(TEC_ROW_UNPERMUTE), "TEC_IN_DTYPE=" + std::to_string(dtype_code(y.proto.dtype, "input '" + y.name + "'")),
                 "TEC_TOPK=" + std::to_string(weights.proto.shape.cols()), "TEC_Y_ROWS=" + std::to_string(y.proto.shape.rows()) + "LL"};
    p.inputs = {buf(data(y)), buf(data(input(n, 1))), buf(data(weights))};
    p.more[0] = status_bit(TEC_STATUS_BAD_ROW_MAP);
    emit_row(p, output(n));
  }

  // ---- The MoE layer's backward (train plans): kernels/moe.cu, row.cu producers 20 and 22,
  // grouped_gemm.cu (dgrad), grouped_wgrad.cu ----

  void require_unquantized(const Node& n, std::initializer_list<const Value*> values) const {
    for (const Value* v : values)
      if (v && v->proto.quantizer) throw NotLowered{"backward node '" + n.name + "' reads or writes quantized '" + v->name + "'"};
  }

  // The router's backward (one block per token), then its weight's gradient (a thread per element).
  void lower_moe_router_backward(const Node& n, const Value* dx, const Value* dw) {
    const Value& x = input(n, 0);
    const Value& w = input(n, 1);
    const Value& dweights = input(n, 2);
    require_unquantized(n, {&x, &w, &dweights, dx, dw});
    const int64_t tokens = x.proto.shape.rows(), experts = n.attrs.get_int("num_experts", 0), hidden = n.attrs.get_int("in_features", 0);
    const std::string dlogits = add_workspace(n.name + ".dlogits", TensorProto::dense(Shape{tokens, experts}, DType::fp32));
    const std::string dx_buffer = dx ? data(*dx) : add_workspace(n.name + ".dx", TensorProto::dense(x.proto.shape, x.proto.dtype));
    std::vector<std::string> defines = router_defines(n, x, w);
    defines.push_back("TEC_OUT_DTYPE=" + std::to_string(dtype_code(dx ? dx->proto.dtype : x.proto.dtype, "the router's dx")));
    if (dw)
      defines.insert(defines.end(), {"TEC_ROUTER_TOKENS=" + std::to_string(tokens) + "LL",
                                     "TEC_DW_DTYPE=" + std::to_string(dtype_code(dw->proto.dtype, "'" + dw->name + "'"))});
    out_.push_back(moe_launch("tec_moe_router_backward", defines, {buf(data(x)), buf(data(w)), buf(data(dweights)), buf(dlogits), buf(dx_buffer)},
                              tokens, kRowThreads));
    if (dw)
      out_.push_back(moe_launch("tec_moe_router_weight_grad", defines, {buf(data(x)), buf(dlogits), buf(data(*dw))},
                                ceil_div(experts * hidden, 256), 256));
  }

  // d(permuted) back to token order: the row map made again from the indices (tec_moe_route),
  // then each token the sum of its k rows (producer 20, unweighted).
  void lower_moe_permute_backward(const Node& n, const Value* dx) {
    const Value& indices = input(n, 0);
    const Value& dpermuted = input(n, 1);
    require_unquantized(n, {&dpermuted, dx});
    if (!dx) return;
    const int64_t slots = indices.proto.shape.numel(), experts = n.attrs.get_int("num_experts", 0);
    auto int32_workspace = [&](const char* what, int64_t count) {
      return add_workspace(n.name + "." + what, TensorProto::dense(Shape{count}, DType::int32));
    };
    const std::string m_splits = int32_workspace("m_splits", experts), row_map = int32_workspace("row_map", slots),
                      row_source = int32_workspace("row_source", slots);
    push_route(n, indices, m_splits, row_map, row_source);
    Producer p;
    p.defines = {row_producer(TEC_ROW_UNPERMUTE), "TEC_UNWEIGHTED=1", "TEC_IN_DTYPE=" + std::to_string(dtype_code(dpermuted.proto.dtype, "'" + dpermuted.name + "'")),
                 "TEC_TOPK=" + std::to_string(indices.proto.shape.cols()), "TEC_Y_ROWS=" + std::to_string(slots) + "LL"};
    p.inputs = {buf(data(dpermuted)), buf(row_map), {}};
    p.more[0] = status_bit(TEC_STATUS_BAD_ROW_MAP);
    emit_row(p, *dx);
  }

  // d(weights): a block per token slot; d(y): each row's slot found (tec_moe_invert_row_map),
  // then the row kernel's scatter (producer 22), which may quantize it for fc2's backward.
  void lower_moe_unpermute_backward(const Node& n, const Value* dy, const Value* dweights) {
    const Value& y = input(n, 0);
    const Value& row_map = input(n, 1);
    const Value& weights = input(n, 2);
    const Value& dout = input(n, 3);
    require_unquantized(n, {&y, &weights, &dout, dweights});
    const int64_t slots = weights.proto.shape.numel(), top_k = weights.proto.shape.cols(), y_rows = y.proto.shape.rows();
    if (dweights)
      out_.push_back(moe_launch("tec_moe_unpermute_weights_grad",
                                {"TEC_COLS=" + std::to_string(y.proto.shape.cols()) + "LL", "TEC_K=" + std::to_string(top_k) + "LL",
                                 "TEC_Y_ROWS=" + std::to_string(y_rows) + "LL",
                                 "TEC_IN_DTYPE=" + std::to_string(dtype_code(y.proto.dtype, "'" + y.name + "'")),
                                 "TEC_PARAM_DTYPE=" + std::to_string(dtype_code(dout.proto.dtype, "'" + dout.name + "'"))},
                                {buf(data(y)), buf(data(row_map)), buf(data(dout)), buf(data(*dweights)), status_bit(TEC_STATUS_BAD_ROW_MAP)},
                                slots, kRowThreads));
    if (!dy) return;
    const std::string slot_of_row = add_workspace(n.name + ".slot_of_row", TensorProto::dense(Shape{y_rows}, DType::int32));
    out_.push_back(moe_launch("tec_moe_invert_row_map",
                              {"TEC_INVERT_SLOTS=" + std::to_string(slots) + "LL", "TEC_Y_ROWS=" + std::to_string(y_rows) + "LL"},
                              {buf(data(row_map)), buf(slot_of_row), status_bit(TEC_STATUS_BAD_ROW_MAP)}, 1, 1024));
    Producer p;
    p.defines = {row_producer(TEC_ROW_UNPERMUTE_BACKWARD), "TEC_IN_DTYPE=" + std::to_string(dtype_code(dout.proto.dtype, "'" + dout.name + "'")),
                 "TEC_TOPK=" + std::to_string(top_k)};
    p.inputs = {buf(data(dout)), buf(slot_of_row), buf(data(weights))};
    emit_row(p, *dy);
  }

  // grouped_linear's backward. Inputs: x, m_splits, W, dy quantized rowwise, dy quantized
  // columnwise, [dy]. dgrad dx = dy W[e] is the forward's grouped GEMM over W's members
  // transposed (bf16: W transposed while tiled; FP8: the columnwise copy tiled), wgrad
  // dW[e] = dy^T x is kernels/grouped_wgrad_sm90.cu (wgmma: bf16 rows, or both FP8 columnwise
  // copies) or kernels/grouped_wgrad.cu (mma.sync: other shapes). db[e] is the column sums of
  // each expert's rows of dy.
  void lower_grouped_backward(const Node& n) {
    const Value& x = input(n, 0);
    const Value& splits = input(n, 1);
    const Value& w = input(n, 2);
    const Value& dy = input(n, 3);
    const Value& dy_cols = input(n, 4);
    auto grad_of = [&](int slot) { return gradient_output(n, slot); };
    const Value* dx = grad_of(0);
    const Value* dw = grad_of(2);
    const std::string where = "the backward of grouped_linear '" + n.name + "'";
    if (!hopper_) throw NotLowered{where + ": tec's grouped GEMMs are Hopper (sm_90) kernels; compile with --arch sm_90 alone"};
    const auto [accumulated, main_grad] = fused_main_grad_add(dw);
    // fp8-block: x and dy in 1x128 blocks, W in 128x128 tiles (LAYOUTS.md section 3).
    auto fp8_block = [](const Value& v, int64_t block_rows) {
      const auto& q = v.proto.quantizer;
      return q && q->kind == QuantizerKind::fp8_block && q->block_rows == block_rows && q->block_cols == 128;
    };
    // MXFP8 and NVFP4: tec's grouped kernels read no 32- or 16-element block scales, so the
    // operands are dequantized to bf16 (dgrad's W and dy from W's columnwise and dy's rowwise
    // copy, wgrad's x and dy from their columnwise copies, in their own shape) and the bf16
    // kernels run on them. NVFP4's W copy holds each member transposed, W^T as the FP8 one does.
    const std::optional<QuantizerKind> kind = x.proto.quantizer ? std::optional(x.proto.quantizer->kind) : std::nullopt;
    auto same_kind = [&](const Value& v) { return v.proto.quantizer && v.proto.quantizer->kind == *kind; };
    const bool dequantized = kind && multiplied_dequantized(*kind) && same_kind(w) && same_kind(dy) && same_kind(dy_cols);
    const bool w_transposed_copy = dequantized && *kind == QuantizerKind::nvfp4;
    // Operand type codes (grouped_wgrad.cu's): 0 bf16, 3 FP8 E4M3, 4 FP8 E5M2, per tensor or in blocks.
    auto type_code = [&](const Value& v, int64_t block_rows) {
      if ((!v.proto.quantizer && v.proto.dtype == DType::bf16) || dequantized) return 0;
      if (v.proto.quantizer && ((fp8_per_tensor(v) && v.proto.usage.rowwise) || fp8_block(v, block_rows)))
        return v.proto.quantizer->dtype == DType::fp8_e4m3 ? 3 : 4;
      throw NotLowered{where + " reads " + (v.proto.quantizer ? v.proto.quantizer->str() : std::string(tec::to_string(v.proto.dtype))) + " '" +
                       v.name + "'; the GPU's grouped backward takes bf16, per-tensor FP8 (fp8-current, fp8-delayed), fp8-block and "
                       "(dequantized to bf16) mxfp8 and nvfp4 so far"};
    };
    const int x_type = type_code(x, 1), w_type = type_code(w, 128), dy_type = type_code(dy, 1);
    if ((x_type == 0) != (w_type == 0) || (x_type == 0) != (dy_type == 0) || (w_type != 0 && w_type != 3))
      throw NotLowered{where + " mixes operand types (bf16 with FP8, or an E5M2 weight)"};
    const bool fp8 = x_type != 0;
    const bool block = fp8_block(x, 1);
    if (block != fp8_block(w, 128) || block != fp8_block(dy, 1) || block != fp8_block(dy_cols, 1))
      throw NotLowered{where + " mixes per-tensor FP8 with FP8 blocks"};
    // The memory plan frees a saved FP8 input's rowwise copy once the forward has read it, so
    // the wgrad reads an FP8 x from its columnwise copy.
    if (fp8 && !x.proto.usage.columnwise) throw NotLowered{where + ": '" + x.name + "' has no columnwise copy for the wgrad"};
    if (block && !dy_cols.proto.usage.columnwise) throw NotLowered{where + ": '" + dy_cols.name + "' has no columnwise copy for the wgrad"};
    if (dequantized && dw)
      for (const Value* v : {&x, &dy_cols})
        if (!v->proto.usage.columnwise) throw NotLowered{where + ": '" + v->name + "' has no columnwise copy for the wgrad"};
    const int64_t experts = n.attrs.get_int("num_gemms", 0), n_out = n.attrs.get_int("out_features", 0), k = n.attrs.get_int("in_features", 0);
    const int64_t rows = x.proto.shape.rows();
    if (n_out % 128 != 0 || k % 128 != 0)
      throw NotLowered{where + ": the grouped backward GEMMs need in_features and out_features % 128 == 0, got " + std::to_string(k) + " and " +
                       std::to_string(n_out)};
    if (dx) {
      const bool staged = dx->proto.quantizer.has_value();
      if (!staged && dx->proto.dtype != DType::bf16 && dx->proto.dtype != DType::fp32)
        throw NotLowered{where + ": dgrad output '" + dx->name + "' is " + std::string(tec::to_string(dx->proto.dtype)) + "; the grouped GEMM writes bf16 or fp32"};
      // W^T's members [k, n_out]: an FP8 weight's columnwise copy, read row-major as it is; a
      // bf16 weight read as it is, [n_out, k], and multiplied transposed (MN-major).
      (void)packed_member_bytes(w, fp8 ? BufferRole::columnwise_data : BufferRole::data);
      const std::string w_t = fp8          ? role(w, BufferRole::columnwise_data)
                              : dequantized ? dequantize_to(w, w.name + ".columnwise_16bit", DType::bf16, Copy::columnwise)
                                            : data(w);
      const std::string dy_rows = dequantized ? dequantize_to(dy, dy.name + ".16bit") : data(dy);
      const DType d_type = staged ? DType::bf16 : dx->proto.dtype;
      const std::string d = staged ? add_workspace("dgrad_staging", TensorProto::dense(dx->proto.shape, DType::bf16)) : data(*dx);
      const int64_t tile_n = k % 256 == 0 && !block ? 256 : 128;
      std::vector<std::string> defines = {"TEC_N=" + std::to_string(k) + "LL", "TEC_TILE_N=" + std::to_string(tile_n), "TEC_K=" + std::to_string(n_out) + "LL",
                                          "TEC_E=" + std::to_string(experts), "TEC_ROWS=" + std::to_string(rows) + "LL",
                                          "TEC_BF16=" + std::string(fp8 ? "0" : "1"), "TEC_BIAS=0", "TEC_OUT=" + std::string(d_type == DType::fp32 ? "2" : "0"),
                                          "TEC_AMAX=0", "TEC_X_E5M2=" + std::string(dy_type == 4 ? "1" : "0"),
                                          "TEC_W_ROW_MAJOR=1", "TEC_W_TRANSPOSED=" + std::string(fp8 || w_transposed_copy ? "0" : "1")};
      // W^T's 128x128 scales: W's columnwise scale_inv, each member [k / 128, roundup(n_out / 128, 4)].
      if (block)
        defines.insert(defines.end(), {"TEC_BLOCK_SCALES=1", "TEC_X_SCALE_ROW=" + std::to_string(round_up(rows, 4)) + "LL",
                                       "TEC_W_SCALE_ROW=" + std::to_string(round_up(ceil_div(n_out, 128), 4)) + "LL",
                                       "TEC_W_SCALE_MEMBER=" + std::to_string(packed_member_bytes(w, BufferRole::columnwise_scale_inv) / 4) + "LL"});
      const int64_t element_bytes = fp8 ? 1 : 2;
      Launch l = grouped_gemm_launch(std::move(defines), rows, experts, k / tile_n, tile_n, dy_rows, n_out * element_bytes,
                                     {buf(w_t), fp8 ? buf(role(w, block ? BufferRole::columnwise_scale_inv : BufferRole::scale_inv)) : LaunchArg{},
                                      buf(dy_rows), fp8 ? buf(role(dy, BufferRole::scale_inv)) : LaunchArg{}, LaunchArg{}, buf(data(splits)),
                                      buf(d), status_bit(TEC_STATUS_BAD_SPLITS), LaunchArg{}});
      // W^T row-major: [E * k, n_out], or (bf16, multiplied transposed) W itself, [E * n_out, k].
      const bool w_transposed = !fp8 && !w_transposed_copy;
      l.tensor_maps.push_back(w_transposed ? TensorMapArg{w_t, experts * n_out, k * 2, 64}
                                           : TensorMapArg{w_t, experts * k, n_out * element_bytes, 64});
      out_.push_back(std::move(l));
      step_.fusions.push_back("gpu: dgrad of '" + n.name + "' by tec's grouped GEMM over W^T (" +
                              (fp8           ? "W's columnwise copy, read row-major"
                               : w_transposed_copy ? "W's columnwise NVFP4 copy (W^T) dequantized to bf16, read row-major"
                               : dequantized ? "W's columnwise MXFP8 copy dequantized to bf16, multiplied transposed"
                                             : "W as made, multiplied transposed") +
                              ")" +
                              std::string(block ? ", fp8-block scales applied per 128-deep step" : ""));
      if (staged) emit_row(load(d, DType::bf16, "dgrad staging"), *dx);
    }
    if (dw) {
      const Value& d = accumulated ? *accumulated : *dw;
      if (d.proto.quantizer || (d.proto.dtype != DType::fp32 && d.proto.dtype != DType::bf16))
        throw NotLowered{where + ": wgrad output '" + d.name + "' is " + (d.proto.quantizer ? d.proto.quantizer->str() : std::string(tec::to_string(d.proto.dtype))) +
                         "; the grouped wgrad writes fp32 or bf16"};
      if (main_grad && (data(*main_grad) != data(d) || main_grad->proto.dtype != d.proto.dtype))
        throw NotLowered{where + ": '" + main_grad->name + "' and '" + d.name + "' are not one buffer, which the grouped wgrad adds into in place"};
      // wgmma (kernels/grouped_wgrad_sm90.cu) where K % 256 == 0: bf16 over both operands
      // MN-major, per-tensor FP8 over both columnwise copies (K-major; rows % 16 == 0, so each
      // column's rows start on 16 bytes). Standalone A/B on an H100, moe.json's fc1 at
      // T = 8192 (16384 rows): bf16 14.1 -> 9.0 ms (273 -> 427 TFLOP/s), FP8 17.9 -> 8.9 ms.
      // fp8-block takes 128 x 128 tiles (each scale block's sum in registers of its own), so
      // K % 128 == 0 will do. Other shapes keep mma.sync.
      const bool wgmma = block ? rows % 16 == 0 : k % 256 == 0 && (!fp8 || (rows % 16 == 0 && dy_cols.proto.usage.columnwise));
      std::vector<std::string> defines = {"TEC_N=" + std::to_string(n_out) + "LL", "TEC_K=" + std::to_string(k) + "LL", "TEC_E=" + std::to_string(experts),
                                          "TEC_ROWS=" + std::to_string(rows) + "LL", "TEC_OUT=" + std::string(d.proto.dtype == DType::fp32 ? "2" : "0"),
                                          "TEC_ACCUMULATE=" + std::string(main_grad ? "1" : "0")};
      if (fp8 || !wgmma)
        defines.insert(defines.end(), {"TEC_DY_TYPE=" + std::to_string(dy_type), "TEC_X_TYPE=" + std::to_string(x_type),
                                       "TEC_BLOCK_SCALES=" + std::string(block ? "1" : "0")});
      KernelRequest request{wgmma ? "grouped_wgrad_sm90.cu" : "grouped_wgrad.cu", std::move(defines), ""};
      request.arch_specific = wgmma;
      Launch l;
      l.kind = Launch::Kind::kernel;
      l.step = index_;
      l.module = modules_.add(request);
      if (wgmma) {
        l.entry = "tec_grouped_wgrad_sm90";
        l.grid = {(n_out / TEC_WGRAD_SM90_TILE_N) * (k / TEC_WGRAD_SM90_TILE_K(block)), 1, experts};
        l.block = {384, 1, 1};  // a producer warpgroup and two consumers
        l.shared_bytes = TEC_WGRAD_SM90_SHARED_BYTES(block);
      } else {
        l.entry = "tec_grouped_wgrad";
        l.grid = {k / 128, n_out / 128, experts};
        l.block = {256, 1, 1};
        l.shared_bytes = 2 * 2 * 128 * (64 + 8) * 2;  // two steps of both operands, each 128 x 64 16-bit values and their skew (TEC_STAGE)
      }
      // Per tensor, a columnwise copy has its rowwise copy's scale_inv; blocks have their own.
      const BufferRole scales = block ? BufferRole::columnwise_scale_inv : BufferRole::scale_inv;
      const bool dy_columnwise = block || (fp8 && wgmma);
      const std::string dy_t = dy_columnwise ? role(dy_cols, BufferRole::columnwise_data)
                               : dequantized ? dequantize_to(dy_cols, dy_cols.name + ".columnwise_16bit", DType::bf16, Copy::columnwise_as_value)
                                             : data(dy);
      const std::string x_t = fp8 ? role(x, BufferRole::columnwise_data)
                              : dequantized ? dequantize_to(x, x.name + ".columnwise_16bit", DType::bf16, Copy::columnwise_as_value)
                                            : data(x);
      l.args = {buf(dy_t), fp8 ? buf(role(block ? dy_cols : dy, scales)) : LaunchArg{},
                buf(x_t), fp8 ? buf(role(x, scales)) : LaunchArg{}, buf(data(splits)), buf(data(d)),
                status_bit(TEC_STATUS_BAD_SPLITS)};
      out_.push_back(std::move(l));
      step_.fusions.push_back("gpu: wgrad of '" + n.name + "' per expert by tec's grouped wgrad (" +
                              std::string(wgmma && block ? "wgmma over both columnwise copies, each 128-row scale block summed apart and added in fp32"
                                          : wgmma && fp8 ? "wgmma over both columnwise copies, FP8 accumulation as the forward's"
                                          : wgmma && dequantized ? "wgmma over bf16 copies dequantized from both columnwise copies"
                                          : wgmma ? "wgmma, both operands MN-major"
                                          : block ? "mma.sync, FP8 widened to fp16, each 128-row scale block summed apart"
                                          : fp8   ? "mma.sync, FP8 widened to fp16"
                                          : dequantized ? "mma.sync over bf16 copies dequantized from both columnwise copies"
                                                  : "mma.sync") +
                              ")" + (main_grad ? ", added into '" + main_grad->name + "'" : std::string()));
    }
    if (const Value* db = grad_of(3)) {
      push_column_sums(input(n, 5), rows, n_out, nullptr, nullptr, nullptr, db, nullptr, &splits, experts);
      step_.fusions.push_back("gpu: the bias gradient of '" + n.name + "' as column sums over each expert's rows");
    }
  }

  // kernels/grouped_gemm.cu: one launch over every expert, m_splits read on the device. The
  // fusion pass may have joined the gated activation reading the GEMM's output (swiglu, geglu):
  // the kernel applies it in its epilogue when a 256-column tile can pair 128 gate with 128 up
  // columns, else a row kernel does after it. A quantized output is staged in bf16 and cast by
  // a row kernel; for current scaling the GEMM leaves the amax, so only the cast pass runs.
  void lower_grouped_gemm(const Node& n) {
    const Node* act = step_.nodes.size() == 2 ? &node(1) : nullptr;
    if (step_.nodes.size() > 2 || (act && !is_gated(act->op)))
      throw NotLowered{"step '" + step_.name + "' fuses ops into grouped_linear '" + n.name + "' that the grouped GEMM does not take"};
    const Value& x = input(n, 0);
    const Value& splits = input(n, 1);
    const Value& w = input(n, 2);
    const Value& gemm_out = output(n);
    const Value& out = act ? output(*act) : gemm_out;
    const bool bias = n.attrs.get_bool("bias", false);
    const int64_t experts = n.attrs.get_int("num_gemms", 0), n_out = n.attrs.get_int("out_features", 0), k = n.attrs.get_int("in_features", 0);
    const int64_t rows = x.proto.shape.rows();
    const std::string where = "grouped_linear '" + n.name + "'";
    if (!hopper_) throw NotLowered{where + ": tec's grouped GEMM is a Hopper (sm_90) kernel; compile with --arch sm_90 alone"};
    auto fp8_e4m3_per_tensor = [](const Value& v) {
      const auto& q = v.proto.quantizer;
      return q && (q->kind == QuantizerKind::fp8_current || q->kind == QuantizerKind::fp8_delayed) && q->dtype == DType::fp8_e4m3;
    };
    auto block_scaled = [](const Value& v) {
      const auto& q = v.proto.quantizer;
      return q && (q->kind == QuantizerKind::fp8_block || q->kind == QuantizerKind::mxfp8 || q->kind == QuantizerKind::nvfp4);
    };
    // FP8 block scaling in E4M3 (X 1x128, W 128x128) runs natively (unless
    // LoweringTarget::grouped_block_scales is off): the kernel scales each 128-deep step of K as
    // it adds it. MXFP8's 32-element and NVFP4's 16-element blocks would need that after every
    // wgmma, so those operands reach the kernel dequantized to bf16 (a constant weight once per
    // session, the tokens every run).
    auto fp8_block_e4m3 = [](const Value& v) {
      const auto& q = v.proto.quantizer;
      return q && q->kind == QuantizerKind::fp8_block && q->dtype == DType::fp8_e4m3;
    };
    const bool block_scales = grouped_block_scales_ && fp8_block_e4m3(x) && fp8_block_e4m3(w) && x.proto.quantizer->block_rows == 1 &&
                              x.proto.quantizer->block_cols == 128 && w.proto.quantizer->block_rows == 128 &&
                              w.proto.quantizer->block_cols == 128;
    const bool dequantized = !block_scales && block_scaled(x) && block_scaled(w) && x.proto.quantizer->kind == w.proto.quantizer->kind;
    const bool bf16 = dequantized || (!x.proto.quantizer && !w.proto.quantizer && x.proto.dtype == DType::bf16 && w.proto.dtype == DType::bf16);
    if (!bf16 && !block_scales && !(fp8_e4m3_per_tensor(x) && fp8_e4m3_per_tensor(w)))
      throw NotLowered{where + " reads " + (x.proto.quantizer ? x.proto.quantizer->str() : std::string(tec::to_string(x.proto.dtype))) +
                       " operands; tec's grouped GEMM takes bf16, per-tensor FP8 E4M3 (fp8-current, fp8-delayed) and, "
                       "dequantized to bf16, fp8-block, mxfp8 and nvfp4"};
    const int64_t element_bytes = bf16 ? 2 : 1;
    if (n_out % 128 != 0 || (k * element_bytes) % 128 != 0)
      throw NotLowered{where + ": the grouped GEMM needs out_features % 128 == 0 and in_features x " + std::to_string(element_bytes) +
                       " bytes % 128 == 0, got " + std::to_string(n_out) + " and " + std::to_string(k)};
    auto unquantized_16_or_32 = [](const Value& v) { return !v.proto.quantizer && (v.proto.dtype == DType::bf16 || v.proto.dtype == DType::fp32); };
    if (!unquantized_16_or_32(gemm_out) && (act || !gemm_out.proto.quantizer))
      throw NotLowered{where + " makes a " + std::string(tec::to_string(gemm_out.proto.dtype)) + " output; the grouped GEMM writes bf16 or fp32"};
    std::string w_data, x_data;
    bool w_row_major = false;
    if (dequantized) {
      w_data = dequantize_grouped_weight(w, experts * n_out, n_out, k);
      x_data = dequantize_to(x, x.name + ".bf16");
      step_.fusions.push_back("gpu: " + std::string(tec::to_string(x.proto.quantizer->kind)) +
                              (x.proto.quantizer->kind == QuantizerKind::fp8_block
                                   ? ": te-compile --no-grouped-block-scales"
                                   : ": tec's grouped GEMM reads no 32- or 16-element block scales") +
                              ": every expert's weight dequantized to bf16 in the GEMM's tiled layout (" +
                              (w.kind == ValueKind::weight ? "once per session" : "every run") + "), the tokens every run; bf16 grouped GEMM");
    } else if (w.kind != ValueKind::weight) {
      // A train plan's weight changes every step: the kernel reads it row-major, as it is made.
      // A tiled copy made every run moved the weight twice more (moe.json fp8-current, H100:
      // the training step at T=256 15.7 -> 13.8 ms without it).
      (void)packed_member_bytes(w, BufferRole::data);
      w_data = data(w);
      w_row_major = true;
      x_data = data(x);
      step_.fusions.push_back("gpu: '" + w.name + "' is made every run, so the grouped GEMM reads it row-major, with no tiled copy");
    } else {
      w_data = data(w);
      x_data = data(x);
      mid_m_weights_.push_back(w_data);
      if (layouts_ && layout_of(w_data) != "mid_m_tiles")
        throw NotLowered{where + ": its weight '" + w.name + "' is read by other kernels too, and the grouped GEMM needs it in its own device layout"};
    }
    DType bias_type = DType::bf16;
    if (bias) {
      bias_type = input(n, 3).proto.dtype;
      if (bias_type != DType::bf16 && bias_type != DType::fp32) throw NotLowered{where + " has a " + std::string(tec::to_string(bias_type)) + " bias"};
    }
    // 256-column tiles halve the X each block streams per FLOP; 128 where N does not divide,
    // and with block scales (a step's product is held apart from the sum: 2 x 64 registers).
    const bool gated_epilogue = act && (n_out / 2) % 128 == 0 && !block_scales;
    const int64_t tile_n = !block_scales && (gated_epilogue || n_out % 256 == 0) ? 256 : 128;

    // Where the kernel writes: the output itself, a bf16 staging buffer a row kernel quantizes,
    // or (an activation it cannot fuse) the GEMM's output for the activation's row kernel.
    const Value& written = gated_epilogue || !act ? out : gemm_out;
    const bool staged = written.proto.quantizer.has_value();
    if (!staged && !unquantized_16_or_32(written))
      throw NotLowered{where + ": '" + written.name + "' is " + std::string(tec::to_string(written.proto.dtype)) + "; the grouped GEMM writes bf16 or fp32"};
    const DType d_type = staged ? DType::bf16 : written.proto.dtype;
    const std::string d = staged ? add_workspace("staging", TensorProto::dense(written.proto.shape, DType::bf16))
                          : act && !gated_epilogue ? add_workspace(gemm_out.name, TensorProto::dense(gemm_out.proto.shape, d_type))
                                                   : data(out);
    const bool amax_in_epilogue = staged && written.proto.quantizer->kind == QuantizerKind::fp8_current;
    std::string amax;
    if (amax_in_epilogue) {
      amax = add_workspace(written.name + ".amax", TensorProto::dense(Shape{1}, DType::fp32));
      memset(amax);
    }
    std::vector<std::string> defines = {
        "TEC_N=" + std::to_string(n_out) + "LL", "TEC_TILE_N=" + std::to_string(tile_n), "TEC_K=" + std::to_string(k) + "LL",
        "TEC_E=" + std::to_string(experts),
        "TEC_ROWS=" + std::to_string(rows) + "LL", "TEC_BF16=" + std::string(bf16 ? "1" : "0"),
        "TEC_BIAS=" + std::string(!bias ? "0" : bias_type == DType::bf16 ? "1" : "2"),
        "TEC_OUT=" + std::string(d_type == DType::fp32 ? "2" : "0"), "TEC_AMAX=" + std::string(amax_in_epilogue ? "1" : "0"),
        "TEC_W_ROW_MAJOR=" + std::string(w_row_major ? "1" : "0")};
    if (gated_epilogue) defines.insert(defines.end(), {"TEC_GATED=1", "TEC_ACT=" + std::to_string(activation_code(*act))});
    if (block_scales)
      defines.insert(defines.end(), {"TEC_BLOCK_SCALES=1", "TEC_X_SCALE_ROW=" + std::to_string(round_up(rows, 4)) + "LL",
                                     "TEC_W_SCALE_ROW=" + std::to_string(round_up(ceil_div(k, 128), 4)) + "LL",
                                     "TEC_W_SCALE_MEMBER=" + std::to_string(packed_member_bytes(w, BufferRole::scale_inv) / 4) + "LL"});
    auto opt = [&](bool present, const std::string& b) { return present ? buf(b) : LaunchArg{}; };
    Launch l = grouped_gemm_launch(std::move(defines), rows, experts, gated_epilogue ? n_out / 2 / 128 : n_out / tile_n, tile_n, x_data,
                                   k * element_bytes,
                                   {buf(w_data), opt(!bf16, bf16 ? "" : role(w, BufferRole::scale_inv)), buf(x_data),
                                    opt(!bf16, bf16 ? "" : role(x, BufferRole::scale_inv)), opt(bias, bias ? data(input(n, 3)) : ""),
                                    buf(data(splits)), buf(d), status_bit(TEC_STATUS_BAD_SPLITS), opt(amax_in_epilogue, amax)});
    if (w_row_major) l.tensor_maps.push_back({w_data, experts * n_out, k * element_bytes, 64});
    out_.push_back(std::move(l));
    step_.fusions.push_back("gpu: tec's grouped GEMM (wgmma), m_splits read on the device");
    if (block_scales) step_.fusions.push_back("gpu: fp8-block scales applied per 128-deep step of K in the grouped GEMM");
    if (gated_epilogue)
      step_.fusions.push_back("gpu: " + act->op + " '" + act->name + "' in the grouped GEMM's epilogue (a tile pairs 128 gate with 128 up columns)");
    if (act && !gated_epilogue) {
      step_.fusions.push_back("gpu: " + act->op + " '" + act->name + "' by a row kernel after the grouped GEMM: " +
                              (block_scales ? std::string("block scales take 128-column tiles")
                                            : "out_features / 2 = " + std::to_string(n_out / 2) + " is no multiple of 128") +
                              ", so a tile cannot pair gate with up columns");
      Producer p;
      p.defines = {row_producer(TEC_ROW_GATED), "TEC_IN_DTYPE=" + std::to_string(dtype_code(d_type, "'" + gemm_out.name + "'")),
                   "TEC_ACT=" + std::to_string(activation_code(*act))};
      p.inputs = {buf(d), {}, {}};
      emit_row(p, out);
      return;
    }
    if (!staged) return;
    if (amax_in_epilogue) {
      step_.fusions.push_back("gpu: fp8_current output of '" + written.name + "' staged in bf16 with its amax from the grouped GEMM, then cast by a row kernel");
      const AmaxPartials partials{amax, 1};
      emit_row(load(d, DType::bf16, "staging"), written, &partials);
      return;
    }
    step_.fusions.push_back("gpu: " + std::string(tec::to_string(written.proto.quantizer->kind)) + " output of '" + written.name +
                            "' staged in bf16, then quantized by a row kernel");
    emit_row(load(d, DType::bf16, "staging"), written);
  }

  // kernels/grouped_gemm.cu over `rows` rows of `experts` experts, `column_tiles` tiles of D's
  // columns per 128 rows, X (`x`, rows of `k_bytes`) through a TMA tensor map of 128-row boxes,
  // and `args` (its slots 0-8). The caller adds a row-major W's tensor map.
  //
  // Where K is 64 steps or more, the last round may split along K (kernels/grouped_schedule.h):
  // up to TEC_MAX_PARTS items per tile, partial sums for a round's blocks (sm_90 GPUs have at
  // most 132 SMs, one block each, slot 9) and a counter per split tile (slot 10), zeroed before
  // every launch. A round of moe.json's fc2 (K = 14336) is ~90 us, and splitting its last round
  // saved ~30 us at T = 2048 (H200), but fc1 (K = 4096, a ~31 us round) lost ~1% at T = 8192
  // with it (its producer then took 56 registers, not 40, leaving the consumers 224, not 232).
  Launch grouped_gemm_launch(std::vector<std::string> defines, int64_t rows, int64_t experts, int64_t column_tiles, int64_t tile_n,
                             const std::string& x, int64_t k_bytes, std::vector<LaunchArg> args) {
    constexpr int64_t split_slots = 132;
    const bool split = k_bytes >= 64 * 128;
    if (split) defines.push_back("TEC_SPLIT_SLOTS=" + std::to_string(split_slots));
    KernelRequest request{"grouped_gemm.cu", std::move(defines), ""};
    request.arch_specific = true;
    Launch l;
    l.kind = Launch::Kind::kernel;
    l.step = index_;
    l.module = modules_.add(request);
    l.entry = "tec_grouped_gemm";
    // The most items any routing needs: sum over experts of ceil(m_e / 128) <= rows / 128 + E
    // tiles per column tile, a last round split into up to 4 items per tile.
    l.grid = {(ceil_div(rows, 128) + experts) * column_tiles * (split ? TEC_MAX_PARTS : 1), 1, 1};
    l.block = {384, 1, 1};  // a producer warpgroup and two consumers
    // One block per SM striding over the tiles: its producer fills the next tile's slots while
    // its consumers run this tile's epilogue.
    l.persistent = true;
    // 4 slots of tile_n rows of W and 128 of X per 128 bytes of K, 1 KB to align them, the mbarriers.
    l.shared_bytes = 4 * (tile_n + 128) * 128 + 1024 + 16 * 4;
    l.args = std::move(args);
    if (split) {
      const std::string partials = add_workspace("split_partials", TensorProto::dense(Shape{split_slots, tile_n / 2 * 256}, DType::fp32));
      const std::string counters = add_workspace("split_counters", TensorProto::dense(Shape{split_slots}, DType::int32));
      memset(counters);
      l.args.resize(11);
      l.args[9] = buf(partials);
      l.args[10] = buf(counters);
    }
    l.tensor_maps = {{x, rows, k_bytes, 128}};
    return l;
  }

  // A block-scaled grouped weight [experts x n_out rows, k] as bf16 in kernels/mid_m_layout.h's
  // tiled layout, by the dequantize row kernel. The members' scale arrays are indexed as one
  // tensor's, which holds when every member's are the same size and packed back to back.
  std::string dequantize_grouped_weight(const Value& w, int64_t rows, int64_t member_rows, int64_t k) {
    require_packed_members(w);
    // A constant weight's copy is made once per session and kept; a train plan's weight copy
    // changes every step, so it is dequantized every run.
    const bool constant = w.kind == ValueKind::weight;
    const std::string out = add_workspace(w.name + ".bf16_tiles", TensorProto::dense(Shape{rows, k}, DType::bf16), constant);
    Producer p = dequantize_producer(w);
    p.defines.push_back("TEC_OUT_MID_M_TILES=1");
    if (w.proto.quantizer->kind == QuantizerKind::nvfp4) p.defines.push_back("TEC_DQ_MEMBER_ROWS=" + std::to_string(member_rows) + "LL");
    emit_row_to(p, rows, k, out, DType::bf16);
    out_.back().constant_copy = constant;
    return out;
  }

  // The bytes from one member's buffer `b` to the next's in grouped weight `w`, where the
  // kernels index the members as one array: every member's the same size, packed back to back.
  // MXFP8 and NVFP4 have no cuBLASLt GEMM on sm_90, and tec's grouped kernels read no 32- or
  // 16-element block scales: their GEMM operands are dequantized to bf16 first.
  static bool multiplied_dequantized(QuantizerKind kind) { return kind == QuantizerKind::mxfp8 || kind == QuantizerKind::nvfp4; }

  // Every buffer of grouped `w` holds equal members back to back, so that one kernel indexes
  // them as one tensor's.
  static void require_packed_members(const Value& w) {
    for (const GroupedBuffer& b : GroupedTensor::uniform(w.proto).buffers()) (void)packed_member_bytes(w, b);
  }

  static int64_t packed_member_bytes(const Value& w, const GroupedBuffer& b) {
    for (size_t e = 0; e + 1 < b.offsets.size(); ++e)
      if (b.offsets[e] != static_cast<int64_t>(e) * b.member_bytes.at(0))
        throw NotLowered{"grouped weight '" + w.name + "': its members' " + std::string(tec::to_string(b.spec.role)) +
                         " buffers are not equal and packed, so no one kernel indexes them"};
    return b.member_bytes.at(0);
  }
  static int64_t packed_member_bytes(const Value& w, BufferRole role) {
    for (const GroupedBuffer& b : GroupedTensor::uniform(w.proto).buffers())
      if (b.spec.role == role) return packed_member_bytes(w, b);
    throw NotLowered{"grouped weight '" + w.name + "' has no " + std::string(tec::to_string(role)) + " buffer"};
  }

  std::string layout_of(const std::string& buffer) const {
    if (!layouts_) return "";
    const auto it = layouts_->find(buffer);
    return it == layouts_->end() ? "" : it->second;
  }

  const Graph& g_;
  Step& step_;
  int index_;
  ModuleTable& modules_;
  std::vector<Launch>& out_;
  std::vector<std::string>& small_m_weights_;
  std::vector<std::string>& mid_m_weights_;
  bool fp8_mma_;    // every target arch has FP8 mma.sync (sm_89+)
  bool hopper_;     // every target arch is sm_90 (wgmma)
  bool mid_m_;      // LoweringTarget::mid_m_gemm, and hopper_
  bool grouped_block_scales_;  // LoweringTarget::grouped_block_scales
  const WeightLayouts* layouts_;  // null in the scratch lowering
};

// "sm_90" -> 90; 0 when the name has no number.
int arch_number(const std::string& arch) {
  int n = 0;
  for (char c : arch)
    if (c >= '0' && c <= '9') n = n * 10 + (c - '0');
  return n;
}

}  // namespace

GpuLowering lower_for_gpu(const Graph& g, Schedule& schedule, ModuleTable& modules, const LoweringTarget& target,
                          const WeightLayouts* layouts) {
  const std::vector<std::string>& archs = target.archs;
  GpuLowering result;
  result.supported = true;
  result.reason.clear();
  bool any_delayed = false;
  for (const Value& v : g.values)
    if (v.kind != ValueKind::weight && v.proto.quantizer && v.proto.quantizer->kind == QuantizerKind::fp8_delayed)
      any_delayed = true;
  int delayed_module = -1;
  if (any_delayed) {
    if (g.recipe.amax_history_len > kMaxGpuAmaxHistory) {
      result.supported = false;
      result.reason = "amax_history_len " + std::to_string(g.recipe.amax_history_len) + " is longer than the GPU update allows (" +
                      std::to_string(kMaxGpuAmaxHistory) + ")";
      return result;
    }
    KernelRequest r = delayed_update_kernel(g.recipe.amax_history_len, "");
    delayed_module = modules.add(r);
    Launch l;
    l.kind = Launch::Kind::delayed_scale_inv;
    l.module = delayed_module;
    l.entry = "tec_delayed_scale_inv";
    result.launches.push_back(l);
  }
  try {
    const bool fp8_mma = !archs.empty() && std::all_of(archs.begin(), archs.end(), [](const std::string& a) { return arch_number(a) >= 89; });
    const bool hopper = !archs.empty() && std::all_of(archs.begin(), archs.end(), [](const std::string& a) { return arch_number(a) == 90; });
    const bool mid_m = target.mid_m_gemm && hopper;
    for (size_t i = 0; i < schedule.steps.size(); ++i) {
      const Step& step = schedule.steps[i];
      result.step = step.name;
      result.node = step.nodes.empty() ? "" : g.node(step.nodes[0]).name;
      result.op = step.nodes.empty() ? "" : g.node(step.nodes[0]).op;
      StepLowering(g, schedule.steps[i], static_cast<int>(i), modules, result, fp8_mma, hopper, mid_m, target.grouped_block_scales, layouts)
          .lower();
    }
    result.step = result.node = result.op = "";
  } catch (const NotLowered& e) {
    result.supported = false;
    result.reason = e.reason;
    result.launches.clear();
    result.small_m_weights.clear();
    result.mid_m_weights.clear();
    for (Step& s : schedule.steps) s.workspaces.clear();
    return result;
  }
  if (target.overlap_min_rows >= 0) overlap_collectives(result.launches, g.tp.size, target.overlap_min_rows, schedule, modules);
  if (any_delayed) {
    Launch l;
    l.kind = Launch::Kind::delayed_update;
    l.module = delayed_module;
    l.entry = "tec_delayed_update";
    result.launches.push_back(l);
  }
  return result;
}

WeightLayouts weight_device_layouts(const std::vector<GpuLowering>& profiles) {
  std::set<std::string> small, mid, other_uses;
  for (const GpuLowering& p : profiles) {
    if (!p.supported) return {};
    small.insert(p.small_m_weights.begin(), p.small_m_weights.end());
    mid.insert(p.mid_m_weights.begin(), p.mid_m_weights.end());
    for (const Launch& l : p.launches) {
      if (l.kind == Launch::Kind::memset) other_uses.insert(l.buffer);
      if (l.kind == Launch::Kind::collective) other_uses.insert({l.collective.send, l.collective.recv});
      if (l.kind == Launch::Kind::gemm)
        for (const std::string* b : {&l.gemm.a.buffer, &l.gemm.a.scale_inv, &l.gemm.b.buffer, &l.gemm.b.scale_inv, &l.gemm.bias,
                                     &l.gemm.c, &l.gemm.d, &l.gemm.d_scale, &l.gemm.amax_d})
          other_uses.insert(*b);
      const bool reads_w_in_its_layout = l.entry == "tec_gemm_small_m" || l.entry == "tec_gemm_mid_m" || l.entry == "tec_grouped_gemm";
      for (size_t i = 0; i < l.args.size(); ++i)
        if (l.args[i].kind == LaunchArg::Kind::buffer && !(reads_w_in_its_layout && i == 0)) other_uses.insert(l.args[i].buffer);
      for (const TensorMapArg& m : l.tensor_maps) other_uses.insert(m.buffer);  // read row-major
    }
  }
  WeightLayouts layouts;
  for (const std::string& w : small)
    if (!other_uses.count(w) && !mid.count(w)) layouts[w] = "small_m_tiles";
  for (const std::string& w : mid)
    if (!other_uses.count(w) && !small.count(w)) layouts[w] = "mid_m_tiles";
  return layouts;
}

}  // namespace tec::codegen
