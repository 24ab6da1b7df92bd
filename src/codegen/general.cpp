#include "codegen/general.h"

#include <algorithm>

#include "status.h"

namespace tec::codegen {

namespace {

constexpr int64_t kThreads = 256;        // TEC_GENERAL_THREADS in kernels/general.cu
constexpr int64_t kMatmulTile = 16;      // TEC_MM_TILE
constexpr int64_t kMaxGridBlocks = 65535;  // the kernels stride over more work than this

// kernels/general.cu's dtype codes; -1 for a type it does not take.
int general_dtype_code(DType d) {
  if (d == DType::uint8) return 3;
  if (d == DType::int32) return 4;
  return kernel_dtype_code(d);
}

// Slots 0..63 of one launch (kernels/general.cu lists them).
struct Slots {
  std::vector<LaunchArg> args = std::vector<LaunchArg>(64);
  void buffer(size_t slot, const std::string& name) { args[slot] = {LaunchArg::Kind::buffer, name, 0}; }
  void value(size_t slot, int64_t v) { args[slot] = {LaunchArg::Kind::value, "", v}; }
  void values(size_t first, const std::vector<int64_t>& vs) {
    for (size_t i = 0; i < vs.size(); ++i) value(first + i, vs[i]);
  }
};

int64_t product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

int64_t blocks_for(int64_t work, int64_t per_block) { return std::clamp<int64_t>((work + per_block - 1) / per_block, 1, kMaxGridBlocks); }

// gather (a thread per output element) and scatter_add (a block per output row: it walks
// gather's plan backwards) read the same slots.
template <typename MakeLaunch>
Launch gather_launch(const GeneralPlan& plan, const std::vector<GeneralOperand>& inputs, const GeneralOperand& out,
                     const std::vector<std::string>& dtype_defines, MakeLaunch&& launch) {
  const bool gather = plan.kernel == GeneralKernel::gather;
  Slots s;
  s.buffer(0, inputs.at(0).buffer);
  s.buffer(1, inputs.at(1).buffer);
  if (gather) s.args[2] = {LaunchArg::Kind::status, "", TEC_STATUS_BAD_INDEX};
  s.buffer(3, out.buffer);
  const int64_t work = gather ? plan.m * plan.n * plan.inner : plan.m * product(plan.dims);
  s.value(4, work);
  s.value(5, plan.k);
  s.values(6, plan.dims);
  s.value(33, plan.inner);
  s.values(48, {plan.m, plan.n});
  std::vector<std::string> defines = {dtype_defines[0], dtype_defines.back(), gather ? "TEC_GATHER=1" : "TEC_SCATTER_ADD=1"};
  return launch(defines, gather ? "tec_general_gather" : "tec_general_scatter_add",
                std::array<int64_t, 3>{gather ? blocks_for(work, kThreads) : std::min(work, kMaxGridBlocks), 1, 1}, kThreads, s);
}

}  // namespace

std::vector<Launch> general_launches(const GeneralPlan& plan, const std::vector<GeneralOperand>& inputs, const GeneralOperand& out,
                                     int step, ModuleTable& modules, std::string& why_not) {
  std::vector<std::string> dtype_defines;
  const char* names[3] = {"TEC_A_DTYPE", "TEC_B_DTYPE", "TEC_C_DTYPE"};
  for (size_t i = 0; i < inputs.size() && plan.kernel != GeneralKernel::copies; ++i) {
    if (general_dtype_code(inputs[i].dtype) < 0) {
      why_not = "input '" + inputs[i].buffer + "' is " + std::string(to_string(inputs[i].dtype)) +
                "; the general kernels take bf16, fp16, fp32, int32 and uint8";
      return {};
    }
    dtype_defines.push_back(std::string(names[i]) + "=" + std::to_string(general_dtype_code(inputs[i].dtype)));
  }
  if (general_dtype_code(out.dtype) < 0) {
    why_not = "output '" + out.buffer + "' is " + std::string(to_string(out.dtype)) + "; the general kernels write bf16, fp16, fp32, int32 and uint8";
    return {};
  }
  dtype_defines.push_back("TEC_OUT_DTYPE=" + std::to_string(general_dtype_code(out.dtype)));

  auto launch = [&](std::vector<std::string> defines, const char* entry, std::array<int64_t, 3> grid, int64_t threads, Slots slots) {
    Launch l;
    l.kind = Launch::Kind::kernel;
    l.step = step;
    l.module = modules.add(KernelRequest{"general.cu", std::move(defines), ""});
    l.entry = entry;
    l.grid = grid;
    l.block = {threads, 1, 1};
    l.args = std::move(slots.args);
    return l;
  };
  std::vector<Launch> launches;
  switch (plan.kernel) {
    case GeneralKernel::map: {
      Slots s;
      for (size_t i = 0; i < inputs.size(); ++i) s.buffer(i, inputs[i].buffer);
      s.buffer(3, out.buffer);
      const int64_t count = product(plan.dims);
      s.value(4, count);
      s.value(5, static_cast<int64_t>(plan.dims.size()));
      s.values(6, plan.dims);
      for (size_t i = 0; i < plan.strides.size(); ++i) s.values(12 + 6 * i, plan.strides[i]);
      std::vector<std::string> defines = dtype_defines;
      defines.push_back("TEC_MAP=" + std::to_string(plan.code));
      launches.push_back(launch(defines, "tec_general_map", {blocks_for(count, kThreads), 1, 1}, kThreads, s));
      break;
    }
    case GeneralKernel::copies:
      for (const StridedCopy& c : plan.copies) {
        const bool zeros = c.input == kZeroFill;
        const GeneralOperand& in = zeros ? out : inputs.at(static_cast<size_t>(c.input));
        if (general_dtype_code(in.dtype) < 0) {
          why_not = "input '" + in.buffer + "' is " + std::string(to_string(in.dtype)) + "; the general kernels take bf16, fp16, fp32, int32 and uint8";
          return {};
        }
        Slots s;
        if (!zeros) s.buffer(0, in.buffer);
        s.buffer(3, out.buffer);
        const int64_t count = product(c.dims);
        s.value(4, count);
        s.value(5, static_cast<int64_t>(c.dims.size()));
        s.values(6, c.dims);
        s.values(12, c.in_strides);
        s.values(18, c.out_strides);
        s.value(30, c.in_offset);
        s.value(31, c.out_offset);
        std::vector<std::string> defines = {"TEC_COPY=1", "TEC_A_DTYPE=" + std::to_string(general_dtype_code(in.dtype)), dtype_defines.back()};
        if (zeros) defines.push_back("TEC_COPY_ZEROS=1");
        launches.push_back(launch(std::move(defines),
                                  "tec_general_copy", {blocks_for(count, kThreads), 1, 1}, kThreads, s));
      }
      break;
    case GeneralKernel::softmax: {
      Slots s;
      s.buffer(0, inputs.at(0).buffer);
      s.buffer(3, out.buffer);
      s.value(4, plan.rows);
      s.value(32, plan.n);
      s.value(33, plan.inner);
      std::vector<std::string> defines = dtype_defines;
      defines.push_back("TEC_SOFTMAX=1");
      launches.push_back(launch(defines, "tec_general_softmax", {std::min(plan.rows, kMaxGridBlocks), 1, 1}, kThreads, s));
      break;
    }
    case GeneralKernel::reduce: {
      Slots s;
      s.buffer(0, inputs.at(0).buffer);
      s.buffer(3, out.buffer);
      const int64_t outputs = product(plan.dims);
      s.value(4, outputs);
      s.value(5, static_cast<int64_t>(plan.dims.size()));
      s.values(6, plan.dims);
      s.values(12, plan.strides.at(0));
      s.value(34, static_cast<int64_t>(plan.reduced_dims.size()));
      s.values(35, plan.reduced_dims);
      s.values(41, plan.reduced_strides);
      s.value(47, product(plan.reduced_dims));
      std::vector<std::string> defines = dtype_defines;
      defines.push_back("TEC_REDUCE=" + std::to_string(plan.code));
      launches.push_back(launch(defines, "tec_general_reduce", {std::min(outputs, kMaxGridBlocks), 1, 1}, kThreads, s));
      break;
    }
    case GeneralKernel::gather:
    case GeneralKernel::scatter_add:
      launches.push_back(gather_launch(plan, inputs, out, dtype_defines, launch));
      break;
    case GeneralKernel::matmul: {
      Slots s;
      s.buffer(0, inputs.at(0).buffer);
      s.buffer(1, inputs.at(1).buffer);
      s.buffer(3, out.buffer);
      const int64_t batches = product(plan.dims);
      s.value(4, batches);
      s.value(5, static_cast<int64_t>(plan.dims.size()));
      s.values(6, plan.dims);
      s.values(12, plan.strides.at(0));
      s.values(18, plan.strides.at(1));
      s.values(48, {plan.m, plan.n, plan.k});
      if ((plan.m + kMatmulTile - 1) / kMatmulTile > kMaxGridBlocks) {
        why_not = "a matmul of " + std::to_string(plan.m) + " rows (the general kernel takes up to " +
                  std::to_string(kMaxGridBlocks * kMatmulTile) + ")";
        return {};
      }
      std::vector<std::string> defines = dtype_defines;
      defines.push_back("TEC_MATMUL=1");
      launches.push_back(launch(defines, "tec_general_matmul",
                                {(plan.n + kMatmulTile - 1) / kMatmulTile, (plan.m + kMatmulTile - 1) / kMatmulTile, std::min(batches, kMaxGridBlocks)},
                                kMatmulTile * kMatmulTile, s));
      break;
    }
  }
  return launches;
}

std::optional<GemmLaunch> matmul_gemm(const GeneralPlan& plan, const std::vector<GeneralOperand>& in, const GeneralOperand& out) {
  const DType dtype = out.dtype;
  if (in.at(0).dtype != dtype || in.at(1).dtype != dtype || (dtype != DType::bf16 && dtype != DType::fp16 && dtype != DType::fp32))
    return std::nullopt;
  const int64_t per_16_bytes = 16 / storage_bytes(dtype);
  if (plan.k % per_16_bytes != 0 || plan.n % per_16_bytes != 0 || plan.dims.size() > 1) return std::nullopt;
  GemmLaunch g;
  g.m = plan.m, g.n = plan.n, g.k = plan.k;
  const int64_t batch = plan.dims.empty() ? 1 : plan.dims[0];
  const int64_t stride_left = batch > 1 ? plan.strides.at(0).at(0) : 0, stride_right = batch > 1 ? plan.strides.at(1).at(0) : 0;
  if (batch > 1 && stride_right == 0 && stride_left == plan.m * plan.k) {
    g.m = checked_mul(batch, plan.m);  // every batch times the one right matrix: one GEMM
  } else if (batch > 1) {
    if (stride_left != plan.m * plan.k || stride_right != plan.k * plan.n) return std::nullopt;
    g.batch = batch;
    g.batch_stride_a = stride_right;
    g.batch_stride_b = stride_left;
  }
  // y[m, n] = x[m, k] . w[n, k]^T with x the left operand and w^T the right one, [k, n] row-major.
  g.a = GemmOperand{.buffer = in[1].buffer, .type = dtype, .scale_inv = "", .scale_mode = "none", .transposed = true};
  g.b = GemmOperand{.buffer = in[0].buffer, .type = dtype, .scale_inv = "", .scale_mode = "none", .transposed = false};
  g.d = out.buffer;
  g.d_type = dtype;
  return g;
}

std::string describe(const GemmLaunch& gemm) {
  return (gemm.batch > 1 ? "a strided batch of " + std::to_string(gemm.batch) + " cuBLASLt GEMMs" : std::string("one cuBLASLt GEMM")) +
         " (fp32 accumulation; its output within the GEMM bound of the CPU reference's)";
}

GeneralPlan copy_plan(int64_t count, const Shape& out) {
  GeneralPlan plan;
  plan.kernel = GeneralKernel::copies;
  plan.out_dims = out.dims;
  plan.copies.push_back(StridedCopy{.input = 0, .dims = {count}, .in_offset = 0, .out_offset = 0, .in_strides = {1}, .out_strides = {1}});
  return plan;
}

}  // namespace tec::codegen
