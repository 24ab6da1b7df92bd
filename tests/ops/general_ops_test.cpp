// The general path (ir/general_kernel.h): ops of any shape as strided loops, whose CPU reference
// (src/ops/general.cpp) is what kernels/general.cu must reproduce bit for bit on the GPU
// (tests/gpu/general_any_shape.json). Here: the values against direct math, the index
// arithmetic against hand-written cases, and the loops' limits.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "ops/common.h"
#include "ops/general.h"
#include "test_util.h"

namespace tec {

namespace {

HostTensor tensor(Shape shape, std::vector<float> values) { return HostTensor{std::move(shape), std::move(values)}; }

// Seeded values in [-2, 2), never all alike.
HostTensor seeded(Shape shape, unsigned seed) {
  HostTensor t{shape, std::vector<float>(static_cast<size_t>(shape.numel()))};
  unsigned s = seed * 2654435761u + 1;
  for (float& v : t.values) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>(s >> 8) / static_cast<float>(1 << 24) * 4.0f - 2.0f;
  }
  return t;
}

Attributes attrs_of(const std::string& json) {
  Attributes a;
  const nlohmann::json parsed = nlohmann::json::parse(json);
  for (const auto& [k, v] : parsed.items()) {
    if (v.is_string()) a.values[k] = v.get<std::string>();
    else if (v.is_boolean()) a.values[k] = v.get<bool>();
    else if (v.is_array()) a.values[k] = v.get<std::vector<int64_t>>();
    else a.values[k] = v.get<int64_t>();
  }
  return a;
}

HostTensor run(const std::string& op, const std::string& attrs, const std::vector<HostTensor>& in) {
  return builtin_ops().get(op).reference(attrs_of(attrs), in).at(0);
}

GeneralPlan plan_of(const std::string& op, const std::string& attrs, const std::vector<Shape>& shapes) {
  return builtin_ops().get(op).general(attrs_of(attrs), shapes);
}

}  // namespace

TEST_CASE("softmax normalizes along any axis; a row of -inf gives NaN, as PyTorch's does") {
  const HostTensor x = seeded({2, 3, 4}, 1);
  for (int64_t axis : {0, 1, 2, -1}) {
    CAPTURE(axis);
    const HostTensor y = run("softmax", R"({"axis": )" + std::to_string(axis) + "}", {x});
    REQUIRE(y.shape == x.shape);
    const size_t a = static_cast<size_t>(axis < 0 ? axis + 3 : axis);
    const auto strides = x.shape.contiguous_strides();
    for (int64_t e = 0; e < x.shape.numel(); ++e) {
      const int64_t j = e / strides[a] % x.shape.dims[a], base = e - j * strides[a];
      double max = -1e30, sum = 0;
      for (int64_t i = 0; i < x.shape.dims[a]; ++i) max = std::max<double>(max, x.values[static_cast<size_t>(base + i * strides[a])]);
      for (int64_t i = 0; i < x.shape.dims[a]; ++i) sum += std::exp(x.values[static_cast<size_t>(base + i * strides[a])] - max);
      CHECK(y.values[static_cast<size_t>(e)] == doctest::Approx(std::exp(x.values[static_cast<size_t>(e)] - max) / sum).epsilon(1e-6));
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  const HostTensor masked = run("softmax", "{}", {tensor({2, 3}, {0.0f, -inf, 0.0f, -inf, -inf, -inf})});
  CHECK(masked.values[0] == 0.5f);
  CHECK(masked.values[1] == 0.0f);
  CHECK(std::isnan(masked.values[3]));
}

TEST_CASE("reduce sums, averages and maxes over any axes; max passes NaN on") {
  const HostTensor x = seeded({2, 3, 4}, 2);
  const HostTensor sum = run("reduce", R"({"fn": "sum", "axes": [0, 2], "keepdims": false})", {x});
  REQUIRE(sum.shape == Shape{3});
  for (int64_t j = 0; j < 3; ++j) {
    double want = 0;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t k = 0; k < 4; ++k) want += x.values[static_cast<size_t>(i * 12 + j * 4 + k)];
    CHECK(sum.values[static_cast<size_t>(j)] == doctest::Approx(want).epsilon(1e-6));
  }
  const HostTensor mean = run("reduce", R"({"fn": "mean", "axes": []})", {x});
  CHECK(mean.shape == Shape{1, 1, 1});
  double total = 0;
  for (float v : x.values) total += v;
  CHECK(mean.values[0] == doctest::Approx(total / 24).epsilon(1e-6));
  const HostTensor max = run("reduce", R"({"fn": "max", "axes": [1]})", {tensor({2, 2}, {1, NAN, -3, -2})});
  CHECK(std::isnan(max.values[0]));
  CHECK(max.values[1] == -2.0f);
}

TEST_CASE("matmul broadcasts batch dims through each operand's strides") {
  const HostTensor a = seeded({2, 1, 3, 4}, 3), b = seeded({5, 4, 2}, 4);
  const HostTensor y = run("matmul", "{}", {a, b});
  REQUIRE(y.shape == Shape({2, 5, 3, 2}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 5; ++j)
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t c = 0; c < 2; ++c) {
          float acc = 0.0f;  // in order, as the kernel: equal bits
          for (int64_t k = 0; k < 4; ++k) acc += a.values[static_cast<size_t>(i * 12 + r * 4 + k)] * b.values[static_cast<size_t>(j * 8 + k * 2 + c)];
          CHECK(y.values[static_cast<size_t>(((i * 5 + j) * 3 + r) * 2 + c)] == acc);
        }
  // 1-D operands are promoted and the promoted dim dropped.
  CHECK(run("matmul", "{}", {tensor({3}, {1, 2, 3}), tensor({3, 2}, {1, 0, 0, 1, 1, 1})}).values == std::vector<float>{4, 5});
}

TEST_CASE("compare gives 0/1 with broadcasting, NaN unequal to all; where picks by the condition") {
  const HostTensor a = tensor({2, 2}, {1, 2, NAN, 4}), b = tensor({2}, {2, 2});
  CHECK(run("compare", R"({"fn": "less"})", {a, b}).values == std::vector<float>{1, 0, 0, 0});
  CHECK(run("compare", R"({"fn": "equal"})", {a, b}).values == std::vector<float>{0, 1, 0, 0});
  CHECK(run("compare", R"({"fn": "greater_equal"})", {a, b}).values == std::vector<float>{0, 1, 0, 1});
  CHECK(run("compare", R"({"fn": "isnan"})", {a}).values == std::vector<float>{0, 0, 1, 0});
  CHECK(run("compare", R"({"fn": "not"})", {tensor({3}, {0, 1, 0})}).values == std::vector<float>{1, 0, 1});
  CHECK(run("compare", R"({"fn": "xor"})", {tensor({2}, {1, 1}), tensor({2}, {0, 1})}).values == std::vector<float>{1, 0});
  CHECK(run("where", "{}", {tensor({2}, {1, 0}), tensor({2, 2}, {1, 2, 3, 4}), tensor({}, {-1})}).values ==
        std::vector<float>{1, -1, 3, -1});
  const Error e = test::error_of([] { (void)plan_of("compare", R"({"fn": "and"})", {Shape{2}}); });
  CHECK(std::string(e.what()).find("compare 'and' takes 2 inputs, got 1") != std::string::npos);
}

TEST_CASE("slice clamps as ONNX Slice does, steps either way; concat and expand move elements only") {
  const HostTensor x = seeded({4, 6}, 5);
  // Rows 1..2; columns from the last back by 2, the end clamped: 5, 3, 1.
  const HostTensor s = run("slice", R"({"starts": [1, -1], "ends": [3, -100], "axes": [0, 1], "steps": [1, -2]})", {x});
  REQUIRE(s.shape == Shape({2, 3}));
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 3; ++c) CHECK(s.values[static_cast<size_t>(r * 3 + c)] == x.values[static_cast<size_t>((1 + r) * 6 + 5 - 2 * c)]);
  CHECK(run("slice", R"({"starts": [2], "ends": [1000]})", {x}).shape == Shape({2, 6}));
  const Error empty = test::error_of([] { (void)plan_of("slice", R"({"starts": [3], "ends": [3]})", {Shape{4, 6}}); });
  CHECK(empty.kind() == ErrorKind::unsupported);
  CHECK(std::string(empty.what()).find("is empty") != std::string::npos);

  const HostTensor c = run("concat", R"({"axis": 1})", {tensor({2, 1, 2}, {1, 2, 3, 4}), tensor({2, 2, 2}, {5, 6, 7, 8, 9, 10, 11, 12})});
  CHECK(c.shape == Shape({2, 3, 2}));
  CHECK(c.values == std::vector<float>{1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12});
  const Error mismatch = test::error_of([] { (void)plan_of("concat", R"({"axis": 0})", {Shape{2, 3}, Shape{2, 4}}); });
  CHECK(std::string(mismatch.what()).find("concat input 1 is [2, 4]") != std::string::npos);

  const HostTensor e = run("expand", R"({"shape": [2, 1, 3]})", {tensor({2, 1}, {7, 8})});
  CHECK(e.shape == Shape({2, 2, 3}));
  CHECK(e.values == std::vector<float>{7, 7, 7, 8, 8, 8, 7, 7, 7, 8, 8, 8});
}

TEST_CASE("gather picks along any axis, negative indices from the end; gather_nd picks index tuples; out of range is named") {
  const HostTensor data = tensor({2, 3, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  const HostTensor g = run("gather", R"({"axis": 1})", {data, tensor({2, 2}, {2, 0, -1, 1})});
  CHECK(g.shape == Shape({2, 2, 2, 2}));
  CHECK(g.values == std::vector<float>{4, 5, 0, 1, 4, 5, 2, 3, 10, 11, 6, 7, 10, 11, 8, 9});
  const HostTensor nd = run("gather_nd", "{}", {data, tensor({2, 2}, {1, 2, 0, -3})});
  CHECK(nd.shape == Shape({2, 2}));
  CHECK(nd.values == std::vector<float>{10, 11, 0, 1});
  const Error e = test::error_of([&] { (void)run("gather", R"({"axis": 0})", {data, tensor({1}, {2})}); });
  CHECK(std::string(e.what()).find("index 2 at position 0 of the indices is outside [-2, 2)") != std::string::npos);
}

TEST_CASE("convert changes the dtype; the stored values are what ONNX Cast gives") {
  const GeneralPlan p = plan_of("convert", R"({"dtype": "int32"})", {Shape{3}});
  CHECK(p.kernel == GeneralKernel::map);
  CHECK(run("convert", R"({"dtype": "uint8"})", {tensor({3}, {-2.5f, 0.0f, 0.25f})}).values == std::vector<float>{-2.5f, 0.0f, 0.25f});
  // (the executor stores them: int32 toward zero, uint8 nonzero as 1; tests/reference checks the stored bytes)
}

TEST_CASE("the loops merge dims they walk as one, and refuse more than the kernels take") {
  CHECK(map_plan(0, {Shape{8, 16, 4}, Shape{8, 16, 4}}).dims == std::vector<int64_t>{512});
  const GeneralPlan bias_like = map_plan(16, {Shape{8, 16, 4}, Shape{4}});
  CHECK(bias_like.dims == std::vector<int64_t>{128, 4});
  CHECK(bias_like.strides.at(1) == std::vector<int64_t>{0, 1});
  // Broadcast dims alternating in both operands cannot merge: eight dims.
  const Error e = test::error_of([] { (void)map_plan(16, {Shape{2, 1, 2, 1, 2, 1, 2, 1}, Shape{2, 1, 2, 1, 2, 1, 2}}); });
  CHECK(e.kind() == ErrorKind::unsupported);
  CHECK(std::string(e.what()).find("the general kernels take at most 6") != std::string::npos);
  // A reduction over the middle axis of a [B, S, H] tensor: kept dims merge apart from it.
  const GeneralPlan r = plan_of("reduce", R"({"fn": "sum", "axes": [1]})", {Shape{2, 5, 3}});
  CHECK(r.dims == std::vector<int64_t>{2, 3});
  CHECK(r.strides.at(0) == std::vector<int64_t>{15, 1});
  CHECK(r.reduced_strides == std::vector<int64_t>{3});
}

TEST_CASE("a graph's general ops are checked when compiled, naming the node") {
  const std::string bad_axis = R"({"inputs": [{"name": "x", "shape": [4, 8]}],
    "ops": [{"name": "probs", "op": "softmax", "inputs": ["x"], "attrs": {"axis": 2}}], "outputs": ["probs"]})";
  const Error e = test::error_of([&] { (void)test::compile_text(bad_axis); });
  CHECK(std::string(e.what()).find("node 'probs'") != std::string::npos);
  CHECK(std::string(e.what()).find("softmax axis 2 is out of range for rank 2") != std::string::npos);
}

}  // namespace tec
