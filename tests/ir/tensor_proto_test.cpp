// TensorProto::buffers() against LAYOUTS.md: the worked example (§8, M=2048, K=4096) byte
// for byte, the padding check (§8.5), and shapes that need padding.
#include <doctest/doctest.h>

#include "ir/tensor_proto.h"
#include "test_util.h"

namespace tec {

namespace {

struct Expected {
  BufferRole role;
  Shape shape;
  DType dtype;
  int64_t bytes;
};

void check_buffers(const TensorProto& t, const std::vector<Expected>& expected, const Target& target = {}) {
  const auto got = t.buffers(target);
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(to_string(expected[i].role));
    CHECK(got[i].role == expected[i].role);
    CHECK(got[i].shape == expected[i].shape);
    CHECK(got[i].dtype == expected[i].dtype);
    CHECK(got[i].bytes == expected[i].bytes);
  }
}

TensorProto quantized(Shape shape, Quantizer q, Usage usage) {
  return TensorProto::dense(std::move(shape), DType::bf16).with_quantizer(q).update_usage(usage);
}

constexpr Usage kBoth{true, true};
constexpr Usage kRowwise{true, false};
constexpr Usage kColumnwise{false, true};
const Target kHopper{90};
const Target kBlackwell{100};

}  // namespace

TEST_CASE("LAYOUTS.md §8.1: per-tensor FP8, M=2048 K=4096") {
  for (auto q : {Quantizer::fp8_current(DType::fp8_e4m3), Quantizer::fp8_delayed(DType::fp8_e4m3)}) {
    CAPTURE(q.str());
    const auto t = quantized({2048, 4096}, q, kBoth);
    check_buffers(t,
                  {{BufferRole::data, {2048, 4096}, DType::fp8_e4m3, 8388608},
                   {BufferRole::columnwise_data, {4096, 2048}, DType::fp8_e4m3, 8388608},
                   {BufferRole::scale_inv, {1}, DType::fp32, 4}},
                  kHopper);
    CHECK(t.bytes(kHopper) == 16777220);
    // SM 10.x serves columnwise from the rowwise bytes: no transposed copy.
    CHECK(t.bytes(kBlackwell) == 8388612);
  }
  const auto state = Quantizer::fp8_delayed(DType::fp8_e4m3).state_buffers();
  REQUIRE(state.size() == 2);
  CHECK(state[0].shape.numel() * 4 + state[1].shape.numel() * 4 == 4 + 4096);
}

TEST_CASE("LAYOUTS.md §8.2: MXFP8 rowwise + columnwise, M=2048 K=4096") {
  const auto t = quantized({2048, 4096}, Quantizer::mxfp8(DType::fp8_e4m3), kBoth);
  check_buffers(t, {{BufferRole::data, {2048, 4096}, DType::fp8_e4m3, 8388608},
                    {BufferRole::scale_inv, {2048, 128}, DType::e8m0, 262144},
                    {BufferRole::columnwise_data, {2048, 4096}, DType::fp8_e4m3, 8388608},
                    {BufferRole::columnwise_scale_inv, {64, 4096}, DType::e8m0, 262144}});
  CHECK(t.bytes() == 17301504);
}

TEST_CASE("LAYOUTS.md §8.3: FP8 block 1x128 and 128x128, M=2048 K=4096") {
  const auto one_d = quantized({2048, 4096}, Quantizer::fp8_block(DType::fp8_e4m3, 1), kBoth);
  check_buffers(one_d, {{BufferRole::data, {2048, 4096}, DType::fp8_e4m3, 8388608},
                        {BufferRole::scale_inv, {32, 2048}, DType::fp32, 262144},
                        {BufferRole::columnwise_data, {4096, 2048}, DType::fp8_e4m3, 8388608},
                        {BufferRole::columnwise_scale_inv, {16, 4096}, DType::fp32, 262144}});
  CHECK(one_d.bytes() == 17301504);
  const auto two_d = quantized({2048, 4096}, Quantizer::fp8_block(DType::fp8_e4m3, 2), kBoth);
  check_buffers(two_d, {{BufferRole::data, {2048, 4096}, DType::fp8_e4m3, 8388608},
                        {BufferRole::scale_inv, {16, 32}, DType::fp32, 2048},
                        {BufferRole::columnwise_data, {4096, 2048}, DType::fp8_e4m3, 8388608},
                        {BufferRole::columnwise_scale_inv, {32, 16}, DType::fp32, 2048}});
  CHECK(two_d.bytes() == 16781312);
}

TEST_CASE("LAYOUTS.md §8.4: NVFP4, M=2048 K=4096") {
  const auto t = quantized({2048, 4096}, Quantizer::nvfp4(), kBoth);
  check_buffers(t, {{BufferRole::data, {2048, 2048}, DType::fp4_e2m1x2, 4194304},
                    {BufferRole::scale_inv, {2048, 256}, DType::fp8_e4m3, 524288},
                    {BufferRole::amax, {1}, DType::fp32, 4},
                    {BufferRole::columnwise_data, {4096, 1024}, DType::fp4_e2m1x2, 4194304},
                    {BufferRole::columnwise_scale_inv, {4096, 128}, DType::fp8_e4m3, 524288},
                    {BufferRole::columnwise_amax, {1}, DType::fp32, 4}});
  CHECK(t.bytes() == 9437192);
}

TEST_CASE("LAYOUTS.md §8.5: padding check, M=96 K=160") {
  const auto mx = quantized({96, 160}, Quantizer::mxfp8(DType::fp8_e4m3), kBoth).buffers();
  CHECK(mx[1].shape == Shape{128, 8});
  CHECK(mx[1].bytes == 1024);
  CHECK(mx[3].shape == Shape{4, 256});
  CHECK(mx[3].bytes == 1024);
  const auto nv = quantized({96, 160}, Quantizer::nvfp4(), kBoth).buffers();
  CHECK(nv[0].shape == Shape{96, 80});
  CHECK(nv[0].bytes == 7680);
  CHECK(nv[3].shape == Shape{160, 48});
  CHECK(nv[3].bytes == 7680);
  CHECK(nv[1].shape == Shape{128, 12});
  CHECK(nv[1].bytes == 1536);
  CHECK(nv[4].shape == Shape{256, 8});
  CHECK(nv[4].bytes == 2048);
  const auto b1 = quantized({96, 160}, Quantizer::fp8_block(DType::fp8_e4m3, 1), kBoth).buffers();
  CHECK(b1[1].shape == Shape{2, 96});
  CHECK(b1[1].bytes == 768);
  CHECK(b1[3].shape == Shape{1, 160});
  CHECK(b1[3].bytes == 640);
  const auto b2 = quantized({96, 160}, Quantizer::fp8_block(DType::fp8_e4m3, 2), kBoth).buffers();
  CHECK(b2[1].shape == Shape{1, 4});
  CHECK(b2[1].bytes == 16);
  CHECK(b2[3].shape == Shape{2, 4});
  CHECK(b2[3].bytes == 32);
}

TEST_CASE("padding: M=1000 K=4160, as 2-D and as the 3-D input [4, 250, 4160]") {
  for (const Shape& shape : {Shape{1000, 4160}, Shape{4, 250, 4160}}) {
    CAPTURE(shape.str());
    // Block scaling: ceil(4160/128) = 33 K-blocks, M padded to 1000 -> 1000 (already a
    // multiple of 4), ceil(1000/128) = 8 M-blocks.
    const auto b1 = quantized(shape, Quantizer::fp8_block(DType::fp8_e4m3, 1), kBoth).buffers();
    CHECK(b1[0].shape == shape);
    CHECK(b1[1].shape == Shape{33, 1000});
    CHECK(b1[2].shape == shape.last_dim_first());  // [4160, 1000] or [4160, 4, 250]
    CHECK(b1[3].shape == Shape{8, 4160});
    const auto b2 = quantized(shape, Quantizer::fp8_block(DType::fp8_e4m3, 2), kBoth).buffers();
    CHECK(b2[1].shape == Shape{8, 36});  // roundup(33, 4)
    CHECK(b2[3].shape == Shape{33, 8});  // roundup(8, 4)
    // MXFP8 rowwise: K/32 = 130 blocks padded to 132; M padded to 1024.
    const auto mx = quantized(shape, Quantizer::mxfp8(DType::fp8_e4m3), kRowwise).buffers();
    CHECK(mx[1].shape == Shape{1024, 132});
    CHECK(mx[1].bytes == 1024 * 132);
    // NVFP4 rowwise: K/16 = 260 (a multiple of 4), M padded to 1024, data packed to K/2.
    const auto nv = quantized(shape, Quantizer::nvfp4(), kRowwise).buffers();
    CHECK(nv[0].shape == shape.with_last(2080));
    CHECK(nv[1].shape == Shape{1024, 260});
    // Per-tensor FP8: the transposed copy moves the last dim first.
    const auto pt = quantized(shape, Quantizer::fp8_current(DType::fp8_e4m3), kBoth).buffers();
    CHECK(pt[1].shape == shape.last_dim_first());
    CHECK(pt[1].bytes == 4160000);
  }
}

TEST_CASE("blocks along M need M divisible by the block: MXFP8 and NVFP4 columnwise reject M=1000") {
  auto mx = test::error_of([] { (void)quantized({1000, 4160}, Quantizer::mxfp8(DType::fp8_e4m3), kBoth).buffers(); });
  CHECK(mx.message().find("columnwise quantization needs M divisible by 32, got M=1000") != std::string::npos);
  auto nv = test::error_of([] { (void)quantized({1000, 4160}, Quantizer::nvfp4(), kColumnwise).buffers(); });
  CHECK(nv.message().find("needs M divisible by 16, got M=1000") != std::string::npos);
  auto k = test::error_of([] { (void)quantized({64, 100}, Quantizer::mxfp8(DType::fp8_e4m3), kRowwise).buffers(); });
  CHECK(k.message().find("needs K divisible by 32, got K=100") != std::string::npos);
}

TEST_CASE("usage: buffers for a direction that is not used are absent") {
  const auto q = Quantizer::fp8_block(DType::fp8_e4m3, 1);
  CHECK(quantized({256, 256}, q, kRowwise).buffers().size() == 2);
  const auto col = quantized({256, 256}, q, kColumnwise).buffers();
  REQUIRE(col.size() == 2);
  CHECK(col[0].role == BufferRole::columnwise_data);
  // Per-tensor columnwise-only on Hopper keeps just the transpose and the shared scale.
  const auto pt = quantized({256, 512}, Quantizer::fp8_current(DType::fp8_e4m3), kColumnwise).buffers(kHopper);
  REQUIRE(pt.size() == 2);
  CHECK(pt[0].role == BufferRole::columnwise_data);
  CHECK(pt[0].shape == Shape{512, 256});
}

TEST_CASE("update_usage returns a new proto and leaves the original alone") {
  const auto t = quantized({128, 128}, Quantizer::mxfp8(DType::fp8_e4m3), kRowwise);
  const auto both = t.update_usage(kBoth);
  CHECK(t.usage == kRowwise);
  CHECK(both.usage == kBoth);
  CHECK(t.buffers().size() == 2);
  CHECK(both.buffers().size() == 4);
}

TEST_CASE("unquantized tensors have one data buffer of their dtype") {
  const auto t = TensorProto::dense({4, 250, 4160}, DType::bf16);
  check_buffers(t, {{BufferRole::data, {4, 250, 4160}, DType::bf16, 8320000}});
  CHECK(t.strides == std::vector<int64_t>{1040000, 4160, 1});
}

}  // namespace tec
