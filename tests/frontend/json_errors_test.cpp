// Bad JSON graphs: each gets one clear error that names the JSON pointer (or node) at fault
// and says what was expected. Each case starts from a valid graph and breaks one thing.
#include <doctest/doctest.h>

#include <filesystem>

#include "test_util.h"

namespace tec {

namespace {

const std::string kValid = R"({
  "dims": {"T": [32, 64], "H": 64, "F": 256},
  "recipe": "fp8-current",
  "inputs": [{"name": "x", "shape": ["T", "H"]}],
  "ops": [
    {"name": "ln", "op": "layernorm", "inputs": ["x"], "attrs": {"hidden": "H"}},
    {"name": "fc1", "op": "linear", "inputs": ["ln"], "attrs": {"in_features": "H", "out_features": "F"}},
    {"name": "act", "op": "gelu", "inputs": ["fc1"]},
    {"name": "fc2", "op": "linear", "inputs": ["act"], "attrs": {"in_features": "F", "out_features": "H"}},
    {"name": "y", "op": "add", "inputs": ["fc2", "x"]}
  ],
  "outputs": ["y"]
})";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const auto pos = text.find(from);
  REQUIRE_MESSAGE(pos != std::string::npos, "test bug: '" << from << "' not in the graph");
  return text.replace(pos, from.size(), to);
}

struct BadCase {
  std::string what;
  std::string text;
  std::string location;  // expected in the error's location ("" = not checked)
  std::string node;      // expected node name ("" = not checked)
  std::string message;   // expected substring of the message
  ErrorKind kind = ErrorKind::invalid_input;
};

std::vector<BadCase> bad_cases() {
  return {
      {"malformed JSON", replace(kValid, R"("recipe": "fp8-current",)", R"("recipe": "fp8-current",,)"),
       "graph.json:3:27", "", "malformed JSON"},
      {"not an object", "[1, 2]", "graph.json /", "", "a graph must be a JSON object"},
      {"a dim too large for 64 bits", replace(kValid, R"("H": 64)", R"("H": 4444444444444444444444444444444444444444)"),
       "graph.json /dims/H", "", "expected an integer dim"},
      {"unknown top-level field", replace(kValid, R"("recipe")", R"("recipie")"), "graph.json /recipie", "",
       "unknown field 'recipie'"},
      {"unknown op", replace(kValid, R"("op": "gelu")", R"("op": "gelux")"), "graph.json /ops/2/op", "act",
       "unknown op 'gelux'; known ops: add, attention, bias"},
      {"missing input value", replace(kValid, R"("inputs": ["fc1"])", R"("inputs": ["fc0"])"),
       "graph.json /ops/2/inputs/0", "act", "input value 'fc0' is not defined by any input or op"},
      {"name used twice", replace(kValid, R"("name": "act")", R"("name": "fc1")"), "graph.json /ops/2/name", "fc1",
       "name 'fc1' is used twice: first at /ops/1/name"},
      {"op name clashes with an input", replace(kValid, R"("name": "ln")", R"("name": "x")"),
       "graph.json /ops/0/name", "x", "name 'x' is used twice: first at /inputs/0/name"},
      {"cycle", replace(kValid, R"("inputs": ["ln"])", R"("inputs": ["fc2"])"), "graph.json /ops/1", "fc1", "the graph has a cycle: fc1 -> act -> fc2 -> fc1"},
      {"shape mismatch at a linear", replace(kValid, R"("in_features": "F")", R"("in_features": 128)"), "graph.json /ops/3",
       "fc2", "shape mismatch: input 'act' has shape [32, 256], expected last dim 128 (in_features)"},
      {"FP8 GEMM dim not a multiple of 16", replace(kValid, R"("F": 256)", R"("F": 200)"), "graph.json /ops/1",
       "fc1", "fp8_current GEMM needs N divisible by 16, got N=200"},
      {"unknown model dtype", replace(kValid, R"("recipe")", R"("dtype": "bf17", "recipe")"), "graph.json /dtype", "",
       "unknown model dtype 'bf17'; expected bf16, fp16 or fp32"},
      {"unknown input dtype", replace(kValid, R"("shape": ["T", "H"])", R"("shape": ["T", "H"], "dtype": "int4")"),
       "graph.json /inputs/0/dtype", "x", "unknown input dtype 'int4'"},
      {"unknown recipe", replace(kValid, R"("fp8-current")", R"("fp9")"), "graph.json /recipe", "",
       "unknown recipe 'fp9'; expected one of: bf16, fp8-current"},
      {"bad recipe field", replace(kValid, R"("fp8-current")", R"({"kind": "fp8-delayed", "amax_history_len": 0})"),
       "graph.json /recipe", "", "amax_history_len must be in [1, 65536], got 0"},
      {"negative dim", replace(kValid, R"("T": [32, 64])", R"("T": [-5, 64])"), "graph.json /dims/T/0", "",
       "dim must be in [1, 2147483648], got -5"},
      {"absurd dim 2^40", replace(kValid, R"("H": 64)", R"("H": 1099511627776)"), "graph.json /dims/H", "",
       "dim must be in [1, 2147483648], got 1099511627776"},
      {"absurd literal shape", replace(kValid, R"(["T", "H"])", R"(["T", 1099511627776])"), "graph.json /inputs/0/shape/1",
       "", "dim must be in [1, 2147483648]"},
      {"tensor too large", replace(kValid, R"(["T", "H"])", R"([2147483648, 2147483648])"), "graph.json /inputs/0/shape",
       "x", "more than the limit"},
      {"unknown dim name", replace(kValid, R"(["T", "H"])", R"(["T", "Hidden"])"), "graph.json /inputs/0/shape/1", "",
       "unknown dim 'Hidden'"},
      {"profile lengths differ", replace(kValid, R"("H": 64)", R"("H": [64, 128, 256])"), "graph.json /dims/T", "",
       "profile dims must list the same number of sizes"},
      {"unknown attribute", replace(kValid, R"({"hidden": "H"})", R"({"hiden": "H"})"), "graph.json /ops/0/attrs/hiden",
       "ln", "unknown attribute 'hiden' for op 'layernorm'; it takes: hidden, eps, zero_centered_gamma"},
      {"unknown attribute with a list value", replace(kValid, R"({"hidden": "H"})", R"({"hidden": "H", "axes": ["T"]})"),
       "graph.json /ops/0/attrs/axes", "ln", "unknown attribute 'axes' for op 'layernorm'"},
      {"missing attribute", replace(kValid, R"({"hidden": "H"})", "{}"), "graph.json /ops/0", "ln",
       "op 'layernorm' needs attribute 'hidden'"},
      {"attribute of the wrong type", replace(kValid, R"("out_features": "F")", R"("out_features": 2.5)"),
       "graph.json /ops/1/attrs/out_features", "", "expected an integer or a dim name, got 2.5"},
      {"attribute not in its choices", replace(kValid, R"("op": "gelu")", R"("op": "gelu", "attrs": {"approximate": "fast"})"),
       "graph.json /ops/2/attrs/approximate", "act", "expected one of: tanh, none"},
      {"output never produced", replace(kValid, R"("outputs": ["y"])", R"("outputs": ["z"])"), "graph.json /outputs/0",
       "", "output 'z' is never produced"},
      {"missing ops", replace(kValid, R"("ops")", R"("opz")"), "graph.json /opz", "", "unknown field 'opz'"},
      {"wrong input count", replace(kValid, R"("inputs": ["fc2", "x"])", R"("inputs": ["fc2"])"), "graph.json /ops/4",
       "y", "op 'add' takes 2 input(s), got 1"},
      {"weights file missing", replace(kValid, R"("recipe")", R"("weights": {"file": "no_such.safetensors"}, "recipe")"),
       "graph.json /weights/file", "", "cannot open weights file", ErrorKind::io},
      {"weights with both file and init",
       replace(kValid, R"("recipe")", R"("weights": {"file": "w.safetensors", "init": "random"}, "recipe")"),
       "graph.json /weights", "", "either 'file'"},
  };
}

}  // namespace

TEST_CASE("bad JSON graphs: one clear error naming the pointer or node and what was expected") {
  for (const BadCase& c : bad_cases()) {
    CAPTURE(c.what);
    const Error e = test::error_of([&] { (void)test::compile_text(c.text); });
    const std::string message = e.what();
    CAPTURE(message);
    CHECK(e.kind() == c.kind);
    if (!c.location.empty()) CHECK(e.context().location.rfind(c.location, 0) == 0);
    if (!c.node.empty()) CHECK(e.context().node == c.node);
    CHECK(e.message().find(c.message) != std::string::npos);
  }
}

// Every input a fuzzer ever crashed us with lives in tests/fuzz/regressions/ and must now
// give a tec::Error (or compile). The first one: an integer literal that overflowed inside the
// JSON library's lexer made it throw out_of_range rather than parse_error, which escaped.
TEST_CASE("fuzzer findings stay fixed: each regression input gives a clear error") {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(test::source_dir() + "/tests/fuzz/regressions")) {
    if (entry.path().extension() != ".json") continue;
    CAPTURE(entry.path().string());
    const std::string text = test::read_text(entry.path().string());
    try {
      (void)test::compile_text(text);
    } catch (const Error& e) {
      CHECK_FALSE(std::string(e.what()).empty());
    }
    ++count;
  }
  CHECK(count >= 1);
}

TEST_CASE("the valid graph used by the bad cases compiles") {
  const auto graphs = test::compile_text(kValid);
  CHECK(graphs.size() == 2);
}

}  // namespace tec
