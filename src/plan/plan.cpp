// Parses and validates a plan manifest (schemas/plan.schema.json). Every field the
// executors use is checked here: types, ranges, offsets inside their regions, references
// between buffers, tensors and steps, and that each tensor's buffers are exactly what its
// TensorProto says (LAYOUTS.md).
#include "plan/plan.h"

#include "plan/file.h"
#include "plan/format.h"

namespace tec::plan {

namespace {

using json = nlohmann::json;

// Reads fields of one manifest object; errors name the JSON path.
class Reader {
 public:
  Reader(const json& j, std::string path, const std::string& file) : j_(j), path_(std::move(path)), file_(file) {
    TEC_USER_CHECK(j_.is_object(), ctx()) << "expected an object";
  }
  ErrorContext ctx(const std::string& key = "") const {
    return ErrorContext{"plan", "", "", file_ + " manifest " + path_ + (key.empty() ? "" : "/" + key)};
  }
  const json& field(const std::string& key) const {
    TEC_USER_CHECK(j_.contains(key), ctx()) << "missing field '" << key << "'";
    return j_[key];
  }
  std::string str(const std::string& key) const {
    TEC_USER_CHECK(field(key).is_string(), ctx(key)) << "expected a string";
    return field(key).get<std::string>();
  }
  int64_t integer(const std::string& key, int64_t lo, int64_t hi) const {
    const json& v = field(key);
    TEC_USER_CHECK(v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi, ctx(key))
        << "expected an integer in [" << lo << ", " << hi << "], got " << v.dump();
    return v.get<int64_t>();
  }
  const json& array(const std::string& key) const {
    TEC_USER_CHECK(field(key).is_array(), ctx(key)) << "expected an array";
    return field(key);
  }
  std::vector<std::string> strings(const std::string& key) const {
    std::vector<std::string> out;
    for (const auto& v : array(key)) {
      TEC_USER_CHECK(v.is_string(), ctx(key)) << "expected strings";
      out.push_back(v.get<std::string>());
    }
    return out;
  }
  Shape shape(const std::string& key) const {
    Shape s;
    for (const auto& d : array(key)) {
      TEC_USER_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0 && d.get<int64_t>() <= kMaxDim, ctx(key))
          << "shape entries must be integers in [0, " << kMaxDim << "]";
      s.dims.push_back(d.get<int64_t>());
    }
    TEC_USER_CHECK(s.rank() <= 8, ctx(key)) << "rank " << s.rank() << " exceeds 8";
    with_context(ctx(key), [&] { (void)s.numel(); });
    return s;
  }
  DType dtype(const std::string& key) const {
    auto d = parse_dtype(str(key));
    TEC_USER_CHECK(d.has_value(), ctx(key)) << "unknown dtype";
    return *d;
  }

 private:
  const json& j_;
  std::string path_;
  const std::string& file_;
};

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

Buffer parse_buffer(const Reader& r, int64_t arena_bytes, int64_t constant_bytes) {
  Buffer b;
  b.name = r.str("name");
  b.tensor = r.str("tensor");
  auto role = parse_role(r.str("role"));
  TEC_USER_CHECK(role.has_value(), r.ctx("role")) << "unknown buffer role";
  b.role = *role;
  b.state = r.str("state");
  b.region = r.str("region");
  TEC_USER_CHECK(b.region == "constants" || b.region == "state" || b.region == "input" || b.region == "output" ||
                     b.region == "scratch",
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
  const json& life = r.array("lifetime");
  TEC_USER_CHECK(life.size() == 2 && life[0].is_number_integer() && life[1].is_number_integer(), r.ctx("lifetime"))
      << "lifetime must be [first, last]";
  b.first_step = life[0].get<int>();
  b.last_step = life[1].get<int>();
  return b;
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
    TEC_USER_CHECK(tensor.kind == "input" || tensor.kind == "activation" || tensor.kind == "weight", t.ctx("kind"))
        << "unknown tensor kind";
    tensor.proto = TensorProto::dense(t.shape("shape"), t.dtype("dtype"));
    if (!t.field("quantizer").is_null()) {
      tensor.proto.quantizer = with_context(t.ctx("quantizer"), [&] { return quantizer_from_json(t.field("quantizer")); });
      const Reader u(t.field("usage"), path + "/tensors/" + std::to_string(i) + "/usage", file);
      TEC_USER_CHECK(u.field("rowwise").is_boolean() && u.field("columnwise").is_boolean(), t.ctx("usage"))
          << "usage needs rowwise and columnwise booleans";
      tensor.proto.usage = Usage{u.field("rowwise").get<bool>(), u.field("columnwise").get<bool>()};
    }
    for (const auto& [role_name, index] : t.field("buffers").items()) {
      auto role = parse_role(role_name);
      TEC_USER_CHECK(role && index.is_number_integer() && index.get<int64_t>() >= 0 && index.get<int64_t>() < buffer_count,
                     t.ctx("buffers"))
          << "buffer reference '" << role_name << "': " << index.dump() << " is not a buffer of this profile";
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
        TEC_USER_CHECK(b.bytes == spec.bytes && b.dtype == spec.dtype && b.tensor == tensor.name, t.ctx("buffers"))
            << "buffer '" << b.name << "' does not match tensor '" << tensor.name << "': " << to_string(spec.role)
            << " needs " << spec.bytes << " bytes of " << to_string(spec.dtype);
      }
    }
    if (tensor.proto.quantizer)
      for (const auto& st : tensor.proto.quantizer->state_buffers()) {
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
    TEC_USER_CHECK(step.kind == "gemm" || step.kind == "kernel", s.ctx("kind")) << "unknown step kind";
    step.fusions = s.strings("fusions");
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
      step.ops.push_back(std::move(op));
    }
    p.steps.push_back(std::move(step));
  }
  p.inputs = r.strings("inputs");
  p.outputs = r.strings("outputs");
  p.delayed = r.strings("delayed");
  for (const auto& name : p.inputs)
    TEC_USER_CHECK(known(name) && !p.tensors.at(name).buffers.empty(), r.ctx("inputs")) << "input '" << name << "' has no buffers";
  for (const auto& name : p.outputs)
    TEC_USER_CHECK(known(name) && !p.tensors.at(name).buffers.empty(), r.ctx("outputs")) << "output '" << name << "' has no buffers";
  for (const auto& name : p.delayed)
    TEC_USER_CHECK(known(name) && p.tensors.at(name).state.size() == 2, r.ctx("delayed"))
        << "delayed tensor '" << name << "' has no scale and amax_history state";
  return p;
}

}  // namespace

Plan Plan::load(std::span<const uint8_t> bytes, const std::string& name) {
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
  const json& blobs = r.array("blobs");
  std::optional<std::span<const uint8_t>> constants;
  for (size_t i = 0; i < blobs.size(); ++i) {
    const Reader b(blobs[i], "/blobs/" + std::to_string(i), name);
    const auto offset = static_cast<uint64_t>(b.integer("offset", 0, kMaxArenaBytes));
    const auto size = static_cast<uint64_t>(b.integer("size", 0, kMaxArenaBytes));
    TEC_USER_CHECK(offset % kBlobAlignment == 0 && offset <= file.blobs.size() && size <= file.blobs.size() - offset, b.ctx())
        << "blob '" << b.str("name") << "' [" << offset << ", +" << size << ") lies outside the blob section of "
        << file.blobs.size() << " bytes";
    if (b.str("name") == "constants") constants = file.blobs.subspan(offset, size);
  }
  TEC_USER_CHECK(constants.has_value(), r.ctx("blobs")) << "the constants blob is missing";
  const int64_t constant_bytes = r.integer("constant_bytes", 0, kMaxArenaBytes);
  TEC_USER_CHECK(static_cast<int64_t>(constants->size()) == constant_bytes, r.ctx("constant_bytes"))
      << "constants blob has " << constants->size() << " bytes, the manifest says " << constant_bytes;
  plan.constants.assign(constants->begin(), constants->end());
  const json& profiles = r.array("profiles");
  TEC_USER_CHECK(!profiles.empty(), r.ctx("profiles")) << "a plan needs at least one profile";
  for (size_t i = 0; i < profiles.size(); ++i)
    plan.profiles.push_back(parse_profile(profiles[i], "/profiles/" + std::to_string(i), name, plan));
  return plan;
}

Plan Plan::load_file(const std::string& path) {
  const std::vector<uint8_t> bytes = read_whole_file(path);
  return load(bytes, path);
}

const Profile& Plan::profile(const std::map<std::string, int64_t>& dims) const {
  if (dims.empty() && profiles.size() == 1) return profiles[0];
  std::string known;
  for (const Profile& p : profiles) {
    bool match = true;
    for (const auto& [dim, size] : dims) match &= p.dims.count(dim) && p.dims.at(dim) == size;
    if (match && !dims.empty()) return p;
    std::string one;
    for (const auto& [dim, size] : p.dims) one += (one.empty() ? "" : ",") + dim + "=" + std::to_string(size);
    known += (known.empty() ? "" : "; ") + one;
  }
  throw Error(ErrorKind::usage, ErrorContext{"plan", "", "", ""},
              std::string(dims.empty() ? "the plan has several profiles, pick one with --shape" : "no profile matches") +
                  "; the plan has: " + known);
}

}  // namespace tec::plan
