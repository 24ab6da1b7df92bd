// Helpers for tests: compile a JSON graph given as text through the passes, and catch the
// Error a bad input raises.
#pragma once

#include <doctest/doctest.h>

#include <functional>
#include <string>

#include "frontend/json/graph_json.h"
#include "passes/passes.h"

namespace tec::test {

inline std::vector<Graph> compile_text(const std::string& text, FrontendOptions options = {},
                                       const std::string& base_dir = ".") {
  std::vector<Graph> graphs = parse_json_graphs(text, "graph.json", base_dir, options);
  for (Graph& g : graphs) g = usage(meta(apply_recipe(std::move(g))));
  return graphs;
}

inline std::vector<Graph> compile_file(const std::string& path, FrontendOptions options = {}) {
  std::vector<Graph> graphs = load_json_graphs(path, options);
  for (Graph& g : graphs) g = usage(meta(apply_recipe(std::move(g))));
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

}  // namespace tec::test
