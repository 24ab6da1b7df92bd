// The ONNX frontend against hostile and broken models: each gets one clear error (never a
// crash; CI runs this file under ASan/UBSan too), and a good model with its weights in an
// external file next to it compiles. Models are built with ONNX's protobuf classes.
#include <doctest/doctest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>

#include "frontend/onnx/onnx_import.h"
#include "passes/passes.h"
#include "test_util.h"

namespace tec {

namespace {

namespace fs = std::filesystem;

// x[2, 8] -> MatMul(W[8, 4]) -> Relu -> y: a valid model to break one thing at a time.
::onnx::ModelProto valid_model() {
  ::onnx::ModelProto m;
  m.set_ir_version(10);
  m.add_opset_import()->set_version(21);
  auto* g = m.mutable_graph();
  g->set_name("small");
  auto value = [](::onnx::ValueInfoProto* v, const std::string& name, std::vector<int64_t> dims) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(::onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
  };
  value(g->add_input(), "x", {2, 8});
  value(g->add_output(), "y", {2, 4});
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(::onnx::TensorProto::FLOAT);
  w->add_dims(8);
  w->add_dims(4);
  for (int i = 0; i < 32; ++i) w->add_float_data(0.1f * static_cast<float>(i % 7) - 0.3f);
  auto* mm = g->add_node();
  mm->set_name("fc");
  mm->set_op_type("MatMul");
  mm->add_input("x");
  mm->add_input("w");
  mm->add_output("h");
  auto* relu = g->add_node();
  relu->set_name("act");
  relu->set_op_type("Relu");
  relu->add_input("h");
  relu->add_output("y");
  return m;
}

std::string bytes_of(const ::onnx::ModelProto& m) { return m.SerializeAsString(); }

OnnxImport import_bytes(const std::string& bytes, const std::string& base_dir = ".") {
  return import_onnx(onnx::parse_model(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "model.onnx", base_dir),
                     FrontendOptions{});
}

void expect_error(const std::string& bytes, ErrorKind kind, const std::string& message, const std::string& base_dir = ".") {
  const Error e = test::error_of([&] { (void)import_bytes(bytes, base_dir); });
  CHECK_MESSAGE(e.kind() == kind, e.what());
  CHECK_MESSAGE(std::string(e.what()).find(message) != std::string::npos, "expected '" << message << "' in: " << e.what());
}

}  // namespace

TEST_CASE("a valid ONNX model becomes a linear and a relu, and compiles through meta") {
  OnnxImport imported = import_bytes(bytes_of(valid_model()));
  REQUIRE(imported.graphs.size() == 1);
  Graph g = usage(meta(apply_recipe(std::move(imported.graphs[0]))));
  CHECK(test::node_named(g, "fc").op == "linear");
  CHECK(test::node_named(g, "act").op == "relu");
  CHECK(imported.nodes.at(0).became == "linear");
}

TEST_CASE("a truncated ONNX file is rejected, wherever it is cut") {
  const std::string bytes = bytes_of(valid_model());
  int rejected = 0;
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    try {
      (void)import_bytes(bytes.substr(0, cut));
    } catch (const Error& e) {
      CHECK_MESSAGE((e.kind() == ErrorKind::invalid_input || e.kind() == ErrorKind::unsupported), e.what());
      ++rejected;
    }
  }
  CHECK(rejected == static_cast<int>(bytes.size()));  // no prefix is a whole valid model
}

TEST_CASE("random bytes are not an ONNX model") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string bytes(static_cast<size_t>(rng() % 4096), '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    const Error e = test::error_of([&] { (void)import_bytes(bytes); });
    CHECK_MESSAGE((e.kind() == ErrorKind::invalid_input || e.kind() == ErrorKind::unsupported), e.what());
  }
}

TEST_CASE("a node outside its op's arity is named before anything reads its inputs") {
  auto m = valid_model();
  m.mutable_graph()->mutable_node(0)->mutable_input()->RemoveLast();  // MatMul(x)
  m.mutable_graph()->mutable_node(1)->add_input("x");                 // Relu(h, x)
  const Error e = test::error_of([&] { (void)import_bytes(bytes_of(m)); });
  CHECK(std::string(e.what()).find("2 node(s)") != std::string::npos);
  CHECK(std::string(e.what()).find("node 'fc' (MatMul, opset 21): MatMul takes 2 inputs and at least 1 output, this one has 1") !=
        std::string::npos);
  CHECK(std::string(e.what()).find("node 'act' (Relu, opset 21): Relu takes 1 inputs") != std::string::npos);
}

TEST_CASE("a graph with a cycle is named as one") {
  auto m = valid_model();
  m.mutable_graph()->mutable_node(0)->set_input(0, "y");  // fc reads act's output, act reads fc's
  expect_error(bytes_of(m), ErrorKind::invalid_input, "cycle");
}

TEST_CASE("an output name that no node produces") {
  auto m = valid_model();
  m.mutable_graph()->mutable_output(0)->set_name("nowhere");
  expect_error(bytes_of(m), ErrorKind::invalid_input, "graph output 'nowhere' is never produced");
}

TEST_CASE("dims of -5 and 2^40 are rejected with the input's name") {
  for (int64_t dim : {int64_t{-5}, int64_t{1} << 40}) {
    auto m = valid_model();
    m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_value(dim);
    expect_error(bytes_of(m), ErrorKind::invalid_input, "dim " + std::to_string(dim) + " is outside");
  }
  auto m = valid_model();
  m.mutable_graph()->mutable_initializer(0)->set_dims(0, int64_t{1} << 40);
  expect_error(bytes_of(m), ErrorKind::invalid_input, "initializer 'w'");
}

TEST_CASE("an initializer whose raw_data does not match its dims") {
  auto m = valid_model();
  auto* w = m.mutable_graph()->mutable_initializer(0);
  w->clear_float_data();
  w->set_raw_data(std::string(31 * 4, '\0'));  // 31 floats for dims [8, 4]
  expect_error(bytes_of(m), ErrorKind::invalid_input, "raw_data holds 124 bytes");
}

TEST_CASE("external data must stay inside the model's folder") {
  const fs::path dir = fs::temp_directory_path() / ("tec_onnx_external_" + std::to_string(::getpid()));
  fs::create_directories(dir / "model");
  auto with_location = [](const std::string& location) {
    auto m = valid_model();
    auto* w = m.mutable_graph()->mutable_initializer(0);
    w->clear_float_data();
    w->set_data_location(::onnx::TensorProto::EXTERNAL);
    auto* kv = w->add_external_data();
    kv->set_key("location");
    kv->set_value(location);
    return bytes_of(m);
  };
  const std::string base = (dir / "model").string();
  expect_error(with_location("../../etc/passwd"), ErrorKind::invalid_input, "may not contain '..'", base);
  expect_error(with_location("/etc/passwd"), ErrorKind::invalid_input, "must be a path relative", base);
  std::error_code ec;
  fs::create_symlink("/etc", dir / "model" / "escape", ec);
  if (!ec) expect_error(with_location("escape/passwd"), ErrorKind::invalid_input, "outside the model's folder", base);
  expect_error(with_location("missing.bin"), ErrorKind::invalid_input, "does not exist", base);

  // The same weights in a file beside the model load, and past-the-end offsets do not.
  {
    std::ofstream data(dir / "model" / "weights.bin", std::ios::binary);
    for (int i = 0; i < 32; ++i) {
      const float v = 0.01f * static_cast<float>(i);
      data.write(reinterpret_cast<const char*>(&v), 4);
    }
  }
  CHECK_NOTHROW((void)import_bytes(with_location("weights.bin"), base));
  auto m = valid_model();
  auto* w = m.mutable_graph()->mutable_initializer(0);
  w->clear_float_data();
  w->set_data_location(::onnx::TensorProto::EXTERNAL);
  for (auto [k, v] : {std::pair{"location", "weights.bin"}, std::pair{"offset", "64"}}) {
    auto* kv = w->add_external_data();
    kv->set_key(k);
    kv->set_value(v);
  }
  expect_error(bytes_of(m), ErrorKind::invalid_input, "past the end", base);
  fs::remove_all(dir);
}

TEST_CASE("an opset from the future is refused, naming the range tec knows") {
  auto m = valid_model();
  m.mutable_opset_import(0)->set_version(99);
  expect_error(bytes_of(m), ErrorKind::unsupported, "opset 99 is newer than tec knows");
}

TEST_CASE("every unsupported node is listed in one error") {
  auto m = valid_model();
  auto* g = m.mutable_graph();
  g->mutable_node(1)->set_op_type("LogSoftmax");
  auto* conv = g->add_node();
  conv->set_name("odd");
  conv->set_op_type("Conv");
  conv->add_input("x");
  conv->add_output("z");
  auto* custom = g->add_node();
  custom->set_name("vendor");
  custom->set_op_type("FusedThing");
  custom->set_domain("com.example");
  custom->add_input("x");
  custom->add_output("q");
  const Error e = test::error_of([&] { (void)import_bytes(bytes_of(m)); });
  CHECK(e.kind() == ErrorKind::unsupported);
  const std::string what = e.what();
  CHECK(what.find("3 node(s) tec cannot compile") != std::string::npos);
  CHECK(what.find("node 'act' (LogSoftmax, opset 21): op LogSoftmax is not supported") != std::string::npos);
  CHECK(what.find("node 'odd' (Conv") != std::string::npos);
  CHECK(what.find("domain 'com.example' is not supported") != std::string::npos);
}

// q, k, v -> Attention -> y at opset 23, 3-D [2, 8, heads x 16]; `edit` changes one thing.
::onnx::ModelProto attention_model(int64_t q_width, int64_t kv_width, const std::function<void(::onnx::NodeProto&)>& edit) {
  ::onnx::ModelProto m;
  m.set_ir_version(10);
  m.add_opset_import()->set_version(23);
  auto* g = m.mutable_graph();
  auto value = [](::onnx::ValueInfoProto* v, const std::string& name, std::vector<int64_t> dims) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(::onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
  };
  value(g->add_input(), "q", {2, 8, q_width});
  value(g->add_input(), "k", {2, 8, kv_width});
  value(g->add_input(), "v", {2, 8, kv_width});
  value(g->add_output(), "y", {2, 8, q_width});
  auto* n = g->add_node();
  n->set_name("attn");
  n->set_op_type("Attention");
  for (const char* in : {"q", "k", "v"}) n->add_input(in);
  n->add_output("y");
  auto attr = [&](const char* name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(v);
  };
  attr("q_num_heads", q_width / 16);
  attr("kv_num_heads", kv_width / 16);
  attr("is_causal", 1);
  edit(*n);
  return m;
}

TEST_CASE("ONNX Attention's 3-D form becomes tec's attention; the forms tec does not take yet are named") {
  OnnxImport imported = import_bytes(bytes_of(attention_model(64, 32, [](::onnx::NodeProto&) {})));
  Graph g = meta(apply_recipe(std::move(imported.graphs.at(0))));
  const Node& attn = test::node_named(g, "attn");
  CHECK(attn.op == "attention");
  CHECK(attn.attrs.get_int("heads", 0) == 4);
  CHECK(attn.attrs.get_int("kv_heads", 0) == 2);
  CHECK(attn.attrs.get_int("head_dim", 0) == 16);
  CHECK(attn.attrs.get_bool("causal", false));
  CHECK(test::value_named(g, "y").proto.shape == Shape({2, 8, 64}));

  // Each is one line of the frontend's list of nodes it cannot compile.
  auto with_mask = attention_model(64, 32, [](::onnx::NodeProto& n) { n.add_input("q"); });  // q [2, 8, 64] as attn_mask
  expect_error(bytes_of(with_mask), ErrorKind::unsupported,
               "node 'attn' (Attention, opset 23): input 'q' (the additive mask) must be float and broadcast to [B, heads, S, S_kv] = "
               "[2, 4, 8, 8]");
  auto with_cache = attention_model(64, 32, [](::onnx::NodeProto& n) {
    n.add_input("");
    n.add_input("k");  // past_key
  });
  expect_error(bytes_of(with_cache), ErrorKind::unsupported, "input 4 ('k', past_key): tec's attention takes Q, K, V and a float attn_mask");
  expect_error(bytes_of(attention_model(64, 32, [](::onnx::NodeProto& n) { n.add_output("present_key"); })), ErrorKind::unsupported,
               "output 1 ('present_key', present_key): tec's attention makes Y alone");
  auto fifth_output = attention_model(64, 32, [](::onnx::NodeProto& n) {
    for (const char* out : {"", "", "", "extra"}) n.add_output(out);  // past the spec's four outputs
  });
  expect_error(bytes_of(fifth_output), ErrorKind::unsupported, "output 4 ('extra', past the spec's four)");
  expect_error(bytes_of(attention_model(64, 32, [](::onnx::NodeProto& n) { n.mutable_attribute()->Clear(); })), ErrorKind::unsupported,
               "3-D Q, K and V need the attributes q_num_heads and kv_num_heads (>= 1), got 0 and 0");
  expect_error(bytes_of(attention_model(64, 48, [](::onnx::NodeProto&) {})), ErrorKind::unsupported, "kv_heads must divide heads = 4");
}

TEST_CASE("ONNX Attention's 4-D form: transposed to tec's [batch, seq, heads x head_dim] and back, heads from the shapes") {
  auto four_d = attention_model(64, 32, [](::onnx::NodeProto& n) { n.mutable_attribute()->Clear(); });
  auto* g = four_d.mutable_graph();
  auto set_dims = [](::onnx::ValueInfoProto* v, std::vector<int64_t> dims) {
    auto* shape = v->mutable_type()->mutable_tensor_type()->mutable_shape();
    shape->clear_dim();
    for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
  };
  set_dims(g->mutable_input(0), {2, 4, 8, 16});  // q: 4 heads of 16
  set_dims(g->mutable_input(1), {2, 2, 8, 16});  // k, v: 2 kv heads
  set_dims(g->mutable_input(2), {2, 2, 8, 16});
  set_dims(g->mutable_output(0), {2, 4, 8, 16});
  OnnxImport imported = import_bytes(bytes_of(four_d));
  Graph graph = meta(apply_recipe(std::move(imported.graphs.at(0))));
  const auto found = std::find_if(graph.nodes.begin(), graph.nodes.end(), [](const Node& n) { return n.op == "attention"; });
  REQUIRE(found != graph.nodes.end());
  const Node& attn = *found;
  CHECK(attn.name.rfind("attn", 0) == 0);  // named after the ONNX node (the transposes before it took "attn")
  CHECK(attn.op == "attention");
  CHECK(attn.attrs.get_int("heads", 0) == 4);
  CHECK(attn.attrs.get_int("kv_heads", 0) == 2);
  CHECK(attn.attrs.get_int("head_dim", 0) == 16);
  CHECK(test::value_named(graph, "y").proto.shape == Shape({2, 4, 8, 16}));
  // Head-count attributes that contradict the shapes are the model's error.
  auto contradicting = four_d;
  auto* heads = contradicting.mutable_graph()->mutable_node(0)->add_attribute();
  heads->set_name("q_num_heads");
  heads->set_type(::onnx::AttributeProto::INT);
  heads->set_i(8);
  expect_error(bytes_of(contradicting), ErrorKind::unsupported, "q_num_heads 8 and kv_num_heads 0 disagree with Q [2, 4, 8, 16]");
}

TEST_CASE("a symbolic dim needs --shape, and --shape must name one") {
  auto m = valid_model();
  auto* dim = m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0);
  dim->clear_dim_value();
  dim->set_dim_param("tokens");
  expect_error(bytes_of(m), ErrorKind::invalid_input, "--shape tokens=N");
  const std::string bytes = bytes_of(m);
  FrontendOptions options;
  options.dim_overrides["tokens"] = {16, 32};
  const auto model = onnx::parse_model(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "model.onnx", ".");
  const OnnxImport two = import_onnx(model, options);
  REQUIRE(two.graphs.size() == 2);
  CHECK(two.graphs[1].value(two.graphs[1].inputs[0]).proto.shape == Shape{32, 8});
  options.dim_overrides["seq"] = {4};
  const Error e = test::error_of([&] { (void)import_onnx(model, options); });
  CHECK(std::string(e.what()).find("no symbolic dim 'seq'") != std::string::npos);
}

// y = x + (a + b) for constants a and b: the inner Add is folded at import.
// y = x + op(a, b) with constants a and b (b left out when empty): the op is folded.
::onnx::ModelProto folded_add_model(std::vector<int64_t> a_dims, std::vector<int64_t> b_dims, std::vector<int64_t> x_dims,
                                    const std::string& op = "Add") {
  ::onnx::ModelProto m;
  m.set_ir_version(10);
  m.add_opset_import()->set_version(21);
  auto* g = m.mutable_graph();
  g->set_name("fold");
  auto* x = g->add_input();
  x->set_name("x");
  x->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
  for (int64_t d : x_dims) x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
  g->add_output()->set_name("y");
  for (const auto& [name, dims] : {std::pair{"a", a_dims}, std::pair{"b", b_dims}}) {
    if (dims.empty()) continue;
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::FLOAT);
    int64_t count = 1;
    for (int64_t d : dims) {
      t->add_dims(d);
      count *= d;
    }
    for (int64_t i = 0; i < count; ++i) t->add_float_data(0.25f);
  }
  auto node = [&](const std::string& type, const std::string& a, const std::string& b, const std::string& out) {
    auto* n = g->add_node();
    n->set_name(out);
    n->set_op_type(type);
    n->add_input(a);
    if (!b.empty()) n->add_input(b);
    n->add_output(out);
  };
  node(op, "a", b_dims.empty() ? "" : "b", "ab");
  node("Add", "x", "ab", "y");
  return m;
}

// y = x + Range(start, limit, delta), the three scalars FLOAT initializers.
::onnx::ModelProto range_model(float start, float limit, float delta, int64_t x_len) {
  ::onnx::ModelProto m = folded_add_model({1}, {}, {x_len}, "Identity");
  auto* g = m.mutable_graph();
  g->clear_initializer();
  for (const auto& [name, value] : {std::pair{"start", start}, std::pair{"limit", limit}, std::pair{"delta", delta}}) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::FLOAT);
    t->add_float_data(value);
  }
  auto* range = g->mutable_node(0);
  range->set_op_type("Range");
  range->clear_input();
  for (const char* in : {"start", "limit", "delta"}) range->add_input(in);
  return m;
}

TEST_CASE("Range of constants folds (positions), and a hostile one is refused by name") {
  SUBCASE("0, 0.5, 1, 1.5: ceil((limit - start) / delta) elements") {
    const OnnxImport imported = import_bytes(bytes_of(range_model(0.0f, 2.0f, 0.5f, 4)));
    const Graph& g = imported.graphs.at(0);
    const auto add = std::find_if(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return n.op == "bias"; });
    REQUIRE(add != g.nodes.end());
    CHECK(*g.value(add->inputs.at(1)).weight->values == std::vector<float>{0.0f, 0.5f, 1.0f, 1.5f});
  }
  SUBCASE("a zero delta") {
    expect_error(bytes_of(range_model(0.0f, 2.0f, 0.0f, 4)), ErrorKind::invalid_input, "Range needs a nonzero finite delta");
  }
  SUBCASE("a range too long to hold") {
    expect_error(bytes_of(range_model(0.0f, 1e30f, 1.0f, 4)), ErrorKind::invalid_input, "Range of 1e+30 elements is too long");
  }
}

TEST_CASE("the rotary tables' and causal mask's folds (MatMul, Cos, Sin, Trilu) refuse what they cannot fold, by name") {
  SUBCASE("a MatMul of constants whose product is too big is refused before it is allocated") {
    expect_error(bytes_of(folded_add_model({4096, 1}, {1, 8192}, {4096, 8192}, "MatMul")), ErrorKind::unsupported,
                 "folding would make a constant of 33554432 elements [4096, 8192] from inputs of at most 8192");
  }
  SUBCASE("a MatMul of 1-D constants") {
    expect_error(bytes_of(folded_add_model({4}, {4}, {1}, "MatMul")), ErrorKind::unsupported,
                 "MatMul of constants folds float tensors of rank 2 or more");
  }
  SUBCASE("a Trilu of a 1-D constant") {
    expect_error(bytes_of(folded_add_model({4}, {}, {4}, "Trilu")), ErrorKind::invalid_input, "Trilu needs a tensor of rank 2 or more");
  }
  SUBCASE("Trilu of a run-time value is where(a constant triangle, x, 0) on the general path") {
    ::onnx::ModelProto m = valid_model();
    m.mutable_graph()->mutable_node(1)->set_op_type("Trilu");  // of h [2, 4], upper, k = 0
    const OnnxImport imported = import_bytes(bytes_of(m));
    const Graph& g = imported.graphs.at(0);
    const auto where = std::find_if(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return n.op == "where"; });
    REQUIRE(where != g.nodes.end());
    const Value& keep = g.value(where->inputs.at(0));
    REQUIRE(keep.weight.has_value());
    CHECK(keep.proto.shape == Shape({2, 4}));
    CHECK(*keep.weight->values == std::vector<float>{1, 1, 1, 1, 0, 1, 1, 1});
    CHECK(*g.value(where->inputs.at(2)).weight->values == std::vector<float>{0});
  }
  SUBCASE("Cos of a run-time value is a general unary") {
    ::onnx::ModelProto m = valid_model();
    m.mutable_graph()->mutable_node(1)->set_op_type("Cos");
    const OnnxImport imported = import_bytes(bytes_of(m));
    CHECK(std::any_of(imported.graphs.at(0).nodes.begin(), imported.graphs.at(0).nodes.end(),
                      [](const Node& n) { return n.op == "unary" && n.attrs.get_string("fn", "") == "cos"; }));
  }
  SUBCASE("Trilu of a constant folds: the upper triangle kept") {
    const OnnxImport imported = import_bytes(bytes_of(folded_add_model({4, 4}, {}, {4, 4}, "Trilu")));
    CHECK(imported.graphs.at(0).value(imported.graphs.at(0).outputs.at(0)).proto.shape == Shape{4, 4});
  }
}

TEST_CASE("constant folding may grow a constant by broadcasting, but not without bound") {
  SUBCASE("a [64, 1] + [1, 64] table folds") {
    const OnnxImport imported = import_bytes(bytes_of(folded_add_model({64, 1}, {1, 64}, {64, 64})));
    CHECK(imported.graphs.at(0).value(imported.graphs.at(0).outputs.at(0)).proto.shape == Shape{64, 64});
  }
  SUBCASE("a [8192, 1] + [1, 8192] table (2^26 elements from 8192) is refused before it is allocated") {
    expect_error(bytes_of(folded_add_model({8192, 1}, {1, 8192}, {8192, 8192})), ErrorKind::unsupported,
                 "folding would make a constant of 67108864 elements [8192, 8192] from inputs of at most 8192");
  }
  SUBCASE("constants whose shapes do not broadcast are named, not folded") {
    expect_error(bytes_of(folded_add_model({32, 16}, {32}, {32, 16})), ErrorKind::invalid_input,
                 "shapes [32, 16] and [32] do not broadcast");
  }
}

}  // namespace tec

namespace tec {

// Every ONNX input the fuzzer (tests/fuzz/onnx_frontend_fuzz.cpp) ever crashed us with lives
// in tests/fuzz/regressions/*.onnx and must now import or give a tec::Error.
TEST_CASE("ONNX fuzzer findings stay fixed: each regression model imports or gives a clear error") {
  for (const auto& entry : std::filesystem::directory_iterator(test::source_dir() + "/tests/fuzz/regressions")) {
    if (entry.path().extension() != ".onnx") continue;
    CAPTURE(entry.path().string());
    try {
      (void)import_bytes(test::read_text(entry.path().string()));
    } catch (const Error& e) {
      CHECK_FALSE(std::string(e.what()).empty());
    }
  }
}

}  // namespace tec
