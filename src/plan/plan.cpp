// Parses and validates a plan manifest (schemas/plan.schema.json). Every field the
// executors use is checked here: types, ranges, offsets inside their regions, references
// between buffers, tensors and steps, and that each tensor's buffers are exactly what its
// TensorProto says (LAYOUTS.md).
#include "plan/plan.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>

#include "core/json_text.h"
#include "ir/runtime_scalars.h"
#include "plan/file.h"
#include "plan/layout_check.h"
#include "plan/format.h"
#include "plan/manifest_reader.h"
#include "status.h"

namespace tec::plan {

namespace {

std::optional<BufferRole> parse_role(const std::string& s) {
  for (auto r : {BufferRole::data, BufferRole::columnwise_data, BufferRole::scale_inv, BufferRole::columnwise_scale_inv,
                 BufferRole::amax, BufferRole::columnwise_amax})
    if (to_string(r) == s) return r;
  return std::nullopt;
}

AttrValue attr_from_json(const json& v, const ErrorContext& ctx) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) return v.get<std::string>();
  TEC_USER_CHECK(v.is_array(), ctx) << "attribute has an unsupported type";
  std::vector<int64_t> out;
  for (const auto& e : v) {
    TEC_USER_CHECK(e.is_number_integer(), ctx) << "list attributes hold integers";
    out.push_back(e.get<int64_t>());
  }
  return out;
}

// Every tensor a step reads was written before (by an earlier step, an earlier op of the same
// step, the caller, or the plan's constants and state), and every buffer a step touches is
// alive in that step: a hostile plan cannot make an executor read a freed or foreign buffer.
void check_dataflow(const Profile& p, const Reader& r) {
  std::set<std::string> written;
  for (const auto& [name, t] : p.tensors)
    if (t.kind != "activation") written.insert(name);
  auto check_alive = [&](const Tensor& t, int step, bool columnwise, const std::string& what, const ErrorContext& ctx) {
    std::vector<BufferRole> roles;
    for (const auto& entry : t.buffers) roles.push_back(entry.first);
    for (const auto& [role, index] : t.buffers) {
      if (!role_serves_direction(role, columnwise, roles)) continue;
      const Buffer& b = p.buffers[static_cast<size_t>(index)];
      if (b.region != "scratch") continue;
      TEC_USER_CHECK(b.first_step <= step && step <= b.last_step, ctx)
          << what << " '" << t.name << "' in step " << step << ", but its buffer '" << b.name << "' lives in steps ["
          << b.first_step << ", " << b.last_step << "]";
    }
  };
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& step = p.steps[s];
    for (const Op& op : step.ops) {
      const ErrorContext ctx{"plan", op.node, op.op, "step '" + step.name + "'"};
      for (size_t i = 0; i < op.inputs.size(); ++i) {
        const Tensor& t = p.tensors.at(op.inputs[i]);
        TEC_USER_CHECK(written.count(t.name), ctx) << "reads '" << t.name << "', which no earlier step writes";
        check_alive(t, static_cast<int>(s), op.columnwise_inputs.size() > i && op.columnwise_inputs[i], "reads", ctx);
      }
      for (const auto& name : op.outputs) {
        const Tensor& t = p.tensors.at(name);
        TEC_USER_CHECK(t.kind == "activation", ctx) << "writes '" << name << "', a tensor of kind " << t.kind;
        TEC_USER_CHECK(written.insert(name).second, ctx) << "writes '" << name << "', which an earlier step wrote";
        check_alive(t, static_cast<int>(s), false, "writes", ctx);
        if (t.proto.quantizer && t.proto.usage.columnwise) check_alive(t, static_cast<int>(s), true, "writes", ctx);
      }
    }
  }
  for (const auto& name : p.outputs) TEC_USER_CHECK(written.count(name), r.ctx("outputs")) << "no step writes output '" << name << "'";
}

Buffer parse_buffer(const Reader& r, int64_t arena_bytes, int64_t constant_bytes) {
  Buffer b;
  b.name = r.str("name");
  b.tensor = r.str("tensor");
  auto role = parse_role(r.str("role"));
  TEC_USER_CHECK(role.has_value(), r.ctx("role")) << "unknown buffer role";
  b.role = *role;
  b.state = r.str("state");
  b.region = r.str("region");
  TEC_USER_CHECK(b.region == "constants" || b.region == "state" || b.region == "workspace" || b.region == "input" ||
                     b.region == "output" || b.region == "scratch",
                 r.ctx("region"))
      << "unknown region '" << b.region << "'";
  b.dtype = r.dtype("dtype");
  b.shape = r.shape("shape");
  b.bytes = r.integer("bytes", 0, kMaxArenaBytes);
  b.offset = r.integer("offset", 0, kMaxArenaBytes);
  TEC_USER_CHECK(b.bytes == checked_mul(b.shape.numel(), storage_bytes(b.dtype)), r.ctx("bytes"))
      << "buffer '" << b.name << "' says " << b.bytes << " bytes, its shape and dtype need "
      << b.shape.numel() * storage_bytes(b.dtype);
  // Offsets are 256-aligned (the planner's granularity): kernels and the reference read
  // buffers as float arrays.
  TEC_USER_CHECK(b.offset % static_cast<int64_t>(kBlobAlignment) == 0, r.ctx("offset"))
      << "buffer '" << b.name << "' offset " << b.offset << " is not a multiple of " << kBlobAlignment;
  const int64_t limit = b.region == "constants" ? constant_bytes : arena_bytes;
  TEC_USER_CHECK(b.offset <= limit && b.bytes <= limit - b.offset, r.ctx("offset"))
      << "buffer '" << b.name << "' [" << b.offset << ", +" << b.bytes << ") lies outside its region of " << limit
      << " bytes";
  b.device_layout = r.optional_str("device_layout");
  if (!b.device_layout.empty()) {
    // The layouts' rows and K steps (kernels/small_m_layout.h, kernels/mid_m_layout.h).
    const bool small = b.device_layout == "small_m_tiles";
    TEC_USER_CHECK(small || b.device_layout == "mid_m_tiles", r.ctx("device_layout"))
        << "unknown device layout '" << b.device_layout << "' (expected small_m_tiles or mid_m_tiles)";
    // mid_m_tiles also takes bf16 rows (the grouped GEMM's): K counts bytes there.
    const int64_t rows = small ? 16 : 64, k_step = small ? 64 : 128;
    const bool fp8 = b.dtype == DType::fp8_e4m3 || b.dtype == DType::fp8_e5m2;
    TEC_USER_CHECK(b.region == "constants" && (fp8 || (!small && b.dtype == DType::bf16)) && b.shape.rank() == 2 &&
                       b.shape[0] % rows == 0 && (b.shape[1] * storage_bytes(b.dtype)) % k_step == 0,
                   r.ctx("device_layout"))
        << "buffer '" << b.name << "': " << b.device_layout << " takes a constant FP8" << (small ? "" : " or bf16")
        << " [N, K] weight with N % " << rows << " == 0 and K bytes % " << k_step << " == 0, not " << b.region << " "
        << to_string(b.dtype) << " " << b.shape.str();
  }
  const json& life = r.array("lifetime");
  TEC_USER_CHECK(life.size() == 2 && life[0].is_number_integer() && life[1].is_number_integer(), r.ctx("lifetime"))
      << "lifetime must be [first, last]";
  b.first_step = life[0].get<int>();
  b.last_step = life[1].get<int>();
  return b;
}

// Kernel grid and block limits (CUDA's), checked before anything is launched.
constexpr int64_t kMaxGrid = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxGridYZ = 65535;
constexpr int64_t kMaxBlockThreads = 1024;
// The most dynamic shared memory a block may opt into on any arch tec targets (sm_90's 227 KB);
// the session checks the GPU's own limit.
constexpr int64_t kMaxDynamicSharedBytes = 227 * 1024;

Launch parse_launch(const Reader& r, const std::string& path, const std::string& file, const Profile& p, int module_count,
                    int step_count, int64_t tp_size) {
  Launch l;
  l.kind = r.str("kind");
  l.step = static_cast<int>(r.integer("step", -1, step_count - 1));
  l.stream = static_cast<int>(r.optional_integer("stream", 0, 1));
  TEC_USER_CHECK(l.stream == 0 || l.kind == "collective", r.ctx("stream")) << "only collectives run on the side stream";
  if (l.kind == "fork" || l.kind == "join") {
    TEC_USER_CHECK(tp_size > 1, r.ctx("kind")) << "a " << l.kind << " in a plan of one rank";
    return l;
  }
  const BufferRefs refs{r, p};
  auto ref = [&](const json& v, const std::string& key, bool writable) { return refs.ref(v, key, writable); };
  auto bytes_of = [&](int i) { return refs.bytes_of(i); };
  if (l.kind == "memset") {
    l.buffer = ref(r.field("buffer"), "buffer", true);
    TEC_USER_CHECK(l.buffer >= 0, r.ctx("buffer")) << "memset needs a buffer";
    return l;
  }
  if (l.kind == "kernel" || l.kind == "delayed_scale_inv" || l.kind == "delayed_update") {
    l.module = static_cast<int>(r.integer("module", 0, module_count - 1));
    l.entry = r.str("entry");
    TEC_USER_CHECK(!l.entry.empty() && l.entry.size() < 256, r.ctx("entry")) << "bad kernel entry name";
    if (l.kind != "kernel") return l;
    auto dims = [&](const std::string& key, int64_t hi) {
      std::array<int64_t, 3> out{};
      const json& a = r.array(key);
      TEC_USER_CHECK(a.size() == 3, r.ctx(key)) << "expected [x, y, z]";
      for (size_t i = 0; i < 3; ++i) {
        TEC_USER_CHECK(a[i].is_number_integer() && a[i].get<int64_t>() >= 1 && a[i].get<int64_t>() <= hi, r.ctx(key))
            << "entries must be integers in [1, " << hi << "]";
        out[i] = a[i].get<int64_t>();
      }
      return out;
    };
    l.grid = dims("grid", kMaxGrid);
    TEC_USER_CHECK(l.grid[1] <= kMaxGridYZ && l.grid[2] <= kMaxGridYZ, r.ctx("grid"))
        << "grid y and z must be at most " << kMaxGridYZ;
    l.block = dims("block", kMaxBlockThreads);
    TEC_USER_CHECK(l.block[0] * l.block[1] * l.block[2] <= kMaxBlockThreads, r.ctx("block")) << "too many threads per block";
    l.shared_bytes = r.optional_integer("shared_bytes", 0, kMaxDynamicSharedBytes);
    l.early_launch = r.optional_boolean("early_launch");
    l.persistent = r.optional_boolean("persistent");
    l.constant_copy = r.optional_boolean("constant_copy");
    const json& args = r.array("args");
    TEC_USER_CHECK(args.size() <= kMaxKernelArgs, r.ctx("args")) << "at most " << kMaxKernelArgs << " kernel argument slots";
    for (const auto& a : args) {
      KernelArg arg;
      if (a.is_object() && a.contains("buffer")) {
        arg.kind = KernelArg::Kind::buffer;
        arg.buffer = ref(a["buffer"], "args", false);
        TEC_USER_CHECK(arg.buffer >= 0, r.ctx("args")) << "buffer argument without a buffer";
      } else if (a.is_object() && a.contains("value")) {
        TEC_USER_CHECK(a["value"].is_number_integer(), r.ctx("args")) << "value arguments are integers";
        arg.kind = KernelArg::Kind::value;
        arg.value = a["value"].get<int64_t>();
      } else if (a.is_object() && a.contains("status")) {
        const json& bit = a["status"];
        const auto named = bit.is_number_integer() ? bit.get<int64_t>() : 0;
        TEC_USER_CHECK(named == TEC_STATUS_BAD_EXPERT || named == TEC_STATUS_BAD_SPLITS || named == TEC_STATUS_BAD_ROW_MAP ||
                           named == TEC_STATUS_BAD_TOKEN_ID || named == TEC_STATUS_BAD_PADDING || named == TEC_STATUS_BAD_INDEX,
                       r.ctx("args"))
            << "a status argument names one bit of the status word (" << TEC_STATUS_BAD_EXPERT << ", " << TEC_STATUS_BAD_SPLITS << ", "
            << TEC_STATUS_BAD_ROW_MAP << ", " << TEC_STATUS_BAD_TOKEN_ID << ", " << TEC_STATUS_BAD_PADDING << " or " << TEC_STATUS_BAD_INDEX
            << "), got " << json_excerpt(bit);
        arg.kind = KernelArg::Kind::status;
        arg.value = bit.get<int64_t>();
      } else {
        TEC_USER_CHECK(a.is_null(), r.ctx("args")) << "an argument is {\"buffer\": i}, {\"value\": v}, {\"status\": bit} or null";
      }
      l.args.push_back(arg);
    }
    if (r.contains("tensor_maps")) {
      const json& maps = r.array("tensor_maps");
      TEC_USER_CHECK(maps.size() <= kMaxTensorMaps, r.ctx("tensor_maps")) << "at most " << kMaxTensorMaps << " tensor maps";
      for (size_t i = 0; i < maps.size(); ++i) {
        const std::string map_path = path + "/tensor_maps/" + std::to_string(i);
        const Reader m(maps[i], map_path, file);
        TensorMap map;
        map.buffer = ref(m.field("buffer"), "tensor_maps", false);
        TEC_USER_CHECK(map.buffer >= 0, m.ctx("buffer")) << "a tensor map needs a buffer";
        // cuTensorMapEncodeTiled's limits: dimensions up to 2^32 (a row's bytes are one),
        // strides multiples of 16, boxes of at most 256 rows; the 128-byte swizzle reads
        // 128-byte box rows.
        map.rows = m.integer("rows", 1, int64_t{1} << 32);
        map.row_bytes = m.integer("row_bytes", 128, int64_t{1} << 32);
        TEC_USER_CHECK(map.row_bytes % 16 == 0, m.ctx("row_bytes")) << "expected a multiple of 16, got " << map.row_bytes;
        map.box_rows = m.integer("box_rows", 1, 256);
        TEC_USER_CHECK(map.row_bytes <= bytes_of(map.buffer) / map.rows, m.ctx("rows"))
            << map.rows << " rows of " << map.row_bytes << " bytes overrun buffer '" << p.buffers[static_cast<size_t>(map.buffer)].name << "' ("
            << bytes_of(map.buffer) << " bytes)";
        l.tensor_maps.push_back(map);
      }
    }
    return l;
  }
  if (l.kind == "collective") {
    TEC_USER_CHECK(tp_size > 1, r.ctx("kind")) << "a collective launch in a plan of one rank";
    const Reader c(r.field("collective"), path + "/collective", file);
    Collective& op = l.collective;
    op.op = c.str("op");
    TEC_USER_CHECK(op.op == "all_gather" || op.op == "reduce_scatter" || op.op == "all_reduce" || op.op == "reduce" || op.op == "copy" ||
                       op.op == "ring_exchange",
                   c.ctx("op"))
        << "expected all_gather, reduce_scatter, all_reduce, reduce, copy or ring_exchange, got '" << op.op << "'";
    op.send_offset = c.optional_integer("send_offset", 0, kMaxArenaBytes);
    op.recv_offset = c.optional_integer("recv_offset", 0, kMaxArenaBytes);
    TEC_USER_CHECK(op.recv_offset == 0 || op.op == "ring_exchange", c.ctx("recv_offset")) << "only a ring_exchange receives at an offset";
    op.root = static_cast<int>(c.optional_integer("root", 0, tp_size - 1));
    op.reduce = c.str("reduce");
    TEC_USER_CHECK(op.reduce == "sum" || op.reduce == "max", c.ctx("reduce")) << "expected sum or max, got '" << op.reduce << "'";
    op.dtype = c.dtype("dtype");
    TEC_USER_CHECK(op.dtype == DType::bf16 || op.dtype == DType::fp16 || op.dtype == DType::fp32 || storage_bytes(op.dtype) == 1,
                   c.ctx("dtype"))
        << "collectives move bf16, fp16, fp32 or bytes (FP8), not " << to_string(op.dtype);
    TEC_USER_CHECK(storage_bytes(op.dtype) != 1 || op.op == "all_gather" || op.op == "copy" || op.op == "ring_exchange", c.ctx("dtype"))
        << "FP8 bytes are gathered or copied, never summed";
    op.send = ref(c.field("send"), "send", false);
    op.recv = ref(c.field("recv"), "recv", true);
    TEC_USER_CHECK(op.send >= 0 && op.recv >= 0, r.ctx("collective")) << "a collective needs a send and a recv buffer";
    op.count = c.integer("count", 1, kMaxArenaBytes);
    // What NCCL reads and writes, in bytes, must lie inside the buffers named.
    const int64_t part = checked_mul(op.count, storage_bytes(op.dtype));
    const int64_t whole = checked_mul(part, tp_size);
    const int64_t send_bytes = checked_add(op.op == "reduce_scatter" ? whole : part, checked_mul(op.send_offset, storage_bytes(op.dtype)));
    const int64_t recv_bytes = checked_add(op.op == "all_gather" ? whole : part, checked_mul(op.recv_offset, storage_bytes(op.dtype)));
    TEC_USER_CHECK(send_bytes <= bytes_of(op.send) && recv_bytes <= bytes_of(op.recv), r.ctx("collective"))
        << op.op << " of " << op.count << " " << to_string(op.dtype) << " per rank over " << tp_size << " ranks reads "
        << send_bytes << " bytes of a " << bytes_of(op.send) << "-byte buffer and writes " << recv_bytes << " bytes of a "
        << bytes_of(op.recv) << "-byte one";
    // A ring_exchange may send from one part of a buffer and receive into another.
    const bool disjoint = op.op == "ring_exchange" && (op.send_offset + op.count <= op.recv_offset || op.recv_offset + op.count <= op.send_offset);
    TEC_USER_CHECK(op.send != op.recv || (op.op == "all_reduce" && op.send_offset == 0) || disjoint, r.ctx("collective"))
        << "only an all_reduce works in place (and a ring_exchange from one part of a buffer into another)";
    return l;
  }
  if (l.kind == "attention") {
    const Reader a(r.field("attention"), path + "/attention", file);
    Attention& at = l.attention;
    at.batch = a.integer("batch", 1, kMaxDim);
    at.seq_q = a.integer("seq_q", 1, kMaxDim);
    at.seq_kv = a.integer("seq_kv", 1, kMaxDim);
    at.heads = a.integer("heads", 1, kMaxDim);
    at.kv_heads = a.integer("kv_heads", 1, at.heads);
    TEC_USER_CHECK(at.heads % at.kv_heads == 0, a.ctx("kv_heads")) << "kv_heads " << at.kv_heads << " does not divide heads " << at.heads;
    at.head_dim = a.integer("head_dim", 1, kMaxDim);
    at.v_head_dim = a.integer("v_head_dim", 1, kMaxDim);
    at.causal = a.boolean("causal");
    const std::string layout = a.str("layout");
    TEC_USER_CHECK(layout == "bshd" || layout == "sbhd", a.ctx("layout")) << "expected bshd or sbhd, got '" << layout << "'";
    at.sbhd = layout == "sbhd";
    at.scale = a.number("scale");
    TEC_USER_CHECK(std::isfinite(at.scale) && at.scale > 0.0, a.ctx("scale")) << "the softmax scale must be positive and finite";
    at.dtype = a.dtype("dtype");
    TEC_USER_CHECK(at.dtype == DType::bf16 || at.dtype == DType::fp16, a.ctx("dtype")) << "attention runs in bf16 or fp16, not "
                                                                                        << to_string(at.dtype);
    // Each buffer must hold what cuDNN reads or writes there.
    const int64_t elem = storage_bytes(at.dtype);
    auto operand = [&](const char* key, bool writable, bool required, int64_t bytes) {
      const int i = ref(a.field(key), key, writable);
      TEC_USER_CHECK(i >= 0 || !required, a.ctx(key)) << "attention needs buffer '" << key << "'";
      TEC_USER_CHECK(i < 0 || bytes_of(i) >= bytes, a.ctx(key))
          << "buffer '" << p.buffers[static_cast<size_t>(i)].name << "' has " << bytes_of(i) << " bytes; attention's " << key
          << " needs " << bytes;
      return i;
    };
    const int64_t rows_q = checked_mul(at.batch, at.seq_q), rows_kv = checked_mul(at.batch, at.seq_kv);
    const int64_t q_bytes = checked_mul(checked_mul(rows_q, checked_mul(at.heads, at.head_dim)), elem);
    const int64_t k_bytes = checked_mul(checked_mul(rows_kv, checked_mul(at.kv_heads, at.head_dim)), elem);
    const int64_t v_bytes = checked_mul(checked_mul(rows_kv, checked_mul(at.kv_heads, at.v_head_dim)), elem);
    const int64_t o_bytes = checked_mul(checked_mul(rows_q, checked_mul(at.heads, at.v_head_dim)), elem);
    // The backward reads the forward's o and stats and d_o, and writes dq, dk and dv.
    at.backward = a.optional_boolean("backward");
    at.q = operand("q", false, true, q_bytes);
    at.k = operand("k", false, true, k_bytes);
    at.v = operand("v", false, true, v_bytes);
    at.o = operand("o", !at.backward, true, o_bytes);
    at.stats = operand("stats", !at.backward, at.backward, checked_mul(checked_mul(rows_q, at.heads), 4));
    if (at.backward) {
      at.d_o = operand("d_o", false, true, o_bytes);
      at.dq = operand("dq", true, true, q_bytes);
      at.dk = operand("dk", true, true, k_bytes);
      at.dv = operand("dv", true, true, v_bytes);
    }
    at.seq_lens = operand("seq_lens", false, false, checked_mul(at.batch, 4));
    if (!a.field("bias").is_null()) {
      const json& dims = a.array("bias_dims");
      TEC_USER_CHECK(dims.size() == 4, a.ctx("bias_dims")) << "expected [B or 1, heads or 1, seq_q, seq_kv]";
      const int64_t full[4] = {at.batch, at.heads, at.seq_q, at.seq_kv};
      for (size_t d = 0; d < 4; ++d) {
        TEC_USER_CHECK(dims[d].is_number_integer() && (dims[d].get<int64_t>() == full[d] || (d < 2 && dims[d].get<int64_t>() == 1)),
                       a.ctx("bias_dims"))
            << "expected [" << at.batch << " or 1, " << at.heads << " or 1, " << at.seq_q << ", " << at.seq_kv << "], got " << json_excerpt(dims);
        at.bias_dims[d] = dims[d].get<int64_t>();
      }
      at.bias = operand("bias", false, true,
                        checked_mul(checked_mul(checked_mul(at.bias_dims[0], at.bias_dims[1]), checked_mul(at.seq_q, at.seq_kv)), elem));
    }
    TEC_USER_CHECK(at.seq_lens < 0 || at.bias < 0, r.ctx("attention")) << "a padding mask (seq_lens) or an additive one (bias), not both";
    return l;
  }
  TEC_USER_CHECK(l.kind == "gemm", r.ctx("kind")) << "unknown launch kind '" << l.kind << "'";
  l.gemm = parse_gemm(r, path, file, refs, tp_size);
  return l;
}

Profile parse_profile(const json& j, const std::string& path, const std::string& file, const Plan& plan) {
  const Reader r(j, path, file);
  Profile p;
  for (const auto& [dim, size] : r.field("dims").items()) {
    TEC_USER_CHECK(size.is_number_integer() && size.get<int64_t>() >= 1 && size.get<int64_t>() <= kMaxDim, r.ctx("dims"))
        << "dims must be positive integers";
    p.dims[dim] = size.get<int64_t>();
  }
  p.arena_bytes = r.integer("arena_bytes", 0, plan.arena_bytes);
  p.scratch_peak_bytes = r.integer("scratch_peak_bytes", 0, kMaxArenaBytes);
  p.scratch_naive_bytes = r.integer("scratch_naive_bytes", 0, kMaxArenaBytes);
  p.naive_bytes = r.integer("naive_bytes", 0, kMaxArenaBytes);
  const json& buffers = r.array("buffers");
  for (size_t i = 0; i < buffers.size(); ++i)
    p.buffers.push_back(parse_buffer(Reader(buffers[i], path + "/buffers/" + std::to_string(i), file), p.arena_bytes,
                                     static_cast<int64_t>(plan.constants.size())));
  const int buffer_count = static_cast<int>(p.buffers.size());

  const json& tensors = r.array("tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Reader t(tensors[i], path + "/tensors/" + std::to_string(i), file);
    Tensor tensor;
    tensor.name = t.str("name");
    tensor.kind = t.str("kind");
    TEC_USER_CHECK(tensor.kind == "input" || tensor.kind == "activation" || tensor.kind == "weight" || tensor.kind == "state",
                   t.ctx("kind"))
        << "unknown tensor kind '" << tensor.kind << "' (expected input, activation, weight or state)";
    tensor.storage = t.optional_str("storage");
    tensor.proto = TensorProto::dense(t.shape("shape"), t.dtype("dtype"));
    if (!t.field("quantizer").is_null()) {
      tensor.proto.quantizer = with_context(t.ctx("quantizer"), [&] { return quantizer_from_json(t.field("quantizer")); });
      const Reader u(t.field("usage"), path + "/tensors/" + std::to_string(i) + "/usage", file);
      TEC_USER_CHECK(u.field("rowwise").is_boolean() && u.field("columnwise").is_boolean(), t.ctx("usage"))
          << "usage needs rowwise and columnwise booleans";
      tensor.proto.usage = Usage{u.field("rowwise").get<bool>(), u.field("columnwise").get<bool>()};
    }
    tensor.proto.group_members = t.optional_integer("group_members", 2, kMaxDim);
    // Train plans hold a grouped weight's copy (made from its fp32 master every step) as an activation.
    TEC_USER_CHECK(!tensor.proto.is_grouped() || ((tensor.kind == "weight" || tensor.kind == "activation") &&
                                                  tensor.proto.shape.rank() >= 2 && tensor.proto.shape[0] == tensor.proto.group_members),
                   t.ctx("group_members"))
        << "a grouped tensor is a weight (or a train plan's copy of one) of shape [group_members, ...]; '" << tensor.name
        << "' is a " << tensor.kind << " of shape " << tensor.proto.shape.str();
    for (const auto& [role_name, index] : t.field("buffers").items()) {
      auto role = parse_role(role_name);
      TEC_USER_CHECK(role && index.is_number_integer() && index.get<int64_t>() >= 0 && index.get<int64_t>() < buffer_count,
                     t.ctx("buffers"))
          << "buffer reference '" << role_name << "': " << json_excerpt(index) << " is not a buffer of this profile";
      tensor.buffers[*role] = index.get<int>();
    }
    for (const auto& [state_name, index] : t.field("state").items()) {
      TEC_USER_CHECK(index.is_number_integer() && index.get<int64_t>() >= 0 && index.get<int64_t>() < buffer_count,
                     t.ctx("state"))
          << "state reference '" << state_name << "' is not a buffer of this profile";
      tensor.state[state_name] = index.get<int>();
    }
    // The listed buffers must be exactly what the proto's layout says, in size and type.
    if (!tensor.buffers.empty()) {
      const auto specs = with_context(t.ctx(), [&] { return tensor.proto.buffers(plan.target); });
      TEC_USER_CHECK(specs.size() == tensor.buffers.size(), t.ctx("buffers"))
          << "tensor '" << tensor.name << "' lists " << tensor.buffers.size() << " buffers, its layout has " << specs.size();
      for (const auto& spec : specs) {
        auto it = tensor.buffers.find(spec.role);
        TEC_USER_CHECK(it != tensor.buffers.end(), t.ctx("buffers"))
            << "tensor '" << tensor.name << "' lacks its " << to_string(spec.role) << " buffer";
        const Buffer& b = p.buffers[static_cast<size_t>(it->second)];
        const std::string& owner = tensor.storage.empty() ? tensor.name : tensor.storage;
        TEC_USER_CHECK(b.bytes == spec.bytes && b.dtype == spec.dtype && b.tensor == owner && b.role == spec.role, t.ctx("buffers"))
            << "buffer '" << b.name << "' does not match tensor '" << tensor.name << "': " << to_string(spec.role)
            << " needs " << spec.bytes << " bytes of " << to_string(spec.dtype);
        TEC_USER_CHECK((tensor.kind == "state" || !tensor.storage.empty()) == (b.region == "state"), t.ctx("buffers"))
            << "tensor '" << tensor.name << "' (" << tensor.kind << ") has buffer '" << b.name << "' in region " << b.region
            << "; state tensors, and only they, live in the state region";
      }
    }
    if (!tensor.storage.empty()) {
      auto base = p.tensors.find(tensor.storage);
      TEC_USER_CHECK(base != p.tensors.end() && base->second.kind == "state" && tensor.kind == "activation", t.ctx("storage"))
          << "tensor '" << tensor.name << "' is stored in '" << tensor.storage << "', which is no earlier state tensor";
      TEC_USER_CHECK(base->second.proto.shape == tensor.proto.shape && base->second.proto.dtype == tensor.proto.dtype &&
                         base->second.buffers == tensor.buffers,
                     t.ctx("storage"))
          << "tensor '" << tensor.name << "' differs from its storage '" << tensor.storage << "' in shape, dtype or buffers";
    }
    if (tensor.kind == "state") {
      TEC_USER_CHECK(!tensor.buffers.empty() && !tensor.proto.quantizer, t.ctx("buffers"))
          << "state tensor '" << tensor.name << "' needs one unquantized buffer";
      if (auto init = tensor.state.find("init"); init != tensor.state.end()) {
        const Buffer& b = p.buffers[static_cast<size_t>(init->second)];
        const Buffer& data = p.buffers[static_cast<size_t>(tensor.buffers.at(BufferRole::data))];
        TEC_USER_CHECK(b.region == "constants" && b.bytes == data.bytes && b.dtype == data.dtype, t.ctx("state"))
            << "state tensor '" << tensor.name << "': its init buffer '" << b.name << "' must be a constant of " << data.bytes
            << " bytes of " << to_string(data.dtype);
      }
    } else {
      TEC_USER_CHECK(!tensor.state.count("init"), t.ctx("state")) << "only state tensors have an init buffer";
    }
    if (tensor.proto.quantizer)
      for (const auto& st : tensor.proto.state_buffers()) {
        if (tensor.kind == "weight") break;
        auto it = tensor.state.find(st.name);
        TEC_USER_CHECK(it != tensor.state.end(), t.ctx("state")) << "tensor '" << tensor.name << "' lacks state " << st.name;
        const Buffer& b = p.buffers[static_cast<size_t>(it->second)];
        TEC_USER_CHECK(b.region == "state" && b.dtype == DType::fp32 && b.shape == st.shape, t.ctx("state"))
            << "state buffer '" << b.name << "' has the wrong region, dtype or shape";
      }
    TEC_USER_CHECK(p.tensors.emplace(tensor.name, tensor).second, t.ctx("name")) << "tensor '" << tensor.name << "' twice";
  }

  auto known = [&](const std::string& name) { return p.tensors.count(name) != 0; };
  const json& steps = r.array("steps");
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::string step_path = path + "/steps/" + std::to_string(i);
    const Reader s(steps[i], step_path, file);
    Step step;
    step.name = s.str("name");
    step.kind = s.str("kind");
    TEC_USER_CHECK(step.kind == "gemm" || step.kind == "kernel" || step.kind == "collective", s.ctx("kind"))
        << "unknown step kind '" << step.kind << "' (expected gemm, kernel or collective)";
    TEC_USER_CHECK(step.kind != "collective" || (plan.tp_size > 1 && s.array("ops").size() == 1), s.ctx("kind"))
        << "a collective step holds one op, in a plan of two or more ranks (this one has tp_size " << plan.tp_size << ")";
    step.fusions = s.strings("fusions");
    if (const std::string phase = s.optional_str("phase"); !phase.empty()) {
      const auto parsed = parse_phase(phase);
      TEC_USER_CHECK(parsed.has_value(), s.ctx("phase"))
          << "unknown phase '" << phase << "' (expected weight_workspace, forward, backward or optimizer)";
      step.phase = *parsed;
    }
    for (const auto& d : s.array("deps")) {
      TEC_USER_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0 && d.get<int64_t>() < static_cast<int64_t>(i),
                     s.ctx("deps"))
          << "a step may depend only on earlier steps";
      step.deps.push_back(d.get<int>());
    }
    const json& ops = s.array("ops");
    TEC_USER_CHECK(!ops.empty(), s.ctx("ops")) << "a step needs at least one op";
    for (size_t k = 0; k < ops.size(); ++k) {
      const Reader o(ops[k], step_path + "/ops/" + std::to_string(k), file);
      Op op;
      op.node = o.str("node");
      op.op = o.str("op");
      op.inputs = o.strings("inputs");
      op.outputs = o.strings("outputs");
      TEC_USER_CHECK(o.field("attrs").is_object(), o.ctx("attrs")) << "attrs must be an object";
      for (const auto& [key, value] : o.field("attrs").items()) op.attrs.values[key] = attr_from_json(value, o.ctx("attrs"));
      for (const auto& name : op.inputs) TEC_USER_CHECK(known(name), o.ctx("inputs")) << "step reads unknown tensor '" << name << "'";
      for (const auto& name : op.outputs) TEC_USER_CHECK(known(name), o.ctx("outputs")) << "step writes unknown tensor '" << name << "'";
      op.backward = o.optional_boolean("backward");
      op.columnwise_inputs.assign(op.inputs.size(), false);
      if (o.contains("columnwise_inputs"))
        for (const auto& index : o.array("columnwise_inputs")) {
          TEC_USER_CHECK(index.is_number_integer() && index.get<int64_t>() >= 0 && index.get<int64_t>() < static_cast<int64_t>(op.inputs.size()),
                         o.ctx("columnwise_inputs"))
              << "expected input indices, got " << json_excerpt(index);
          const Tensor& t = p.tensors.at(op.inputs[index.get<size_t>()]);
          TEC_USER_CHECK(t.proto.quantizer && t.proto.usage.columnwise, o.ctx("columnwise_inputs"))
              << "reads the columnwise copy of '" << t.name << "', which has none";
          op.columnwise_inputs[index.get<size_t>()] = true;
        }
      if (op.backward) {
        for (const auto& slot : o.array("gradient_slots")) {
          TEC_USER_CHECK(slot.is_number_integer() && slot.get<int64_t>() >= 0 && slot.get<int64_t>() < 1024, o.ctx("gradient_slots"))
              << "expected input slot numbers, got " << json_excerpt(slot);
          op.gradient_slots.push_back(slot.get<int>());
        }
        TEC_USER_CHECK(op.gradient_slots.size() == op.outputs.size(), o.ctx("gradient_slots"))
            << "a backward op names the input slot of each of its " << op.outputs.size() << " outputs, got "
            << op.gradient_slots.size();
      }
      step.ops.push_back(std::move(op));
    }
    p.steps.push_back(std::move(step));
  }
  p.inputs = r.strings("inputs");
  p.outputs = r.strings("outputs");
  p.delayed = r.strings("delayed");
  // The lists are what the tensors say, each name once: the inputs are the tensors of kind
  // input (a run fills exactly those), the delayed ones those with delayed-scaling state.
  auto unique = [&](const std::vector<std::string>& names, const char* key) {
    const std::set<std::string> seen(names.begin(), names.end());
    TEC_USER_CHECK(seen.size() == names.size(), r.ctx(key)) << "a tensor is listed twice";
  };
  unique(p.inputs, "inputs");
  unique(p.outputs, "outputs");
  unique(p.delayed, "delayed");
  for (const auto& name : p.inputs)
    TEC_USER_CHECK(known(name) && p.tensors.at(name).kind == "input" && !p.tensors.at(name).buffers.empty(), r.ctx("inputs"))
        << "input '" << name << "' is no input tensor with buffers";
  for (const auto& name : p.outputs)
    TEC_USER_CHECK(known(name) && !p.tensors.at(name).buffers.empty(), r.ctx("outputs")) << "output '" << name << "' has no buffers";
  for (const auto& name : p.delayed)
    TEC_USER_CHECK(known(name) && p.tensors.at(name).state.count("scale") && p.tensors.at(name).state.count("amax_history"),
                   r.ctx("delayed"))
        << "delayed tensor '" << name << "' has no scale and amax_history state";
  for (const auto& [name, t] : p.tensors) {
    if (t.kind == "input")
      TEC_USER_CHECK(std::count(p.inputs.begin(), p.inputs.end(), name), r.ctx("inputs")) << "input tensor '" << name << "' is not listed";
    if (t.state.count("amax_history"))
      TEC_USER_CHECK(std::count(p.delayed.begin(), p.delayed.end(), name), r.ctx("delayed"))
          << "tensor '" << name << "' has delayed-scaling state and is not listed";
  }
  if (r.contains("train") && !r.field("train").is_null()) {
    const Reader train(r.field("train"), path + "/train", file);
    p.train = true;
    p.optimizer = train.str("optimizer");
    p.wgrad = train.str("wgrad");
    TEC_USER_CHECK(p.optimizer == "none" || p.optimizer == "adamw", train.ctx("optimizer")) << "unknown optimizer '" << p.optimizer << "'";
    TEC_USER_CHECK(p.wgrad == "accumulate" || p.wgrad == "write", train.ctx("wgrad")) << "unknown wgrad '" << p.wgrad << "'";
    p.runtime_scalars = train.strings("runtime_scalars");
    for (const auto& name : p.runtime_scalars) {
      TEC_USER_CHECK(known(name) && p.tensors.at(name).kind == "state" && p.tensors.at(name).proto.shape == Shape({1}) &&
                         p.tensors.at(name).proto.dtype == DType::fp32,
                     train.ctx("runtime_scalars"))
          << "runtime scalar '" << name << "' is no fp32 state tensor of shape [1]";
      TEC_USER_CHECK(runtime_scalar_range(name) != nullptr, train.ctx("runtime_scalars"))
          << "runtime scalar '" << name << "' is none that tec defines";
      // A hyperparameter the plan starts with must be in range (a NaN lr would poison every master).
      if (auto init = p.tensors.at(name).state.find("init"); init != p.tensors.at(name).state.end()) {
        const Buffer& b = p.buffers[static_cast<size_t>(init->second)];
        float value;
        std::memcpy(&value, plan.constants.data() + b.offset, 4);
        if (const auto error = runtime_scalar_error(name, value))
          TEC_USER_ERROR(train.ctx("runtime_scalars")) << "its starting value: " << *error;
      }
    }
  }
  check_dataflow(p, r);
  check_buffer_layout(p, file, path);
  if (r.contains("tp_layouts")) {
    TEC_USER_CHECK(r.field("tp_layouts").is_object(), r.ctx("tp_layouts")) << "expected an object of tensor -> layout";
    for (const auto& [tensor, layout] : r.field("tp_layouts").items()) {
      TEC_USER_CHECK(layout.is_string(), r.ctx("tp_layouts")) << "tensor '" << tensor << "': expected replicated, sequence or feature";
      const TpLayout parsed = parse_tp_layout(layout.get<std::string>()).value_or(TpLayout::partial);
      TEC_USER_CHECK(parsed != TpLayout::partial, r.ctx("tp_layouts"))
          << "tensor '" << tensor << "': expected replicated, sequence or feature";
      const bool listed = std::count(p.inputs.begin(), p.inputs.end(), tensor) || std::count(p.outputs.begin(), p.outputs.end(), tensor);
      TEC_USER_CHECK(listed, r.ctx("tp_layouts")) << "'" << tensor << "' is no input or output of the profile";
      TEC_USER_CHECK(parsed == TpLayout::replicated || p.tensors.at(tensor).proto.shape.rank() >= 1, r.ctx("tp_layouts"))
          << "'" << tensor << "' is a scalar and cannot be split";
      p.tp_layouts[tensor] = parsed;
    }
  }
  // Over several ranks every input has a layout, and so does every output but the gradient a
  // rank writes for its own weight shard ("<weight>.grad", autodiff's name): without one an
  // output is read rank by rank instead of joined.
  if (plan.tp_size > 1) {
    for (const auto& name : p.inputs)
      TEC_USER_CHECK(p.tp_layouts.count(name), r.ctx("tp_layouts")) << "input '" << name << "' has no layout over the ranks";
    for (const auto& name : p.outputs) {
      const bool weight_gradient = name.ends_with(".grad") && p.tensors.count(name.substr(0, name.size() - 5));
      TEC_USER_CHECK(p.tp_layouts.count(name) || weight_gradient, r.ctx("tp_layouts"))
          << "output '" << name << "' has no layout over the ranks";
    }
  }
  {
    const Reader gpu(r.field("gpu"), path + "/gpu", file);
    TEC_USER_CHECK(gpu.field("supported").is_boolean(), gpu.ctx("supported")) << "expected a boolean";
    p.gpu_supported = gpu.field("supported").get<bool>();
    p.gpu_reason = gpu.str("reason");
    const json& launches = gpu.array("launches");
    for (size_t i = 0; i < launches.size(); ++i)
      p.launches.push_back(parse_launch(Reader(launches[i], path + "/gpu/launches/" + std::to_string(i), file),
                                        path + "/gpu/launches/" + std::to_string(i), file, p,
                                        static_cast<int>(plan.modules.size()), static_cast<int>(p.steps.size()), plan.tp_size));
    // Side-stream work sits between a fork and a join of one phase, so that every selection of
    // steps a run makes (train plans' forward_only, skipped weight copies) joins what it forks.
    std::optional<Phase> open;
    for (size_t i = 0; i < p.launches.size(); ++i) {
      const Launch& l = p.launches[i];
      const ErrorContext at = gpu.ctx("launches/" + std::to_string(i));
      const bool side = l.kind == "fork" || l.kind == "join" || l.stream == 1;
      if (!side) continue;
      TEC_USER_CHECK(l.step >= 0, at) << "a " << l.kind << " launch belongs to a step";
      const Phase phase = p.steps.at(static_cast<size_t>(l.step)).phase;
      TEC_USER_CHECK(l.kind == "fork" || open.has_value(), at) << "side-stream work before any fork";
      TEC_USER_CHECK(!open || *open == phase, at) << "a fork and its join in different phases";
      open = l.kind == "join" ? std::nullopt : std::optional<Phase>(phase);
    }
    TEC_USER_CHECK(!open.has_value(), gpu.ctx("launches")) << "a fork without a join: the side stream's work would never rejoin the run";
    check_launch_lifetimes(p, file, path);
    // A plan with GPU code runs every step on the GPU; one without says why and has none.
    if (!p.gpu_supported) {
      TEC_USER_CHECK(p.launches.empty() && !p.gpu_reason.empty(), gpu.ctx("supported"))
          << "a profile without GPU code has no launches and says why";
    } else {
      std::vector<bool> launched(p.steps.size(), false);
      for (const Launch& l : p.launches)
        if (l.step >= 0) launched[static_cast<size_t>(l.step)] = true;
      for (size_t s = 0; s < p.steps.size(); ++s)
        TEC_USER_CHECK(launched[s], gpu.ctx("launches")) << "step " << s << " ('" << p.steps[s].name << "') has no GPU launch";
    }
  }
  return p;
}

// Empties every array and object bottom-up, so that destroying `j` has nothing nested to move
// onto the heap stack that ~basic_json allocates. Nesting beyond kMaxDepth (only a hostile
// manifest has it) is left to that destructor, to bound this recursion.
void release_json(json& j, int depth = 0) noexcept {
  constexpr int kMaxDepth = 64;
  if (depth > kMaxDepth) return;
  if (j.is_array()) {
    auto& array = j.get_ref<json::array_t&>();
    for (json& e : array) release_json(e, depth + 1);
    array.clear();
  } else if (j.is_object()) {
    auto& object = j.get_ref<json::object_t&>();
    for (auto& entry : object) release_json(entry.second, depth + 1);
    object.clear();
  }
}

// The plan in `bytes`. Where `owner` holds those bytes (a file read whole), its buffer becomes
// the constants, moved to its front, instead of a copy of them. A copy is a second allocation
// of their size: `te-run --inspect` of moe.json's 5.6 GB train plan (its fp32 masters) took
// 33-37 s and 11.2 GB with it on the CPU machine, 12-16 s and 5.7 GB without, most of it the
// kernel handing out fresh pages. `bytes` and `owner` are not read after the move.
Plan load_plan(std::span<const uint8_t> bytes, std::vector<uint8_t>* owner, const std::string& name) {
  PlanFile file = parse_plan_file(bytes, name);
  Plan plan;
  plan.manifest = std::move(file.manifest);
  const Reader r(plan.manifest, "", name);
  TEC_USER_CHECK(r.str("format") == "tec-plan", r.ctx("format")) << "not a tec plan manifest";
  plan.name = r.str("name");
  plan.recipe = r.str("recipe");
  plan.mode = r.str("mode");
  const Reader target(r.field("target"), "/target", name);
  const auto archs = target.strings("archs");
  TEC_USER_CHECK(!archs.empty() && archs[0].rfind("sm_", 0) == 0, target.ctx("archs")) << "needs at least one sm_NN arch";
  plan.target.sm = std::atoi(archs[0].c_str() + 3);
  plan.arena_bytes = r.integer("arena_bytes", 0, kMaxArenaBytes);
  // Blobs: each inside the blob section, and the constants blob present.
  // Blobs lie one after another as the writer lays them out (plan/file.cpp), each at the next
  // 256-byte boundary, filling the section: none overlaps another or hides in padding.
  const json& blobs = r.array("blobs");
  std::optional<std::span<const uint8_t>> constants;
  std::set<std::string> blob_names;
  uint64_t next_blob = 0;
  for (size_t i = 0; i < blobs.size(); ++i) {
    const Reader b(blobs[i], "/blobs/" + std::to_string(i), name);
    const auto offset = static_cast<uint64_t>(b.integer("offset", 0, kMaxArenaBytes));
    const auto size = static_cast<uint64_t>(b.integer("size", 0, kMaxArenaBytes));
    TEC_USER_CHECK(offset == next_blob && offset <= file.blobs.size() && size <= file.blobs.size() - offset, b.ctx())
        << "blob '" << b.str("name") << "' [" << offset << ", +" << size << ") is not where the blob section of "
        << file.blobs.size() << " bytes has its next blob (" << next_blob << ")";
    next_blob = (offset + size + kBlobAlignment - 1) / kBlobAlignment * kBlobAlignment;
    TEC_USER_CHECK(blob_names.insert(b.str("name")).second, b.ctx("name")) << "blob '" << b.str("name") << "' twice";
    if (b.str("name") == "constants") constants = file.blobs.subspan(offset, size);
  }
  TEC_USER_CHECK(next_blob == file.blobs.size(), r.ctx("blobs"))
      << "the blobs end at " << next_blob << ", the blob section at " << file.blobs.size();
  TEC_USER_CHECK(constants.has_value(), r.ctx("blobs")) << "the constants blob is missing";
  const int64_t constant_bytes = r.integer("constant_bytes", 0, kMaxArenaBytes);
  TEC_USER_CHECK(static_cast<int64_t>(constants->size()) == constant_bytes, r.ctx("constant_bytes"))
      << "constants blob has " << constants->size() << " bytes, the manifest says " << constant_bytes;
  // Tensor parallel: every other rank's constants, in rank 0's layout.
  plan.tp_size = r.contains("tp_size") ? r.integer("tp_size", 1, kMaxTpSize) : 1;
  std::vector<std::span<const uint8_t>> rank_constants;
  for (int64_t rank = 1; rank < plan.tp_size; ++rank) {
    const std::string blob = "constants.rank" + std::to_string(rank);
    std::optional<std::span<const uint8_t>> rank_bytes;
    for (const auto& b : blobs)
      if (b["name"].get<std::string>() == blob) rank_bytes = file.blobs.subspan(b["offset"].get<size_t>(), b["size"].get<size_t>());
    TEC_USER_CHECK(rank_bytes.has_value(), r.ctx("blobs")) << "a plan of " << plan.tp_size << " ranks needs blob '" << blob
                                                           << "', rank " << rank << "'s constants, and has none";
    TEC_USER_CHECK(static_cast<int64_t>(rank_bytes->size()) == constant_bytes, r.ctx("blobs"))
        << "blob '" << blob << "' has " << rank_bytes->size() << " bytes; every rank's constants have " << constant_bytes;
    rank_constants.push_back(*rank_bytes);
  }
  // Every rank's constants are bytes of their own in the file: blobs that overlap must not
  // make the reader copy the same bytes for thousands of ranks.
  TEC_USER_CHECK(checked_mul(plan.tp_size, constant_bytes) <= static_cast<int64_t>(file.blobs.size()), r.ctx("tp_size"))
      << plan.tp_size << " ranks of " << constant_bytes << " bytes of constants do not fit the file's " << file.blobs.size()
      << " bytes of blobs";
  for (const auto& bytes_of_rank : rank_constants) plan.other_rank_constants.emplace_back(bytes_of_rank.begin(), bytes_of_rank.end());
  plan.archs = archs;
  {
    std::map<std::string, std::span<const uint8_t>> blob_bytes;
    for (const auto& b : blobs)
      blob_bytes[b["name"].get<std::string>()] = file.blobs.subspan(b["offset"].get<size_t>(), b["size"].get<size_t>());
    const json& modules = r.array("modules");
    for (size_t i = 0; i < modules.size(); ++i) {
      const Reader m(modules[i], "/modules/" + std::to_string(i), name);
      Module module;
      module.source = m.str("source");
      module.defines = m.strings("defines");
      TEC_USER_CHECK(m.field("cubins").is_object(), m.ctx("cubins")) << "expected an object of arch -> blob";
      for (const auto& [arch, blob] : m.field("cubins").items()) {
        TEC_USER_CHECK(blob.is_string() && blob_bytes.count(blob.get<std::string>()), m.ctx("cubins"))
            << "cubin for " << arch << " names no blob";
        const auto cubin = blob_bytes.at(blob.get<std::string>());
        module.cubins[arch].assign(cubin.begin(), cubin.end());
      }
      plan.modules.push_back(std::move(module));
    }
  }
  // The last use of the file's bytes: the profiles read constants from plan.constants.
  if (owner) {
    const auto at = static_cast<size_t>(constants->data() - owner->data());
    std::memmove(owner->data(), owner->data() + at, constants->size());
    owner->resize(constants->size());
    plan.constants = std::move(*owner);
  } else {
    plan.constants.assign(constants->begin(), constants->end());
  }
  const json& profiles = r.array("profiles");
  TEC_USER_CHECK(!profiles.empty(), r.ctx("profiles")) << "a plan needs at least one profile";
  int64_t largest_arena = 0;
  for (size_t i = 0; i < profiles.size(); ++i) {
    plan.profiles.push_back(parse_profile(profiles[i], "/profiles/" + std::to_string(i), name, plan));
    largest_arena = std::max(largest_arena, plan.profiles.back().arena_bytes);
    for (size_t j = 0; j < i; ++j)
      TEC_USER_CHECK(plan.profiles[j].dims != plan.profiles[i].dims, r.ctx("profiles"))
          << "profiles " << j << " and " << i << " have the same dims";
  }
  // The session allocates the plan's arena: it is the largest profile's, not more.
  TEC_USER_CHECK(plan.arena_bytes == largest_arena, r.ctx("arena_bytes"))
      << "the plan's arena is " << plan.arena_bytes << " bytes, its largest profile's " << largest_arena;
  // The device permutes each constant once, for every profile: they must agree on how.
  std::map<int64_t, const Buffer*> layout_at;
  for (const Profile& p : plan.profiles)
    for (const Buffer& b : p.buffers) {
      if (b.region != "constants" || b.bytes == 0) continue;
      const auto [it, fresh] = layout_at.emplace(b.offset, &b);
      TEC_USER_CHECK(fresh || (it->second->device_layout == b.device_layout && it->second->bytes == b.bytes &&
                               (b.device_layout.empty() || it->second->shape == b.shape)),
                     r.ctx("profiles"))
          << "constant '" << b.name << "' at offset " << b.offset << " disagrees with '" << it->second->name
          << "' there on its size, shape or device layout";
    }
  return plan;
}

}  // namespace

Plan::~Plan() { release_json(manifest); }

Plan Plan::load(std::span<const uint8_t> bytes, const std::string& name) { return load_plan(bytes, nullptr, name); }

Plan Plan::load_file(const std::string& path) {
  std::vector<uint8_t> bytes = read_plan_file(path);
  return load_plan(bytes, &bytes, path);
}

const Profile& Plan::profile(const std::map<std::string, int64_t>& dims) const {
  if (dims.empty() && profiles.size() == 1) return profiles[0];
  auto text = [](const std::map<std::string, int64_t>& d) {
    std::string out;
    for (const auto& [dim, size] : d) out += (out.empty() ? "" : ",") + dim + "=" + std::to_string(size);
    return out;
  };
  std::string known;
  for (const Profile& p : profiles) {
    bool match = true;
    for (const auto& [dim, size] : dims) match &= p.dims.count(dim) && p.dims.at(dim) == size;
    if (match && !dims.empty()) return p;
    known += (known.empty() ? "" : "; ") + text(p.dims);
  }
  throw Error(ErrorKind::usage, ErrorContext{"plan", "", "", ""},
              (dims.empty() ? "the plan has several profiles, pick one with --shape" : "no profile has " + text(dims)) +
                  "; the plan has: " + known);
}

}  // namespace tec::plan
