// Helpers for tests: compile a JSON graph given as text through the passes, and catch the
// Error a bad input raises.
#pragma once

#include <doctest/doctest.h>

#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <sstream>
#include <string>

#include "frontend/json/graph_json.h"
#include "passes/passes.h"

namespace tec::test {

inline std::vector<Graph> compile_text(const std::string& text, FrontendOptions options = {},
                                       const std::string& base_dir = ".") {
  std::vector<Graph> graphs = parse_json_graphs(text, "graph.json", base_dir, options);
  for (Graph& g : graphs) g = usage(meta(apply_recipe(tensor_parallel(std::move(g)))));
  return graphs;
}

inline std::vector<Graph> compile_file(const std::string& path, FrontendOptions options = {}) {
  std::vector<Graph> graphs = load_json_graphs(path, options);
  for (Graph& g : graphs) g = usage(meta(apply_recipe(tensor_parallel(std::move(g)))));
  return graphs;
}

// Runs f and returns the Error it throws; fails the test if it throws none.
inline Error error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("expected a tec::Error, none was thrown");
  throw;  // unreachable
}

inline FrontendOptions with_recipe(RecipeKind kind, Mode mode = Mode::infer) {
  FrontendOptions o;
  o.recipe = kind;
  o.mode = mode;
  return o;
}

inline const Value& value_named(const Graph& g, const std::string& name) {
  auto id = g.find_value(name);
  REQUIRE_MESSAGE(id.has_value(), "no value named " << name);
  return g.value(*id);
}

inline const Node& node_named(const Graph& g, const std::string& name) {
  for (const Node& n : g.nodes)
    if (n.name == name) return n;
  FAIL("no node named " << name);
  throw;
}

inline std::string source_dir() { return TEC_SOURCE_DIR; }

// A whole file as bytes in a string (regression inputs, fixtures).
inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A random graph over [T, H] values: elementwise ops, norms, linears H->H and residual adds.
inline std::string random_graph(std::mt19937& rng) {
  auto pick = [&rng](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const int tokens = 32 << pick(3), hidden = 32 << pick(2);
  std::vector<std::string> values{"x"};
  std::ostringstream ops;
  const int count = 2 + pick(15);
  for (int i = 0; i < count; ++i) {
    const std::string name = "v" + std::to_string(i);
    const std::string a = values[static_cast<size_t>(pick(static_cast<int>(values.size())))];
    const std::string b = values[static_cast<size_t>(pick(static_cast<int>(values.size())))];
    ops << (i ? "," : "") << R"({"name": ")" << name << "\", ";
    switch (pick(6)) {
      case 0: ops << R"("op": "gelu", "inputs": [")" << a << "\"]}"; break;
      case 1: ops << R"("op": "relu", "inputs": [")" << a << "\"]}"; break;
      case 2: ops << R"("op": "add", "inputs": [")" << a << "\", \"" << b << "\"]}"; break;
      case 3: ops << R"("op": "layernorm", "inputs": [")" << a << R"("], "attrs": {"hidden": )" << hidden << "}}"; break;
      case 4: ops << R"("op": "scale", "inputs": [")" << a << R"("], "attrs": {"scale": 0.5}})"; break;
      default:
        ops << R"("op": "linear", "inputs": [")" << a << R"("], "attrs": {"in_features": )" << hidden
            << R"(, "out_features": )" << hidden << "}}";
    }
    values.push_back(name);
  }
  std::string outputs = "\"" + values.back() + "\"";
  if (pick(2) && values.size() > 3) outputs += ", \"" + values[values.size() / 2] + "\"";
  return R"({"inputs": [{"name": "x", "shape": [)" + std::to_string(tokens) + ", " + std::to_string(hidden) +
         R"(]}], "ops": [)" + ops.str() + R"(], "outputs": [)" + outputs + "]}";
}


}  // namespace tec::test
