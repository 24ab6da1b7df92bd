// The ONNX frontend's driver: its stages in order (ARCHITECTURE.md §3), then one graph per
// shape profile and the report of what every node became. The stages: onnx_graph.h (the graph
// read, canonicalised, its constants found), onnx_claims.cpp (what tec takes), onnx_patterns.h
// (the exporters' spellings of TE ops, one family per file in patterns/), onnx_builder.h (tec
// nodes), onnx_nodes.cpp (the ONNX ops one by one).
#include "frontend/onnx/onnx_import.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "frontend/onnx/onnx_builder.h"
#include "ops/common.h"

namespace tec {

namespace {

using onnx::ConstMap;
using onnx::ShapeOf;
using onnx::Tensor;
using onnx::attr_int;
using onnx::tec_dtype;

class Importer {
 public:
  Importer(const onnx::Model& m, const FrontendOptions& o)
      : model_(m), opt_(o), graph_(analysed(m, problems_)), matches_(graph_, problems_), builder_(graph_, matches_) {}

  OnnxImport run() {
    if (opt_.onnx_patterns) matches_.find_patterns();
    matches_.check_no_kv_cache();
    matches_.find_padding_masks();
    matches_.check_qdq_placement();
    throw_problems();
    OnnxImport result;
    for (const auto& profile : profiles()) result.graphs.push_back(build(profile));
    throw_problems();
    for (const onnx::Node& n : graph_.nodes) {
      std::string became = became_[static_cast<size_t>(n.index)];
      if (const auto note = graph_.canonical_notes.find(n.index); note != graph_.canonical_notes.end())
        became += " [canonical form: " + note->second + "]";
      // The op the model wrote, where a rewrite changed it (model_ holds the file's nodes).
      const std::string& op =
          static_cast<size_t>(n.index) < model_.nodes.size() ? model_.nodes[static_cast<size_t>(n.index)].op_type : n.op_type;
      result.nodes.push_back({n.name, op, became});
    }
    return result;
  }

 private:
  // The graph read: checked against the claims, canonicalised, its constants found.
  static onnx::OnnxGraph analysed(const onnx::Model& m, onnx::Problems& problems) {
    onnx::OnnxGraph graph(m);
    graph.index_values();
    graph.order_nodes();
    if (onnx::check_claims(graph, problems)) problems.throw_if_any(graph.file_ctx(), m.opset);  // (no stage below may read such a node)
    graph.canonicalize();
    graph.skip_noop_casts();
    graph.find_constants();
    onnx::check_constant_inputs(graph, problems);
    graph.fold_known_constants();
    graph.find_ranks();
    return graph;
  }

  const onnx::Node& node(int i) const { return graph_.node(i); }
  ErrorContext node_ctx(const onnx::Node& n) const { return graph_.node_ctx(n); }
  ErrorContext file_ctx() const { return graph_.file_ctx(); }
  void throw_problems() { problems_.throw_if_any(file_ctx(), model_.opset); }

  // ---- profiles --------------------------------------------------------------------------

  std::vector<std::map<std::string, int64_t>> profiles() {
    std::set<std::string> names;
    for (const auto& in : model_.inputs) {
      const ErrorContext ctx{"onnx", in.name, "", model_.file + " graph input '" + in.name + "'"};
      TEC_UNSUPPORTED_CHECK(in.elem_type >= 0, ctx) << "input '" << in.name << "' is not a tensor";
      // (Integer inputs are int32 in the plan: token ids, padding masks, or any index the general path reads.)
      TEC_UNSUPPORTED_CHECK(onnx::is_integer_input(in.elem_type) || tec_dtype(in.elem_type).has_value(), ctx)
          << "input '" << in.name << "' is " << onnx::elem_type_name(in.elem_type)
          << "; tec takes FLOAT, FLOAT16, BFLOAT16, INT64 and INT32 inputs (integers as int32)";
      TEC_USER_CHECK(in.has_shape, ctx) << "input '" << in.name << "' has no shape; tec needs every input's rank";
      for (size_t d = 0; d < in.dims.size(); ++d) {
        if (in.dims[d].value >= 1) continue;
        TEC_USER_CHECK(!in.dims[d].param.empty(), ctx)
            << "dim " << d << " of input '" << in.name << "' is dynamic and unnamed; name it (dim_param) or fix it";
        names.insert(in.dims[d].param);
      }
    }
    size_t count = 1;
    for (const auto& [name, sizes] : opt_.dim_overrides) {
      TEC_USER_CHECK(names.count(name), (ErrorContext{"onnx", "", "", "--shape/--profiles " + name}))
          << "the model has no symbolic dim '" << name << "'"
          << (names.empty() ? std::string(" (all its dims are fixed)") : "; its symbolic dims: " + join(names));
      TEC_USER_CHECK(count == 1 || sizes.size() == 1 || sizes.size() == count, (ErrorContext{"onnx", "", "", "--profiles " + name}))
          << "profile lists differ in length";
      count = std::max(count, sizes.size());
      for (int64_t s : sizes)
        TEC_USER_CHECK(s >= 1 && s <= kMaxDim, (ErrorContext{"onnx", "", "", "--shape " + name})) << "size " << s << " is out of range";
    }
    for (const auto& name : names)
      TEC_USER_CHECK(opt_.dim_overrides.count(name), (ErrorContext{"onnx", "", "", model_.file}))
          << "the model's dim '" << name << "' is symbolic; give its size with --shape " << name << "=N (or --profiles "
          << name << "=N1,N2,...)";
    std::vector<std::map<std::string, int64_t>> out;
    for (size_t p = 0; p < count; ++p) {
      std::map<std::string, int64_t> profile;
      for (const auto& [name, sizes] : opt_.dim_overrides) profile[name] = sizes[sizes.size() == 1 ? 0 : p];
      out.push_back(std::move(profile));
    }
    return out;
  }

  static std::string join(const std::set<std::string>& names) {
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
    return s;
  }

  Graph build(const std::map<std::string, int64_t>& profile) {
    onnx::Env e;
    e.g.name = model_.graph_name.empty() ? std::filesystem::path(model_.file).stem().string() : model_.graph_name;
    e.g.source_file = model_.file;
    e.g.mode = opt_.mode;
    e.g.target = opt_.target;
    e.g.dims = profile;
    // The model's Q/DQ pairs choose the recipe; --recipe replaces it (tec's own scaling then,
    // with the Q/DQ weights dequantized).
    e.g.recipe = Recipe::defaults(opt_.recipe ? *opt_.recipe : matches_.qdq_recipe ? *matches_.qdq_recipe : RecipeKind::bf16);
    if (e.g.recipe.kind == RecipeKind::fp8_static && matches_.qdq_recipe != RecipeKind::fp8_static)
      throw Error(ErrorKind::usage, file_ctx(),
                  matches_.qdq_recipe ? "fp8-static takes a per-tensor scale for each GEMM input from the model's Q/DQ pairs; this model's "
                                "pairs have block scales (recipe " + std::string(to_string(*matches_.qdq_recipe)) + ")"
                              : std::string("fp8-static takes its scales from the model's QuantizeLinear/DequantizeLinear pairs; "
                                            "this model has none (use fp8-current or fp8-delayed)"));
    builder_.keep_static_scales(e.g.recipe.kind == RecipeKind::fp8_static);
    for (const auto& in : model_.inputs) {
      Value v;
      v.name = builder_.unique(e, in.name);
      v.kind = ValueKind::input;
      v.source = model_.file + " graph input '" + in.name + "'";
      std::vector<int64_t> dims;
      for (const auto& d : in.dims) dims.push_back(d.value >= 1 ? d.value : profile.at(d.param));
      Shape s(dims);
      with_context(ErrorContext{"onnx", in.name, "", v.source}, [&] { (void)s.numel(); });
      // Integer inputs (token ids, padding masks) are int32 in the plan; te-run narrows INT64 .npy files.
      v.proto = TensorProto::dense(std::move(s), onnx::is_integer_input(in.elem_type) ? DType::int32 : *tec_dtype(in.elem_type));
      v.proto.requires_grad = opt_.mode == Mode::train && !onnx::is_integer_input(in.elem_type);
      const ValueId id = e.g.add_value(std::move(v));
      e.runtime[in.name] = id;
      e.g.inputs.push_back(id);
    }
    e.consts = graph_.known;
    ShapeOf shape_of = [&e](const std::string& v) -> std::optional<Shape> {
      auto it = e.runtime.find(v);
      if (it != e.runtime.end()) return e.g.value(it->second).proto.shape;
      const auto in_mask = e.mask_values.find(v);  // (a padding mask's values: their shapes, for Shape nodes)
      if (in_mask != e.mask_values.end()) return Shape(in_mask->second->dims);
      return std::nullopt;
    };
    for (const auto& [mask, input] : matches_.padding.input) {  // the padding masks' inputs at a probe of all tokens
      const Shape dims = e.g.value(e.runtime.at(input)).proto.shape;
      e.mask_values[input] = std::make_shared<const Tensor>(
          Tensor{.elem_type = onnx::kInt64, .dims = dims.dims, .floats = {}, .ints = std::vector<int64_t>(static_cast<size_t>(dims.numel()), 1)});
    }
    became_.assign(graph_.nodes.size(), "");
    emitted_.assign(graph_.nodes.size(), {});
    std::set<std::string> failed;  // values a failed node should have made
    for (int i : graph_.order) {
      const onnx::Node& n = node(i);
      const int gid = matches_.group_of[static_cast<size_t>(i)];
      bool blocked = false;
      for (const auto& in : n.inputs) blocked = blocked || failed.count(in);
      if (blocked) {
        for (const auto& out : n.outputs) failed.insert(out);
        continue;
      }
      try {
        if (graph_.constant_node[static_cast<size_t>(i)]) {
          if (!e.consts.count(n.outputs.at(0))) {
            auto outs = with_context(node_ctx(n), [&] { return onnx::fold(n, e.consts, shape_of); });
            for (size_t o = 0; o < outs.size() && o < n.outputs.size(); ++o) e.consts[n.outputs[o]] = std::move(outs[o]);
          }
          became_[static_cast<size_t>(i)] = "folded into a constant";
          continue;
        }
        if (graph_.noop_cast[static_cast<size_t>(i)]) {
          became_[static_cast<size_t>(i)] =
              n.op_type == "Identity" ? "nothing: an Identity (its readers read its input)"
                                      : "nothing: a Cast to the type its input already has, or a round trip through FLOAT back to it "
                                        "(its readers read the input)";
          continue;
        }
        if (matches_.padding.is_mask_node[static_cast<size_t>(i)]) {
          // Its values at the probe of all tokens, so that Shape nodes reading it fold; the
          // attention's emission checks the mask itself (probe_padding).
          try {
            ConstMap values = e.consts;
            values.insert(e.mask_values.begin(), e.mask_values.end());
            auto outs = onnx::fold(n, values, shape_of);
            for (size_t o = 0; o < outs.size() && o < n.outputs.size(); ++o) e.mask_values[n.outputs[o]] = std::move(outs[o]);
          } catch (const Error&) {
            // (no shape then: a Shape reading it, or the probe, names the problem)
          }
          became_[static_cast<size_t>(i)] = "part of attention's padding mask from input '" + matches_.padding.input_of_node(i) +
                                            "': the attention reads each sequence's length (sequence_lengths)";
          continue;
        }
        if (gid >= 0) {
          const onnx::Group& grp = matches_.groups[static_cast<size_t>(gid)];
          if (grp.root == i && !emit_group_or_general(e, grp)) continue;  // (its members' reports say why)
          const int shown = grp.kind == onnx::Group::Kind::gated ? grp.members.back() : grp.root;
          became_[static_cast<size_t>(i)] = grp.describe + " ('" + node(shown).name + "')";
          continue;
        }
        emit_plain(e, i, matches_.why_no_pattern(i));
      } catch (const Error& err) {
        if (err.kind() != ErrorKind::unsupported && err.kind() != ErrorKind::invalid_input) throw;
        problems_.add(n, err.message());
        for (const auto& out : n.outputs) failed.insert(out);
      }
    }
    for (const auto& out : model_.outputs) {
      if (failed.count(out.name)) continue;
      auto it = e.runtime.find(out.name);
      if (it == e.runtime.end()) {
        const int p = graph_.producer_of(out.name);
        if (p >= 0) problems_.add(node(p), "graph output '" + out.name + "' is a constant; tec compiles run-time computations only");
        else TEC_UNSUPPORTED(file_ctx()) << "graph output '" << out.name << "' is a constant";
        continue;
      }
      ValueId id = it->second;
      // An output must be made by a node of its own (an input or an alias is copied).
      if (e.g.value(id).producer < 0 || e.g.value(id).name != out.name ||
          std::count(e.g.outputs.begin(), e.g.outputs.end(), id)) {
        const onnx::Node synthetic{.index = -1, .name = "output_" + out.name, .op_type = "Identity"};
        const onnx::Node& src = graph_.producer_of(out.name) >= 0 ? node(graph_.producer_of(out.name)) : synthetic;
        id = builder_.emit(e, src, "identity", {id}, {}, {}, out.name);
      }
      e.g.outputs.push_back(id);
      if (out.elem_type > 0 && tec_dtype(out.elem_type) && *tec_dtype(out.elem_type) != e.g.value(id).proto.dtype)
        problems_.add_graph(out.name, "graph output '" + out.name + "' is declared " + onnx::elem_type_name(out.elem_type) + " but computes " +
                    std::string(to_string(e.g.value(id).proto.dtype)));
    }
    throw_problems();
    verify(e.g);
    return without_unread_nodes(std::move(e.g));
  }

  // One node as it is (emit_node), and what it became for the report; `why_general` says why
  // no pattern took a node that went the general path (and any node of a refused pattern).
  void emit_plain(onnx::Env& e, int i, const std::string& why_general, bool refused_pattern = false) {
    const size_t before = e.g.nodes.size();
    builder_.emit_node(e, node(i));
    std::string ops;
    bool general = false;
    for (size_t k = before; k < e.g.nodes.size(); ++k) {
      ops += (ops.empty() ? "" : " + ") + e.g.nodes[k].op;
      general = general || builtin_ops().get(e.g.nodes[k].op).general;
      emitted_[static_cast<size_t>(i)].push_back(e.g.nodes[k].name);
    }
    became_[static_cast<size_t>(i)] = ops.empty() ? "an alias"
                                      : ops + (matches_.qdq_gemms.count(i) ? " (input quantized by its Q/DQ pair)" : "") +
                                            (general || refused_pattern ? " (general path: " + why_general + ")" : "");
  }

  // A pattern whose emission refuses what it found (rope tables that are no rope's, a mask that
  // is no padding, shapes its op does not take) leaves its nodes to the general path, which

  // computes them as the model writes them; the report says which pattern and why. False then.
  // A pattern whose nodes cannot all be emitted alone (an input only the pattern reads, such as
  // a padding mask it probed) keeps the pattern's error.
  bool emit_group_or_general(onnx::Env& e, const onnx::Group& grp) {
    try {
      builder_.emit_group(e, grp);
      return true;
    } catch (const Error& err) {
      if (err.kind() != ErrorKind::unsupported || !members_stand_alone(e, grp)) throw;
      std::vector<int> members;  // in topological order
      for (int i : graph_.order)
        if (std::find(grp.members.begin(), grp.members.end(), i) != grp.members.end()) members.push_back(i);
      for (int m : members) emit_plain(e, m, "the pattern '" + grp.describe + "' found here refused it: " + err.message(), true);
      return false;
    }
  }

  // Whether every input of the group's nodes is a constant, emitted already, or made by another of them.
  bool members_stand_alone(const onnx::Env& e, const onnx::Group& grp) const {
    std::set<std::string> made;
    for (int m : grp.members) made.insert(node(m).outputs.begin(), node(m).outputs.end());
    for (int m : grp.members)
      for (const std::string& in : node(m).inputs)
        if (!in.empty() && !e.consts.count(in) && !e.runtime.count(in) && !made.count(in)) return false;
    return true;
  }


  // The graph without the nodes nothing reads (a split into heads a pattern read around), and
  // the values only they used; the report says so for the ONNX nodes that made them.
  Graph without_unread_nodes(Graph g) {
    std::vector<bool> read(g.values.size(), false), kept(g.nodes.size(), false);
    for (ValueId out : g.outputs) read[static_cast<size_t>(out)] = true;
    for (size_t n = g.nodes.size(); n-- > 0;) {
      const Node& node = g.nodes[n];
      kept[n] = std::any_of(node.outputs.begin(), node.outputs.end(), [&](ValueId v) { return read[static_cast<size_t>(v)]; });
      if (kept[n])
        for (ValueId in : node.inputs) read[static_cast<size_t>(in)] = true;
    }
    if (std::all_of(kept.begin(), kept.end(), [](bool k) { return k; })) return g;
    // `g` keeps its name, recipe, mode and the rest; its values and nodes are rebuilt.
    std::vector<Value> values = std::move(g.values);
    std::vector<Node> nodes = std::move(g.nodes);
    const std::vector<ValueId> inputs = std::move(g.inputs), outputs = std::move(g.outputs);
    g.values.clear();
    g.nodes.clear();
    g.inputs.clear();
    g.outputs.clear();
    std::vector<ValueId> moved(values.size(), -1);
    auto take = [&](ValueId v) {
      if (moved[static_cast<size_t>(v)] < 0) {
        Value copy = values[static_cast<size_t>(v)];
        copy.producer = -1;
        moved[static_cast<size_t>(v)] = g.add_value(std::move(copy));
      }
      return moved[static_cast<size_t>(v)];
    };
    for (ValueId in : inputs) g.inputs.push_back(take(in));
    std::set<std::string> removed;
    for (size_t n = 0; n < nodes.size(); ++n) {
      if (!kept[n]) {
        removed.insert(nodes[n].name);
        continue;
      }
      Node node = std::move(nodes[n]);
      for (ValueId& in : node.inputs) in = take(in);
      for (ValueId& o : node.outputs) o = take(o);
      g.add_node(std::move(node));
    }
    for (ValueId o : outputs) g.outputs.push_back(take(o));
    for (size_t i = 0; i < emitted_.size(); ++i)
      if (!emitted_[i].empty() && std::all_of(emitted_[i].begin(), emitted_[i].end(), [&](const std::string& name) { return removed.count(name); }))
        became_[i] = "nothing: what it made (" + became_[i] + ") is read by no one once a pattern read around it";
    verify(g);
    return g;
  }


  const onnx::Model& model_;
  const FrontendOptions& opt_;
  onnx::Problems problems_;
  onnx::OnnxGraph graph_;
  onnx::Matcher matches_;
  onnx::Builder builder_;
  std::vector<std::string> became_;                // per ONNX node: what it became, for the report
  std::vector<std::vector<std::string>> emitted_;  // per ONNX node, the tec nodes it became (build)
};

}  // namespace

OnnxImport import_onnx(const onnx::Model& model, const FrontendOptions& options) { return Importer(model, options).run(); }

OnnxImport load_onnx_graphs(const std::string& path, const FrontendOptions& options) {
  return import_onnx(onnx::read_model_file(path), options);
}

}  // namespace tec
