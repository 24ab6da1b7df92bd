// src/core: dtypes, shapes with overflow checks, checksums, and errors that carry their context.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <new>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/hash.h"
#include "core/json_text.h"
#include "core/shape.h"
#include "ir/runtime_scalars.h"
#include "mid_m_layout.h"
#include "small_m_layout.h"
#include "test_util.h"

namespace tec {

TEST_CASE("every dtype's name parses back to it") {
  for (int i = 0; i < kDTypeCount; ++i) {
    const auto d = static_cast<DType>(i);
    CHECK(parse_dtype(to_string(d)) == d);
  }
  CHECK_FALSE(parse_dtype("float8").has_value());
  CHECK(storage_bytes(DType::bf16) == 2);
  CHECK(storage_bytes(DType::fp4_e2m1x2) == 1);
  CHECK(max_finite(DType::fp8_e4m3) == 448.0f);
  CHECK(max_finite(DType::fp8_e5m2) == 57344.0f);
  CHECK(max_finite(DType::fp4_e2m1x2) == 6.0f);
}

TEST_CASE("shapes: [M, K] view, strides and overflow") {
  const Shape s{4, 250, 4160};
  CHECK(s.rows() == 1000);
  CHECK(s.cols() == 4160);
  CHECK(s.contiguous_strides() == std::vector<int64_t>{1040000, 4160, 1});
  CHECK(s.last_dim_first() == Shape{4160, 4, 250});
  CHECK(Shape{}.rows() == 1);
  CHECK(Shape{}.numel() == 1);
  const Shape huge{int64_t{1} << 31, int64_t{1} << 31, 4};
  CHECK(test::error_of([&] { (void)huge.numel(); }).message().find("does not fit in 64 bits") != std::string::npos);
  const Shape big{int64_t{1} << 21, int64_t{1} << 21};
  CHECK(test::error_of([&] { (void)big.numel(); }).message().find("more than the limit") != std::string::npos);
}

TEST_CASE("errors name the stage, node, op and location, and map to exit codes") {
  const Error e = test::error_of([] {
    TEC_USER_CHECK(4100 % 16 == 0, (ErrorContext{"meta", "fc1", "linear", "graph.json /ops/1"}))
        << "FP8 GEMM needs K divisible by 16, got K=" << 4100;
  });
  CHECK(std::string(e.what()) ==
        "[meta] node 'fc1' (linear) at graph.json /ops/1: FP8 GEMM needs K divisible by 16, got K=4100");
  CHECK(e.kind() == ErrorKind::invalid_input);
  CHECK(exit_code(ErrorKind::usage) == 2);
  CHECK(exit_code(ErrorKind::invalid_input) == 3);
  CHECK(exit_code(ErrorKind::unsupported) == 4);
  const Error internal = test::error_of([] { TEC_INTERNAL_CHECK(1 == 2, {}) << "detail"; });
  CHECK(std::string(internal.what()).find("tec bug at") != std::string::npos);
}

// Found by fuzz_plan_manifest: a blob check's message asked for the blob's name, the very field
// that was missing, and the second exception terminated the process.
TEST_CASE("an error whose message cannot be built reports why the message failed, never terminates") {
  const auto missing_name = [](const char* why) -> std::string {
    TEC_USER_ERROR((ErrorContext{"plan", "", "", "/blobs/0/name"})) << "field is missing (" << why << ")";
  };
  const Error from_check = test::error_of([&] {
    TEC_USER_CHECK(false, (ErrorContext{"plan", "", "", "/blobs/0"})) << "blob '" << missing_name("check") << "' is outside";
  });
  CHECK(std::string(from_check.what()) == "[plan] at /blobs/0/name: field is missing (check)");
  const Error from_statement = test::error_of([&] {
    TEC_INTERNAL_ERROR(ErrorContext{}) << "while reporting: " << missing_name("statement");
  });
  CHECK(std::string(from_statement.what()) == "[plan] at /blobs/0/name: field is missing (statement)");
  CHECK_THROWS_AS(TEC_USAGE_CHECK(false, {}) << "message" << (throw std::bad_alloc(), 0), std::bad_alloc);
}

TEST_CASE("a checksum taken over pieces equals the checksum of the whole, however it is split") {
  std::vector<uint8_t> bytes(45);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 37 + 11);
  const uint64_t whole = checksum64(bytes);
  for (size_t a = 0; a <= bytes.size(); ++a) {
    for (size_t b = a; b <= bytes.size(); ++b) {
      Checksum64 sum(bytes.size());
      sum.update(std::span(bytes).first(a));
      sum.update(std::span(bytes).subspan(a, b - a));
      sum.update(std::span(bytes).subspan(b));
      CHECK(sum.finish() == whole);
    }
  }
  CHECK(checksum64(std::span(bytes).first(44)) != whole);
  Checksum64 short_of_total(bytes.size());
  short_of_total.update(std::span(bytes).first(40));
  CHECK(test::error_of([&] { (void)short_of_total.finish(); }).kind() == ErrorKind::internal);
}

TEST_CASE("with_context fills in the node for errors raised without one") {
  const Error e = test::error_of([] {
    with_context(ErrorContext{"usage", "ln", "layernorm", "graph.json /ops/0"}, [] { (void)Shape{-1, 2}.numel(); });
  });
  CHECK(e.context().node == "ln");
  CHECK(std::string(e.what()).find("node 'ln' (layernorm)") != std::string::npos);
}

// Every byte of an [n_rows][k] weight lands on its own place in [0, n_rows * k).
void require_permutation(long long (*offset)(long long, long long, long long), long long n_rows, long long k) {
  std::vector<int> hits(static_cast<size_t>(n_rows * k), 0);
  for (long long n = 0; n < n_rows; ++n)
    for (long long c = 0; c < k; ++c) {
      const long long at = offset(n, c, k);
      REQUIRE(at >= 0);
      REQUIRE(at < n_rows * k);
      ++hits[static_cast<size_t>(at)];
    }
  for (int h : hits) REQUIRE(h == 1);
}

TEST_CASE("the small-M tiled layout is a permutation that puts each warp's step in one 1 KB run") {
  const long long n_rows = 48, k = 192;
  require_permutation(tec_small_m_tiled_offset, n_rows, k);
  // What kernels/gemm_small_m.cu loads: lane 4g + t of step s reads 16 bytes of row g at
  // tile * 16K + 1024 s + 16 lane, and of row g + 8 512 bytes further.
  for (long long tile : {0, 2})
    for (long long step : {0, 2})
      for (int lane = 0; lane < 32; ++lane)
        for (int j = 0; j < 16; ++j) {
          const long long g = lane / 4, t = lane % 4, base = tile * 16 * k + 1024 * step + 16 * lane + j;
          CHECK(tec_small_m_tiled_offset(16 * tile + g, 64 * step + 16 * t + j, k) == base);
          CHECK(tec_small_m_tiled_offset(16 * tile + g + 8, 64 * step + 16 * t + j, k) == base + 512);
        }
}

TEST_CASE("the mid-M layout is a permutation: each 64-row tile's 128-byte step is 8 KB in wgmma's 128-byte swizzle") {
  const long long n_rows = 128, k = 384;
  require_permutation(tec_mid_m_tiled_offset, n_rows, k);
  // What kernels/gemm_mid_m.cu copies and wgmma reads: step s of tile t starts at
  // t * 64 K + 8192 s; row r's 128 bytes lie at 128 r, its 16-byte chunk c at chunk c ^ (r % 8).
  for (long long tile : {0, 1})
    for (long long step : {0, 2})
      for (long long r = 0; r < 64; ++r)
        for (long long c = 0; c < 8; ++c)
          for (long long j = 0; j < 16; j += 5)
            CHECK(tec_mid_m_tiled_offset(64 * tile + r, 128 * step + 16 * c + j, k) ==
                  tile * 64 * k + 8192 * step + 128 * r + 16 * (c ^ (r % 8)) + j);
}

}  // namespace tec

namespace tec {

// Issue 51: readers of untrusted files share these rules (core/json_text.h, core/file_io.h).
TEST_CASE("JSON nesting is measured outside strings, and refused past the limit before parsing") {
  CHECK(json_nesting_depth(R"({"a": [[1], {"b": "[[[[[[["}]})", 64) == 3);
  CHECK(json_nesting_depth(R"(["\"[[[", "\\"])", 64) == 1);
  size_t at = 0;
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  CHECK(json_nesting_depth(deep, 64, &at) == 65);
  CHECK(at == 64);
  const Error e = test::error_of([&] { (void)parse_json_text(deep, ErrorContext{"json", "", "", "g.json"}); });
  CHECK(e.message().find("nested deeper than 64") != std::string::npos);
  CHECK(e.context().location == "g.json:1:65");
  CHECK(parse_json_text(std::string(64, '[') + std::string(64, ']'), {}).is_array());
  CHECK(test::error_of([] { (void)parse_json_text(R"({"k": ")" + std::string(5000, 'x') + R"("})", {"json", "", "", "g"}); })
            .context()
            .location == "g /k");
}

TEST_CASE("values in error messages are bounded excerpts") {
  nlohmann::json big = nlohmann::json::array();
  for (int i = 0; i < 100000; ++i) big.push_back(i);
  CHECK(json_excerpt(big).size() < 100);
  CHECK(json_excerpt(nlohmann::json::parse(std::string(50, '[') + std::string(50, ']'))) == "[[[[...]]]]");
  CHECK(json_excerpt(std::string(1000, 'x')).size() < 100);
  CHECK(json_excerpt(nlohmann::json{{"a", 1}}) == R"({"a": 1})");
}

TEST_CASE("file names made from tensor names stay in their folder and stay distinct") {
  CHECK(file_name_for("y", ".npy") == "y.npy");
  CHECK(file_name_for("layers.0/attn:out", ".npy") == "layers.0%2Fattn%3Aout.npy");
  for (const std::string& name : std::vector<std::string>{"..", ".", "../y", "/etc/passwd", std::string("a\0b", 3), "", "a%2Fb", ".hidden"}) {
    const std::string file = file_name_for(name, ".npy");
    CAPTURE(file);
    CHECK(file.find('/') == std::string::npos);
    CHECK(file.find('\0') == std::string::npos);
    CHECK(file[0] != '.');
  }
  CHECK(file_name_for("a/b", "") != file_name_for("a%2Fb", ""));  // '%' itself is escaped
  CHECK(file_name_for("", "") != file_name_for("%", ""));
  const Error e = test::error_of([] { (void)file_name_for(std::string(300, 'y'), ".npy"); });
  CHECK(e.message().find("at most 200") != std::string::npos);
}

TEST_CASE("reads are bounded: directories and devices refused, regular files sized first") {
  const Error dir = test::error_of([] { (void)read_file("/", ReadLimits{1 << 20, true}, "graph file", {}); });
  CHECK(dir.kind() == ErrorKind::io);
  CHECK(dir.message().find("this path is a directory") != std::string::npos);
  const Error device = test::error_of([] { (void)read_file("/dev/zero", ReadLimits{1 << 20, true}, "graph file", {}); });
  CHECK(device.kind() == ErrorKind::io);
  CHECK(device.message().find("not a regular file") != std::string::npos);
  CHECK(test::error_of([] { (void)read_file("/nonexistent/x", ReadLimits{1 << 20, false}, "plan file", {}); }).kind() == ErrorKind::io);
  const std::string path = "/tmp/tec_core_test_" + std::to_string(::getpid());
  write_text_file(path, std::string(1000, 'x'));
  CHECK(read_file(path, ReadLimits{1000, false}, "file", {}).size() == 1000);
  const Error big = test::error_of([&] { (void)read_file(path, ReadLimits{999, false}, "graph file", {}); });
  CHECK(big.kind() == ErrorKind::invalid_input);
  CHECK(big.message().find("over the limit of 999") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("runtime scalars: one table of valid values") {
  CHECK_FALSE(runtime_scalar_error("optimizer.lr", 0.0f).has_value());
  CHECK_FALSE(runtime_scalar_error("optimizer.beta2", 0.999f).has_value());
  CHECK(runtime_scalar_error("optimizer.beta2", 0.99999999f).has_value());  // rounds to 1.0f: NaN in bias correction
  CHECK(runtime_scalar_error("optimizer.lr", std::nanf("")).has_value());
  CHECK(*runtime_scalar_error("optimizer.step", -1.0f) ==
        "optimizer.step (AdamW's step count, counted in fp32 (exact below 2^24)) must be a whole number in [0, 16777215], got -1");
  CHECK(*runtime_scalar_error("first_microbatch", 0.5f) ==
        "first_microbatch (1 remakes the weights' copies from the masters, 0 reuses them (TE's is_first_microbatch)) must be 0 or 1, got 0.5");
  CHECK(runtime_scalar_error("optimizer.eps", 0.0f).has_value());
  CHECK_FALSE(runtime_scalar_error("not.a.scalar", 1e30f).has_value());  // the plan reader refuses unknown names itself
}

}  // namespace tec
