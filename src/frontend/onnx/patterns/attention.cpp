// Attention as exporters spell it: Softmax(MatMul(q, Transpose(k)) x scale + mask) MatMul v, the
// scale on the scores or split over q and k, Hugging Face's repeat_kv (GQA) and its heads split
// and merged around it, transformers' NaN guard after the softmax -> tec's attention; a
// constant causal mask becomes its causal flag, a padding mask its sequence lengths
// (padding_mask.cpp). Also the check that names a KV cache input.
#include "frontend/onnx/onnx_builder.h"

namespace tec::onnx {

namespace {

// Perm of a Transpose that swaps the last two axes and keeps the others.
bool swaps_last_two(const Node& t) {
  const auto perm = attr_ints(t, "perm");
  if (!perm || perm->size() < 2) return false;
  const int64_t n = static_cast<int64_t>(perm->size());
  for (int64_t i = 0; i < n - 2; ++i)
    if ((*perm)[static_cast<size_t>(i)] != i) return false;
  return (*perm)[static_cast<size_t>(n - 2)] == n - 1 && (*perm)[static_cast<size_t>(n - 1)] == n - 2;
}

// Whether a constant mask is the causal one: [.., S, S] (leading dims 1), 0 on and below the
// diagonal, at most -1e4 above it (-inf, or the dtype's lowest: exp underflows to exactly 0
// there for any score below 9000, as a masked key's weight is).
bool is_causal_mask(const Tensor& m, int64_t seq, int64_t seq_kv) {
  if (m.dims.size() < 2 || seq != seq_kv || m.dims[m.dims.size() - 1] != seq || m.dims[m.dims.size() - 2] != seq) return false;
  // Leading dims (batch, heads) may repeat the [S, S] mask, as a mask expanded to the batch
  // does: every copy must be the causal one.
  const int64_t copies = m.numel() / (seq * seq);
  for (int64_t c = 0; c < copies; ++c)
    for (int64_t i = 0; i < seq; ++i)
      for (int64_t j = 0; j < seq; ++j) {
        const double v = m.at(static_cast<size_t>((c * seq + i) * seq + j));
        if (j <= i ? v != 0.0 : !(v <= -1e4)) return false;
      }
  return true;
}

// Whether some row of a constant additive mask masks every key (all at most -1e4).
bool masks_a_whole_row(const Tensor& m) {
  if (m.dims.empty() || !m.is_float()) return true;
  const int64_t keys = m.dims.back(), rows = keys > 0 ? m.numel() / keys : 0;
  for (int64_t r = 0; r < rows; ++r) {
    bool all = true;
    for (int64_t j = 0; j < keys && all; ++j) all = m.at(static_cast<size_t>(r * keys + j)) <= -1e4;
    if (all) return true;
  }
  return false;
}

// Whether reshaping [d0, d1, d2] by the ONNX shape `dims` (0 copies a dim, -1 is inferred)
// gives `want`.
bool reshapes_to(const Shape& from, const std::vector<int64_t>& dims, const std::vector<int64_t>& want) {
  if (dims.size() != want.size()) return false;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = dims[i] == 0 && i < from.rank() ? from[i] : dims[i];
    if (d != -1 && d != want[i]) return false;
  }
  return true;
}

}  // namespace

// v = Mul(v', c) (either way round) by a constant, swallowed: v becomes v', c joins the scales.
void Matcher::strip_constant_factor(std::string& v, Group& g) const {
  const int m = graph_.producer_of(v);
  if (m < 0 || !graph_.internal(v) || !is_op(m, "Mul")) return;
  const auto& in = node(m).inputs;
  for (int side = 0; side < 2; ++side)
    if (graph_.is_constant(in[static_cast<size_t>(side)]) && !graph_.is_constant(in[static_cast<size_t>(1 - side)])) {
      g.scales.emplace_back(in[static_cast<size_t>(side)], false);
      g.members.push_back(m);
      v = in[static_cast<size_t>(1 - side)];
      return;
    }
}

// Hugging Face's repeat_kv: v = Reshape(Expand(Unsqueeze(x, axis 2), [B, KVH, n, S, D]),
// [B, KVH x n, S, D]), each read only here, with constant shapes: query head h then reads kv
// head h / n, as tec's GQA attention does. v becomes x; the Expand's dims are returned.
std::vector<int64_t> Matcher::strip_repeat_kv(std::string& v, Group& g) const {
  const int r = graph_.producer_of(v);
  if (r < 0 || !graph_.internal(v) || !is_op(r, "Reshape") || node(r).inputs.size() < 2 || !graph_.known.count(node(r).inputs[1])) return {};
  const std::string expanded = node(r).inputs[0];
  const int e = graph_.producer_of(expanded);
  if (e < 0 || !graph_.internal(expanded) || !is_op(e, "Expand") || node(e).inputs.size() < 2 || !graph_.known.count(node(e).inputs[1])) return {};
  const std::string unsqueezed = node(e).inputs[0];
  const int u = graph_.producer_of(unsqueezed);
  if (u < 0 || !graph_.internal(unsqueezed) || !is_op(u, "Unsqueeze")) return {};
  std::optional<std::vector<int64_t>> axes = attr_ints(node(u), "axes");
  if (!axes && node(u).inputs.size() > 1 && graph_.known.count(node(u).inputs[1])) axes = as_ints(*graph_.known.at(node(u).inputs[1]));
  const std::string x = node(u).inputs[0];
  // x's rank may be unknown here (a rope's output): the emitter checks its shape.
  if (!axes || *axes != std::vector<int64_t>{2} || (graph_.rank_of(x) != 4 && graph_.rank_of(x) != -1) || graph_.is_constant(x)) return {};
  const std::vector<int64_t> d = as_ints(*graph_.known.at(node(e).inputs[1])), to = as_ints(*graph_.known.at(node(r).inputs[1]));
  if (d.size() != 5 || to.size() != 4 || d[2] < 1 || to[0] != d[0] || to[1] % d[2] != 0 || to[1] / d[2] != d[1] || to[2] != d[3] ||
      to[3] != d[4])
    return {};
  g.members.insert(g.members.end(), {r, e, u});
  v = x;
  return d;
}

// v = Transpose(Reshape(flat, [B, S, H, D]), perm [0, 2, 1, 3]), both read only here, with a
// known shape constant: an exporter's split of [B, S, H x D] into heads.
std::optional<Matcher::HeadSplit> Matcher::head_split_of(const std::string& v) const {
  const int t = graph_.producer_of(v);
  if (t < 0 || !graph_.internal(v) || !is_op(t, "Transpose") || attr_ints(node(t), "perm") != std::vector<int64_t>{0, 2, 1, 3})
    return std::nullopt;
  const std::string split = node(t).inputs[0];
  const int r = graph_.producer_of(split);
  if (r < 0 || !graph_.internal(split) || !is_op(r, "Reshape") || node(r).inputs.size() < 2 || graph_.rank_of(node(r).inputs[0]) != 3)
    return std::nullopt;
  const auto shape = graph_.known.find(node(r).inputs[1]);
  if (shape == graph_.known.end()) return std::nullopt;
  const std::vector<int64_t> dims = as_ints(*shape->second);
  if (dims.size() != 4 || dims[2] < 1) return std::nullopt;
  return HeadSplit{node(r).inputs[0], node(r).inputs[1], dims[2], {t, r}};
}

// scales q and k^T by sqrt(scale) each; Hugging Face's eager attention, which divides the
// scores): Softmax(MatMul(q [x c], Transpose(k) [x c]) [x or / c] [+ mask]) MatMul v, q, k, v
// [batch, heads, seq, head_dim] (or [batch x heads, seq, head_dim]) -> tec's attention.
void Matcher::match_attention(int sm) {
  const Node& softmax = node(sm);
  const int64_t axis = attr_int(softmax, "axis", -1);
  if (axis != -1 && axis != graph_.rank_of(softmax.inputs[0]) - 1) return;
  std::string probs = softmax.outputs[0];
  const std::vector<int> guard = nan_guard_of(probs);
  if (!guard.empty()) probs = node(guard.back()).outputs[0];
  const int pv = sole_consumer(probs, "MatMul");
  if (pv < 0 || node(pv).inputs[0] != probs || graph_.is_constant(node(pv).inputs[1])) return;
  Group g{.kind = Group::Kind::attention, .members = {sm, pv}, .root = pv};
  g.members.insert(g.members.end(), guard.begin(), guard.end());
  g.nan_guard = !guard.empty();
  g.value = node(pv).inputs[1];
  std::string scores = softmax.inputs[0];
  // + mask: the Add's other operand, beside the scores' chain.
  if (const int add = graph_.producer_of(scores); add >= 0 && graph_.internal(scores) && is_op(add, "Add")) {
    for (int side = 0; side < 2 && g.mask.empty(); ++side) {
      const std::string chain = node(add).inputs[static_cast<size_t>(side)];
      const int p = graph_.producer_of(chain);
      if (p >= 0 && graph_.internal(chain) && (is_op(p, "MatMul") || is_op(p, "Mul") || is_op(p, "Div"))) {
        g.mask = node(add).inputs[static_cast<size_t>(1 - side)];
        scores = chain;
      }
    }
    if (g.mask.empty()) return;
    g.members.push_back(add);
  }
  // x c or / c after the MatMul.
  if (const int m = graph_.producer_of(scores); m >= 0 && graph_.internal(scores) && (is_op(m, "Mul") || is_op(m, "Div"))) {
    const auto& in = node(m).inputs;
    const bool divide = node(m).op_type == "Div";
    if (graph_.is_constant(in[1]) && !graph_.is_constant(in[0])) {
      g.scales.emplace_back(in[1], divide);
      scores = in[0];
    } else if (!divide && graph_.is_constant(in[0]) && !graph_.is_constant(in[1])) {
      g.scales.emplace_back(in[0], false);
      scores = in[1];
    } else {
      return;
    }
    g.members.push_back(m);
  }
  const int qk = graph_.producer_of(scores);
  if (qk < 0 || !graph_.internal(scores) || !is_op(qk, "MatMul")) return;
  g.members.push_back(qk);
  std::string q = node(qk).inputs[0], keys_t = node(qk).inputs[1];
  strip_constant_factor(q, g);
  strip_constant_factor(keys_t, g);
  const int t = graph_.producer_of(keys_t);
  if (t < 0 || !graph_.internal(keys_t) || !is_op(t, "Transpose") || !swaps_last_two(node(t))) return;
  g.members.push_back(t);
  std::string k = node(t).inputs[0];
  strip_constant_factor(k, g);
  g.key_repeat = strip_repeat_kv(k, g);
  g.value_repeat = strip_repeat_kv(g.value, g);
  if (g.key_repeat.empty() != g.value_repeat.empty()) return;  // one of the two repeated: not GQA as tec knows it
  if (graph_.is_constant(q) || graph_.is_constant(k)) return;
  g.x = q;
  g.key = k;
  g.describe = "MatMul/Softmax/MatMul attention -> attention";
  if (!g.key_repeat.empty()) g.describe += " (repeat_kv's Expand of the keys and values: GQA)";
  if (g.nan_guard) g.describe += " (the softmax's NaN guard, Where(IsNaN(p), 0, p), with it)";
  // Heads split from flat tensors on the way in, and merged on the way out: tec's attention
  // reads and writes the flat [B, S, H x D] form, so those Transposes and Reshapes go too.
  const auto sq = head_split_of(g.x), sk = head_split_of(g.key), sv = head_split_of(g.value);
  if (sq && sk && sv) {
    for (const HeadSplit* split : {&*sq, &*sk, &*sv}) {
      g.members.insert(g.members.end(), split->members.begin(), split->members.end());
      g.split_shapes.push_back(split->shape);
    }
    g.x = sq->flat;
    g.key = sk->flat;
    g.value = sv->flat;
    g.heads = sq->heads;
    g.kv_heads = sk->heads;
    g.describe += " (heads split and merged in place)";
  }
  const int merge = sole_consumer(node(pv).outputs[0], "Transpose");
  const int flatten = merge >= 0 ? sole_consumer(node(merge).outputs[0], "Reshape") : -1;
  if (flatten >= 0 && attr_ints(node(merge), "perm") == std::vector<int64_t>{0, 2, 1, 3} && node(flatten).inputs.size() > 1 &&
      graph_.known.count(node(flatten).inputs[1]) &&
      (graph_.known.at(node(flatten).inputs[1])->numel() == 3 || graph_.known.at(node(flatten).inputs[1])->numel() == 2)) {
    g.members.insert(g.members.end(), {merge, flatten});
    g.root = flatten;
    g.merge_shape = node(flatten).inputs[1];
  }
  add_group(std::move(g));
}

// transformers' sdpa attention after its softmax: Where(IsNaN(p), 0, p), zeroing the rows
// whose every key is masked. Returns {IsNaN, Where} when `probs` feeds exactly that, else {}.
std::vector<int> Matcher::nan_guard_of(const std::string& probs) const {
  const auto& readers = graph_.consumers_of(probs);
  if (readers.size() != 2 || graph_.outputs.count(probs)) return {};
  const int is_nan = is_op(readers[0], "IsNaN") ? readers[0] : is_op(readers[1], "IsNaN") ? readers[1] : -1;
  const int where = is_op(readers[0], "Where") ? readers[0] : is_op(readers[1], "Where") ? readers[1] : -1;
  if (is_nan < 0 || where < 0 || !graph_.internal(node(is_nan).outputs[0])) return {};
  const auto& in = node(where).inputs;
  if (in[0] != node(is_nan).outputs[0] || in[2] != probs || !graph_.known.count(in[1])) return {};
  const Tensor& zero = *graph_.known.at(in[1]);
  if (!zero.is_float() || zero.numel() != 1 || zero.at(0) != 0.0) return {};
  return {is_nan, where};
}

// A graph input whose values an attention reads as keys or values after Concat with the new
// ones: a KV cache (transformers' use_cache=True export, past_key_values.* -> present.*).
// tec's attention patterns compute a forward over the whole sequence, so such a model is
// named rather than compiled with a cache it does not have.
void Matcher::check_no_kv_cache() {
  std::map<std::string, int32_t> float_inputs;
  for (const auto& in : graph_.model.inputs)
    if (is_float_type(in.elem_type) && !graph_.known.count(in.name)) float_inputs[in.name] = in.elem_type;
  // `v` through the views exporters put between a cache and the attention (a Concat of one
  // input among them: transformers' first update of an empty cache layer).
  auto through_views = [&](std::string v) {
    static const std::set<std::string> views = {"Reshape", "Unsqueeze", "Squeeze", "Expand", "Transpose", "Identity", "Cast", "Flatten"};
    for (int depth = 0; depth < 16; ++depth) {
      const int p = graph_.producer_of(v);
      const bool single_concat = p >= 0 && node(p).op_type == "Concat" && node(p).inputs.size() == 1;
      if (p < 0 || (!views.count(node(p).op_type) && !single_concat) || node(p).inputs.empty()) break;
      v = node(p).inputs[0];
    }
    return v;
  };
  std::set<std::string> named;
  for (const Group& g : groups) {
    if (g.kind != Group::Kind::attention) continue;
    for (const bool keys : {true, false}) {
      const int cat = graph_.producer_of(through_views(keys ? g.key : g.value));
      if (cat < 0 || node(cat).op_type != "Concat") continue;
      for (const std::string& part : node(cat).inputs) {
        const std::string cache = through_views(part);
        if (!float_inputs.count(cache) || !named.insert(cache).second) continue;
        problems_.add(node(cat), "input '" + cache + "' is a KV cache (use_cache=True): an attention reads it as its " +
                               (keys ? "keys" : "values") + " after this Concat with the new ones. tec compiles a "
                               "forward over the whole sequence: export with use_cache=False (text generation over a KV cache "
                               "is not built yet). --no-onnx-patterns compiles this graph as it is, one step at the past length "
                               "its profile fixes, on the general path");
      }
    }
  }
}

ValueId Builder::emit_spelled_attention(Env& e, const Group& grp, ValueId q, const std::string& out) {
  const Node& root = node(grp.root);
  const ErrorContext ctx = graph_.node_ctx(root);
  const ValueId k = runtime(e, grp.key, root), v = runtime(e, grp.value, root);
  // repeat_kv's Expand must have repeated exactly these keys and values.
  for (const auto& [t, d] : {std::pair{k, &grp.key_repeat}, std::pair{v, &grp.value_repeat}}) {
    if (d->empty()) continue;
    const Shape& s = e.g.value(t).proto.shape;
    TEC_UNSUPPORTED_CHECK(s.rank() == 4 && s[0] == (*d)[0] && s[1] == (*d)[1] && s[2] == (*d)[3] && s[3] == (*d)[4], ctx)
        << "repeat_kv's Expand to [" << (*d)[0] << ", " << (*d)[1] << ", " << (*d)[2] << ", " << (*d)[3] << ", " << (*d)[4]
        << "] reads '" << e.g.value(t).name << "' " << s.str() << ", not [batch, kv_heads, seq, head_dim]";
  }
  if (grp.heads > 0) {
    // The Reshapes this replaces must have split [B, S, H x D] into [B, S, H, D].
    const ValueId flats[3] = {q, k, v};
    const int64_t heads[3] = {grp.heads, grp.kv_heads, grp.kv_heads};
    for (int i = 0; i < 3; ++i) {
      const Shape& f = e.g.value(flats[i]).proto.shape;
      const std::vector<int64_t> dims = as_ints(*e.consts.at(grp.split_shapes[static_cast<size_t>(i)]));
      TEC_UNSUPPORTED_CHECK(f.rank() == 3 && f[2] % heads[i] == 0 && reshapes_to(f, dims, {f[0], f[1], heads[i], f[2] / heads[i]}), ctx)
          << "attention's heads are split from '" << e.g.value(flats[i]).name << "' " << f.str() << " by a Reshape that is not "
          << "[batch, seq, heads, head_dim]";
    }
  }
  double scale = 1.0;
  for (const auto& [name, divide] : grp.scales) {
    const Tensor& c = *e.consts.at(name);
    TEC_UNSUPPORTED_CHECK(c.numel() == 1 && c.is_float(), ctx)
        << "the attention's scores are scaled by constant '" << name << "', which is not one float";
    scale = divide ? scale / c.at(0) : scale * c.at(0);
  }
  const Shape qs = e.g.value(q).proto.shape, ks = e.g.value(k).proto.shape;  // copies: operand() below may add a value
  TEC_UNSUPPORTED_CHECK(qs.rank() == 3 || qs.rank() == 4, ctx)
      << "attention's q is " << qs.str() << "; tec takes [batch, heads, seq, head_dim] or [batch x heads, seq, head_dim]";
  Attributes a;
  a.values["scale"] = scale;
  a.values["causal"] = false;
  std::optional<ValueId> mask;
  if (!grp.mask.empty()) {
    const int64_t seq = qs[qs.rank() - 2], seq_kv = ks[ks.rank() - 2];
    const bool padding = matches_.padding.input.count(grp.mask) != 0;
    if (padding) {
      a.values["causal"] = probe_padding(e, grp.mask, seq, ctx).causal;
      a.values["mask"] = std::string("padding");
      mask = sequence_lengths_of(e, matches_.padding.input.at(grp.mask), root);
    } else if (e.consts.count(grp.mask) && e.consts.at(grp.mask)->is_float() && is_causal_mask(*e.consts.at(grp.mask), seq, seq_kv)) {
      a.values["causal"] = true;
    } else {
      mask = operand(e, grp.mask, e.g.value(q).proto.dtype, root);
    }
    // tec's attention gives NaN, not the guard's zeros, for a row whose every key is masked
    // by an additive mask (a padding mask's empty sequence gives zeros, as the guard does).
    TEC_UNSUPPORTED_CHECK(!grp.nan_guard || padding || a.get_bool("causal", false) ||
                              (e.consts.count(grp.mask) && !masks_a_whole_row(*e.consts.at(grp.mask))),
                          ctx)
        << "the softmax's output passes a NaN guard, Where(IsNaN(p), 0, p), and the mask '" << grp.mask
        << "' is computed at run time and is no padding mask of an integer input: tec cannot tell whether a query row has "
           "every key masked, where the guard gives zeros";
  }
  if (grp.heads > 0) {
    a.values["heads"] = grp.heads;
    a.values["kv_heads"] = grp.kv_heads;
  }
  if (grp.merge_shape.empty()) {
    if (grp.heads == 0) return emit_attention_of(e, root, q, k, v, mask, a, out);
    // Flat in, 4-D [B, H, S, Dv] out: the attention's [B, S, H x Dv], split into heads.
    const ValueId y = emit_attention_of(e, root, q, k, v, mask, a, out + ".flat");
    const Shape ys = e.g.value(y).proto.shape;
    const ValueId split = reshape_to(e, root, y, {ys[0], ys[1], grp.heads, ys[2] / grp.heads}, out + ".heads");
    Attributes perm;
    perm.values["perm"] = std::vector<int64_t>{0, 2, 1, 3};
    return emit(e, root, "transpose", {split}, perm, {}, out);
  }
  // The heads merged back: tec's attention makes [B, S, H x Dv], what Transpose + Reshape make
  // of [B, H, S, Dv], so its output is the Reshape's; or, merged to rows as a Gemm reads them
  // (GPT-2's c_proj), [B x S, H x Dv], a reshape of it.
  const std::vector<int64_t> merged = as_ints(*e.consts.at(grp.merge_shape));
  if (merged.size() == 2) {
    const ValueId y = emit_attention_of(e, root, q, k, v, mask, a, out + ".merged", true);
    const Shape ys = e.g.value(y).proto.shape;
    const std::vector<int64_t> rows = {checked_mul(ys[0], ys[1]), ys[2]};
    TEC_UNSUPPORTED_CHECK(reshapes_to(ys, merged, rows) || (merged[0] == -1 && merged[1] == ys[2]), ctx)
        << "attention's heads are merged by a Reshape to a shape other than [batch x seq, heads x head_dim] of " << ys.str();
    return reshape_to(e, root, y, rows, out);
  }
  const ValueId y = emit_attention_of(e, root, q, k, v, mask, a, out, true);
  const Shape& ys = e.g.value(y).proto.shape;
  TEC_UNSUPPORTED_CHECK(reshapes_to(ys, merged, ys.dims), ctx)
      << "attention's heads are merged by a Reshape to a shape other than [batch, seq, heads x head_dim] " << ys.str();
  return y;
}

}  // namespace tec::onnx
