// What exported models become: the corpus exported with torch.onnx.export (tests/onnx/corpus,
// both exporters, several opsets and dtypes) must map onto TE ops only and have GPU code under
// every recipe; explicitly quantized models keep their FP8 codes and scales under fp8-static;
// and bad Q/DQ models or mismatched gated projections get one clear error naming the node.
// Models here are built with ONNX's protobuf classes; onnxruntime agreement is
// tests/onnx/ort_crosscheck.py's.
#include <doctest/doctest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "compiler.h"
#include "reference/convert.h"
#include "test_util.h"

namespace tec {

namespace {

// A small ONNX graph, one call per element.
struct ModelBuilder {
  ::onnx::ModelProto m;
  ::onnx::GraphProto* g;

  explicit ModelBuilder(int opset = 21) : g(m.mutable_graph()) {
    m.set_ir_version(10);
    m.add_opset_import()->set_version(opset);
    g->set_name("built");
  }
  static void tensor_type(::onnx::ValueInfoProto* v, const std::string& name, const std::vector<int64_t>& dims) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(::onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
  }
  void input(const std::string& name, const std::vector<int64_t>& dims) { tensor_type(g->add_input(), name, dims); }
  void output(const std::string& name, const std::vector<int64_t>& dims) { tensor_type(g->add_output(), name, dims); }
  void floats(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& values) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    for (float v : values) t->add_float_data(v);
  }
  // FLOAT8E4M3FN codes of `values` (ONNX keeps float8 codes in int32_data).
  void fp8(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& values) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(17);  // FLOAT8E4M3FN, newer than Debian's libonnx 1.12 headers
    for (int64_t d : dims) t->add_dims(d);
    for (float v : values) t->add_int32_data(reference::float_to_e4m3(v));
  }
  ::onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& in, const std::string& out, const std::string& name) {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  }
  void constant_ints(const std::string& name, const std::vector<int64_t>& values) {  // a 1-D INT64 initializer
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
  }
  static void attr(::onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(v);
  }
  std::string save(const std::string& file) const {
    const auto dir = std::filesystem::temp_directory_path() / "tec_onnx_patterns_test";
    std::filesystem::create_directories(dir);
    const std::string path = (dir / file).string();
    std::ofstream(path, std::ios::binary) << m.SerializeAsString();
    return path;
  }
};

// y = x . DQ(W codes [K, N], weight scales) with x through a Q/DQ pair of scale `x_scale`.
struct StaticModel {
  int64_t t = 16, k = 128, n = 64;
  float x_scale = 0.02f;
  std::vector<float> codes, scales;  // codes row-major [K, N], as E4M3 values
  std::vector<int64_t> scale_dims;    // the weight scale's dims
  int64_t axis = 1, block = 0;
  float q_scale_override = NAN;       // a different scale on the QuantizeLinear (bad input)
  bool scale_is_input = false;        // the Q/DQ scale a run-time input (bad input)

  StaticModel() {
    for (int64_t i = 0; i < k * n; ++i) codes.push_back(reference::e4m3_to_float(static_cast<uint8_t>((i * 37 + 11) % 126 + (i % 2 ? 0x80 : 0))));
    for (int64_t j = 0; j < n; ++j) scales.push_back(0.001f * static_cast<float>(1 + j % 7));
    scale_dims = {n};
  }
  std::string save(const std::string& file) const {
    ModelBuilder b;
    b.input("x", {t, k});
    if (scale_is_input) b.input("s", {});
    b.output("y", {t, n});
    if (!scale_is_input) b.floats("s", {}, {x_scale});
    b.floats("s_q", {}, {std::isnan(q_scale_override) ? x_scale : q_scale_override});
    b.fp8("zp", {}, {0.0f});
    b.fp8("w_fp8", {k, n}, codes);
    b.floats("w_scale", scale_dims, scales);
    b.node("QuantizeLinear", {"x", std::isnan(q_scale_override) ? "s" : "s_q", "zp"}, "x_q", "quantize_x");
    b.node("DequantizeLinear", {"x_q", "s", "zp"}, "x_dq", "dequantize_x");
    auto* dq = b.node("DequantizeLinear", {"w_fp8", "w_scale"}, "w", "dequantize_w");
    if (scales.size() > 1) ModelBuilder::attr(dq, "axis", axis);
    if (block) ModelBuilder::attr(dq, "block_size", block);
    b.node("MatMul", {"x_dq", "w"}, "y", "fc");
    return b.save(file);
  }
};

CompileResult compile_model(const std::string& path, std::optional<RecipeKind> recipe, const std::string& stop_after,
                            const std::map<std::string, std::vector<int64_t>>& dims = {}) {
  CompileOptions o;
  o.model_path = path;
  o.frontend.recipe = recipe;
  o.frontend.dim_overrides = dims;
  o.dump_after = stop_after;
  o.archs = {};  // nothing to compile with NVRTC here
  o.cache_dir = "";
  return compile(o);
}

// p = Softmax(q k^T x 0.25 + mask) over the inputs q, k [B, H, S, D] and the value "mask", as
// the dynamo exporter spells attention's scores.
void add_attention_probs(ModelBuilder& b) {
  b.floats("scale", {}, {0.25f});
  auto* t = b.node("Transpose", {"k"}, "kt", "k_t");
  auto* perm = t->add_attribute();
  perm->set_name("perm");
  perm->set_type(::onnx::AttributeProto::INTS);
  for (int64_t d : {0, 1, 3, 2}) perm->add_ints(d);
  b.node("MatMul", {"q", "kt"}, "s", "qk");
  b.node("Mul", {"s", "scale"}, "ss", "scaled");
  b.node("Add", {"ss", "mask"}, "sm", "masked");
  b.node("Softmax", {"sm"}, "p", "softmax");
}

void expect_error(const std::string& path, std::optional<RecipeKind> recipe, ErrorKind kind, const std::string& node,
                  const std::string& message) {
  const Error e = test::error_of([&] { (void)compile_model(path, recipe, "apply_recipe"); });
  CHECK_MESSAGE(e.kind() == kind, e.what());
  CHECK_MESSAGE(std::string(e.what()).find(message) != std::string::npos, "expected '" << message << "' in: " << e.what());
  CHECK_MESSAGE(std::string(e.what()).find(node) != std::string::npos, "expected node '" << node << "' in: " << e.what());
}

}  // namespace

TEST_CASE("every exported model of the corpus becomes TE ops, and has GPU code under every recipe") {
  const std::string folder = test::source_dir() + "/tests/onnx/corpus";
  const auto manifest = nlohmann::json::parse(test::read_text(folder + "/manifest.json"));
  int models = 0;
  for (const auto& m : manifest["models"]) {
    if (m.contains("error")) continue;
    ++models;
    const std::string file = m["file"], family = m["model"];
    std::map<std::string, std::vector<int64_t>> dims;
    if (m.contains("shape_args")) dims = {{"batch", {2}}, {"seq", {16}}};
    for (RecipeKind recipe : {RecipeKind::bf16, RecipeKind::fp8_current, RecipeKind::fp8_delayed, RecipeKind::fp8_block,
                              RecipeKind::mxfp8, RecipeKind::nvfp4}) {
      CAPTURE(file);
      CAPTURE(to_string(recipe));
      const CompileResult r = compile_model(folder + "/" + file, recipe, "lower", dims);
      std::multiset<std::string> ops;
      for (const Node& n : r.profiles.at(0).graph.nodes) ops.insert(n.op);
      for (const char* general : {"binary", "unary", "cast", "reduce", "matmul", "transpose"})
        CHECK_MESSAGE(ops.count(general) == 0, "a leftover '" << general << "' op");
      CHECK_MESSAGE(r.profiles.at(0).gpu.supported, r.profiles.at(0).gpu.reason);
      if (family == "gpt_mlp") {
        CHECK(ops.count("layernorm") == 1);
        CHECK(ops.count("linear") == 2);
        CHECK(ops.count("gelu") == 1);
        CHECK(ops.count("add") == 1);
      } else if (family == "ln_gelu_erf") {
        CHECK(ops.count("layernorm") == 1);
        CHECK(ops.count("linear") == 1);
        CHECK(ops.count("gelu") == 1);
      } else if (family == "hf_llama_layer" || family == "hf_llama_gqa_layer") {  // a whole decoder layer: the rotary tables and the mask folded
        CHECK(ops.count("rmsnorm") == 2);
        CHECK(ops.count("linear") == 6);  // q, k, v, o, gate and up as one, down
        CHECK(ops.count("rope") == 2);
        CHECK(ops.count("attention") == 1);
        CHECK(ops.count("swiglu") == 1);
        CHECK(ops.count("add") == 2);
        for (const Node& n : r.profiles.at(0).graph.nodes) {
          if (n.op == "rope") CHECK(n.attrs.get_float("theta", 0) == 10000.0);
          if (n.op == "attention") CHECK(n.attrs.get_bool("causal", false));
          if (n.op == "attention" && family == "hf_llama_gqa_layer") {  // repeat_kv's Expand: 2 kv heads for 4 query heads
            CHECK(n.attrs.get_int("heads", 0) == 4);
            CHECK(n.attrs.get_int("kv_heads", 0) == 2);
          }
        }
      } else {  // llama_mlp_hf, llama_mlp_swap: gate and up as one linear, then swiglu
        CHECK(ops.count("rmsnorm") == 1);
        CHECK(ops.count("linear") == 2);
        CHECK(ops.count("swiglu") == 1);
        CHECK(ops.count("add") == 1);
      }
    }
  }
  CHECK(models >= 21);
}

// transformers' own decoder layers (tests/onnx/export_hf.py: Llama, Qwen2, Gemma, GPT-2, BERT; sdpa
// and eager attention; the dynamo and the legacy exporter): whatever spelling the exporter
// chose, the layer becomes tec's ops, attention included, with GPU code under every recipe
// (an fp32 model's attention reads bf16 casts).
TEST_CASE("every decoder layer of the Hugging Face corpus becomes TE ops, and has GPU code under every recipe") {
  const std::string folder = test::source_dir() + "/tests/onnx/hf_corpus";
  const auto manifest = nlohmann::json::parse(test::read_text(folder + "/manifest.json"));
  int layers = 0;
  std::set<std::string> canonical_forms;
  for (const auto& [file, m] : manifest["models"].items()) {
    if (!m.contains("file") || (file.find("_layer.") == std::string::npos && file.find("_block.") == std::string::npos)) continue;
    ++layers;
    const std::string family = file.substr(0, file.find('_'));
    for (RecipeKind recipe : {RecipeKind::bf16, RecipeKind::fp8_current, RecipeKind::fp8_delayed, RecipeKind::fp8_block,
                              RecipeKind::mxfp8, RecipeKind::nvfp4}) {
      CAPTURE(file);
      CAPTURE(to_string(recipe));
      const CompileResult r = compile_model(folder + "/" + file, recipe, "lower");
      std::multiset<std::string> ops;
      for (const Node& n : r.profiles.at(0).graph.nodes) {
        ops.insert(n.op);
        if (n.op == "cast") {
          const bool attention_cast = n.name.find(".bf16") != std::string::npos || n.name.find(".to_fp32") != std::string::npos;
          CHECK_MESSAGE(attention_cast, n.name);
        }
        if (n.op != "attention") continue;
        CHECK(n.attrs.get_bool("causal", false) == (family != "bert"));  // (GPT-2's mask: causal)
        CHECK(n.attrs.get_int("heads", 0) == 4);
        const int64_t kv_heads = n.attrs.get_int("kv_heads", 0) == 0 ? 4 : n.attrs.get_int("kv_heads", 0);
        CHECK(kv_heads == (family == "bert" || family == "gpt2" ? 4 : family == "gemma" ? 1 : 2));
      }
      for (const std::string general : {"binary", "unary", "reduce", "matmul", "transpose", "reshape"})
        if (family != "gpt2" || (general != "reshape" && general != "transpose"))  // (GPT-2's Gemms read rows: [B x S, H] views)
          CHECK_MESSAGE(ops.count(general) == 0, "a leftover '" << general << "' op");
      CHECK_MESSAGE(r.profiles.at(0).gpu.supported, r.profiles.at(0).gpu.reason);
      CHECK(ops.count("attention") == 1);
      CHECK(ops.count("cast") == 4);  // q, k, v to bf16, the output back to fp32
      CHECK(ops.count("add") == 2);   // the two residuals
      CHECK(ops.count("linear") == 6);
      if (family == "bert" || family == "gpt2") {  // (GPT-2's fused c_attn is three linears)
        CHECK(ops.count("layernorm") == 2);
        CHECK(ops.count("gelu") == 1);
      } else {
        CHECK(ops.count("rmsnorm") == 2);
        CHECK(ops.count("rope") == 2);
        CHECK(ops.count(family == "gemma" ? "geglu" : "swiglu") == 1);
      }
      for (const auto& n : r.onnx_nodes)
        if (const auto at = n.became.find("[canonical form: "); at != std::string::npos) canonical_forms.insert(n.became.substr(at, 40));
    }
  }
  CHECK(layers >= 17);
  // Both of the dynamo exporter's key transposes were met, and read through their canonical form.
  CHECK(canonical_forms.size() >= 2);
}

TEST_CASE("a whole causal LM of the Hugging Face corpus becomes TE ops from the embedding to the logits, its attention_mask "
          "the attention's sequence lengths") {
  const std::string folder = test::source_dir() + "/tests/onnx/hf_corpus";
  const auto manifest = nlohmann::json::parse(test::read_text(folder + "/manifest.json"));
  int lms = 0;
  for (const auto& [file, m] : manifest["models"].items()) {
    if (!m.contains("file") || file.find("_lm") == std::string::npos || file.find("_lm_kv") != std::string::npos) continue;
    ++lms;
    CAPTURE(file);
    const bool gpt2 = file.rfind("gpt2", 0) == 0, masked = file.find("_lm_ids.") == std::string::npos;
    for (RecipeKind recipe : {RecipeKind::bf16, RecipeKind::fp8_current, RecipeKind::nvfp4}) {
      CAPTURE(to_string(recipe));
      const CompileResult r = compile_model(folder + "/" + file, recipe, "lower");
      std::multiset<std::string> ops;
      for (const Node& n : r.profiles.at(0).graph.nodes) {
        ops.insert(n.op);
        if (n.op != "attention") continue;
        CHECK(n.attrs.get_bool("causal", false));
        CHECK(n.inputs.size() == (masked ? 4u : 3u));  // the padding mask: each sequence's length
        if (masked) CHECK(n.attrs.get_string("mask", "") == "padding");
      }
      CHECK_MESSAGE(r.profiles.at(0).gpu.supported, r.profiles.at(0).gpu.reason);
      CHECK(ops.count("embedding") == 1);
      CHECK(ops.count("sequence_lengths") == (masked ? 1u : 0u));  // one for both layers
      CHECK(ops.count("attention") == 2);  // two layers, each with transformers' NaN guard after its softmax
      CHECK(ops.count(gpt2 ? "layernorm" : "rmsnorm") == 5);  // two per layer and the final norm
      CHECK(ops.count(gpt2 ? "gelu" : "swiglu") == 2);
      CHECK(ops.count("linear") == 13);  // six per layer (GPT-2's c_attn as three) and the lm_head
      for (const std::string general : {"matmul", "unary", "reduce"}) CHECK_MESSAGE(ops.count(general) == 0, "a leftover '" << general << "' op");
      for (ValueId in : r.profiles.at(0).graph.inputs) CHECK(r.profiles.at(0).graph.value(in).proto.dtype == DType::int32);  // INT64, narrowed
      int mask_nodes = 0;  // the nodes that make the mask from attention_mask (the rest fold: the causal triangle)
      for (const auto& n : r.onnx_nodes) {
        mask_nodes += n.became.find("part of attention's padding mask from input 'attention_mask'") != std::string::npos;
        if ((n.op_type == "And" || n.op_type == "Where") && n.became.find("folded") == std::string::npos)
          CHECK_MESSAGE(n.became.find("attention") != std::string::npos, n.op_type << ": " << n.became);
      }
      CHECK((mask_nodes > 0) == masked);
    }
  }
  CHECK(lms == 9);  // Llama, Qwen2, GPT-2: given token ids (dynamo), and an attention_mask (dynamo, legacy)
}

TEST_CASE("transformers' NaN guard after the softmax goes with the attention only where no row can be wholly masked") {
  // Softmax(q k^T x c + mask), then Where(IsNaN(p), 0, p), then MatMul v (transformers' sdpa, as
  // the dynamo exporter writes it), the mask a run-time input or a constant of no masked row.
  auto model = [](bool mask_at_run_time) {
    ModelBuilder b(18);
    for (const char* t : {"q", "k", "v"}) b.input(t, {1, 2, 8, 16});
    if (mask_at_run_time) b.input("mask", {1, 1, 8, 8});
    else b.floats("mask", {1, 1, 8, 8}, std::vector<float>(64, 0.0f));
    b.output("y", {1, 2, 8, 16});
    b.floats("zero", {}, {0.0f});
    add_attention_probs(b);
    b.node("IsNaN", {"p"}, "nan", "is_nan");
    b.node("Where", {"nan", "zero", "p"}, "pg", "guard");
    b.node("MatMul", {"pg", "v"}, "y", "pv");
    return b.save(mask_at_run_time ? "nan_guard_runtime_mask.onnx" : "nan_guard_constant_mask.onnx");
  };
  // A run-time mask may mask a whole row, where the guard's zeros are not the attention's: the
  // pattern refuses it, and its nodes go the general path as written, the report saying why.
  const CompileResult general = compile_model(model(true), RecipeKind::bf16, "lower");
  CHECK(general.profiles.at(0).gpu.supported);
  std::multiset<std::string> general_ops;
  for (const Node& n : general.profiles.at(0).graph.nodes) general_ops.insert(n.op);
  CHECK(general_ops.count("attention") == 0);
  CHECK(general_ops.count("softmax") == 1);
  CHECK(general_ops.count("where") == 1);
  for (const auto& n : general.onnx_nodes) {
    if (n.node != "guard") continue;
    const bool says_why = n.became.find("refused it: ") != std::string::npos &&
                          n.became.find("passes a NaN guard, Where(IsNaN(p), 0, p), and the mask 'mask' is computed at run time") != std::string::npos;
    CHECK_MESSAGE(says_why, n.became);
  }
  const CompileResult r = compile_model(model(false), RecipeKind::bf16, "frontend");
  int attention = 0;
  for (const Node& n : r.profiles.at(0).graph.nodes) attention += n.op == "attention";
  CHECK(attention == 1);
  for (const auto& n : r.onnx_nodes)
    if (n.node == "is_nan" || n.node == "guard") CHECK_MESSAGE(n.became.find("NaN guard") != std::string::npos, n.became);
}

TEST_CASE("a mask made at run time from an integer input is taken by what it computes: the key padding, or named") {
  // Where(Unsqueeze(Cast(attention_mask, BOOL)), 0, -inf) added to the scores: the key padding
  // of a bidirectional layer (BERT's); the same with 0 and -inf swapped masks the tokens instead.
  auto model = [](bool padding) {
    ModelBuilder b(18);
    for (const char* t : {"q", "k", "v"}) b.input(t, {2, 2, 8, 16});
    auto* am = b.g->add_input();
    ModelBuilder::tensor_type(am, "attention_mask", {2, 8});
    am->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::INT64);
    b.output("y", {2, 2, 8, 16});
    b.floats("zero", {}, {0.0f});
    b.floats("lowest", {}, {-INFINITY});
    auto* axes = b.g->add_initializer();
    axes->set_name("axes");
    axes->set_data_type(::onnx::TensorProto::INT64);
    axes->add_dims(2);
    axes->add_int64_data(1);
    axes->add_int64_data(2);
    ModelBuilder::attr(b.node("Cast", {"attention_mask"}, "keep", "to_bool"), "to", ::onnx::TensorProto::BOOL);
    b.node("Unsqueeze", {"keep", "axes"}, "keep4", "unsqueeze");
    b.node("Where", {"keep4", padding ? "zero" : "lowest", padding ? "lowest" : "zero"}, "mask", "additive");
    add_attention_probs(b);
    b.node("MatMul", {"p", "v"}, "y", "pv");
    return b.save(padding ? "key_padding.onnx" : "not_padding.onnx");
  };
  const CompileResult r = compile_model(model(true), RecipeKind::bf16, "frontend");
  int attention = 0;
  for (const Node& n : r.profiles.at(0).graph.nodes) {
    if (n.op != "attention") continue;
    ++attention;
    CHECK_FALSE(n.attrs.get_bool("causal", true));  // bidirectional: every token sees its sequence's tokens
    CHECK(n.attrs.get_string("mask", "") == "padding");
    CHECK(r.profiles.at(0).graph.value(n.inputs.at(3)).name == "attention_mask.lengths");
  }
  CHECK(attention == 1);
  const Error e = test::error_of([&] { (void)compile_model(model(false), RecipeKind::bf16, "frontend"); });
  CHECK(e.kind() == ErrorKind::unsupported);
  CHECK_MESSAGE(std::string(e.what()).find("the attention's mask 'mask' is computed at run time from input 'attention_mask' and is no "
                                           "padding mask tec knows") != std::string::npos,
                e.what());
}

TEST_CASE("Hugging Face's layer: Cos, Sin, MatMul and Trilu of constants fold, and the softmax's fp32 round trip is skipped") {
  const std::string path = test::source_dir() + "/tests/onnx/corpus/hf_llama_layer.bf16.legacy18.3d.onnx";
  const CompileResult r = compile_model(path, RecipeKind::bf16, "frontend");
  std::map<std::string, std::string> became;
  for (const auto& n : r.onnx_nodes) became[n.node] = n.became;
  for (const char* folded : {"/MatMul", "/Cos", "/Sin", "/Trilu"}) CHECK_MESSAGE(became[folded].find("constant") != std::string::npos, folded << ": " << became[folded]);
  CHECK(became["/Cast_3"].find("nothing") != std::string::npos);  // Cast(FLOAT) then back to bf16: the softmax's own output
}

TEST_CASE("a Cast to the type its input already has is skipped, and the report says so") {
  const std::string path = test::source_dir() + "/tests/onnx/corpus/llama_mlp_hf.fp32.legacy17.2d.onnx";
  const CompileResult r = compile_model(path, RecipeKind::bf16, "frontend");
  int casts = 0;
  for (const auto& n : r.onnx_nodes)
    if (n.op_type == "Cast") {
      ++casts;
      CHECK(n.became.find("a Cast to the type its input already has") != std::string::npos);
    }
  CHECK(casts == 2);  // Hugging Face's .to(float32) and .to(input_dtype) around RMSNorm
}

TEST_CASE("fp8-static keeps the model's FP8 codes and scales: per tensor, per output channel, per block along K") {
  struct Case {
    const char* name;
    std::vector<float> scales;
    int64_t axis, block;
    int block_rows, block_cols;
  };
  StaticModel base;
  std::vector<float> blocks;
  for (int64_t i = 0; i < (base.k / 64) * base.n; ++i) blocks.push_back(0.0005f * static_cast<float>(1 + i % 5));
  for (const Case& c : {Case{"per tensor", {0.003f}, 1, 0, 0, 0}, Case{"per channel", base.scales, 1, 0, 1, 0},
                        Case{"block_size 64 along K", blocks, 0, 64, 1, 64}}) {
    CAPTURE(std::string(c.name));
    StaticModel model;
    model.scales = c.scales;
    model.scale_dims = c.scales.size() == 1 ? std::vector<int64_t>{} : c.block ? std::vector<int64_t>{model.k / c.block, model.n}
                                                                                : std::vector<int64_t>{model.n};
    model.axis = c.axis;
    model.block = c.block;
    const std::string path = model.save("static.onnx");
    const CompileResult r = compile_model(path, std::nullopt, "");  // the Q/DQ pairs choose fp8-static
    const Graph& g = r.profiles.at(0).graph;
    REQUIRE(g.recipe.kind == RecipeKind::fp8_static);
    const Node& fc = test::node_named(g, "fc");
    const Value& x = g.value(fc.inputs[0]);
    const Value& w = g.value(fc.inputs[1]);
    REQUIRE(x.proto.quantizer);
    CHECK(x.proto.quantizer->kind == QuantizerKind::fp8_static);
    CHECK(x.proto.quantizer->static_scale_inv == model.x_scale);
    REQUIRE(w.proto.quantizer);
    CHECK(w.proto.quantizer->block_rows == c.block_rows);
    CHECK(w.proto.quantizer->block_cols == c.block_cols);
    // The plan's constants hold the model's codes (transposed to [N, K]) and scales, bit for bit.
    const auto& manifest = r.plan->manifest;
    const auto constants = r.plan->blobs.at(0).bytes.span();
    std::vector<uint8_t> data, scale_bytes;
    for (const auto& b : manifest["profiles"][0]["buffers"]) {
      if (b["tensor"] != w.name) continue;
      const size_t offset = b["offset"], bytes = b["bytes"];
      (b["role"] == "data" ? data : scale_bytes).assign(constants.begin() + static_cast<long>(offset),
                                                        constants.begin() + static_cast<long>(offset + bytes));
    }
    REQUIRE(data.size() == static_cast<size_t>(model.k * model.n));
    int codes_differing = 0;
    for (int64_t row = 0; row < model.n; ++row)
      for (int64_t col = 0; col < model.k; ++col)
        codes_differing += data[static_cast<size_t>(row * model.k + col)] !=
                           reference::float_to_e4m3(model.codes[static_cast<size_t>(col * model.n + row)]);
    CHECK(codes_differing == 0);
    std::vector<float> stored(scale_bytes.size() / 4);
    std::memcpy(stored.data(), scale_bytes.data(), scale_bytes.size());
    std::vector<float> expected = c.scales;
    if (c.block)  // ONNX's [K / B, N] is tec's [N, K / B]
      for (int64_t row = 0; row < model.n; ++row)
        for (int64_t kb = 0; kb < model.k / c.block; ++kb)
          expected[static_cast<size_t>(row * (model.k / c.block) + kb)] = c.scales[static_cast<size_t>(kb * model.n + row)];
    CHECK(stored == expected);
  }
}

TEST_CASE("--recipe replaces the recipe the Q/DQ pairs choose; fp8-static needs them") {
  StaticModel model;
  const std::string path = model.save("static_replaced.onnx");
  const CompileResult r = compile_model(path, RecipeKind::fp8_current, "apply_recipe");
  CHECK(r.profiles.at(0).graph.recipe.kind == RecipeKind::fp8_current);
  expect_error(test::source_dir() + "/examples/onnx/gpt_mlp.onnx", RecipeKind::fp8_static, ErrorKind::usage, "",
               "fp8-static takes its scales from the model's QuantizeLinear/DequantizeLinear pairs; this model has none");
}

TEST_CASE("bad Q/DQ scales and block sizes are named, with the node") {
  struct Bad {
    const char* what;
    std::function<void(StaticModel&)> edit;
    std::string node, message;
    ErrorKind kind = ErrorKind::unsupported;  // the import lists every node it cannot compile, as exit code 4
  };
  const std::vector<Bad> cases = {
      {"zero activation scale", [](StaticModel& m) { m.x_scale = 0.0f; }, "quantize_x", "its scale must be a positive finite number, got 0"},
      {"negative activation scale", [](StaticModel& m) { m.x_scale = -0.5f; }, "quantize_x",
       "its scale must be a positive finite number, got -0.5"},
      {"NaN activation scale", [](StaticModel& m) { m.x_scale = NAN; }, "quantize_x", "its scale must be a positive finite number, got nan"},
      {"Q and DQ scales differ", [](StaticModel& m) { m.q_scale_override = 0.5f; }, "quantize_x", "different scales"},
      {"run-time scale", [](StaticModel& m) { m.scale_is_input = true; }, "quantize_x", "input 1 ('s') must be a constant"},
      {"zero weight scale", [](StaticModel& m) { m.scales[3] = 0.0f; }, "dequantize_w",
       "DequantizeLinear 'dequantize_w' of weight 'w': its scale must be a positive finite number, got 0 at index 3"},
      {"block_size that does not divide K",
       [](StaticModel& m) {
         m.block = 96;
         m.axis = 0;
         m.scales.assign(2 * static_cast<size_t>(m.n), 0.001f);
         m.scale_dims = {2, m.n};  // ceil(128 / 96) blocks, as ONNX lays them out
       },
       "dequantize_w", "block_size 96 does not divide K=128"},
      {"per-axis scales along K",
       [](StaticModel& m) {
         m.axis = 0;
         m.scales.assign(static_cast<size_t>(m.k), 0.001f);
         m.scale_dims = {m.k};
       },
       "dequantize_w", "per-axis scales along K"},
  };
  for (const Bad& bad : cases) {
    CAPTURE(std::string(bad.what));
    StaticModel model;
    bad.edit(model);
    const std::string path = model.save("bad.onnx");
    const Error e = test::error_of([&] { (void)compile_model(path, std::nullopt, "apply_recipe"); });
    const std::string what = e.what();
    CHECK_MESSAGE(e.kind() == bad.kind, what);
    CHECK_MESSAGE(what.find(bad.message) != std::string::npos, "expected '" << bad.message << "' in: " << what);
    CHECK_MESSAGE(what.find(bad.node) != std::string::npos, "expected node '" << bad.node << "' in: " << what);
  }
}

TEST_CASE("a gated MLP whose gate and up projections differ in shape is named as such") {
  ModelBuilder b;
  b.input("x", {8, 32});
  b.output("y", {8, 32});
  std::vector<float> w(32 * 64, 0.01f), up(32 * 48, 0.02f);
  b.floats("w_gate", {32, 64}, w);
  b.floats("w_up", {32, 48}, up);
  b.node("MatMul", {"x", "w_gate"}, "g", "gate_proj");
  b.node("Sigmoid", {"g"}, "s", "sigmoid");
  b.node("Mul", {"g", "s"}, "a", "silu");
  b.node("MatMul", {"x", "w_up"}, "u", "up_proj");
  b.node("Mul", {"a", "u"}, "y", "gate_times_up");
  const Error e = test::error_of([&] { (void)compile_model(b.save("gated.onnx"), RecipeKind::bf16, "frontend"); });
  CHECK(e.kind() == ErrorKind::unsupported);
  CHECK_MESSAGE(std::string(e.what()).find("node 'gate_times_up' (Mul, opset 21): gated MLP: the gate projection ('gate_proj') maps 32 "
                                           "features to 64, the up projection ('up_proj') 32 to 48") != std::string::npos,
                e.what());
}

namespace {

// q, k, v [2, 4, 8, 16] -> scaled_dot_product_attention as torch.onnx spells it: q and k^T each
// times sqrt(scale), MatMul, + mask, Softmax, MatMul v. `mask`: "" for none, "causal" for the
// constant causal mask (0 and -inf), "ramp" for a constant mask that is not causal.
// `flat`: q, k, v come as [2, 8, 64] and are split into 4 heads by Reshape + Transpose, and y
// is merged back to [2, 8, 64], as exporters write attention inside a layer.
// An int64 constant.
void ints(ModelBuilder& b, const std::string& name, const std::vector<int64_t>& values) {
  auto* t = b.g->add_initializer();
  t->set_name(name);
  t->set_data_type(::onnx::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t->add_int64_data(v);
}

// gqa: k and v [2, 2, 8, 16] through Hugging Face's repeat_kv (Unsqueeze, Expand, Reshape) to
// the 4 query heads.
std::string spelled_attention(const std::string& mask, const std::string& file, bool flat = false, bool gqa = false) {
  ModelBuilder b(18);
  auto perm_attr = [](::onnx::NodeProto* n, std::vector<int64_t> perm) {
    auto* a = n->add_attribute();
    a->set_name("perm");
    a->set_type(::onnx::AttributeProto::INTS);
    for (int64_t p : perm) a->add_ints(p);
  };
  if (flat) {
    b.g->add_initializer()->CopyFrom([] {
      ::onnx::TensorProto t;
      t.set_name("heads_shape");
      t.set_data_type(::onnx::TensorProto::INT64);
      t.add_dims(4);
      for (int64_t d : {2, 8, 4, 16}) t.add_int64_data(d);
      return t;
    }());
    for (const std::string in : {"q", "k", "v"}) {
      b.input(in + "_flat", {2, 8, 64});
      b.node("Reshape", {in + "_flat", "heads_shape"}, in + "_split", in + "_split");
      perm_attr(b.node("Transpose", {in + "_split"}, in, in + "_heads"), {0, 2, 1, 3});
    }
    b.output("y", {2, 8, 64});
  } else if (gqa) {
    b.input("q", {2, 4, 8, 16});
    ints(b, "unsqueeze_axes", {2});
    ints(b, "expand_shape", {2, 2, 2, 8, 16});
    ints(b, "repeated_shape", {2, 4, 8, 16});
    for (const std::string in : {"k", "v"}) {
      b.input(in + "_kv", {2, 2, 8, 16});
      b.node("Unsqueeze", {in + "_kv", "unsqueeze_axes"}, in + "_5d", in + "_unsqueeze");
      b.node("Expand", {in + "_5d", "expand_shape"}, in + "_expanded", in + "_expand");
      b.node("Reshape", {in + "_expanded", "repeated_shape"}, in, in + "_repeat");
    }
    b.output("y", {2, 4, 8, 16});
  } else {
    for (const char* in : {"q", "k", "v"}) b.input(in, {2, 4, 8, 16});
    b.output("y", {2, 4, 8, 16});
  }
  b.floats("root_scale", {}, {std::sqrt(1.0f / std::sqrt(16.0f))});
  b.node("Mul", {"q", "root_scale"}, "q_scaled", "scale_q");
  perm_attr(b.node("Transpose", {"k"}, "k_t", "k_transposed"), {0, 1, 3, 2});
  b.node("Mul", {"k_t", "root_scale"}, "k_scaled", "scale_k");
  b.node("MatMul", {"q_scaled", "k_scaled"}, "scores", "qk");
  std::string into_softmax = "scores";
  if (!mask.empty()) {
    std::vector<float> m(64);
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 8; ++j) m[static_cast<size_t>(i * 8 + j)] = mask == "causal" ? (j > i ? -INFINITY : 0.0f) : -0.25f * static_cast<float>(j);
    b.floats("mask", {1, 1, 8, 8}, m);
    b.node("Add", {"scores", "mask"}, "masked", "add_mask");
    into_softmax = "masked";
  }
  ModelBuilder::attr(b.node("Softmax", {into_softmax}, "probs", "softmax"), "axis", -1);
  b.node("MatMul", {"probs", "v"}, flat ? "y_heads" : "y", "pv");
  if (flat) {
    b.g->add_initializer()->CopyFrom([] {
      ::onnx::TensorProto t;
      t.set_name("flat_shape");
      t.set_data_type(::onnx::TensorProto::INT64);
      t.add_dims(3);
      for (int64_t d : {2, 8, 0}) t.add_int64_data(d == 0 ? -1 : d);  // -1: inferred, as exporters often write
      return t;
    }());
    perm_attr(b.node("Transpose", {"y_heads"}, "y_merged", "merge_heads"), {0, 2, 1, 3});
    b.node("Reshape", {"y_merged", "flat_shape"}, "y", "merge");
  }
  return b.save(file);
}

// Hugging Face's apply_rotary_pos_emb on x [2, 4, 8, 16] into y, as exported: theta 500000,
// or (rope_tables false) tables whose angles grow faster than rope's.
void add_rope_spelling(ModelBuilder& r, const std::string& x, const std::string& y, bool rope_tables) {
  std::vector<float> cos_table, sin_table;
  for (int p = 0; p < 8; ++p)
    for (int i = 0; i < 16; ++i) {
      const double angle = p * std::pow(500000.0, -2.0 * (i % 8) / 16.0) * (rope_tables ? 1.0 : 1.0 + 0.1 * i);
      cos_table.push_back(static_cast<float>(std::cos(angle)));
      sin_table.push_back(static_cast<float>(std::sin(angle)));
    }
  r.floats("cos", {1, 1, 8, 16}, cos_table);
  r.floats("sin", {1, 1, 8, 16}, sin_table);
  auto ints = [&](const std::string& name, int64_t v) {
    auto* t = r.g->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::INT64);
    t->add_dims(1);
    t->add_int64_data(v);
  };
  ints("zero", 0);
  ints("half", 8);
  ints("end", 16);
  ints("axis", -1);
  r.node("Slice", {x, "zero", "half", "axis"}, "x1", "x1");
  r.node("Slice", {x, "half", "end", "axis"}, "x2", "x2");
  r.node("Neg", {"x2"}, "neg", "neg");
  ModelBuilder::attr(r.node("Concat", {"neg", "x1"}, "rotated", "rotate_half"), "axis", -1);
  r.node("Mul", {x, "cos"}, "x_cos", "times_cos");
  r.node("Mul", {"rotated", "sin"}, "x_sin", "times_sin");
  r.node("Add", {"x_cos", "x_sin"}, y, "rope");
}

}  // namespace

TEST_CASE("scaled_dot_product_attention spelled as MatMul/Softmax/MatMul becomes one attention; a constant causal mask its flag") {
  struct Case {
    std::string mask;
    bool causal, additive;
  };
  for (const Case& c : {Case{"", false, false}, Case{"causal", true, false}, Case{"ramp", false, true}}) {
    CAPTURE(c.mask);
    const CompileResult r = compile_model(spelled_attention(c.mask, "sdpa_" + c.mask + ".onnx"), RecipeKind::bf16, "meta");
    const Graph& g = r.profiles.at(0).graph;
    int attention = 0, softmax_like = 0;
    for (const Node& n : g.nodes) {
      if (n.op == "attention") {
        ++attention;
        CHECK(n.attrs.get_int("heads", 0) == 4);
        CHECK(n.attrs.get_int("head_dim", 0) == 16);
        CHECK(n.attrs.get_float("scale", 0.0) == doctest::Approx(0.25).epsilon(1e-6));  // sqrt(s) * sqrt(s), s = 1/sqrt(16)
        CHECK(n.attrs.get_bool("causal", false) == c.causal);
        CHECK((n.inputs.size() == 4) == c.additive);
      }
      softmax_like += n.op == "matmul" || n.op == "binary" ? 1 : 0;
    }
    CHECK(attention == 1);
    CHECK(softmax_like == 0);  // no MatMul or Mul of the spelling is left over
    CHECK(test::value_named(g, "y").proto.shape == Shape({2, 4, 8, 16}));
    const auto& report = r.onnx_nodes;
    CHECK(std::any_of(report.begin(), report.end(), [](const auto& n) {
      return n.node == "softmax" && n.became.find("MatMul/Softmax/MatMul attention -> attention") != std::string::npos;
    }));
  }
  // Inside a layer: heads split from and merged back to [B, S, H x D], which tec's attention
  // reads and writes as they are: nothing but the attention is left.
  const CompileResult flat = compile_model(spelled_attention("causal", "sdpa_flat.onnx", true), RecipeKind::bf16, "meta");
  const Graph& g = flat.profiles.at(0).graph;
  REQUIRE(g.nodes.size() == 1);
  CHECK(g.nodes[0].op == "attention");
  CHECK(g.nodes[0].attrs.get_bool("causal", false));
  CHECK(g.nodes[0].attrs.get_int("heads", 0) == 4);
  CHECK(test::value_named(g, "y").proto.shape == Shape({2, 8, 64}));
  // Hugging Face's repeat_kv of the keys and values (GQA: 2 kv heads for 4 query heads) goes
  // into the attention's kv_heads.
  const CompileResult gqa = compile_model(spelled_attention("causal", "sdpa_gqa.onnx", false, true), RecipeKind::bf16, "meta");
  int gqa_attention = 0;
  for (const Node& n : gqa.profiles.at(0).graph.nodes) {
    CHECK(n.op != "expand");
    if (n.op != "attention") continue;
    ++gqa_attention;
    CHECK(n.attrs.get_int("heads", 0) == 4);
    CHECK(n.attrs.get_int("kv_heads", 0) == 2);
    CHECK(n.attrs.get_bool("causal", false));
  }
  CHECK(gqa_attention == 1);
  CHECK(std::any_of(gqa.onnx_nodes.begin(), gqa.onnx_nodes.end(), [](const auto& n) {
    return n.node == "k_expand" && n.became.find("repeat_kv's Expand of the keys and values: GQA") != std::string::npos;
  }));
  // A Softmax on its own takes the general path, and the report says which pattern looked at it.
  ModelBuilder lone(18);
  lone.input("x", {4, 8});
  lone.output("y", {4, 8});
  lone.node("Softmax", {"x"}, "y", "alone");
  const CompileResult alone = compile_model(lone.save("softmax.onnx"), RecipeKind::bf16, "lower");
  CHECK(alone.profiles.at(0).gpu.supported);
  CHECK(std::any_of(alone.onnx_nodes.begin(), alone.onnx_nodes.end(), [](const auto& n) {
    return n.node == "alone" && n.became == "softmax (general path: no pattern took it: the MatMul/Softmax/MatMul attention pattern starts at this "
                                           "Softmax and found no match)";
  }));
}

TEST_CASE("Hugging Face's rotary embedding spelled with Slice/Neg/Concat becomes rope, its theta found from the tables") {
  // Tables that are no rope's are named.
  for (const bool rope_tables : {true, false}) {
    CAPTURE(rope_tables);
    ModelBuilder r(18);
    r.input("x", {2, 4, 8, 16});
    r.output("y", {2, 4, 8, 16});
    add_rope_spelling(r, "x", "y", rope_tables);
    const std::string path = r.save(rope_tables ? "rope.onnx" : "not_rope.onnx");
    if (!rope_tables) {  // computed as written on the general path, the report saying why
      const CompileResult general = compile_model(path, RecipeKind::bf16, "meta");
      for (const Node& n : general.profiles.at(0).graph.nodes) CHECK(n.op != "rope");
      for (const auto& n : general.onnx_nodes) {
        if (n.node != "rope") continue;
        const bool says_why = n.became.find("refused it: the rotary embedding's tables are not rope's for theta") != std::string::npos;
        CHECK_MESSAGE(says_why, n.became);
      }
      continue;
    }
    const CompileResult roped = compile_model(path, RecipeKind::bf16, "meta");
    const auto& nodes = roped.profiles.at(0).graph.nodes;
    const auto rope = std::find_if(nodes.begin(), nodes.end(), [](const Node& n) { return n.op == "rope"; });
    REQUIRE(rope != nodes.end());
    CHECK(rope->attrs.get_float("theta", 0.0) == 500000.0);
    CHECK(rope->attrs.get_int("heads", 0) == 4);
    CHECK(rope->attrs.get_int("head_dim", 0) == 16);
  }
  // Heads split from a flat [2, 8, 64] just before: rope reads the flat tensor, and the split
  // it read around is gone from the graph (the report says so).
  ModelBuilder split(18);
  split.input("x_flat", {2, 8, 64});
  split.output("y", {2, 4, 8, 16});
  auto* shape = split.g->add_initializer();
  shape->set_name("heads_shape");
  shape->set_data_type(::onnx::TensorProto::INT64);
  shape->add_dims(4);
  for (int64_t d : {2, 8, 4, 16}) shape->add_int64_data(d);
  split.node("Reshape", {"x_flat", "heads_shape"}, "x_split", "split_heads");
  auto* turn = split.node("Transpose", {"x_split"}, "x", "heads_first");
  auto* perm = turn->add_attribute();
  perm->set_name("perm");
  perm->set_type(::onnx::AttributeProto::INTS);
  for (int64_t p : {0, 2, 1, 3}) perm->add_ints(p);
  add_rope_spelling(split, "x", "y", true);
  const CompileResult flat = compile_model(split.save("rope_after_split.onnx"), RecipeKind::bf16, "meta");
  std::vector<std::string> ops;
  for (const Node& n : flat.profiles.at(0).graph.nodes) ops.push_back(n.op);
  CHECK(ops == std::vector<std::string>{"rope", "reshape", "transpose"});  // y stays [B, H, S, D]
  for (const auto& n : flat.onnx_nodes)
    if (n.node == "split_heads" || n.node == "heads_first") CHECK(n.became.find("read by no one") != std::string::npos);
}

}  // namespace tec

namespace tec {

TEST_CASE("a MatMul of two run-time operands runs on the GPU: cuBLASLt where its rows are 16-byte aligned, else the general kernel") {
  for (const int64_t n : {8, 5}) {
    CAPTURE(n);
    ModelBuilder b;  // x @ x[:n]^T
    b.input("x", {8, 16});
    b.output("y", {8, n});
    b.constant_ints("starts", {0});
    b.constant_ints("ends", {n});
    b.node("Slice", {"x", "starts", "ends"}, "rows", "first_rows");
    b.node("Transpose", {"rows"}, "xt", "turn");
    b.node("MatMul", {"x", "xt"}, "y", "self_product");
    const CompileResult r = compile_model(b.save("runtime_matmul.onnx"), RecipeKind::bf16, "lower");
    const auto& gpu = r.profiles.at(0).gpu;
    CHECK(gpu.supported);
    const auto kernels = std::count_if(gpu.launches.begin(), gpu.launches.end(), [](const auto& l) { return l.entry == "tec_general_matmul"; });
    const auto gemms = std::count_if(gpu.launches.begin(), gpu.launches.end(), [](const auto& l) { return l.kind == codegen::Launch::Kind::gemm; });
    // fp32 rows of 16 floats and n floats: cuBLASLt takes n = 8 (32 bytes), not n = 5 (20 bytes).
    CHECK(kernels == (n == 8 ? 0 : 1));
    CHECK(gemms == (n == 8 ? 1 : 0));
  }
}

}  // namespace tec
