// Every op's fake forward, table-driven: {op, input shapes, attrs} -> output shape, what it
// saves in train mode, and which saved tensors alias an input. The registry self-test checks
// that every registered op has a case here.
#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "ops/common.h"
#include "passes/passes.h"
#include "test_util.h"

namespace tec {

namespace {

struct OpCase {
  std::string op;
  std::vector<std::string> input_shapes;  // JSON arrays, each optionally followed by a dtype ("[4] int32")
  std::string attrs;                      // JSON object
  Shape output;
  std::vector<std::pair<std::string, int>> saved;  // name, aliased input slot (-1: new buffer)
};

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = {
      {"linear", {"[32, 64]"}, R"({"in_features": 64, "out_features": 128})", {32, 128}, {{"input", 0}, {"weight", 1}}},
      {"linear", {"[2, 16, 64]"}, R"({"in_features": 64, "out_features": 32, "bias": false})", {2, 16, 32},
       {{"input", 0}, {"weight", 1}}},
      {"bias", {"[32, 64]"}, R"({"features": 64})", {32, 64}, {}},
      {"gelu", {"[32, 64]"}, R"({"approximate": "tanh"})", {32, 64}, {{"input", 0}}},
      {"gelu", {"[32, 64]"}, R"({"approximate": "none"})", {32, 64}, {{"input", 0}}},
      {"relu", {"[32, 64]"}, "{}", {32, 64}, {{"input", 0}}},
      {"silu", {"[32, 64]"}, "{}", {32, 64}, {{"input", 0}}},
      {"swiglu", {"[32, 128]"}, "{}", {32, 64}, {{"input", 0}}},
      {"geglu", {"[4, 8, 128]"}, "{}", {4, 8, 64}, {{"input", 0}}},
      {"layernorm", {"[32, 64]"}, R"({"hidden": 64})", {32, 64}, {{"input", 0}, {"gamma", 1}, {"mean", -1}, {"rsigma", -1}}},
      {"rmsnorm", {"[32, 64]"}, R"({"hidden": 64, "eps": 1e-6})", {32, 64}, {{"input", 0}, {"gamma", 1}, {"rsigma", -1}}},
      {"add", {"[32, 64]", "[32, 64]"}, "{}", {32, 64}, {}},
      {"scale", {"[32, 64]"}, R"({"scale": 0.5})", {32, 64}, {}},
      {"l2norm", {"[32, 64]"}, "{}", {32, 64}, {{"input", 0}, {"rnorm", -1}}},
      {"dropout", {"[32, 64]"}, R"({"p": 0.1})", {32, 64}, {{"mask", -1}}},
      {"quantize", {"[32, 64]"}, R"({"recipe": "fp8-current"})", {32, 64}, {}},
      {"dequantize", {"[32, 64]"}, "{}", {32, 64}, {}},  // fed by a quantize, see one_op_graph
      {"reshape", {"[32, 64]"}, R"({"shape": [-1, 32]})", {64, 32}, {}},
      {"identity", {"[32, 64]"}, "{}", {32, 64}, {}},
      // The MoE layer; integer inputs (expert indices, m_splits, the row map) get no gradient.
      {"moe_router", {"[16, 64]"}, R"({"in_features": 64, "num_experts": 4, "top_k": 2})", {16, 2}, {{"input", 0}, {"weight", 1}}},
      {"moe_permute", {"[16, 64]", "[16, 2] int32"}, R"({"num_experts": 4})", {32, 64}, {{"indices", 1}}},
      {"grouped_linear", {"[32, 64]", "[4] int32"}, R"({"num_gemms": 4, "in_features": 64, "out_features": 32})", {32, 32},
       {{"input", 0}, {"m_splits", 1}, {"weight", 2}}},
      {"moe_unpermute", {"[32, 64]", "[32] int32", "[16, 2] fp32"}, "{}", {16, 64}, {{"input", 0}, {"row_map", 1}, {"weights", 2}}},
      // Attention: rope saves nothing (its backward is the rotation's transpose).
      {"rope", {"[2, 8, 64]"}, R"({"heads": 4, "head_dim": 16})", {2, 8, 64}, {}},
      // attention saves q, k, v and the softmax's log-sum-exp per row and head, as flash attention.
      {"attention", {"[2, 8, 64]", "[2, 8, 32]", "[2, 8, 32]"}, R"({"heads": 4, "kv_heads": 2, "head_dim": 16, "causal": true})", {2, 8, 64},
       {{"q", 0}, {"k", 1}, {"v", 2}, {"softmax_lse", -1}, {"o", -1}}},
      {"attention", {"[2, 8, 64]", "[2, 8, 64]", "[2, 8, 64]", "[2] int32"}, R"({"heads": 4, "head_dim": 16})", {2, 8, 64},
       {{"q", 0}, {"k", 1}, {"v", 2}, {"seq_lens", 3}, {"softmax_lse", -1}, {"o", -1}}},
  };
  return cases;
}

std::string case_name(const OpCase& c) {
  std::string shapes;
  for (const auto& s : c.input_shapes) shapes += s;
  return c.op + "(in=" + shapes + ", attrs=" + c.attrs + ")";
}

// A graph with the op under test fed by graph inputs (dequantize gets a quantize first).
std::string one_op_graph(const OpCase& c, bool inputs_require_grad) {
  std::string inputs, names;
  for (size_t i = 0; i < c.input_shapes.size(); ++i) {
    const std::string& spec = c.input_shapes[i];
    const size_t space = spec.find("] ");
    const std::string shape = space == std::string::npos ? spec : spec.substr(0, space + 1);
    const std::string dtype = space == std::string::npos ? "" : R"(, "dtype": ")" + spec.substr(space + 2) + "\"";
    inputs += (i ? "," : "") + std::string(R"({"name": "in)") + std::to_string(i) + R"(", "shape": )" + shape + dtype +
              R"(, "requires_grad": )" + (inputs_require_grad ? "true" : "false") + "}";
    names += (i ? "," : "") + std::string("\"in") + std::to_string(i) + "\"";
  }
  std::string ops;
  if (c.op == "dequantize") {
    ops = R"({"name": "q", "op": "quantize", "inputs": ["in0"], "attrs": {"recipe": "fp8-current"}},)";
    names = "\"q\"";
  }
  ops += R"({"name": "op", "op": ")" + c.op + R"(", "inputs": [)" + names + R"(], "attrs": )" + c.attrs + "}";
  return R"({"inputs": [)" + inputs + R"(], "ops": [)" + ops + R"(], "outputs": ["op"]})";
}

}  // namespace

TEST_CASE("every op's fake forward in infer mode: output shape, nothing saved") {
  for (const OpCase& c : op_cases()) {
    CAPTURE(case_name(c));
    auto graphs = test::compile_text(one_op_graph(c, false));
    const Node& node = test::node_named(graphs.at(0), "op");
    CHECK(test::value_named(graphs.at(0), "op").proto.shape == c.output);
    CHECK(node.saved.empty());
    CHECK_FALSE(node.backward.has_value());
  }
}

TEST_CASE("every op's fake forward in train mode: saved tensors, their aliases, and the backward") {
  for (const OpCase& c : op_cases()) {
    CAPTURE(case_name(c));
    FrontendOptions train;
    train.mode = Mode::train;
    auto graphs = test::compile_text(one_op_graph(c, true), train);
    const Node& node = test::node_named(graphs.at(0), "op");
    REQUIRE(node.saved.size() == c.saved.size());
    for (size_t i = 0; i < c.saved.size(); ++i) {
      CHECK(node.saved[i].name == c.saved[i].first);
      CHECK(node.saved[i].aliases_input == c.saved[i].second);
    }
    // A backward node of its own (infer_backward), or one that autodiff builds out of other ops.
    CHECK(node.backward.has_value() != static_cast<bool>(builtin_ops().get(c.op).gradient));
    CHECK(test::value_named(graphs.at(0), "in0").grad.has_value());
  }
}

// Ops whose backward is a graph of other ops (OpDef::gradient), checked against fp64 in
// tests/reference/train_onnx_test.cpp: the general tensor math and the embedding lookup.
const std::set<std::string> kGradientGraph = {"binary", "unary",  "matmul",  "reduce",  "transpose", "cast",  "softmax", "where",   "slice",
                                              "concat", "expand", "convert", "gather", "gather_nd", "embedding", "reshape", "scale"};
// Ops whose outputs are bools or integers: no gradient flows through them.
const std::set<std::string> kNoGradient = {"compare", "sequence_lengths"};

TEST_CASE("registry self-test: every op has a schema, infer, infer_backward and a test case") {
  std::set<std::string> tested;
  for (const auto& c : op_cases()) tested.insert(c.op);
  for (const OpDef* def : builtin_ops().all()) {
    CAPTURE(def->name);
    CHECK(static_cast<bool>(def->infer));
    if (def->compiler_only) continue;  // adamw, increment, gradient_map, ...: made by autodiff, tested with the train plans
    const bool graph = kGradientGraph.count(def->name) == 1, none = kNoGradient.count(def->name) == 1;
    CHECK(static_cast<bool>(def->gradient) == graph);
    CHECK(static_cast<bool>(def->infer_backward) == (!graph && !none));
    // A backward for the CPU reference, or a gradient that reaches the inputs unchanged.
    CHECK((def->backward_reference != nullptr || def->gradient_passes_through) == (!graph && !none));
    CHECK_FALSE(def->summary.empty());
    CHECK(def->min_inputs <= def->max_inputs);
    CHECK((tested.count(def->name) == 1 || graph || none));
  }
  // The op list of ARCHITECTURE.md §4 that the foundation covers, plus the general tensor
  // math; a tripwire for docs/status.md's table.
  CHECK(builtin_ops().all().size() == 48);
}

HostTensor host(Shape shape, std::vector<float> values) { return HostTensor{std::move(shape), std::move(values)}; }

std::vector<float> run_reference(const std::string& op, const std::string& attrs_json, std::vector<HostTensor> in) {
  Attributes attrs;
  const nlohmann::json parsed = nlohmann::json::parse(attrs_json);
  for (const auto& [k, v] : parsed.items()) {
    if (v.is_string()) attrs.values[k] = v.get<std::string>();
    else if (v.is_boolean()) attrs.values[k] = v.get<bool>();
    else if (v.is_array()) attrs.values[k] = v.get<std::vector<int64_t>>();
    else if (v.is_number_integer()) attrs.values[k] = v.get<int64_t>();
  }
  return builtin_ops().get(op).reference(attrs, in).at(0).values;
}

std::string general_op_graph(const std::string& op, const std::string& attrs, const std::vector<std::string>& shapes) {
  std::string inputs, names;
  for (size_t i = 0; i < shapes.size(); ++i) {
    inputs += (i ? "," : "") + std::string(R"({"name": "in)") + std::to_string(i) + R"(", "shape": )" + shapes[i] + "}";
    names += (i ? "," : "") + std::string("\"in") + std::to_string(i) + "\"";
  }
  return R"({"inputs": [)" + inputs + R"(], "ops": [{"name": "op", "op": ")" + op + R"(", "inputs": [)" + names +
         R"(], "attrs": )" + attrs + R"(}], "outputs": ["op"]})";
}

TEST_CASE("general tensor math: shapes follow numpy, values follow the math") {
  auto out_shape = [](const std::string& op, const std::string& attrs, const std::vector<std::string>& shapes) {
    return test::value_named(test::compile_text(general_op_graph(op, attrs, shapes)).at(0), "op").proto.shape;
  };
  CHECK(out_shape("binary", R"({"fn": "add"})", {"[2, 3]", "[3]"}) == Shape{2, 3});
  CHECK(out_shape("binary", R"({"fn": "pow"})", {"[4, 1, 5]", "[3, 1]"}) == Shape{4, 3, 5});
  CHECK(out_shape("matmul", "{}", {"[2, 1, 4, 3]", "[5, 3, 6]"}) == Shape{2, 5, 4, 6});
  CHECK(out_shape("matmul", "{}", {"[3]", "[3, 6]"}) == Shape{6});
  CHECK(out_shape("reduce", R"({"fn": "mean", "axes": [-1], "keepdims": true})", {"[4, 6]"}) == Shape{4, 1});
  CHECK(out_shape("reduce", R"({"fn": "max", "axes": [0, 2], "keepdims": false})", {"[4, 6, 2]"}) == Shape{6});
  CHECK(out_shape("transpose", R"({"perm": [2, 0, 1]})", {"[4, 6, 2]"}) == Shape{2, 4, 6});
  CHECK(out_shape("transpose", "{}", {"[4, 6, 2]"}) == Shape{2, 6, 4});
  CHECK(test::value_named(test::compile_text(general_op_graph("cast", R"({"dtype": "fp16"})", {"[4, 8]"})).at(0), "op")
            .proto.dtype == DType::fp16);

  CHECK(run_reference("binary", R"({"fn": "sub"})", {host({2, 2}, {1, 2, 3, 4}), host({2}, {10, 20})}) ==
        std::vector<float>{-9, -18, -7, -16});
  CHECK(run_reference("binary", R"({"fn": "div"})", {host({2}, {1, 3}), host({}, {2})}) == std::vector<float>{0.5f, 1.5f});
  CHECK(run_reference("matmul", "{}", {host({2, 3}, {1, 2, 3, 4, 5, 6}), host({3, 1}, {1, 0, -1})}) ==
        std::vector<float>{-2, -2});
  CHECK(run_reference("reduce", R"({"fn": "mean", "axes": [0]})", {host({2, 2}, {1, 2, 3, 6})}) == std::vector<float>{2, 4});
  CHECK(run_reference("transpose", "{}", {host({2, 3}, {1, 2, 3, 4, 5, 6})}) == std::vector<float>{1, 4, 2, 5, 3, 6});
  const float x = 0.7f;
  for (const auto& [fn, expected] : std::vector<std::pair<std::string, double>>{
           {"sigmoid", 1 / (1 + std::exp(-0.7))}, {"tanh", std::tanh(0.7)}, {"erf", std::erf(0.7)},
           {"sqrt", std::sqrt(0.7)}, {"reciprocal", 1 / 0.7}, {"neg", -0.7}, {"exp", std::exp(0.7)}, {"log", std::log(0.7)},
           {"abs", 0.7}, {"cos", std::cos(0.7)}, {"sin", std::sin(0.7)}}) {
    CAPTURE(fn);
    CHECK(run_reference("unary", R"({"fn": ")" + fn + R"("})", {host({1}, {x})}).at(0) == doctest::Approx(expected).epsilon(1e-6));
  }
}

TEST_CASE("embedding: each token id picks its table row; ids must be int32 and inside the table") {
  Attributes a;
  a.values["num_embeddings"] = int64_t{3};
  a.values["embedding_dim"] = int64_t{2};
  const HostTensor table = host({3, 2}, {0.5f, -1, 2, 3, -4, 8});
  const auto out = builtin_ops().get("embedding").reference(a, {host({2, 2}, {2, 0, 1, 2}), table}).at(0);
  CHECK(out.shape == Shape{2, 2, 2});
  CHECK(out.values == std::vector<float>{-4, 8, 0.5f, -1, 2, 3, -4, 8});
  for (const float bad : {3.0f, -1.0f}) {
    const Error e = test::error_of([&] { (void)builtin_ops().get("embedding").reference(a, {host({2}, {0, bad}), table}); });
    CHECK(e.kind() == ErrorKind::invalid_input);
    CHECK(std::string(e.what()).find("at position 1 is outside the embedding table's rows [0, 3)") != std::string::npos);
  }
  // The graph: int32 ids [B, S] -> [B, S, dim] in the table's dtype; float ids are named.
  std::string graph = R"({"inputs": [{"name": "ids", "shape": [2, 5], "dtype": "int32"}], "ops": [{"name": "op", "op": "embedding",
      "inputs": ["ids"], "attrs": {"num_embeddings": 7, "embedding_dim": 4, "dtype": "fp32"}}], "outputs": ["op"]})";
  auto graphs = test::compile_text(graph);
  CHECK(test::value_named(graphs.at(0), "op").proto.shape == Shape{2, 5, 4});
  CHECK(test::value_named(graphs.at(0), "op").proto.dtype == DType::fp32);
  graph.replace(graph.find(R"("dtype": "int32")"), 16, R"("dtype": "fp32")");
  const Error e = test::error_of([&] { (void)test::compile_text(graph); });
  CHECK(std::string(e.what()).find("input 'ids' (the token ids) must be int32, got fp32") != std::string::npos);
  const Error rows = test::error_of([&] {
    (void)test::compile_text(R"({"inputs": [{"name": "ids", "shape": [2], "dtype": "int32"}], "ops": [{"name": "op", "op": "embedding",
        "inputs": ["ids"], "attrs": {"num_embeddings": 0, "embedding_dim": 4}}], "outputs": ["op"]})");
  });
  CHECK(std::string(rows.what()).find("num_embeddings must be in [1, 16777216]") != std::string::npos);
}

TEST_CASE("sequence_lengths: a right-padded mask's rows give their lengths; any other row is named") {
  const auto& def = builtin_ops().get("sequence_lengths");
  CHECK(def.reference({}, {host({3, 4}, {1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0})}).at(0).values == std::vector<float>{4, 1, 0});
  for (const auto& [row, at] : std::vector<std::pair<std::vector<float>, std::string>>{{{0, 1, 1, 1}, "holds 1 at 1 after 0"},
                                                                                        {{1, 0, 1, 0}, "holds 1 at 2 after 1"},
                                                                                        {{1, 2, 0, 0}, "holds 2 at 1 after 1"}}) {
    const Error e = test::error_of([&] { (void)def.reference({}, {host({1, 4}, row)}); });
    CHECK(e.kind() == ErrorKind::invalid_input);
    CHECK_MESSAGE(std::string(e.what()).find("padding mask row 0 " + at + " leading ones; tec's attention takes right-padded") !=
                      std::string::npos,
                  e.what());
  }
  auto graphs = test::compile_text(R"({"inputs": [{"name": "mask", "shape": [2, 5], "dtype": "int32"}], "ops": [{"name": "op",
      "op": "sequence_lengths", "inputs": ["mask"]}], "outputs": ["op"]})");
  CHECK(test::value_named(graphs.at(0), "op").proto.shape == Shape{2});
  CHECK(test::value_named(graphs.at(0), "op").proto.dtype == DType::int32);
}

TEST_CASE("a general op's backward is a graph of other ops, named after the node, in the backward phase") {
  FrontendOptions train;
  train.mode = Mode::train;
  std::string graph = general_op_graph("binary", R"({"fn": "div"})", {"[4, 8]", "[8]"});
  for (const std::string shape : {R"("shape": [4, 8]})", R"("shape": [8]})"}) {
    const std::string marked = shape.substr(0, shape.size() - 1) + R"(, "requires_grad": true})";
    graph.replace(graph.find(shape), shape.size(), marked);
  }
  const Graph g = autodiff(usage(meta(test::compile_text(graph, train).at(0))), {});
  std::map<std::string, std::string> backward;  // node -> op
  for (const Node& n : g.nodes)
    if (n.phase == Phase::backward) backward[n.name] = n.op;
  CHECK(backward.at("op.dinput") == "binary");          // dy / b
  CHECK(backward.at("op.dinput1") == "gradient_map");   // -dy y / b, over [4, 8]
  CHECK(backward.at("op.dinput1_sum") == "reduce");     // summed over the broadcast dim
  CHECK(backward.at("op.dinput1_sum_shape") == "reshape");
}

// Tensor-parallel linears: tests/passes/tensor_parallel_test.cpp.

}  // namespace tec
