// A GEMM launch of a plan manifest: its cuBLASLt matmul's operands, scales, epilogue, output,
// row offsets (a split GEMM's block) and strided batch, each checked against its buffer.
#include <cstdint>
#include <tuple>

#include "plan/manifest_reader.h"

namespace tec::plan {

Gemm parse_gemm(const Reader& r, const std::string& path, const std::string& file, const BufferRefs& refs, int64_t tp_size) {
  auto ref = [&](const json& v, const std::string& key, bool writable) { return refs.ref(v, key, writable); };
  auto bytes_of = [&](int i) { return refs.bytes_of(i); };
  const Reader g(r.field("gemm"), path + "/gemm", file);
  Gemm gemm;
  gemm.m = g.integer("m", 1, kMaxDim);
  gemm.n = g.integer("n", 1, kMaxDim);
  gemm.k = g.integer("k", 1, kMaxDim);
  auto operand = [&](const std::string& key, int64_t rows, int64_t cols) {
    const Reader o(g.field(key), path + "/gemm/" + key, file);
    GemmOperand op;
    op.buffer = ref(o.field("buffer"), key, false);
    op.type = o.dtype("type");
    op.scale_inv = ref(o.field("scale_inv"), key, false);
    op.scale_mode = o.str("scale_mode");
    op.transposed = o.optional_boolean("transposed");
    TEC_USER_CHECK(!op.transposed || !is_float8(op.type), r.ctx(key)) << "FP8 GEMM operands cannot be transposed on sm_90 (TN only)";
    TEC_USER_CHECK(op.scale_mode == "none" || op.scale_mode == "tensor" || op.scale_mode == "vec128" ||
                       op.scale_mode == "blk128x128",
                   r.ctx(key))
        << "unknown scale mode '" << op.scale_mode << "'";
    TEC_USER_CHECK(op.buffer >= 0 && bytes_of(op.buffer) >= checked_mul(checked_mul(rows, cols), storage_bytes(op.type)),
                   r.ctx(key))
        << "GEMM operand " << key << " needs " << rows << "x" << cols << " " << to_string(op.type) << " in its buffer";
    TEC_USER_CHECK((op.scale_mode == "none") == (op.scale_inv < 0), r.ctx(key)) << "scale_inv and scale_mode disagree";
    if (op.scale_mode == "tensor") TEC_USER_CHECK(bytes_of(op.scale_inv) >= 4, r.ctx(key)) << "scale_inv too small";
    if (op.scale_mode == "vec128")
      TEC_USER_CHECK(bytes_of(op.scale_inv) >= checked_mul(ceil_div(cols, 128), round_up(rows, 4)) * 4, r.ctx(key))
          << "1x128 scales too small";
    if (op.scale_mode == "blk128x128")
      TEC_USER_CHECK(bytes_of(op.scale_inv) >= checked_mul(ceil_div(rows, 128), round_up(ceil_div(cols, 128), 4)) * 4, r.ctx(key))
          << "128x128 scales too small";
    return op;
  };
  // A row block of a split GEMM (tensor-parallel overlap): x, C and D start that many rows in,
  // whichever rank runs it; the buffers must hold the furthest block.
  auto row_offset = [&](const std::string& key) {
    RowOffset o;
    if (!g.contains(key)) return o;
    const Reader rows(g.field(key), path + "/gemm/" + key, file);
    o.fixed = rows.integer("fixed", 0, kMaxDim);
    o.per_rank = rows.integer("per_rank", 0, kMaxDim);
    o.shift = static_cast<int>(rows.integer("shift", 0, tp_size - 1));
    return o;
  };
  gemm.x_rows = row_offset("x_rows");
  gemm.d_rows = row_offset("d_rows");
  const int64_t x_rows = checked_add(gemm.m, gemm.x_rows.most_rows(tp_size));
  const int64_t d_rows = checked_add(gemm.m, gemm.d_rows.most_rows(tp_size));
  gemm.a = operand("a", gemm.n, gemm.k);
  gemm.b = operand("b", x_rows, gemm.k);
  // A strided batch: each operand's buffer holds its last GEMM's matrix, D all of them.
  int64_t d_matrices = 1;
  if (g.contains("batch")) {
    const Reader b(g.field("batch"), path + "/gemm/batch", file);
    gemm.batch = b.integer("count", 2, INT32_MAX);  // (cuBLASLt's batch count is an int32)
    gemm.batch_stride_a = b.integer("stride_a", 1, kMaxElements);
    gemm.batch_stride_b = b.integer("stride_b", 1, kMaxElements);
    for (const auto& [key, o, stride, matrix] : {std::tuple{"a", &gemm.a, gemm.batch_stride_a, checked_mul(gemm.n, gemm.k)},
                                                 std::tuple{"b", &gemm.b, gemm.batch_stride_b, checked_mul(gemm.m, gemm.k)}}) {
      TEC_USER_CHECK(bytes_of(o->buffer) >= checked_mul(checked_add(checked_mul(gemm.batch - 1, stride), matrix), storage_bytes(o->type)),
                     b.ctx(key))
          << "GEMM operand " << key << " needs " << gemm.batch << " matrices " << stride << " elements apart in its buffer";
      TEC_USER_CHECK(o->scale_mode == "none" && !is_float8(o->type) && storage_bytes(o->type) >= 2, b.ctx(key))
          << "a batched GEMM takes unscaled 16- or 32-bit operands";
    }
    TEC_USER_CHECK(x_rows == gemm.m && d_rows == gemm.m, b.ctx("count")) << "a batched GEMM has no row offsets";
    d_matrices = gemm.batch;
  }
  if (x_rows != gemm.m)
    TEC_USER_CHECK(!gemm.b.transposed && (gemm.b.scale_mode == "none" || gemm.b.scale_mode == "tensor"), r.ctx("x_rows"))
        << "only an untransposed x with one scale per tensor can start at a row offset";
  gemm.bias = ref(g.field("bias"), "bias", false);
  gemm.bias_type = g.dtype("bias_type");
  if (gemm.bias >= 0)
    TEC_USER_CHECK(bytes_of(gemm.bias) >= gemm.n * storage_bytes(gemm.bias_type), r.ctx("bias")) << "bias too small";
  gemm.epilogue = g.str("epilogue");
  TEC_USER_CHECK(gemm.epilogue == "default" || gemm.epilogue == "bias" || gemm.epilogue == "gelu" ||
                     gemm.epilogue == "gelu_bias" || gemm.epilogue == "relu" || gemm.epilogue == "relu_bias",
                 r.ctx("epilogue"))
      << "unknown epilogue '" << gemm.epilogue << "'";
  TEC_USER_CHECK((gemm.bias >= 0) == (gemm.epilogue.find("bias") != std::string::npos), r.ctx("bias"))
      << "the epilogue and the bias disagree";
  const Reader d(g.field("d"), path + "/gemm/d", file);
  gemm.d = ref(d.field("buffer"), "d", true);
  gemm.d_type = d.dtype("type");
  gemm.d_scale = ref(d.field("scale"), "d", false);
  gemm.amax_d = ref(d.field("amax"), "d", true);
  TEC_USER_CHECK(gemm.d >= 0 && bytes_of(gemm.d) >= checked_mul(checked_mul(checked_mul(d_rows, gemm.n), d_matrices), storage_bytes(gemm.d_type)),
                 r.ctx("d"))
      << "GEMM output needs " << d_matrices << " x " << d_rows << "x" << gemm.n << " " << to_string(gemm.d_type);
  if (gemm.batch > 1)
    TEC_USER_CHECK(gemm.bias < 0 && gemm.amax_d < 0 && gemm.d_scale < 0 && !is_float8(gemm.d_type), r.ctx("batch"))
        << "a batched GEMM has no bias, D scale or amax, and an unquantized output";
  if (d_rows != gemm.m)
    TEC_USER_CHECK(!is_float8(gemm.d_type) && gemm.amax_d < 0, r.ctx("d_rows")) << "an FP8 output (its amax is D's) cannot start at a row offset";
  if (gemm.d_scale >= 0) TEC_USER_CHECK(bytes_of(gemm.d_scale) >= 4, r.ctx("d")) << "D scale too small";
  if (gemm.amax_d >= 0) TEC_USER_CHECK(bytes_of(gemm.amax_d) >= 4, r.ctx("d")) << "amax too small";
  TEC_USER_CHECK(g.field("fast_accum").is_boolean(), r.ctx("fast_accum")) << "expected a boolean";
  gemm.fast_accum = g.field("fast_accum").get<bool>();
  const json& algo = g.field("algo");
  if (!algo.is_string() || algo.get<std::string>() != "heuristic") {
    const Reader a(algo, path + "/gemm/algo", file);
    gemm.algo_source = "tuned";
    const std::string hex = a.str("tuned");
    TEC_USER_CHECK(hex.size() == 128 && hex.find_first_not_of("0123456789abcdef") == std::string::npos, a.ctx("tuned"))
        << "a tuned algorithm is 64 bytes as 128 lowercase hex digits";
    for (size_t i = 0; i < 64; ++i) gemm.algo.push_back(static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16)));
    gemm.algo_cublaslt = a.str("cublaslt");
    gemm.algo_gpu = a.str("gpu");
  }
  gemm.c = ref(g.field("c"), "c", false);
  TEC_USER_CHECK(gemm.c < 0 || gemm.batch == 1, r.ctx("c")) << "a batched GEMM takes no C";
  if (gemm.c >= 0)
    TEC_USER_CHECK(bytes_of(gemm.c) >= checked_mul(checked_mul(d_rows, gemm.n), 2), r.ctx("c")) << "C too small";
  return gemm;
}

}  // namespace tec::plan
