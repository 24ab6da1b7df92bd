#include "core/host_memory.h"
#include "plan_builder.h"

#include <cmath>
#include <filesystem>
#include <optional>

#include "core/file_cache.h"
#include "core/hash.h"
#include "core/random.h"
#include "frontend/weights/safetensors.h"
#include "passes/passes.h"
#include "reference/quantize.h"

namespace tec {

namespace {

using json = nlohmann::json;

// A weight's values for rank `rank` of the plan: the whole tensor, or the rank's shard of it.
std::vector<float> weight_values(const Value& v, int64_t rank) {
  const WeightSource& src = *v.weight;
  const int64_t count = src.shard ? src.shard->full.numel() : v.proto.shape.numel();
  const Shape& shape = src.shard ? src.shard->full : v.proto.shape;
  std::vector<float> values = [&] {
    if (src.kind == WeightSource::Kind::random)
      return random_weight(src.seed, src.random_name.empty() ? v.name : src.random_name, count, src.mean, src.stddev);
    if (src.kind == WeightSource::Kind::values) {
      TEC_INTERNAL_CHECK(src.values && static_cast<int64_t>(src.values->size()) == count, (ErrorContext{"plan", v.name, "", src.origin}))
          << "weight values do not match the shape " << shape.str();
      return *src.values;
    }
    const SafetensorsIndex index = read_safetensors_index(src.path);
    auto it = index.tensors.find(src.tensor);
    TEC_USER_CHECK(it != index.tensors.end() && it->second.shape == shape, (ErrorContext{"plan", v.name, "", src.path}))
        << "weights file changed since it was checked: tensor '" << src.tensor << "'";
    return read_tensor_as_float(index, it->second);
  }();
  return src.shard ? part_along(values, src.shard->full, static_cast<size_t>(src.shard->dim), src.shard->parts, rank, src.shard->groups)
                    : values;
}

// The constants blob: each weight rounded to its dtype, then quantized as the recipe says.
// Constant weights are cast once with the scale of their own amax (current scaling
// semantics, also for the delayed recipe: a constant's amax never changes).
std::vector<uint8_t> build_constants(const CompiledProfile& p, int64_t rank) {
  std::vector<uint8_t> blob(static_cast<size_t>(p.memory.constant_bytes), 0);
  std::map<std::string, std::map<BufferRole, const PlannedBuffer*>> by_tensor;
  for (const PlannedBuffer& b : p.memory.buffers)
    if (b.region == Region::constants) by_tensor[b.tensor][b.role] = &b;
  for (const Value& v : p.graph.values) {
    if (v.kind == ValueKind::state && v.weight) {  // a train plan's starting state, in fp32
      std::vector<float> values = weight_values(v, rank);
      reference::round_to(v.weight->rounded_to, values);
      const PlannedBuffer* b = by_tensor.at(v.name).at(BufferRole::data);
      reference::encode_values_into(DType::fp32, values, std::span<uint8_t>(blob.data() + b->offset, static_cast<size_t>(b->bytes)));
      continue;
    }
    if (v.kind != ValueKind::weight) continue;
    std::vector<float> values = weight_values(v, rank);
    reference::round_to(v.proto.dtype, values);
    const auto& buffers = by_tensor.at(v.name);
    auto span_of = [&](BufferRole role) {
      const PlannedBuffer* b = buffers.at(role);
      return std::span<uint8_t>(blob.data() + b->offset, static_cast<size_t>(b->bytes));
    };
    if (!v.proto.quantizer) {
      reference::encode_values_into(v.proto.dtype, values, span_of(BufferRole::data));
      continue;
    }
    reference::BufferMap out;
    for (const auto& [role, b] : buffers) out[role] = span_of(role);
    reference::QuantizeState state;
    if (v.proto.quantizer->kind == QuantizerKind::fp8_static) {
      TEC_INTERNAL_CHECK(v.weight->static_scales.has_value(), (ErrorContext{"plan", v.name, "", v.weight->origin}))
          << "an fp8_static weight without the model's scales";
      state.static_scale_inv = *v.weight->static_scales->scale_inv;
    }
    state.delayed_scale_from_own_amax = v.proto.quantizer->kind == QuantizerKind::fp8_delayed;
    reference::quantize(v.proto, values, out, p.graph.target, state);
  }
  return blob;
}

// A file as make and ninja see it: a changed file has a new size or modification time.
std::optional<json> file_stamp(const std::filesystem::path& path) {
  std::error_code ec;
  const auto absolute = std::filesystem::canonical(path, ec);
  if (ec) return std::nullopt;
  const auto size = std::filesystem::file_size(absolute, ec);
  if (ec) return std::nullopt;
  const auto time = std::filesystem::last_write_time(absolute, ec);
  if (ec) return std::nullopt;
  return json{absolute.string(), size, time.time_since_epoch().count()};
}

// Everything that decides the constants blob's bytes, for the cache key: the layout of the
// constants region, every weight's tensor description and where its values come from, and
// the te-compile binary itself (so that a rebuilt quantizer never reads an older entry).
// Empty when a file cannot be stamped: then nothing is cached.
std::string constants_cache_key(const CompiledProfile& p, int64_t rank) {
  const std::optional<json> binary = file_stamp("/proc/self/exe");
  if (!binary) return "";
  json key{{"cache", "tec constants v1"}, {"binary", *binary}, {"sm", p.graph.target.sm}, {"bytes", p.memory.constant_bytes},
           {"rank", rank}};
  for (const PlannedBuffer& b : p.memory.buffers)
    if (b.region == Region::constants)
      key["buffers"].push_back({b.name, b.tensor, to_string(b.role), to_string(b.dtype), b.shape.dims, b.offset, b.bytes});
  for (const Value& v : p.graph.values) {
    if (!v.weight) continue;
    const WeightSource& src = *v.weight;
    json source;
    switch (src.kind) {
      case WeightSource::Kind::random: source = {"random", src.seed, src.mean, src.stddev, src.random_name}; break;
      case WeightSource::Kind::file: {
        const std::optional<json> stamp = file_stamp(src.path);
        if (!stamp) return "";
        source = {"file", *stamp, src.tensor, to_string(src.file_dtype), src.file_offset};
        break;
      }
      case WeightSource::Kind::values:
        source = {"values", src.values->size(),
                  checksum64(std::span(reinterpret_cast<const uint8_t*>(src.values->data()), src.values->size() * sizeof(float)))};
        break;
    }
    if (src.static_scales) {
      const auto& scales = *src.static_scales->scale_inv;
      source.push_back(checksum64(std::span(reinterpret_cast<const uint8_t*>(scales.data()), scales.size() * sizeof(float))));
    }
    source.push_back(to_string(src.rounded_to));
    if (src.shard) source.push_back({src.shard->full.dims, src.shard->dim, src.shard->parts, src.shard->groups});
    key["weights"].push_back({v.name, to_string(v.proto.dtype), v.proto.shape.dims,
                              v.proto.quantizer ? quantizer_to_json(*v.proto.quantizer) : json(), v.proto.usage.rowwise,
                              v.proto.usage.columnwise, source});
  }
  return "constants-" + hex64(checksum64(key.dump())) + ".bin";
}

json dtype_json(DType d) { return std::string(to_string(d)); }

// The GPU launches of one profile, buffer names resolved to indices into its buffer list.
json launches_manifest(const CompiledProfile& p) {
  std::map<std::string, int> index;
  for (size_t i = 0; i < p.memory.buffers.size(); ++i) index[p.memory.buffers[i].name] = static_cast<int>(i);
  auto ref = [&](const std::string& name) -> json {
    if (name.empty()) return nullptr;
    auto it = index.find(name);
    TEC_INTERNAL_CHECK(it != index.end(), {}) << "the GPU lowering names buffer '" << name << "', which memory_plan did not place";
    return it->second;
  };
  json out = json::array();
  for (const codegen::Launch& l : p.gpu.launches) {
    json j{{"step", l.step}, {"kind", std::string(codegen::to_string(l.kind))}};
    if (l.stream != 0) j["stream"] = l.stream;
    switch (l.kind) {
      case codegen::Launch::Kind::memset: j["buffer"] = ref(l.buffer); break;
      case codegen::Launch::Kind::collective: {
        const codegen::CollectiveLaunch& c = l.collective;
        j["collective"] = {{"op", c.op}, {"reduce", c.reduce}, {"send", ref(c.send)}, {"recv", ref(c.recv)}, {"count", c.count},
                           {"dtype", dtype_json(c.dtype)}};
        if (c.send_offset) j["collective"]["send_offset"] = c.send_offset;
        if (c.recv_offset) j["collective"]["recv_offset"] = c.recv_offset;
        if (c.op == "reduce") j["collective"]["root"] = c.root;
        break;
      }
      case codegen::Launch::Kind::fork:
      case codegen::Launch::Kind::join: break;
      case codegen::Launch::Kind::attention: {
        const codegen::AttentionLaunch& a = l.attention;
        j["attention"] = {{"batch", a.batch},       {"seq_q", a.seq_q},   {"seq_kv", a.seq_kv},         {"heads", a.heads},
                          {"kv_heads", a.kv_heads}, {"head_dim", a.head_dim}, {"v_head_dim", a.v_head_dim}, {"causal", a.causal},
                          {"layout", a.sbhd ? "sbhd" : "bshd"}, {"scale", a.scale}, {"dtype", dtype_json(a.dtype)},
                          {"q", ref(a.q)},          {"k", ref(a.k)},      {"v", ref(a.v)},              {"o", ref(a.o)},
                          {"stats", ref(a.stats)},  {"seq_lens", ref(a.seq_lens)}, {"bias", ref(a.bias)}};
        if (!a.bias.empty()) j["attention"]["bias_dims"] = a.bias_dims;
        if (a.backward) {
          j["attention"]["backward"] = true;
          for (const auto& [key, buffer] : {std::pair{"d_o", &a.d_o}, {"dq", &a.dq}, {"dk", &a.dk}, {"dv", &a.dv}})
            j["attention"][key] = ref(*buffer);
        }
        break;
      }
      case codegen::Launch::Kind::kernel: {
        json args = json::array();
        for (const auto& a : l.args) {
          if (a.kind == codegen::LaunchArg::Kind::buffer) args.push_back({{"buffer", ref(a.buffer)}});
          else if (a.kind == codegen::LaunchArg::Kind::value) args.push_back({{"value", a.value}});
          else if (a.kind == codegen::LaunchArg::Kind::status) args.push_back({{"status", a.value}});
          else args.push_back(nullptr);
        }
        j.update({{"module", l.module}, {"entry", l.entry}, {"grid", l.grid}, {"block", l.block}, {"args", args}});
        if (l.shared_bytes > 0) j["shared_bytes"] = l.shared_bytes;
        if (l.early_launch) j["early_launch"] = true;
        if (l.persistent) j["persistent"] = true;
        if (l.constant_copy) j["constant_copy"] = true;
        if (!l.tensor_maps.empty()) {
          json maps = json::array();
          for (const auto& m : l.tensor_maps)
            maps.push_back({{"buffer", ref(m.buffer)}, {"rows", m.rows}, {"row_bytes", m.row_bytes}, {"box_rows", m.box_rows}});
          j["tensor_maps"] = maps;
        }
        break;
      }
      case codegen::Launch::Kind::delayed_scale_inv:
      case codegen::Launch::Kind::delayed_update: j.update({{"module", l.module}, {"entry", l.entry}}); break;
      case codegen::Launch::Kind::gemm: {
        const codegen::GemmLaunch& g = l.gemm;
        auto operand = [&](const codegen::GemmOperand& o) {
          json operand_json{{"buffer", ref(o.buffer)}, {"type", dtype_json(o.type)}, {"scale_inv", ref(o.scale_inv)},
                            {"scale_mode", o.scale_mode}};
          if (o.transposed) operand_json["transposed"] = true;
          return operand_json;
        };
        j["gemm"] = {{"m", g.m},
                     {"n", g.n},
                     {"k", g.k},
                     {"a", operand(g.a)},
                     {"b", operand(g.b)},
                     {"bias", ref(g.bias)},
                     {"bias_type", dtype_json(g.bias_type)},
                     {"epilogue", g.epilogue},
                     {"c", ref(g.c)},
                     {"d", {{"buffer", ref(g.d)}, {"type", dtype_json(g.d_type)}, {"scale", ref(g.d_scale)}, {"amax", ref(g.amax_d)}}},
                     {"fast_accum", g.fast_accum},
                     {"algo", "heuristic"}};
        auto rows = [](const codegen::RowOffset& r) { return json{{"fixed", r.fixed}, {"per_rank", r.per_rank}, {"shift", r.shift}}; };
        if (g.x_rows.any()) j["gemm"]["x_rows"] = rows(g.x_rows);
        if (g.d_rows.any()) j["gemm"]["d_rows"] = rows(g.d_rows);
        if (g.batch > 1) j["gemm"]["batch"] = {{"count", g.batch}, {"stride_a", g.batch_stride_a}, {"stride_b", g.batch_stride_b}};
        break;
      }
    }
    out.push_back(std::move(j));
  }
  return out;
}

json profile_manifest(const CompiledProfile& p) {
  const Graph& g = p.graph;
  json buffers = json::array();
  std::map<std::string, json> tensor_buffers, tensor_state;
  for (size_t i = 0; i < p.memory.buffers.size(); ++i) {
    const PlannedBuffer& b = p.memory.buffers[i];
    buffers.push_back({{"name", b.name},
                       {"tensor", b.tensor},
                       {"role", to_string(b.role)},
                       {"state", b.state},
                       {"region", to_string(b.region)},
                       {"dtype", to_string(b.dtype)},
                       {"shape", b.shape.dims},
                       {"offset", b.offset},
                       {"bytes", b.bytes},
                       {"device_layout", b.device_layout},
                       {"lifetime", {b.first_step, b.last_step}}});
    // Workspaces and new saved tensors belong to a node, not a tensor of the graph.
    if (!g.find_value(b.tensor)) continue;
    if (b.state.empty()) tensor_buffers[b.tensor][std::string(to_string(b.role))] = i;
    else tensor_state[b.tensor][b.state] = i;
  }
  json tensors = json::array();
  json delayed = json::array();
  for (const Value& v : g.values) {
    // A later version of a state value lives in that value's buffers.
    const std::string& storage = v.storage ? g.value(*v.storage).name : v.name;
    json t{{"name", v.name},
           {"kind", to_string(v.kind)},
           {"shape", v.proto.shape.dims},
           {"dtype", to_string(v.proto.dtype)},
           {"quantizer", v.proto.quantizer ? quantizer_to_json(*v.proto.quantizer) : json()},
           {"usage", {{"rowwise", v.proto.usage.rowwise}, {"columnwise", v.proto.usage.columnwise}}},
           {"buffers", tensor_buffers.count(storage) ? tensor_buffers[storage] : json::object()},
           {"state", tensor_state.count(v.name) ? tensor_state[v.name] : json::object()}};
    if (v.storage) t["storage"] = storage;
    if (v.proto.is_grouped()) t["group_members"] = v.proto.group_members;
    if (v.proto.quantizer && tensor_state.count(v.name)) delayed.push_back(v.name);
    tensors.push_back(std::move(t));
  }
  json steps = json::array();
  for (const Step& s : p.schedule.steps) {
    json ops = json::array();
    for (NodeId n : s.nodes) {
      const Node& node = g.node(n);
      json op{{"node", node.name}, {"op", node.op}, {"attrs", attributes_to_json(node.attrs)}, {"inputs", json::array()},
              {"outputs", json::array()}};
      for (ValueId in : node.inputs) op["inputs"].push_back(g.value(in).name);
      for (ValueId out : node.outputs) op["outputs"].push_back(g.value(out).name);
      if (node.computes_backward) {
        op["backward"] = true;
        op["gradient_slots"] = node.gradient_slots;
      }
      json columnwise = json::array();
      for (size_t i = 0; i < node.columnwise_inputs.size(); ++i)
        if (node.columnwise_inputs[i]) columnwise.push_back(i);
      if (!columnwise.empty()) op["columnwise_inputs"] = std::move(columnwise);
      ops.push_back(std::move(op));
    }
    json workspaces = json::array();
    for (const Workspace& w : s.workspaces) workspaces.push_back(w.name);
    steps.push_back({{"name", s.name},
                     {"kind", to_string(s.kind)},
                     {"phase", to_string(s.phase)},
                     {"deps", s.deps},
                     {"fusions", s.fusions},
                     {"workspaces", workspaces},
                     {"ops", ops}});
  }
  json inputs = json::array(), outputs = json::array();
  for (ValueId id : g.inputs) inputs.push_back(g.value(id).name);
  for (ValueId id : g.outputs) outputs.push_back(g.value(id).name);
  const MetaSummary meta = summarize(g);
  json tp_layouts = json::object();
  for (const auto& [name, layout] : g.tp.layouts) tp_layouts[name] = to_string(layout);
  return json{{"dims", g.dims},
              {"train", dump_train_step(g, p.memory)},
              {"arena_bytes", p.memory.arena_bytes},
              {"scratch_peak_bytes", p.memory.scratch_peak_bytes},
              {"scratch_naive_bytes", p.memory.scratch_naive_bytes},
              {"naive_bytes", p.memory.naive_bytes},
              {"buffers", std::move(buffers)},
              {"tensors", std::move(tensors)},
              {"steps", std::move(steps)},
              {"inputs", std::move(inputs)},
              {"outputs", std::move(outputs)},
              {"delayed", std::move(delayed)},
              {"tp_layouts", tp_layouts},
              {"gpu", {{"supported", p.gpu.supported}, {"reason", p.gpu.reason}, {"launches", launches_manifest(p)}}},
              {"meta", {{"buffers", meta.buffers},
                        {"total_bytes", meta.total_bytes},
                        {"saved_bytes", meta.saved_bytes},
                        {"bytes_saved_by_aliasing", meta.aliased_bytes}}}};
}

}  // namespace

PlanParts build_plan(const std::vector<CompiledProfile>& profiles, const GpuCode& code, const BuildRecord& record,
                     const std::string& cache_dir) {
  TEC_INTERNAL_CHECK(!profiles.empty(), {}) << "no profiles to build";
  const Graph& first = profiles[0].graph;
  // Weights do not depend on the profile dims, so every profile shares one constants blob.
  std::vector<std::string> constant_layout;
  for (const auto& b : profiles[0].memory.buffers)
    if (b.region == Region::constants) constant_layout.push_back(b.name + "@" + std::to_string(b.offset));
  int64_t arena = 0;
  json profile_list = json::array();
  for (const auto& p : profiles) {
    std::vector<std::string> layout;
    for (const auto& b : p.memory.buffers)
      if (b.region == Region::constants) layout.push_back(b.name + "@" + std::to_string(b.offset));
    TEC_INTERNAL_CHECK(layout == constant_layout, {}) << "profiles disagree on the constants layout";
    arena = std::max(arena, p.memory.arena_bytes);
    profile_list.push_back(profile_manifest(p));
  }
  PlanParts parts;
  // Small constants build in milliseconds; caching them would only fill the disk.
  constexpr int64_t kCacheFrom = int64_t{16} << 20;
  const bool cacheable = profiles[0].memory.constant_bytes >= kCacheFrom && !cache_dir.empty();
  // A tensor-parallel plan holds every rank's constants, one blob each (rank 0's is
  // "constants", as in any plan), so that one file deploys to the whole group.
  const int64_t ranks = first.tp.size;
  require_host_memory(static_cast<uint64_t>(checked_mul(profiles[0].memory.constant_bytes, ranks)),
                      "building the plan's constants" + std::string(ranks > 1 ? " (every rank's)" : ""), ErrorContext{"plan"});
  parts.constants_from_cache = true;
  for (int64_t rank = 0; rank < ranks; ++rank) {
    const std::string cached = cacheable ? constants_cache_key(profiles[0], rank) : "";
    const std::string dir = cached.empty() ? "" : cache_dir;
    std::optional<Bytes> constants = cache_read(dir, cached);
    const bool hit = constants && static_cast<int64_t>(constants->size()) == profiles[0].memory.constant_bytes;
    parts.constants_from_cache = parts.constants_from_cache && hit;
    if (!hit) {
      constants = build_constants(profiles[0], rank);
      cache_write(dir, cached, constants->span());
    }
    parts.blobs.push_back({rank == 0 ? std::string("constants") : "constants.rank" + std::to_string(rank), std::move(*constants)});
  }
  json modules = json::array();
  for (size_t m = 0; m < code.modules.size(); ++m) {
    json cubins = json::object();
    for (size_t a = 0; a < code.archs.size(); ++a) {
      const std::string blob = "cubin." + std::to_string(m) + "." + code.archs[a];
      cubins[code.archs[a]] = blob;
      parts.blobs.push_back({blob, code.cubins.at(m).at(a)});
    }
    modules.push_back({{"source", code.modules[m].source}, {"defines", code.modules[m].defines}, {"cubins", cubins}});
  }
  parts.manifest = json{{"format", "tec-plan"},
                        {"name", first.name},
                        {"recipe", to_string(first.recipe.kind)},
                        {"mode", to_string(first.mode)},
                        {"target", {{"archs", code.archs}, {"layout_sm", first.target.sm}, {"nvrtc", code.nvrtc_version}}},
                        {"modules", std::move(modules)},
                        {"build", {{"tool", record.tool}, {"options", record.options}, {"model_checksum", record.model_checksum}}},
                        {"arena_bytes", arena},
                        {"tp_size", ranks},
                        {"constant_bytes", profiles[0].memory.constant_bytes},
                        {"profiles", std::move(profile_list)}};
  return parts;
}

}  // namespace tec
