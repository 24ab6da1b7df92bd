// The attention ops' CPU reference (so far rope) against the math written out in fp64, and
// their input checks. Gradients: tests/reference/train_test.cpp.
#include <doctest/doctest.h>

#include <cmath>

#include "core/random.h"
#include "ops/common.h"
#include "test_util.h"

namespace tec {

namespace {

HostTensor random_tensor(Shape shape, uint64_t seed) {
  std::vector<float> values = random_weight(seed, "x", shape.numel(), 0.0f, 1.0f);
  return HostTensor{std::move(shape), std::move(values)};
}

Attributes rope_attributes(int64_t heads, int64_t head_dim, int64_t rotary_dim, const std::string& style, const std::string& layout) {
  Attributes a;
  a.values = {{"heads", heads}, {"head_dim", head_dim}, {"rotary_dim", rotary_dim}, {"style", style}, {"layout", layout}, {"theta", 10000.0}};
  return a;
}

HostTensor rope(const Attributes& attrs, const HostTensor& x) { return builtin_ops().get("rope").reference(attrs, {x}).at(0); }

std::string rope_graph(const std::string& shape, const std::string& attrs) {
  return R"({"inputs": [{"name": "x", "shape": )" + shape + R"(}], "ops": [{"name": "rot", "op": "rope", "inputs": ["x"], "attrs": )" +
         attrs + R"(}], "outputs": ["rot"]})";
}

}  // namespace

TEST_CASE("rope turns pair i of every head by position x theta^(-2i / rotary_dim); channels past rotary_dim pass through") {
  const int64_t heads = 2, head_dim = 8, rotary = 4, batch = 2, seq = 5;
  const HostTensor x = random_tensor(Shape{batch, seq, heads * head_dim}, 11);
  for (const std::string style : {"half", "interleaved"}) {
    CAPTURE(style);
    const HostTensor y = rope(rope_attributes(heads, head_dim, rotary, style, "bshd"), x);
    REQUIRE(y.shape == x.shape);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t s = 0; s < seq; ++s)
        for (int64_t h = 0; h < heads; ++h) {
          const size_t head = static_cast<size_t>(((b * seq + s) * heads + h) * head_dim);
          for (int64_t i = 0; i < rotary / 2; ++i) {
            const size_t first = head + static_cast<size_t>(style == "half" ? i : 2 * i);
            const size_t second = head + static_cast<size_t>(style == "half" ? i + rotary / 2 : 2 * i + 1);
            const double angle = static_cast<double>(s) * std::pow(10000.0, -2.0 * static_cast<double>(i) / rotary);
            const double x1 = x.values[first], x2 = x.values[second];
            CHECK(y.values[first] == doctest::Approx(x1 * std::cos(angle) - x2 * std::sin(angle)).epsilon(1e-5));
            CHECK(y.values[second] == doctest::Approx(x2 * std::cos(angle) + x1 * std::sin(angle)).epsilon(1e-5));
          }
          for (int64_t c = rotary; c < head_dim; ++c) CHECK(y.values[head + static_cast<size_t>(c)] == x.values[head + static_cast<size_t>(c)]);
          if (s == 0)  // position 0 turns by nothing
            for (int64_t c = 0; c < head_dim; ++c) CHECK(y.values[head + static_cast<size_t>(c)] == x.values[head + static_cast<size_t>(c)]);
        }
  }
}

TEST_CASE("rope's positions run along the sequence dim of its layout: sbhd gives bshd's values transposed, bit for bit") {
  const int64_t batch = 3, seq = 4, width = 2 * 16;
  const HostTensor bshd = random_tensor(Shape{batch, seq, width}, 5);
  HostTensor sbhd{Shape{seq, batch, width}, std::vector<float>(bshd.values.size())};
  auto at = [&](int64_t outer, int64_t inner, int64_t inner_size, int64_t c) { return static_cast<size_t>((outer * inner_size + inner) * width + c); };
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t c = 0; c < width; ++c) sbhd.values[at(s, b, batch, c)] = bshd.values[at(b, s, seq, c)];
  const HostTensor y_bshd = rope(rope_attributes(2, 16, 16, "half", "bshd"), bshd);
  const HostTensor y_sbhd = rope(rope_attributes(2, 16, 16, "half", "sbhd"), sbhd);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t c = 0; c < width; ++c) CHECK(y_sbhd.values[at(s, b, batch, c)] == y_bshd.values[at(b, s, seq, c)]);
}

TEST_CASE("rope's backward turns by the opposite angle: the gradient of the output is turned back onto the input") {
  const Attributes attrs = rope_attributes(4, 16, 16, "interleaved", "bshd");
  const HostTensor x = random_tensor(Shape{2, 6, 64}, 3);
  const HostTensor back = builtin_ops().get("rope").backward_reference(attrs, {rope(attrs, x)}).at(0);
  REQUIRE(back.shape == x.shape);
  for (size_t i = 0; i < x.values.size(); ++i) CHECK(back.values[i] == doctest::Approx(x.values[i]).epsilon(1e-5));
}

TEST_CASE("rope refuses inputs and attributes it cannot apply, naming the node and what it expected") {
  struct Case {
    std::string shape, attrs, message;
  };
  const std::vector<Case> cases = {
      {"[2, 8, 64]", R"({"heads": 3, "head_dim": 16})", "heads x head_dim"},
      {"[16, 64]", R"({"heads": 4, "head_dim": 16})", "must be 3-D, [B, S, heads x head_dim] (layout bshd), got [16, 64]"},
      {"[2, 8, 64]", R"({"heads": 4, "head_dim": 16, "rotary_dim": 7})", "rotary_dim must be even and in [2, head_dim = 16], got 7"},
      {"[2, 8, 64]", R"({"heads": 4, "head_dim": 16, "rotary_dim": 32})", "rotary_dim must be even and in [2, head_dim = 16], got 32"},
      {"[2, 8, 64]", R"({"heads": 4, "head_dim": 16, "theta": 0.5})", "theta must be a finite number above 1, got 0.5"},
      {"[2, 8, 64]", R"({"heads": 4, "head_dim": 16, "style": "neox"})", "neox"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.attrs);
    const Error e = test::error_of([&] { (void)test::compile_text(rope_graph(c.shape, c.attrs)); });
    CHECK(e.context().node == "rot");
    CHECK(e.message().find(c.message) != std::string::npos);
  }
}

}  // namespace tec
