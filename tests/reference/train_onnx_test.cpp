// Train mode for ONNX models on the CPU reference: every general op's gradient (OpDef::gradient,
// built by autodiff out of other ops) and real Hugging Face layers and causal LMs, with the
// exporters' patterns and without them, against central differences of an independent fp64
// forward of the frontend's graph (tests/fp64_general.h, tests/fp64_train.h).
#include <doctest/doctest.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "compiler.h"
#include "fp64_train.h"
#include "frontend/onnx/onnx_import.h"
#include "passes/passes.h"
#include "plan/file.h"
#include "reference/executor.h"
#include "test_util.h"

namespace tec {

namespace {

using namespace test::fp64;

// One training step of an fp32 ONNX model on the CPU reference (seeded random inputs and dy),
// then every gradient (dx, each trained weight's main_grad) against fp64.
std::vector<GradientCheck> onnx_gradient_checks(const std::string& path, bool patterns, int samples, std::vector<std::string> frozen = {}) {
  CompileOptions o;
  o.model_path = path;
  o.frontend.mode = Mode::train;
  o.frontend.onnx_patterns = patterns;
  o.frontend.frozen = frozen;
  o.cache_dir = "";
  const CompileResult r = compile(o);
  const plan::Plan plan = plan::Plan::load(plan::serialize_plan(r.plan->manifest, r.plan->blobs), path);
  reference::Session s(plan, plan.profiles.at(0));
  s.randomize_inputs(11);
  // A padding mask as a tokenizer makes it: the second sequence's last 3 tokens are padding.
  // (Random bits would mask whole rows, whose softmax a float mask only flattens: fp64 and fp32
  // then disagree on what is flat.)
  for (const std::string& name : plan.profiles.at(0).inputs) {
    if (name != "attention_mask") continue;
    HostTensor mask = s.read(name);
    const int64_t length = mask.shape.cols();
    for (size_t i = 0; i < mask.values.size(); ++i)
      mask.values[i] = i >= mask.values.size() - 3 && static_cast<int64_t>(mask.values.size()) > length ? 0.0f : 1.0f;
    s.set_input(name, mask);
  }
  s.run();
  Graph g = meta(load_onnx_graphs(path, o.frontend).graphs.at(0));
  for (Value& v : g.values)  // (--freeze applies after the frontend)
    for (const std::string& f : frozen)
      if (v.kind == ValueKind::weight && std::regex_match(v.name, std::regex(f))) v.proto.requires_grad = false;
  return gradient_checks(g, samples, [&](const std::string& name) { return s.read(name); });
}

// A small ONNX model: input x [2, 4, 16] (and int64 ids [2, 4] where a node reads "ids"),
// seeded random float initializers, int64 ones as given, the nodes in order, the outputs.
struct OnnxModel {
  struct Node {
    std::string type;
    std::vector<std::string> inputs;
    std::string output;
    std::function<void(::onnx::NodeProto&)> attrs = nullptr;
  };
  std::map<std::string, std::vector<int64_t>> weights;                            // float, by shape
  std::map<std::string, float> scalars;                                           // one-element float constants
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<int64_t>>> ints;  // int64: shape, values
  std::vector<Node> nodes;
  std::vector<std::string> outputs;

  std::string write(const std::string& name) const {
    ::onnx::ModelProto m;
    m.set_ir_version(10);
    m.add_opset_import()->set_version(21);
    auto* g = m.mutable_graph();
    g->set_name(name);
    auto input = [&](const std::string& n, std::vector<int64_t> dims, int type) {
      auto* v = g->add_input();
      v->set_name(n);
      auto* t = v->mutable_type()->mutable_tensor_type();
      t->set_elem_type(type);
      for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
    };
    input("x", {2, 4, 16}, ::onnx::TensorProto::FLOAT);
    bool ids = false;
    for (const Node& n : nodes)
      for (const std::string& i : n.inputs) ids = ids || i == "ids";
    if (ids) input("ids", {2, 4}, ::onnx::TensorProto::INT64);
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    for (const auto& [n, dims] : weights) {
      auto* w = g->add_initializer();
      w->set_name(n);
      w->set_data_type(::onnx::TensorProto::FLOAT);
      int64_t count = 1;
      for (int64_t d : dims) w->add_dims(d), count *= d;
      for (int64_t i = 0; i < count; ++i) w->add_float_data(normal(rng));
    }
    for (const auto& [n, value] : scalars) {
      auto* w = g->add_initializer();
      w->set_name(n);
      w->set_data_type(::onnx::TensorProto::FLOAT);
      w->add_float_data(value);
    }
    for (const auto& [n, shape_values] : ints) {
      auto* w = g->add_initializer();
      w->set_name(n);
      w->set_data_type(::onnx::TensorProto::INT64);
      for (int64_t d : shape_values.first) w->add_dims(d);
      for (int64_t v : shape_values.second) w->add_int64_data(v);
    }
    int index = 0;
    for (const Node& n : nodes) {
      auto* p = g->add_node();
      p->set_name(n.type + "_" + std::to_string(index++));
      p->set_op_type(n.type);
      for (const std::string& i : n.inputs) p->add_input(i);
      p->add_output(n.output);
      if (n.attrs) n.attrs(*p);
    }
    for (const std::string& out : outputs) {
      auto* v = g->add_output();
      v->set_name(out);
      v->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
    }
    const auto path = std::filesystem::temp_directory_path() / ("tec-train-onnx-" + std::to_string(::getpid()) + "-" + name + ".onnx");
    std::ofstream(path, std::ios::binary) << m.SerializeAsString();
    return path.string();
  }
};

std::function<void(::onnx::NodeProto&)> int_attr(const std::string& name, int64_t v) {
  return [name, v](::onnx::NodeProto& n) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(v);
  };
}

std::function<void(::onnx::NodeProto&)> ints_attr(const std::string& name, std::vector<int64_t> vs) {
  return [name, vs](::onnx::NodeProto& n) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INTS);
    for (int64_t v : vs) a->add_ints(v);
  };
}

void check_model(const std::string& name, const OnnxModel& model, double bound = 1e-4) {
  const std::string path = model.write(name);
  for (bool patterns : {false, true}) {
    CAPTURE(patterns);
    const std::vector<GradientCheck> checks = onnx_gradient_checks(path, patterns, 48);
    CHECK(!checks.empty());
    for (const GradientCheck& check : checks) {
      CAPTURE(check.name);
      CHECK(check.error < bound);
    }
  }
  std::filesystem::remove(path);
}

}  // namespace

TEST_CASE("binary ops' gradients reach both operands, summed over the dims each was broadcast along") {
  OnnxModel m;
  m.weights = {{"w_row", {16}}, {"w_head", {4, 1}}, {"w_div", {1, 16}}};
  m.ints = {};
  m.nodes = {{"Sub", {"x", "w_row"}, "a"},
             {"Mul", {"a", "w_head"}, "b"},
             {"Mul", {"w_div", "w_div"}, "d2"},
             {"Add", {"d2", "one"}, "d"},
             {"Div", {"b", "d"}, "c"},
             {"Pow", {"c", "two"}, "p"},
             {"Add", {"p", "c"}, "y"}};
  m.scalars = {{"one", 1.0f}, {"two", 2.0f}};  // one-element constants: frozen, as ONNX constants of the math are
  m.outputs = {"y"};
  check_model("binary", m);
}

TEST_CASE("unary ops' gradients: sigmoid, tanh, erf, sqrt, reciprocal, neg, exp, log, abs, cos, sin") {
  OnnxModel m;
  m.scalars = {{"one", 1.0f}};
  m.nodes = {{"Mul", {"x", "x"}, "xx"},          {"Add", {"xx", "one"}, "pos"},    {"Sigmoid", {"x"}, "u0"},
             {"Tanh", {"x"}, "u1"},              {"Erf", {"x"}, "u2"},             {"Sqrt", {"pos"}, "u3"},
             {"Reciprocal", {"pos"}, "u4"},      {"Neg", {"x"}, "u5"},             {"Exp", {"x"}, "u6"},
             {"Log", {"pos"}, "u7"},             {"Abs", {"x"}, "u8"},             {"Cos", {"x"}, "u9"},
             {"Sin", {"x"}, "u10"},              {"Add", {"u0", "u1"}, "s1"},      {"Add", {"s1", "u2"}, "s2"},
             {"Add", {"s2", "u3"}, "s3"},        {"Add", {"s3", "u4"}, "s4"},      {"Add", {"s4", "u5"}, "s5"},
             {"Add", {"s5", "u6"}, "s6"},        {"Add", {"s6", "u7"}, "s7"},      {"Add", {"s7", "u8"}, "s8"},
             {"Add", {"s8", "u9"}, "s9"},        {"Add", {"s9", "u10"}, "y"}};
  m.outputs = {"y"};
  check_model("unary", m);
}

TEST_CASE("matmul's gradients: both operands at run time, batch dims broadcast, a 1-D operand, a constant operand") {
  OnnxModel m;
  m.weights = {{"w_vec", {16}}, {"w_mat", {16, 8}}, {"w_batch", {1, 16, 16}}};
  m.nodes = {{"Transpose", {"x"}, "xt", ints_attr("perm", {0, 2, 1})},
             {"MatMul", {"x", "xt"}, "scores"},
             {"MatMul", {"scores", "x"}, "y0"},
             {"MatMul", {"x", "w_vec"}, "y1"},
             {"MatMul", {"x", "w_mat"}, "y2"},
             {"MatMul", {"x", "w_batch"}, "y3"}};
  m.outputs = {"y0", "y1", "y2", "y3"};
  check_model("matmul", m);
}

TEST_CASE("reductions' gradients: sum and mean over some axes and all, max (keepdims or not), softmax, transpose") {
  OnnxModel m;
  m.ints = {{"ax1", {{1}, {1}}}, {"ax2", {{1}, {2}}}};
  m.nodes = {{"ReduceSum", {"x", "ax1"}, "r0", int_attr("keepdims", 1)},
             {"Mul", {"x", "r0"}, "y0"},
             {"ReduceMax", {"x", "ax2"}, "y1", int_attr("keepdims", 0)},
             {"ReduceMean", {"x"}, "y2", int_attr("keepdims", 0)},
             {"Softmax", {"x"}, "sm", int_attr("axis", 1)},
             {"Transpose", {"sm"}, "y3", ints_attr("perm", {2, 0, 1})}};
  m.outputs = {"y0", "y1", "y2", "y3"};
  check_model("reduce", m);
}

TEST_CASE("views' gradients: slices with steps (negative too), concat with a weight, expand of a weight, where") {
  OnnxModel m;
  m.weights = {{"w_cat", {2, 4, 3}}, {"w_row", {1, 16}}};
  m.scalars = {{"zero", 0.0f}};
  m.ints = {{"s_start", {{1}, {-1}}}, {"s_end", {{1}, {0}}}, {"s_axis", {{1}, {2}}}, {"s_step", {{1}, {-2}}},
            {"t_start", {{1}, {1}}},  {"t_end", {{1}, {4}}}, {"t_axis", {{1}, {1}}}, {"t_step", {{1}, {2}}},
            {"shape", {{3}, {2, 4, 16}}}};
  m.nodes = {{"Slice", {"x", "s_start", "s_end", "s_axis", "s_step"}, "y0"},
             {"Slice", {"x", "t_start", "t_end", "t_axis", "t_step"}, "y1"},
             {"Concat", {"x", "w_cat"}, "y2", int_attr("axis", 2)},
             {"Expand", {"w_row", "shape"}, "e"},
             {"Mul", {"e", "x"}, "y3"},
             {"Greater", {"x", "zero"}, "positive"},
             {"Mul", {"x", "w_row"}, "scaled"},
             {"Where", {"positive", "x", "scaled"}, "y4"}};
  m.outputs = {"y0", "y1", "y2", "y3", "y4"};
  check_model("views", m);
}

TEST_CASE("gather's and embedding's gradients add every picking position's gradient, repeated indices too") {
  OnnxModel m;
  m.weights = {{"table", {10, 16}}};
  m.ints = {{"picks", {{5}, {0, 2, 2, -1, 2}}}};
  m.nodes = {{"Gather", {"x", "picks"}, "y0", int_attr("axis", 1)},  // x's rows 0, 2, 2, 3, 2
             {"Gather", {"table", "ids"}, "rows"},                    // an embedding lookup at run-time ids
             {"Add", {"rows", "x"}, "y1"}};
  m.outputs = {"y0", "y1"};
  check_model("gather", m);
}

TEST_CASE("Hugging Face layers and causal LMs (tests/onnx/hf_corpus) train with and without patterns; gradients match fp64") {
  const std::string folder = test::source_dir() + "/tests/onnx/hf_corpus";
  const nlohmann::json manifest = nlohmann::json::parse(std::ifstream(folder + "/manifest.json"));
  int checked = 0;
  for (const auto& [file, entry] : manifest.at("models").items()) {
    if (!entry.contains("file")) continue;  // the exporter refused it (its "error" says why)
    CAPTURE(file);
    for (bool patterns : {false, true}) {
      CAPTURE(patterns);
      if (patterns && file.find("_kv.") != std::string::npos) {  // a KV cache: only the general path takes it, as in inference
        CHECK_THROWS_WITH(onnx_gradient_checks(folder + "/" + file, patterns, 6), doctest::Contains("is a KV cache"));
        continue;
      }
      std::vector<GradientCheck> checks;
      REQUIRE_NOTHROW(checks = onnx_gradient_checks(folder + "/" + file, patterns, 6));
      CHECK(checks.size() >= 2);
      for (const GradientCheck& check : checks) {
        CAPTURE(check.name);
        CAPTURE(check.error);
        CAPTURE(check.rms_error);
        // fp32 steps against fp64; with patterns, an fp32 model's attention runs in bf16, as in
        // inference (passes/attention_precision.cpp). A key projection's bias has a gradient of
        // exactly 0 (softmax does not see a shift shared by all keys): there the error is absolute.
        // (An LM's embedding gradient passes two bf16 attentions: 6e-2.)
        if (patterns)
          CHECK((check.error < (file.find("_lm") != std::string::npos ? 6e-2 : 2e-2) || check.rms_error < 2e-3));
        else
          CHECK((check.error < 1e-3 || check.rms_error < 1e-5));
      }
      ++checked;
    }
  }
  CHECK(checked >= 42);  // 22 exported models, each both ways but the KV caches'
}

TEST_CASE("--freeze keeps the named weights out of training; an expression that names none is a usage error") {
  const std::string path = test::source_dir() + "/tests/onnx/hf_corpus/llama_layer.sdpa.dynamo.onnx";
  CompileOptions o;
  o.model_path = path;
  o.frontend.mode = Mode::train;
  o.frontend.onnx_patterns = false;
  o.frontend.frozen = {"unsqueeze_.*"};
  o.cache_dir = "";
  const CompileResult r = compile(o);
  const plan::Plan plan = plan::Plan::load(plan::serialize_plan(r.plan->manifest, r.plan->blobs), path);
  const auto& tensors = plan.profiles.at(0).tensors;
  CHECK(tensors.count("layer.input_layernorm.weight.main_grad") == 1);
  for (const auto& [name, t] : tensors) {
    CAPTURE(name);
    CHECK(!(name.starts_with("unsqueeze_") && name.ends_with(".main_grad")));
  }
  o.frontend.frozen = {"no_such_weight"};
  Error e = test::error_of([&] { compile(o); });
  CHECK(e.kind() == ErrorKind::usage);
  CHECK(std::string(e.what()).find("--freeze 'no_such_weight' names no weight") != std::string::npos);
  o.frontend.frozen = {"("};
  e = test::error_of([&] { compile(o); });
  CHECK(e.kind() == ErrorKind::usage);
  CHECK(std::string(e.what()).find("is no regular expression") != std::string::npos);
}

}  // namespace tec
