// Weights: safetensors files are checked against the shapes the ops declare, and seeded
// random initialisation is deterministic.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/random.h"
#include "frontend/weights/safetensors.h"
#include "test_util.h"

namespace tec {

namespace {

std::filesystem::path temp_dir() {
  auto dir = std::filesystem::temp_directory_path() / ("tec_weights_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

const std::string kGraph = R"({
  "inputs": [{"name": "x", "shape": [16, 32]}],
  "weights": {"file": "w.safetensors"},
  "ops": [{"name": "fc", "op": "linear", "inputs": ["x"], "attrs": {"in_features": 32, "out_features": 16}}],
  "outputs": ["fc"]})";

NamedTensor filled(const std::string& name, Shape shape) {
  std::vector<float> values(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  return {name, std::move(shape), std::move(values)};
}

}  // namespace

TEST_CASE("a safetensors file with the right tensors feeds the weights, and reads back exactly") {
  const auto dir = temp_dir();
  const NamedTensor weight = filled("fc.weight", {16, 32});
  write_safetensors((dir / "w.safetensors").string(), {weight, filled("fc.bias", {16})});
  const Graph g = test::compile_text(kGraph, {}, dir.string()).at(0);
  const Value& w = test::value_named(g, "fc.weight");
  REQUIRE(w.weight.has_value());
  CHECK(w.weight->kind == WeightSource::Kind::file);
  CHECK(w.weight->tensor == "fc.weight");
  const auto index = read_safetensors_index((dir / "w.safetensors").string());
  CHECK(read_tensor_as_float(index, index.tensors.at("fc.weight")) == weight.values);
}

TEST_CASE("a weights file of the wrong shape or missing a tensor names the tensor and both shapes") {
  const auto dir = temp_dir();
  write_safetensors((dir / "w.safetensors").string(), {filled("fc.weight", {32, 16}), filled("fc.bias", {16})});
  const Error shape = test::error_of([&] { (void)test::compile_text(kGraph, {}, dir.string()); });
  CHECK(shape.context().location == "graph.json /weights/file");
  CHECK(shape.context().node == "fc");
  CHECK(shape.message().find("tensor 'fc.weight' has shape [32, 16], expected [16, 32]") != std::string::npos);

  write_safetensors((dir / "w.safetensors").string(), {filled("fc.weight", {16, 32})});
  const Error missing = test::error_of([&] { (void)test::compile_text(kGraph, {}, dir.string()); });
  CHECK(missing.message().find("has no tensor 'fc.bias'") != std::string::npos);
}

TEST_CASE("hostile safetensors files get clear errors") {
  const auto dir = temp_dir();
  const auto path = (dir / "w.safetensors").string();
  auto write_raw = [&](const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; };
  auto header = [](const std::string& json) {
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
    return out + json;
  };
  write_raw("");
  CHECK(test::error_of([&] { (void)read_safetensors_index(path); }).message().find("shorter than") != std::string::npos);
  write_raw(std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}");
  CHECK(test::error_of([&] { (void)read_safetensors_index(path); }).message().find("does not fit") != std::string::npos);
  write_raw(header("{not json"));
  CHECK(test::error_of([&] { (void)read_safetensors_index(path); }).message().find("malformed JSON") != std::string::npos);
  write_raw(header("[1, 2]"));
  CHECK(test::error_of([&] { (void)read_safetensors_index(path); }).message().find("not a JSON object") != std::string::npos);
  // Nesting beyond the readers' limit is refused before it is parsed (core/json_text.h).
  write_raw(header(std::string(100000, '[') + std::string(100000, ']')));
  CHECK(test::error_of([&] { (void)read_safetensors_index(path); }).message().find("nested deeper than 64") != std::string::npos);
  write_raw(header(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 1000]}})") + std::string(16, 'x'));
  CHECK(test::error_of([&] { (void)read_safetensors_index(path); }).message().find("outside the data section") !=
        std::string::npos);
  write_raw(header(R"({"w": {"dtype": "F32", "shape": [5], "data_offsets": [0, 16]}})") + std::string(16, 'x'));
  CHECK(test::error_of([&] { (void)read_safetensors_index(path); }).message().find("needs 20") != std::string::npos);
  write_raw(header(R"({"w": {"dtype": "I8", "shape": [16], "data_offsets": [0, 16]}})") + std::string(16, 'x'));
  CHECK(test::error_of([&] { (void)read_safetensors_index(path); }).kind() == ErrorKind::unsupported);
}

TEST_CASE("random weights are deterministic per (seed, name) and have the asked-for moments") {
  const auto a = random_weight(1234, "fc1.weight", 100001, 0.0f, 0.5f);
  CHECK(a == random_weight(1234, "fc1.weight", 100001, 0.0f, 0.5f));
  CHECK(a != random_weight(1235, "fc1.weight", 100001, 0.0f, 0.5f));
  CHECK(a != random_weight(1234, "fc2.weight", 100001, 0.0f, 0.5f));
  double sum = 0, sum_sq = 0;
  for (float v : a) {
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  const double mean = sum / static_cast<double>(a.size());
  CHECK(std::abs(mean) < 0.01);
  CHECK(std::sqrt(sum_sq / static_cast<double>(a.size()) - mean * mean) == doctest::Approx(0.5).epsilon(0.01));
}

}  // namespace tec
