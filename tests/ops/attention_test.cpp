// The attention ops' CPU reference (rope, attention) against the math written out, and their
// input checks. Gradients against fp64: tests/reference/train_test.cpp.
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

Attributes attention_attributes(int64_t heads, int64_t kv_heads, bool causal, const std::string& layout = "bshd") {
  Attributes a;
  a.values = {{"heads", heads}, {"kv_heads", kv_heads}, {"head_dim", int64_t{4}}, {"causal", causal}, {"scale", 0.0}, {"layout", layout}};
  return a;
}

std::vector<HostTensor> attention(const Attributes& attrs, const HostTensor& q, const HostTensor& k, const HostTensor& v) {
  return builtin_ops().get("attention").reference(attrs, {q, k, v});
}

std::string attention_graph(const std::string& q, const std::string& kv, const std::string& attrs) {
  return R"({"inputs": [{"name": "q", "shape": )" + q + R"(}, {"name": "k", "shape": )" + kv + R"(}, {"name": "v", "shape": )" + kv +
         R"(}], "ops": [{"name": "att", "op": "attention", "inputs": ["q", "k", "v"], "attrs": )" + attrs + R"(}], "outputs": ["att"]})";
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

TEST_CASE("attention: causal row 0 sees only key 0, so it returns v's row 0; its log-sum-exp is that one score; o is saved as made") {
  const int64_t heads = 2, seq = 5;
  const HostTensor q = random_tensor(Shape{1, seq, heads * 4}, 1), k = random_tensor(Shape{1, seq, heads * 4}, 2), v = random_tensor(Shape{1, seq, heads * 4}, 3);
  const std::vector<HostTensor> out = attention(attention_attributes(heads, heads, true), q, k, v);
  REQUIRE(out.size() == 3);
  CHECK(out[1].shape == Shape({1, heads, seq}));
  CHECK(out[2].values == out[0].values);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t d = 0; d < 4; ++d) CHECK(out[0].values[static_cast<size_t>(h * 4 + d)] == v.values[static_cast<size_t>(h * 4 + d)]);
    double score = 0.0;
    for (int64_t d = 0; d < 4; ++d) score += static_cast<double>(q.values[static_cast<size_t>(h * 4 + d)]) * k.values[static_cast<size_t>(h * 4 + d)];
    CHECK(out[1].values[static_cast<size_t>(h * seq)] == doctest::Approx(score / 2.0).epsilon(1e-6));  // scale 1 / sqrt(4)
  }
}

TEST_CASE("attention: keys all alike give every query the mean of v; without causal every row alike") {
  const int64_t seq = 6;
  HostTensor k = random_tensor(Shape{1, 1, 4}, 4);
  k = HostTensor{Shape{1, seq, 4}, [&] {
                   std::vector<float> same;
                   for (int64_t s = 0; s < seq; ++s) same.insert(same.end(), k.values.begin(), k.values.end());
                   return same;
                 }()};
  const HostTensor q = random_tensor(Shape{1, seq, 4}, 5), v = random_tensor(Shape{1, seq, 4}, 6);
  const HostTensor o = attention(attention_attributes(1, 1, false), q, k, v).at(0);
  for (int64_t d = 0; d < 4; ++d) {
    double mean = 0.0;
    for (int64_t s = 0; s < seq; ++s) mean += v.values[static_cast<size_t>(s * 4 + d)] / static_cast<double>(seq);
    for (int64_t s = 0; s < seq; ++s) CHECK(o.values[static_cast<size_t>(s * 4 + d)] == doctest::Approx(mean).epsilon(1e-5));
  }
}

TEST_CASE("attention with GQA: query heads h and h' of one kv head, given the same q, give the same output") {
  const int64_t seq = 4;
  HostTensor q = random_tensor(Shape{1, seq, 4 * 4}, 7);
  for (int64_t s = 0; s < seq; ++s)  // heads 2 and 3 (kv head 1 of 2) share their query
    for (int64_t d = 0; d < 4; ++d) q.values[static_cast<size_t>(s * 16 + 12 + d)] = q.values[static_cast<size_t>(s * 16 + 8 + d)];
  const HostTensor k = random_tensor(Shape{1, seq, 2 * 4}, 8), v = random_tensor(Shape{1, seq, 2 * 4}, 9);
  const HostTensor o = attention(attention_attributes(4, 2, true), q, k, v).at(0);
  for (int64_t s = 0; s < seq; ++s)
    for (int64_t d = 0; d < 4; ++d) {
      CHECK(o.values[static_cast<size_t>(s * 16 + 12 + d)] == o.values[static_cast<size_t>(s * 16 + 8 + d)]);
      CHECK(o.values[static_cast<size_t>(s * 16 + 4 + d)] != o.values[static_cast<size_t>(s * 16 + 8 + d)]);  // another kv head
    }
}

TEST_CASE("cross-attention: causal is aligned at the top left, and v's heads may be wider than q's and k's") {
  // 3 queries, 5 keys; v_head_dim 6. Causal query i sees keys 0..i: query 0 returns v's row 0.
  Attributes attrs = attention_attributes(1, 1, true);
  attrs.values["v_head_dim"] = int64_t{6};
  const HostTensor q = random_tensor(Shape{1, 3, 4}, 13), k = random_tensor(Shape{1, 5, 4}, 14), v = random_tensor(Shape{1, 5, 6}, 15);
  const std::vector<HostTensor> out = attention(attrs, q, k, v);
  REQUIRE(out[0].shape == Shape({1, 3, 6}));
  for (int64_t d = 0; d < 6; ++d) CHECK(out[0].values[static_cast<size_t>(d)] == v.values[static_cast<size_t>(d)]);
  // Keys past the last query's position never matter under causal: changing them changes nothing.
  HostTensor k2 = k, v2 = v;
  for (size_t i = 3 * 4; i < k2.values.size(); ++i) k2.values[i] += 1.0f;
  for (size_t i = 3 * 6; i < v2.values.size(); ++i) v2.values[i] -= 1.0f;
  CHECK(attention(attrs, q, k2, v2).at(0).values == out[0].values);
  // Without causal they all do.
  attrs.values["causal"] = false;
  CHECK(attention(attrs, q, k2, v2).at(0).values != attention(attrs, q, k, v).at(0).values);
}

TEST_CASE("attention under sbhd gives bshd's values transposed, bit for bit") {
  const int64_t batch = 2, seq = 3, width = 8;
  auto transposed = [&](const HostTensor& t) {
    HostTensor out{Shape{seq, batch, width}, std::vector<float>(t.values.size())};
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t s = 0; s < seq; ++s)
        for (int64_t c = 0; c < width; ++c) out.values[static_cast<size_t>((s * batch + b) * width + c)] = t.values[static_cast<size_t>((b * seq + s) * width + c)];
    return out;
  };
  const HostTensor q = random_tensor(Shape{batch, seq, width}, 10), k = random_tensor(Shape{batch, seq, width}, 11), v = random_tensor(Shape{batch, seq, width}, 12);
  const HostTensor bshd = attention(attention_attributes(2, 2, true), q, k, v).at(0);
  const HostTensor sbhd = attention(attention_attributes(2, 2, true, "sbhd"), transposed(q), transposed(k), transposed(v)).at(0);
  CHECK(sbhd.values == transposed(bshd).values);
}

TEST_CASE("attention refuses inputs and attributes it cannot apply, naming the node and what it expected") {
  struct Case {
    std::string q, kv, attrs, message;
  };
  const std::vector<Case> cases = {
      {"[2, 8, 64]", "[2, 8, 32]", R"({"heads": 4, "kv_heads": 3, "head_dim": 16})", "kv_heads must divide heads = 4"},
      {"[2, 8, 64]", "[2, 8, 32]", R"({"heads": 4, "head_dim": 16})", "input 'k' (k) has last dim 32, expected kv_heads x head_dim = 64"},
      {"[2, 8, 64]", "[3, 8, 64]", R"({"heads": 4, "head_dim": 16})", "input 'k' (k) is [3, 8, 64], but q is [2, 8, 64]: the batch differs"},
      {"[2, 8, 64]", "[2, 8, 64]", R"({"heads": 4, "head_dim": 16, "v_head_dim": 8})", "input 'v' (v) has last dim 64, expected kv_heads x v_head_dim = 32"},
      {"[16, 64]", "[16, 64]", R"({"heads": 4, "head_dim": 16})", "input 'q' (q) must be 3-D [B, S, heads x head_dim], got [16, 64]"},
      {"[2, 8, 64]", "[2, 8, 64]", R"({"heads": 4, "head_dim": 16, "scale": -1})", "scale must be a positive finite number"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.attrs);
    const Error e = test::error_of([&] { (void)test::compile_text(attention_graph(c.q, c.kv, c.attrs)); });
    CHECK(e.context().node == "att");
    CHECK(e.message().find(c.message) != std::string::npos);
  }
  // The padding mask: one int32 length per sequence, each within the sequence.
  const std::string wrong_lens = R"({"inputs": [{"name": "q", "shape": [2, 8, 64]}, {"name": "lens", "shape": [3], "dtype": "int32"}],
      "ops": [{"name": "att", "op": "attention", "inputs": ["q", "q", "q", "lens"], "attrs": {"heads": 4, "head_dim": 16}}], "outputs": ["att"]})";
  const Error e = test::error_of([&] { (void)test::compile_text(wrong_lens); });
  CHECK(e.context().node == "att");
  CHECK(e.message().find("input 'lens' (seq_lens, the padding mask) must be int32 [2], one length per sequence, got int32 [3]") !=
        std::string::npos);
  const HostTensor q = random_tensor(Shape{2, 8, 4 * 4}, 1);  // 4 heads of attention_attributes' 4 channels
  const Error range = test::error_of([&] {
    (void)builtin_ops().get("attention").reference(attention_attributes(4, 4, false), {q, q, q, HostTensor{Shape{2}, {3, 9}}});
  });
  CHECK(range.message().find("seq_lens[1] = 9: a sequence's valid length must be in [0, 8]") != std::string::npos);
  // The additive mask: float, and broadcast to [B, heads, S, S_kv].
  const std::string wrong_mask = R"({"inputs": [{"name": "q", "shape": [2, 8, 64]}, {"name": "m", "shape": [3, 8, 8]}],
      "ops": [{"name": "att", "op": "attention", "inputs": ["q", "q", "q", "m"], "attrs": {"heads": 4, "head_dim": 16, "mask": "additive"}}],
      "outputs": ["att"]})";
  const Error mask = test::error_of([&] { (void)test::compile_text(wrong_mask); });
  CHECK(mask.context().node == "att");
  CHECK(mask.message().find("input 'm' (the additive mask) must be float and broadcast to [B, heads, S, S_kv] = [2, 4, 8, 8]") !=
        std::string::npos);
}

TEST_CASE("an additive mask is added to the scaled scores: a causal mask of 0 and -inf gives causal attention, bit for bit") {
  const int64_t heads = 2, seq = 6;
  const HostTensor q = random_tensor(Shape{2, seq, heads * 4}, 7), k = random_tensor(Shape{2, seq, heads * 4}, 8),
                   v = random_tensor(Shape{2, seq, heads * 4}, 9);
  HostTensor causal_mask{Shape{seq, seq}, std::vector<float>(static_cast<size_t>(seq * seq), 0.0f)};
  for (int64_t i = 0; i < seq; ++i)
    for (int64_t j = i + 1; j < seq; ++j) causal_mask.values[static_cast<size_t>(i * seq + j)] = -INFINITY;
  Attributes masked = attention_attributes(heads, heads, false);
  masked.values["mask"] = std::string("additive");
  const auto& def = builtin_ops().get("attention");
  const std::vector<HostTensor> want = def.reference(attention_attributes(heads, heads, true), {q, k, v});
  const std::vector<HostTensor> got = def.reference(masked, {q, k, v, causal_mask});
  CHECK(got.at(0).values == want.at(0).values);
  CHECK(got.at(1).values == want.at(1).values);
  // A per-head, per-batch mask [B, heads, S, S_kv]: a constant c on one head's row changes
  // nothing (softmax is shift-invariant) but its log-sum-exp, by c.
  HostTensor shift{Shape{2, heads, seq, seq}, std::vector<float>(static_cast<size_t>(2 * heads * seq * seq), 0.0f)};
  for (int64_t j = 0; j < seq; ++j) shift.values[static_cast<size_t>(((1 * heads + 1) * seq + 2) * seq + j)] = 3.0f;  // b 1, h 1, row 2
  const std::vector<HostTensor> plain = def.reference(attention_attributes(heads, heads, false), {q, k, v});
  const std::vector<HostTensor> shifted = def.reference(masked, {q, k, v, shift});
  for (size_t i = 0; i < plain[0].values.size(); ++i) CHECK(shifted[0].values[i] == doctest::Approx(plain[0].values[i]).epsilon(1e-6));
  const size_t row = static_cast<size_t>((1 * heads + 1) * seq + 2);
  CHECK(shifted[1].values[row] == doctest::Approx(plain[1].values[row] + 3.0).epsilon(1e-6));
  CHECK(shifted[1].values[row - 1] == plain[1].values[row - 1]);
  // The backward: the same gradients as causal attention's, and none for the mask.
  const HostTensor dout = random_tensor(Shape{2, seq, heads * 4}, 10);
  const auto grads = def.backward_reference(masked, {q, k, v, causal_mask, want[1], want[0], dout});
  const auto causal_grads = def.backward_reference(attention_attributes(heads, heads, true), {q, k, v, want[1], want[0], dout});
  REQUIRE(grads.size() == 4);
  for (int i = 0; i < 3; ++i) CHECK(grads[static_cast<size_t>(i)].values == causal_grads[static_cast<size_t>(i)].values);
  CHECK(grads[3].values.empty());
}

}  // namespace tec
