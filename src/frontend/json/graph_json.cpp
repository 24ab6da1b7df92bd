#include "frontend/json/graph_json.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/file_io.h"
#include "core/json_text.h"
#include "frontend/weights/safetensors.h"
#include "ops/common.h"

namespace tec {

namespace {

using json = nlohmann::json;

// Reading position in the document: the JSON pointer of the field being read.
struct Where {
  const std::string& file;
  std::string pointer;

  Where operator/(const std::string& key) const { return {file, pointer + "/" + text_excerpt(key)}; }
  Where operator/(size_t index) const { return {file, pointer + "/" + std::to_string(index)}; }
  ErrorContext context(std::string node = "", std::string op = "") const {
    return ErrorContext{"json", std::move(node), std::move(op), file + " " + (pointer.empty() ? "/" : pointer)};
  }
};

void require_keys(const json& obj, const Where& at, std::initializer_list<const char*> allowed) {
  TEC_USER_CHECK(obj.is_object(), at.context()) << "expected an object, got " << obj.type_name();
  for (const auto& item : obj.items()) {
    const std::string& key = item.key();
    bool known = std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return key == a; });
    if (!known) {
      std::string list;
      for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      TEC_USER_ERROR((at / key).context()) << "unknown field '" << text_excerpt(key) << "'; expected one of: " << list;
    }
  }
}

const json& required(const json& obj, const Where& at, const char* key) {
  TEC_USER_CHECK(obj.contains(key), at.context()) << "missing required field '" << key << "'";
  return obj[key];
}

std::string get_string(const json& v, const Where& at) {
  TEC_USER_CHECK(v.is_string(), at.context()) << "expected a string, got " << v.type_name();
  return v.get<std::string>();
}

int64_t get_dim(const json& v, const Where& at) {
  TEC_USER_CHECK(v.is_number_integer(), at.context()) << "expected an integer dim, got " << json_excerpt(v);
  TEC_USER_CHECK(v.is_number_unsigned() && v.get<int64_t>() >= 1 && v.get<int64_t>() <= kMaxDim, at.context())
      << "dim must be in [1, " << kMaxDim << "], got " << json_excerpt(v);
  return v.get<int64_t>();
}

// The model after parsing, before it is built for one profile.
struct Model {
  std::string file;
  std::string base_dir;
  json doc;
  std::string name;
  std::map<std::string, std::vector<int64_t>> dims;  // a fixed dim has one value
  std::vector<std::map<std::string, int64_t>> profiles;
  DType dtype = DType::bf16;
  Recipe recipe;
  std::optional<SafetensorsIndex> weights;
  uint64_t seed = 0;
  std::vector<size_t> op_order;  // topological order of doc["ops"]
};

int64_t resolve_dim(const json& v, const Where& at, const std::map<std::string, int64_t>& profile) {
  if (v.is_string()) {
    auto it = profile.find(v.get<std::string>());
    TEC_USER_CHECK(it != profile.end(), at.context()) << "unknown dim '" << v.get<std::string>() << "'";
    return it->second;
  }
  return get_dim(v, at);
}

void parse_dims(Model& m, const FrontendOptions& options) {
  const Where root{m.file, ""};
  size_t profile_count = 1;
  std::string profiled_by;
  if (m.doc.contains("dims")) {
    const Where at = root / "dims";
    TEC_USER_CHECK(m.doc["dims"].is_object(), at.context()) << "dims must be an object of name: size or [sizes]";
    for (const auto& [name, value] : m.doc["dims"].items()) {
      std::vector<int64_t> sizes;
      if (value.is_array()) {
        TEC_USER_CHECK(!value.empty(), (at / name).context()) << "a profile list needs at least one size";
        for (size_t i = 0; i < value.size(); ++i) sizes.push_back(get_dim(value[i], at / name / i));
      } else {
        sizes.push_back(get_dim(value, at / name));
      }
      m.dims[name] = std::move(sizes);
    }
  }
  for (const auto& [name, sizes] : options.dim_overrides) {
    const ErrorContext ctx{"json", "", "", "--shape/--profiles " + name};
    TEC_USER_CHECK(m.dims.count(name), ctx) << "the model has no dim '" << name << "'";
    TEC_USER_CHECK(!sizes.empty(), ctx) << "needs at least one size";
    for (int64_t size : sizes)
      TEC_USER_CHECK(size >= 1 && size <= kMaxDim, ctx) << "dim must be in [1, " << kMaxDim << "], got " << size;
    m.dims[name] = sizes;
  }
  for (const auto& [name, sizes] : m.dims) {
    if (sizes.size() <= 1) continue;
    TEC_USER_CHECK(profile_count == 1 || profile_count == sizes.size(), (root / "dims" / name).context())
        << "profile dims must list the same number of sizes: '" << profiled_by << "' has " << profile_count << ", '"
        << name << "' has " << sizes.size();
    profile_count = sizes.size();
    profiled_by = name;
  }
  for (size_t p = 0; p < profile_count; ++p) {
    std::map<std::string, int64_t> profile;
    for (const auto& [name, sizes] : m.dims) profile[name] = sizes[sizes.size() == 1 ? 0 : p];
    m.profiles.push_back(std::move(profile));
  }
}

Recipe parse_recipe(const json& v, const Where& at, const FrontendOptions& options) {
  auto kind_of = [](const json& name, const Where& where) {
    const std::string s = get_string(name, where);
    auto kind = parse_recipe_kind(s);
    TEC_USER_CHECK(kind.has_value(), where.context())
        << "unknown recipe '" << s << "'; expected one of: " << recipe_kind_names();
    return *kind;
  };
  Recipe r;
  if (v.is_null()) {
    r = Recipe::defaults(RecipeKind::bf16);
  } else if (v.is_string()) {
    r = Recipe::defaults(kind_of(v, at));
  } else {
    require_keys(v, at, {"kind", "format", "amax_history_len", "margin", "amax_algo", "power_2_scales", "amax_epsilon"});
    r = Recipe::defaults(kind_of(required(v, at, "kind"), at / "kind"));
    if (v.contains("format")) {
      const std::string f = get_string(v["format"], at / "format");
      TEC_USER_CHECK(f == "e4m3" || f == "hybrid", (at / "format").context())
          << "format must be 'e4m3' or 'hybrid', got '" << f << "'";
      r.format = f == "e4m3" ? Fp8Format::e4m3 : Fp8Format::hybrid;
    }
    if (v.contains("amax_history_len")) {
      TEC_USER_CHECK(v["amax_history_len"].is_number_unsigned(), (at / "amax_history_len").context())
          << "expected a positive integer";
      r.amax_history_len = static_cast<int>(std::min<uint64_t>(v["amax_history_len"].get<uint64_t>(), 1u << 30));
    }
    if (v.contains("margin")) {
      TEC_USER_CHECK(v["margin"].is_number_unsigned(), (at / "margin").context()) << "expected an integer >= 0";
      r.margin = static_cast<int>(std::min<uint64_t>(v["margin"].get<uint64_t>(), 1u << 30));
    }
    if (v.contains("amax_algo")) {
      const std::string a = get_string(v["amax_algo"], at / "amax_algo");
      TEC_USER_CHECK(a == "max" || a == "most_recent", (at / "amax_algo").context())
          << "amax_algo must be 'max' or 'most_recent', got '" << a << "'";
      r.amax_algo = a == "max" ? AmaxAlgo::max : AmaxAlgo::most_recent;
    }
    if (v.contains("power_2_scales")) {
      TEC_USER_CHECK(v["power_2_scales"].is_boolean(), (at / "power_2_scales").context()) << "expected a bool";
      r.power_2_scales = v["power_2_scales"].get<bool>();
    }
    if (v.contains("amax_epsilon")) {
      TEC_USER_CHECK(v["amax_epsilon"].is_number() && v["amax_epsilon"].get<double>() >= 0,
                     (at / "amax_epsilon").context())
          << "expected a number >= 0";
      r.amax_epsilon = v["amax_epsilon"].get<float>();
    }
  }
  if (options.recipe && *options.recipe != r.kind) r = Recipe::defaults(*options.recipe);
  // Validate the fields by building the quantizers once, so errors point at the recipe.
  with_context(at.context(), [&] {
    for (auto role : {TensorRole::input, TensorRole::weight, TensorRole::grad_output}) (void)r.quantizer_for(role);
  });
  return r;
}

// Kahn's algorithm over op names; a leftover op means a cycle, reported with its path.
std::vector<size_t> topological_order(const json& ops, const Where& at, const std::set<std::string>& graph_inputs) {
  std::map<std::string, size_t> producer;
  const OpRegistry& registry = builtin_ops();
  for (size_t i = 0; i < ops.size(); ++i) {
    producer[ops[i]["name"].get<std::string>()] = i;
    for (const std::string& suffix : registry.get(ops[i]["op"].get<std::string>()).extra_outputs)
      producer[ops[i]["name"].get<std::string>() + "." + suffix] = i;
  }
  std::vector<std::vector<size_t>> deps(ops.size());
  for (size_t i = 0; i < ops.size(); ++i)
    for (const auto& in : ops[i].value("inputs", json::array())) {
      auto it = producer.find(in.get<std::string>());
      if (it != producer.end() && !graph_inputs.count(in.get<std::string>())) deps[i].push_back(it->second);
    }
  std::vector<size_t> order;
  std::vector<int> state(ops.size(), 0);  // 0 new, 1 visiting, 2 done
  std::vector<size_t> stack;
  std::function<void(size_t)> visit = [&](size_t i) {
    if (state[i] == 2) return;
    if (state[i] == 1) {
      // The stack holds dependencies; walk it backwards to print the cycle in data-flow order.
      auto from = std::find(stack.begin(), stack.end(), i);
      std::string path = ops[i]["name"].get<std::string>();
      for (auto it = stack.end(); it != from;) path += " -> " + ops[*--it]["name"].get<std::string>();
      TEC_USER_ERROR((at / i).context(ops[i]["name"].get<std::string>(), ops[i]["op"].get<std::string>()))
          << "the graph has a cycle: " << path;
    }
    state[i] = 1;
    stack.push_back(i);
    for (size_t d : deps[i]) visit(d);
    stack.pop_back();
    state[i] = 2;
    order.push_back(i);
  };
  for (size_t i = 0; i < ops.size(); ++i) visit(i);
  return order;
}

void check_structure(Model& m) {
  const Where root{m.file, ""};
  require_keys(m.doc, root, {"$schema", "name", "description", "dims", "dtype", "recipe", "inputs", "weights", "ops", "outputs"});
  m.name = m.doc.contains("name") ? get_string(m.doc["name"], root / "name")
                                  : std::filesystem::path(m.file).stem().string();
  if (m.doc.contains("dtype")) {
    const std::string d = get_string(m.doc["dtype"], root / "dtype");
    auto dtype = parse_dtype(d);
    TEC_USER_CHECK(dtype && (*dtype == DType::bf16 || *dtype == DType::fp16 || *dtype == DType::fp32),
                   (root / "dtype").context())
        << "unknown model dtype '" << d << "'; expected bf16, fp16 or fp32";
    m.dtype = *dtype;
  }
  // Names: every input, op and weight names one value, once.
  std::map<std::string, std::string> defined;  // name -> pointer that defined it
  auto define = [&defined](const std::string& name, const Where& at) {
    TEC_USER_CHECK(!name.empty(), at.context()) << "names must not be empty";
    auto [it, fresh] = defined.emplace(name, at.pointer);
    TEC_USER_CHECK(fresh, at.context(name)) << "name '" << name << "' is used twice: first at " << it->second;
  };
  const json& inputs = required(m.doc, root, "inputs");
  TEC_USER_CHECK(inputs.is_array() && !inputs.empty(), (root / "inputs").context()) << "inputs must be a non-empty array";
  std::set<std::string> input_names;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Where at = root / "inputs" / i;
    require_keys(inputs[i], at, {"name", "shape", "dtype", "requires_grad"});
    const std::string name = get_string(required(inputs[i], at, "name"), at / "name");
    define(name, at / "name");
    input_names.insert(name);
  }
  const json& ops = required(m.doc, root, "ops");
  TEC_USER_CHECK(ops.is_array() && !ops.empty(), (root / "ops").context()) << "ops must be a non-empty array";
  const OpRegistry& registry = builtin_ops();
  for (size_t i = 0; i < ops.size(); ++i) {
    const Where at = root / "ops" / i;
    require_keys(ops[i], at, {"name", "op", "inputs", "attrs", "description"});
    const std::string name = get_string(required(ops[i], at, "name"), at / "name");
    const std::string op = get_string(required(ops[i], at, "op"), at / "op");
    TEC_USER_CHECK(registry.find(op) != nullptr, (at / "op").context(name, op))
        << "unknown op '" << op << "'; known ops: " << registry.names();
    TEC_USER_CHECK(!registry.find(op)->compiler_only, (at / "op").context(name, op))
        << "op '" << op << "' is made by te-compile itself (e.g. --optimizer adamw), not written in a model";
    define(name, at / "name");
    for (const std::string& suffix : registry.find(op)->extra_outputs) define(name + "." + suffix, at / "name");
    const json& op_inputs = required(ops[i], at, "inputs");
    TEC_USER_CHECK(op_inputs.is_array(), (at / "inputs").context(name, op)) << "inputs must be an array of value names";
    for (size_t j = 0; j < op_inputs.size(); ++j) (void)get_string(op_inputs[j], at / "inputs" / j);
    if (ops[i].contains("attrs"))
      TEC_USER_CHECK(ops[i]["attrs"].is_object(), (at / "attrs").context(name, op)) << "attrs must be an object";
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    const Where at = root / "ops" / i;
    const json& op_inputs = ops[i]["inputs"];
    for (size_t j = 0; j < op_inputs.size(); ++j) {
      const std::string in = op_inputs[j].get<std::string>();
      TEC_USER_CHECK(defined.count(in), (at / "inputs" / j).context(ops[i]["name"], ops[i]["op"]))
          << "input value '" << in << "' is not defined by any input or op";
    }
  }
  const json& outputs = required(m.doc, root, "outputs");
  TEC_USER_CHECK(outputs.is_array() && !outputs.empty(), (root / "outputs").context())
      << "outputs must be a non-empty array of value names";
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string out = get_string(outputs[i], root / "outputs" / i);
    TEC_USER_CHECK(defined.count(out), (root / "outputs" / i).context()) << "output '" << out << "' is never produced";
  }
  m.op_order = topological_order(ops, root / "ops", input_names);
}

void parse_weights(Model& m) {
  const Where at = Where{m.file, ""} / "weights";
  if (!m.doc.contains("weights")) return;
  const json& w = m.doc["weights"];
  require_keys(w, at, {"file", "init", "seed"});
  TEC_USER_CHECK(w.contains("file") != w.contains("init"), at.context())
      << "weights need either 'file' (a safetensors file) or 'init': 'random'";
  if (w.contains("file")) {
    std::filesystem::path path = get_string(w["file"], at / "file");
    if (path.is_relative()) path = std::filesystem::path(m.base_dir) / path;
    try {
      m.weights = read_safetensors_index(path.string());
    } catch (const Error& e) {
      throw Error(e.kind(), (at / "file").context(), e.message() + " (" + path.string() + ")", e.where());
    }
  } else {
    TEC_USER_CHECK(get_string(w["init"], at / "init") == "random", (at / "init").context())
        << "init must be 'random'";
  }
  if (w.contains("seed")) {
    TEC_USER_CHECK(w["seed"].is_number_unsigned(), (at / "seed").context()) << "seed must be an integer >= 0";
    m.seed = w["seed"].get<uint64_t>();
  }
}

AttrValue to_attr(const json& v, const AttrSpec* spec, const Where& at, const std::map<std::string, int64_t>& profile) {
  // An attribute the op does not take is kept as text: check_and_default_attributes then
  // reports it as unknown, with the list of those the op takes.
  if (!spec) return json_excerpt(v);
  const AttrType type = spec->type;
  switch (type) {
    case AttrType::int_:
      if (v.is_string()) return resolve_dim(v, at, profile);
      TEC_USER_CHECK(v.is_number_integer(), at.context()) << "expected an integer or a dim name, got " << json_excerpt(v);
      return v.get<int64_t>();
    case AttrType::float_:
      TEC_USER_CHECK(v.is_number(), at.context()) << "expected a number, got " << json_excerpt(v);
      return v.get<double>();
    case AttrType::bool_:
      TEC_USER_CHECK(v.is_boolean(), at.context()) << "expected true or false, got " << json_excerpt(v);
      return v.get<bool>();
    case AttrType::string_:
      TEC_USER_CHECK(v.is_string(), at.context()) << "expected a string, got " << json_excerpt(v);
      return v.get<std::string>();
    case AttrType::ints: {
      TEC_USER_CHECK(v.is_array(), at.context()) << "expected an array, got " << json_excerpt(v);
      std::vector<int64_t> out;
      for (size_t i = 0; i < v.size(); ++i) {
        if (v[i].is_string()) {
          out.push_back(resolve_dim(v[i], at / i, profile));
        } else {
          TEC_USER_CHECK(v[i].is_number_integer(), (at / i).context()) << "expected an integer or a dim name";
          out.push_back(v[i].get<int64_t>());
        }
      }
      return out;
    }
  }
  return int64_t{0};
}

WeightSource weight_source(const Model& m, const ParamSpec& param, const std::string& name, const Where& op_at,
                           const std::string& op_name, const std::string& op) {
  WeightSource src;
  if (!m.weights) {
    src.kind = WeightSource::Kind::random;
    src.seed = m.seed;
    src.mean = param.init_mean;
    src.stddev = param.init_stddev;
    return src;
  }
  const Where at = Where{m.file, ""} / "weights" / "file";
  auto it = m.weights->tensors.find(name);
  TEC_USER_CHECK(it != m.weights->tensors.end(), at.context(op_name, op))
      << "weights file '" << m.weights->path << "' has no tensor '" << name << "' (needed by op at "
      << op_at.pointer << ")";
  const Shape& expected = param.full ? *param.full : param.shape;
  TEC_USER_CHECK(it->second.shape == expected, at.context(op_name, op))
      << "weights file tensor '" << name << "' has shape " << it->second.shape.str() << ", expected "
      << expected.str() << " (from the attrs at " << op_at.pointer << (param.full ? "; the full tensor, which te-compile shards" : "")
      << ")";
  src.kind = WeightSource::Kind::file;
  src.path = m.weights->path;
  src.tensor = name;
  src.file_dtype = it->second.dtype;
  src.file_offset = it->second.offset;
  return src;
}

Graph build_graph(const Model& m, const std::map<std::string, int64_t>& profile, const FrontendOptions& options) {
  const Where root{m.file, ""};
  Graph g;
  g.name = m.name;
  g.source_file = m.file;
  g.recipe = m.recipe;
  g.mode = options.mode;
  g.target = options.target;
  g.dims = profile;
  const json& inputs = m.doc["inputs"];
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Where at = root / "inputs" / i;
    Value v;
    v.name = inputs[i]["name"].get<std::string>();
    v.kind = ValueKind::input;
    v.source = at.context().location;
    const json& shape = required(inputs[i], at, "shape");
    TEC_USER_CHECK(shape.is_array() && !shape.empty(), (at / "shape").context(v.name))
        << "shape must be a non-empty array of sizes or dim names";
    Shape s;
    for (size_t d = 0; d < shape.size(); ++d) s.dims.push_back(resolve_dim(shape[d], at / "shape" / d, profile));
    with_context((at / "shape").context(v.name), [&] { (void)s.numel(); });
    DType dtype = m.dtype;
    if (inputs[i].contains("dtype")) {
      const std::string d = get_string(inputs[i]["dtype"], at / "dtype");
      auto parsed = parse_dtype(d);
      TEC_USER_CHECK(parsed && (*parsed == DType::bf16 || *parsed == DType::fp16 || *parsed == DType::fp32 || *parsed == DType::int32),
                     (at / "dtype").context(v.name))
          << "unknown input dtype '" << d << "'; expected bf16, fp16, fp32, or int32 (routing given from outside: expert "
             "indices, m_splits)";
      dtype = *parsed;
    }
    v.proto = TensorProto::dense(std::move(s), dtype);
    v.proto.requires_grad = options.mode == Mode::train;  // a train plan returns dx unless told not to
    if (inputs[i].contains("requires_grad")) {
      TEC_USER_CHECK(inputs[i]["requires_grad"].is_boolean(), (at / "requires_grad").context(v.name)) << "expected a bool";
      v.proto.requires_grad = options.mode == Mode::train && inputs[i]["requires_grad"].get<bool>();
    }
    if (dtype == DType::int32) v.proto.requires_grad = false;  // indices have no gradient
    g.inputs.push_back(g.add_value(std::move(v)));
  }
  const OpRegistry& registry = builtin_ops();
  const json& ops = m.doc["ops"];
  bool marked_tensor_parallel = false;
  for (size_t i : m.op_order) {
    const Where at = root / "ops" / i;
    Node node;
    node.name = ops[i]["name"].get<std::string>();
    node.op = ops[i]["op"].get<std::string>();
    node.source = at.context().location;
    const OpDef& def = registry.get(node.op);
    const ErrorContext ctx = at.context(node.name, node.op);
    if (ops[i].contains("attrs")) {
      for (const auto& item : ops[i]["attrs"].items()) {
        const std::string& key = item.key();
        const json& value = item.value();
        auto spec = std::find_if(def.attrs.begin(), def.attrs.end(), [&](const AttrSpec& s) { return s.name == key; });
        node.attrs.values[key] = to_attr(value, spec == def.attrs.end() ? nullptr : &*spec, at / "attrs" / key, profile);
      }
    }
    const bool tensor_parallel = node.op == "linear" && node.attrs.get_string("tp_mode", "none") != "none";
    if (tensor_parallel && options.tp_size > 0) node.attrs.values["tp_size"] = options.tp_size;
    marked_tensor_parallel = marked_tensor_parallel || tensor_parallel;
    check_and_default_attributes(def, node.attrs, ctx);
    for (const auto& in : ops[i]["inputs"]) node.inputs.push_back(*g.find_value(in.get<std::string>()));
    if (def.params) {
      for (const ParamSpec& param : def.params(node.attrs, m.dtype)) {
        Value w;
        w.name = node.name + "." + param.suffix;
        TEC_USER_CHECK(!g.find_value(w.name), ctx) << "parameter name '" << w.name << "' clashes with another value";
        w.kind = ValueKind::weight;
        w.source = node.source;
        w.proto = TensorProto::dense(param.shape, param.dtype);
        w.proto.group_members = param.group_members;
        w.weight = weight_source(m, param, w.name, at, node.name, node.op);
        if (param.full)
          w.weight->shard = WeightSource::Shard{*param.full, param.shard_dim, param.full->dims[static_cast<size_t>(param.shard_dim)] /
                                                                                  param.shape.dims[static_cast<size_t>(param.shard_dim)]};
        node.inputs.push_back(g.add_value(std::move(w)));
      }
    }
    std::vector<std::string> output_names{node.name};
    for (const std::string& suffix : def.extra_outputs) output_names.push_back(node.name + "." + suffix);
    for (const std::string& name : output_names) {
      Value out;
      out.name = name;
      out.source = node.source;
      node.outputs.push_back(g.add_value(std::move(out)));
    }
    g.add_node(std::move(node));
  }
  TEC_USER_CHECK(options.tp_size <= 1 || marked_tensor_parallel, root.context())
      << "--tp " << options.tp_size
      << " shards the linears a graph marks with tp_mode \"column\" or \"row\" (TE's parallel_mode), and this graph marks "
         "none; see examples/mlp_tp.json";
  for (const auto& out : m.doc["outputs"]) g.outputs.push_back(*g.find_value(out.get<std::string>()));
  verify(g);
  return g;
}

}  // namespace

std::vector<Graph> parse_json_graphs(std::string_view text, const std::string& display_name, const std::string& base_dir,
                                     const FrontendOptions& options) {
  Model m;
  m.file = display_name;
  m.base_dir = base_dir;
  m.doc = parse_json_text(text, ErrorContext{"json", "", "", display_name});
  const Where root{m.file, ""};
  TEC_USER_CHECK(m.doc.is_object(), root.context()) << "a graph must be a JSON object, got " << m.doc.type_name();
  check_structure(m);
  parse_dims(m, options);
  m.recipe = parse_recipe(m.doc.contains("recipe") ? m.doc["recipe"] : json(), root / "recipe", options);
  parse_weights(m);
  std::vector<Graph> graphs;
  for (const auto& profile : m.profiles) graphs.push_back(build_graph(m, profile, options));
  return graphs;
}

std::vector<Graph> load_json_graphs(const std::string& path, const FrontendOptions& options) {
  const std::vector<uint8_t> bytes =
      read_file(path, ReadLimits{kMaxGraphJsonBytes, true}, "graph file", ErrorContext{"json", "", "", path});
  const std::string base_dir = std::filesystem::path(path).parent_path().string();
  return parse_json_graphs(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path,
                           base_dir.empty() ? "." : base_dir, options);
}

}  // namespace tec
