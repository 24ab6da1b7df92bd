// GroupedTensor against LAYOUTS.md §5 and its worked example (§8.6): members packed back to
// back per buffer role, per-tensor FP8's scales as [n] floats, members of different row
// counts, and the errors for shapes that cannot be grouped.
#include <doctest/doctest.h>

#include "ir/grouped_tensor.h"
#include "test_util.h"

namespace tec {

namespace {

const GroupedBuffer& role_of(const std::vector<GroupedBuffer>& buffers, BufferRole role) {
  for (const GroupedBuffer& b : buffers)
    if (b.spec.role == role) return b;
  FAIL("no buffer " << to_string(role));
  throw;
}

std::vector<int64_t> multiples(int64_t step, int64_t n) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i <= n; ++i) out.push_back(i * step);
  return out;
}

}  // namespace

TEST_CASE("LAYOUTS 8.6: four MXFP8 experts of [512, 4096] in one allocation per buffer") {
  const GroupedTensor g(std::vector<Shape>(4, Shape{512, 4096}), DType::bf16, Quantizer::mxfp8(DType::fp8_e4m3), Usage{true, true});
  CHECK(g.logical_shape() == Shape({2048, 4096}));
  const auto buffers = g.buffers();
  const GroupedBuffer& data = role_of(buffers, BufferRole::data);
  CHECK(data.spec.bytes == 8'388'608);
  CHECK(data.offsets == multiples(2'097'152, 4));
  const GroupedBuffer& rowwise_scales = role_of(buffers, BufferRole::scale_inv);
  CHECK(rowwise_scales.spec.bytes == 262'144);
  CHECK(rowwise_scales.offsets == multiples(65'536, 4));  // member i at byte i * 65,536: [512, 128] E8M0 each
  const GroupedBuffer& columnwise_scales = role_of(buffers, BufferRole::columnwise_scale_inv);
  CHECK(columnwise_scales.spec.bytes == 262'144);           // 4 x [16, 4096]
  CHECK(columnwise_scales.member_bytes == std::vector<int64_t>(4, 16 * 4096));
}

TEST_CASE("per-tensor FP8 experts keep one scale each: scale_inv is [n] floats") {
  for (const Quantizer& q : {Quantizer::fp8_current(DType::fp8_e4m3), Quantizer::fp8_delayed(DType::fp8_e4m3)}) {
    CAPTURE(q.str());
    TensorProto w = TensorProto::dense(Shape{8, 256, 128}, DType::bf16).with_quantizer(q);
    w.group_members = 8;
    const auto buffers = GroupedTensor::uniform(w).buffers();
    CHECK(role_of(buffers, BufferRole::scale_inv).spec.bytes == 8 * 4);
    CHECK(role_of(buffers, BufferRole::scale_inv).offsets == multiples(4, 8));
    CHECK(role_of(buffers, BufferRole::data).offsets == multiples(256 * 128, 8));
    // TensorProto::buffers() of the grouped proto is the same packing: the data stacked as
    // [experts x N, K], the scales 1-D.
    const auto specs = w.buffers();
    REQUIRE(specs.size() == 2);
    CHECK(specs[0].role == BufferRole::data);
    CHECK(specs[0].shape == Shape({8 * 256, 128}));
    CHECK(specs[1].role == BufferRole::scale_inv);
    CHECK(specs[1].shape == Shape({8}));
    // One member as a plain tensor.
    const TensorProto member = GroupedTensor::uniform(w).member(3);
    CHECK(member.shape == Shape({256, 128}));
    CHECK(!member.is_grouped());
    CHECK(member.quantizer == w.quantizer);
  }
}

TEST_CASE("members may differ in their first dim: offsets follow each member's own padded sizes") {
  // fp8-block 1x128 rowwise scales are [ceil(K/128), round_up(M, 4)] per member.
  const GroupedTensor g({Shape{100, 256}, Shape{4, 256}, Shape{0, 256}, Shape{37, 256}}, DType::bf16,
                        Quantizer::fp8_block(DType::fp8_e4m3, 1), Usage{true, false});
  CHECK(g.logical_shape() == Shape({141, 256}));
  const auto buffers = g.buffers();
  CHECK(role_of(buffers, BufferRole::data).member_bytes == std::vector<int64_t>{100 * 256, 4 * 256, 0, 37 * 256});
  CHECK(role_of(buffers, BufferRole::data).offsets == std::vector<int64_t>{0, 25'600, 26'624, 26'624, 36'096});
  CHECK(role_of(buffers, BufferRole::scale_inv).member_bytes == std::vector<int64_t>{2 * 100 * 4, 2 * 4 * 4, 0, 2 * 40 * 4});
}

TEST_CASE("a bf16 group has one data buffer, members packed") {
  const GroupedTensor g(std::vector<Shape>(3, Shape{64, 32}), DType::bf16, std::nullopt, Usage{});
  const auto buffers = g.buffers();
  REQUIRE(buffers.size() == 1);
  CHECK(buffers[0].offsets == multiples(64 * 32 * 2, 3));
}

TEST_CASE("groups that cannot be laid out are refused with the member and the reason") {
  SUBCASE("members that differ beyond the first dim") {
    const Error e = test::error_of([] { GroupedTensor({Shape{4, 64}, Shape{4, 32}}, DType::bf16, std::nullopt, Usage{}); });
    CHECK(e.message().find("member 1 has shape [4, 32]") != std::string::npos);
  }
  SUBCASE("a member whose data would start off the 16-byte alignment") {
    const Error e = test::error_of([] {
      GroupedTensor({Shape{3, 8}, Shape{3, 8}}, DType::bf16, Quantizer::fp8_current(DType::fp8_e4m3), Usage{}).buffers();
    });
    CHECK(e.message().find("member 1's data would start at byte 24") != std::string::npos);
  }
  SUBCASE("a member shape the quantizer does not take names the member") {
    const Error e = test::error_of([] {
      GroupedTensor({Shape{32, 48}, Shape{32, 48}}, DType::bf16, Quantizer::mxfp8(DType::fp8_e4m3), Usage{}).buffers();
    });
    CHECK(e.message().find("K divisible by 32") != std::string::npos);
    CHECK(e.context().location.find("member 0") != std::string::npos);
  }
  SUBCASE("a grouped proto whose first dim is not its member count") {
    TensorProto w = TensorProto::dense(Shape{4, 16, 16}, DType::bf16);
    w.group_members = 8;
    const Error e = test::error_of([&] { (void)w.buffers(); });
    CHECK(e.message().find("needs shape [8, ...]") != std::string::npos);
  }
}

}  // namespace tec
