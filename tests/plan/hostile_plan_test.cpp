// Hostile plans: every kind of damage gets a clear error and never a crash (CI also runs
// these under AddressSanitizer and UBSan). Each case starts from a valid plan of
// examples/mlp_tiny.json and breaks one thing.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include <unistd.h>

#include "compiler.h"
#include "core/file_io.h"
#include "plan/file.h"
#include "plan/format.h"
#include "plan/plan.h"
#include "reference/executor.h"
#include "test_util.h"

namespace tec {

namespace {

struct ValidPlan {
  nlohmann::json manifest;
  std::vector<plan::Blob> blobs;
  std::vector<uint8_t> bytes;
};

const ValidPlan& valid_plan() {
  static const ValidPlan v = [] {
    CompileOptions options;
    options.model_path = test::source_dir() + "/examples/mlp_tiny.json";
    options.frontend.recipe = RecipeKind::fp8_delayed;
    const CompileResult r = compile(options);
    ValidPlan p{r.plan->manifest, r.plan->blobs, plan::serialize_plan(r.plan->manifest, r.plan->blobs)};
    return p;
  }();
  return v;
}

std::string load_error(std::span<const uint8_t> bytes) {
  const Error e = test::error_of([&] { (void)plan::Plan::load(bytes, "hostile.teplan"); });
  CHECK(e.kind() == ErrorKind::invalid_input);
  CHECK(e.context().stage == "plan");
  return e.message();
}

// The valid plan with its manifest edited, re-serialized with a correct checksum, so that
// the reader's own checks (not the checksum) must catch the damage.
std::string manifest_error(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json m = valid_plan().manifest;
  edit(m);
  return load_error(plan::serialize_plan(m, valid_plan().blobs));
}

plan::FileHeader header_of(const std::vector<uint8_t>& bytes) {
  plan::FileHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  return h;
}

}  // namespace

TEST_CASE("the valid plan loads and runs") {
  const plan::Plan p = plan::Plan::load(valid_plan().bytes, "valid.teplan");
  reference::Session s(p, p.profiles[0]);
  s.randomize_inputs(1);
  s.run();
  CHECK(s.read("y").values.size() == 32 * 64);
}

// Plan::load_file hands the file's buffer to the constants rather than copying them, after
// the blobs are read and before the profiles are: a file must load as its bytes do, and a
// damaged profile read after that hand-over must still be a clear error.
TEST_CASE("a plan file loads as its bytes do, and its damage reads as theirs") {
  const auto path = (std::filesystem::temp_directory_path() / ("tec_hostile_" + std::to_string(::getpid()) + ".teplan")).string();
  auto load_file_error = [&](std::span<const uint8_t> bytes) {
    tec::write_file_atomically(path, bytes);
    const Error e = test::error_of([&] { (void)plan::Plan::load_file(path); });
    CHECK(e.kind() == ErrorKind::invalid_input);
    return e.message();
  };
  tec::write_file_atomically(path, valid_plan().bytes);
  const plan::Plan from_file = plan::Plan::load_file(path);
  const plan::Plan from_bytes = plan::Plan::load(valid_plan().bytes, "valid.teplan");
  CHECK(!from_file.constants.empty());
  CHECK(from_file.constants == from_bytes.constants);
  CHECK(from_file.profiles.size() == from_bytes.profiles.size());

  nlohmann::json m = valid_plan().manifest;
  m["profiles"][0]["buffers"][0]["offset"] = 1 << 30;
  const auto damaged_profile = plan::serialize_plan(m, valid_plan().blobs);
  const std::string message = load_file_error(damaged_profile);
  CHECK(message.find("outside its region") != std::string::npos);
  CHECK(message == load_error(damaged_profile));
  const auto& good = valid_plan().bytes;
  CHECK(load_file_error(std::span(good.data(), good.size() / 2)) == load_error(std::span(good.data(), good.size() / 2)));
  std::filesystem::remove(path);
}

// The corruption sweep covers every small example plan: mlp_tiny under every recipe and
// swiglu_mlp (examples/mlp.json's 128 MiB plan would take an hour of checksums; it shares the
// container and manifest code). The plan reader links no CUDA, so all of this is rejected
// before any CUDA call.
std::vector<std::pair<std::string, std::vector<uint8_t>>> example_plans() {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
  auto add = [&](const std::string& model, RecipeKind recipe) {
    CompileOptions options;
    options.model_path = test::source_dir() + "/examples/" + model + ".json";
    options.frontend.recipe = recipe;
    options.cache_dir = "";
    const CompileResult r = compile(options);
    out.emplace_back(model + " " + std::string(to_string(recipe)), plan::serialize_plan(r.plan->manifest, r.plan->blobs));
  };
  for (RecipeKind recipe : {RecipeKind::bf16, RecipeKind::fp8_current, RecipeKind::fp8_delayed, RecipeKind::fp8_block,
                            RecipeKind::mxfp8, RecipeKind::nvfp4})
    add("mlp_tiny", recipe);
  add("swiglu_mlp", RecipeKind::fp8_delayed);
  return out;
}

TEST_CASE("a flipped byte anywhere is caught (checksum, magic or version), in every example plan") {
  for (const auto& [name, good] : example_plans()) {
    CAPTURE(name);
    const auto h = header_of(good);
    std::vector<size_t> positions;
    for (size_t i = 0; i < h.blobs_offset; ++i) positions.push_back(i);  // header, padding and manifest
    std::mt19937 rng(3);
    for (int i = 0; i < 10000; ++i) positions.push_back(h.blobs_offset + rng() % (good.size() - h.blobs_offset));
    for (size_t i = good.size() - plan::kTrailerBytes; i < good.size(); ++i) positions.push_back(i);
    std::vector<uint8_t> bad = good;
    for (size_t pos : positions) {
      bad[pos] ^= static_cast<uint8_t>(1u << (pos % 8));
      CAPTURE(pos);
      CHECK_FALSE(load_error(bad).empty());
      bad[pos] = good[pos];
    }
  }
}

TEST_CASE("truncation at every 1/64 of every example plan, and a file of 0 bytes") {
  for (const auto& [name, good] : example_plans()) {
    CAPTURE(name);
    for (int i = 0; i < 64; ++i) {
      const size_t keep = good.size() * static_cast<size_t>(i) / 64 + static_cast<size_t>(i);
      CAPTURE(keep);
      const std::string message = load_error(std::span(good.data(), keep));
      CHECK((message.find("truncated") != std::string::npos || message.find("not a tec plan") != std::string::npos));
    }
  }
  CHECK(load_error({}).find("not a tec plan") != std::string::npos);
}

TEST_CASE("wrong magic and a future version") {
  std::vector<uint8_t> bad = valid_plan().bytes;
  bad[0] = 'X';
  CHECK(load_error(bad).find("wrong magic") != std::string::npos);
  // A version from the future, with a valid checksum so the version check itself must speak.
  const auto h = header_of(valid_plan().bytes);
  const auto& good = valid_plan().bytes;
  const std::string text(good.begin() + static_cast<long>(h.manifest_offset),
                         good.begin() + static_cast<long>(h.manifest_offset + h.manifest_size));
  std::vector<uint8_t> future =
      plan::assemble_plan(text, std::span(good.data() + h.blobs_offset, h.blobs_size));
  const uint32_t version = plan::kFormatVersion + 1;
  std::memcpy(future.data() + 8, &version, 4);
  const uint64_t sum = plan::checksum64(std::span(future.data(), future.size() - plan::kTrailerBytes));
  std::memcpy(future.data() + future.size() - 8, &sum, 8);
  CHECK(load_error(future).find("newer than this tec") != std::string::npos);
}

TEST_CASE("a manifest that is not JSON") {
  const auto& good = valid_plan().bytes;
  const auto h = header_of(good);
  const auto blobs = std::span(good.data() + h.blobs_offset, h.blobs_size);
  CHECK(load_error(plan::assemble_plan("{\"format\": ", blobs)).find("malformed JSON") != std::string::npos);
  CHECK(load_error(plan::assemble_plan("[1, 2]", blobs)).find("manifest is not a JSON object") != std::string::npos);
  // Deep nesting is refused before it is parsed, and the error quotes no value (issue 51: the
  // printer recursed once per level and crashed).
  const std::string deep = load_error(plan::assemble_plan(std::string(h.manifest_size, '{'), blobs));
  CHECK(deep.find("nested deeper than 64 levels") != std::string::npos);
  CHECK(deep.size() < 300);
}

TEST_CASE("offsets and sizes past the arena, the constants or the file") {
  CHECK(manifest_error([](auto& m) { m["profiles"][0]["buffers"][0]["offset"] = 1 << 30; }).find("outside its region") !=
        std::string::npos);
  CHECK(manifest_error([](auto& m) {
          for (auto& b : m["profiles"][0]["buffers"])
            if (b["region"] == "constants") b["offset"] = m["constant_bytes"];
        }).find("outside its region") != std::string::npos);
  CHECK(manifest_error([](nlohmann::json& m) { m["profiles"][0]["arena_bytes"] = m["arena_bytes"].get<int64_t>() + 256; })
            .find("expected an integer in") != std::string::npos);
  // A blob index pointing past the blob section: built by hand, since serialize_plan writes
  // the index itself.
  const auto& good = valid_plan().bytes;
  const auto h = header_of(good);
  nlohmann::json m = nlohmann::json::parse(good.begin() + static_cast<long>(h.manifest_offset),
                                           good.begin() + static_cast<long>(h.manifest_offset + h.manifest_size));
  m["blobs"][0]["size"] = h.blobs_size + 4096;
  const auto bad = plan::assemble_plan(m.dump(), std::span(good.data() + h.blobs_offset, h.blobs_size));
  CHECK(load_error(bad).find("is not where the blob section of") != std::string::npos);
  // Blobs that overlap, or one moved into the padding after another (issue 51: the constants
  // blob moved by 256 bytes loaded and ran on other weights).
  for (const int64_t shift : {256, 4096}) {
    nlohmann::json moved = nlohmann::json::parse(good.begin() + static_cast<long>(h.manifest_offset),
                                                 good.begin() + static_cast<long>(h.manifest_offset + h.manifest_size));
    moved["blobs"][0]["offset"] = moved["blobs"][0]["offset"].get<int64_t>() + shift;
    CHECK(load_error(plan::assemble_plan(moved.dump(), std::span(good.data() + h.blobs_offset, h.blobs_size)))
              .find("has its next blob") != std::string::npos);
  }
}

// Regression: the manifest fuzzer (under UBSan) moved a delayed-scaling state buffer to an
// odd offset, and the executor read its float through a misaligned pointer. Offsets must now
// be 256-aligned, and the executor copies state instead of aliasing arena bytes.
TEST_CASE("misaligned buffer offsets are rejected; fuzzer manifests replay cleanly") {
  CHECK(manifest_error([](auto& m) {
          for (auto& b : m["profiles"][0]["buffers"])
            if (b["region"] == "state") b["offset"] = b["offset"].template get<int64_t>() + 3;
        }).find("is not a multiple of 256") != std::string::npos);
  const auto& good = valid_plan().bytes;
  const auto h = header_of(good);
  int replayed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(test::source_dir() + "/tests/fuzz/regressions")) {
    if (entry.path().extension() != ".manifest") continue;
    CAPTURE(entry.path().string());
    const std::string text = test::read_text(entry.path().string());
    const auto bytes = plan::assemble_plan(text, std::span(good.data() + h.blobs_offset, h.blobs_size));
    try {
      const plan::Plan p = plan::Plan::load(bytes, "regression.teplan");
      for (const auto& profile : p.profiles) {
        reference::Session s(p, profile);
        s.randomize_inputs(1);
        s.run();
      }
    } catch (const Error&) {
    }
    ++replayed;
  }
  CHECK(replayed >= 1);
}

TEST_CASE("references to missing buffers and tensors") {
  CHECK(manifest_error([](auto& m) { m["profiles"][0]["tensors"][0]["buffers"]["data"] = 9999; })
            .find("is not a buffer of this profile") != std::string::npos);
  CHECK(manifest_error([](auto& m) { m["profiles"][0]["steps"][0]["ops"][0]["inputs"][0] = "nowhere"; })
            .find("step reads unknown tensor 'nowhere'") != std::string::npos);
  CHECK(manifest_error([](auto& m) { m["profiles"][0]["steps"][1]["deps"] = {5}; }).find("only on earlier steps") !=
        std::string::npos);
  // A tensor pointing at another tensor's buffer of the wrong size.
  CHECK(manifest_error([](auto& m) {
          auto& tensors = m["profiles"][0]["tensors"];
          for (auto& t : tensors)
            if (t["name"] == "y") t["buffers"]["data"] = 0;  // x's buffer
        }).find("does not match tensor 'y'") != std::string::npos);
}

TEST_CASE("grouped tensors: only weights (or a train plan's copies of them) of shape [members, ...], with buffers of the grouped size") {
  auto tensor = [](nlohmann::json& m, const std::string& name) -> nlohmann::json& {
    for (auto& t : m["profiles"][0]["tensors"])
      if (t["name"] == name) return t;
    FAIL("no tensor " << name);
    throw;
  };
  CHECK(manifest_error([&](auto& m) { tensor(m, "x")["group_members"] = 2; }).find("a grouped tensor is a weight") != std::string::npos);
  CHECK(manifest_error([&](auto& m) { tensor(m, "fc1.weight")["group_members"] = 3; })
            .find("a grouped tensor is a weight (or a train plan's copy of one) of shape [group_members, ...]") != std::string::npos);
  CHECK(manifest_error([&](auto& m) { tensor(m, "fc1.weight")["group_members"] = "8"; }).find("expected an integer in [2,") != std::string::npos);
  // fc1.weight is [256, 64]: as 256 members of [64] its buffers would be 256 scales, not the one listed.
  CHECK(manifest_error([&](auto& m) { tensor(m, "fc1.weight")["group_members"] = 256; }).find("fc1.weight") != std::string::npos);
}

TEST_CASE("a grouped tensor's delayed-scaling state must be one scale and one history column per member") {
  // moe_tiny trained under fp8-delayed: fc1.weight's copy has 4 experts, so scale [4] and amax_history [1024, 4].
  CompileOptions options;
  options.model_path = test::source_dir() + "/examples/moe_tiny.json";
  options.frontend.recipe = RecipeKind::fp8_delayed;
  options.frontend.mode = Mode::train;
  options.frontend.dim_overrides["T"] = {16};
  const CompileResult r = compile(options);
  CHECK_NOTHROW((void)plan::Plan::load(plan::serialize_plan(r.plan->manifest, r.plan->blobs), "moe.teplan"));
  auto with_state_shape = [&](const std::string& buffer, const std::vector<int64_t>& shape) {
    nlohmann::json m = r.plan->manifest;
    for (auto& b : m["profiles"][0]["buffers"])
      if (b["name"] == buffer) {
        int64_t numel = 1;
        for (int64_t d : shape) numel *= d;
        b["shape"] = shape;
        b["bytes"] = numel * 4;  // the buffer itself stays consistent: only the state check can object
      }
    return load_error(plan::serialize_plan(m, r.plan->blobs));
  };
  for (const auto& [buffer, shape] : {std::pair<std::string, std::vector<int64_t>>{"fc1.weight.state.amax_history", {1024}},
                                      {"fc1.weight.state.amax_history", {4, 1024}},
                                      {"fc1.weight.state.scale", {1}}}) {
    CAPTURE(buffer);
    CHECK(with_state_shape(buffer, shape).find("state buffer '" + buffer + "' has the wrong region, dtype or shape") != std::string::npos);
  }
}

TEST_CASE("GPU launches with bad buffer references, modules, sizes or kinds are rejected at load") {
  // The first launch of a kind (T=32 runs its GEMMs in tec's small-M kernel, T=128 in cuBLASLt).
  auto launch = [](nlohmann::json& m, const char* kind) -> nlohmann::json& {
    for (auto& p : m["profiles"])
      for (auto& l : p["gpu"]["launches"])
        if (l["kind"] == kind) return l;
    throw std::runtime_error(std::string("no ") + kind + " launch in any profile");
  };
  CHECK(manifest_error([&](auto& m) { launch(m, "kernel")["args"][0] = {{"buffer", 9999}}; })
            .find("expected null or a buffer index below") != std::string::npos);
  CHECK(manifest_error([&](auto& m) { launch(m, "kernel")["module"] = 77; }).find("expected an integer in [0, ") != std::string::npos);
  CHECK(manifest_error([&](auto& m) { launch(m, "kernel")["block"] = {4096, 1, 1}; }).find("entries must be integers in [1, 1024]") !=
        std::string::npos);
  CHECK(manifest_error([&](auto& m) { launch(m, "kernel")["grid"] = {1, 70000, 1}; }).find("grid y and z must be at most 65535") !=
        std::string::npos);
  CHECK(manifest_error([&](auto& m) { launch(m, "kernel")["kind"] = "shell"; }).find("unknown launch kind 'shell'") !=
        std::string::npos);
  // The status word (MoE plans' run-time checks): one known bit, nothing else.
  for (const nlohmann::json& bit : {nlohmann::json(3), nlohmann::json(-1), nlohmann::json("1")})
    CHECK(manifest_error([&](auto& m) { launch(m, "kernel")["args"][0] = {{"status", bit}}; })
              .find("a status argument names one bit of the status word") != std::string::npos);
  CHECK(manifest_error([&](auto& m) { launch(m, "kernel")["shared_bytes"] = 1 << 20; }).find("expected an integer in [0, 232448], got 1048576") !=
        std::string::npos);
  CHECK(manifest_error([&](auto& m) { launch(m, "kernel")["shared_bytes"] = -1; }).find("expected an integer in [0, 232448]") !=
        std::string::npos);
  CHECK(manifest_error([&](auto& m) { launch(m, "kernel")["early_launch"] = "yes"; }).find("expected a boolean, got \"yes\"") !=
        std::string::npos);
  // TMA tensor maps (the grouped GEMM's X and W): within their buffer, in the TMA's limits.
  auto tensor_map = [](int64_t rows, int64_t row_bytes, int64_t box_rows) {
    return nlohmann::json{{"buffer", 0}, {"rows", rows}, {"row_bytes", row_bytes}, {"box_rows", box_rows}};
  };
  CHECK(manifest_error([&](auto& m) { launch(m, "kernel")["tensor_maps"] = {tensor_map(int64_t{1} << 32, 128, 128)}; })
            .find("rows of 128 bytes overrun buffer") != std::string::npos);
  CHECK(manifest_error([&](auto& m) { launch(m, "kernel")["tensor_maps"] = {tensor_map(1, 144, 300)}; })
            .find("expected an integer in [1, 256], got 300") != std::string::npos);
  CHECK(manifest_error([&](auto& m) { launch(m, "kernel")["tensor_maps"] = {tensor_map(1, 200, 8)}; })
            .find("expected a multiple of 16, got 200") != std::string::npos);
  CHECK(manifest_error([&](auto& m) { launch(m, "kernel")["tensor_maps"] = {tensor_map(1, (int64_t{1} << 32) + 16, 8)}; })
            .find("expected an integer in [128, 4294967296], got 4294967312") != std::string::npos);
  CHECK(manifest_error([&](auto& m) { launch(m, "kernel")["tensor_maps"] = {tensor_map(0, 128, 8)}; })
            .find("expected an integer in [1, 4294967296], got 0") != std::string::npos);
  CHECK(manifest_error([&](auto& m) {
          launch(m, "kernel")["tensor_maps"] = {tensor_map(1, 128, 8), tensor_map(1, 128, 8), tensor_map(1, 128, 8)};
        }).find("at most 2 tensor maps") != std::string::npos);
  CHECK(manifest_error([&](auto& m) { launch(m, "kernel")["tensor_maps"] = {{{"rows", 1}}}; }).find("missing field 'buffer'") !=
        std::string::npos);
  CHECK(manifest_error([&](auto& m) { launch(m, "gemm")["gemm"]["k"] = 1 << 20; }).find("GEMM operand a needs") !=
        std::string::npos);
  CHECK(manifest_error([&](auto& m) { launch(m, "gemm")["gemm"]["d"]["buffer"] = launch(m, "gemm")["gemm"]["a"]["buffer"]; })
            .find("which is a constant") != std::string::npos);
  CHECK(manifest_error([&](auto& m) { launch(m, "gemm")["gemm"]["algo"] = {{"tuned", "zz"}, {"cublaslt", "1"}, {"gpu", "x"}}; })
            .find("128 lowercase hex digits") != std::string::npos);
  // Train plans' fields: 16-bit operands may be read transposed, FP8 ones never (TN only).
  CHECK(manifest_error([&](auto& m) { launch(m, "gemm")["gemm"]["a"]["transposed"] = true; })
            .find("FP8 GEMM operands cannot be transposed") != std::string::npos);
  CHECK(manifest_error([&](auto& m) { launch(m, "gemm")["gemm"]["b"]["transposed"] = "yes"; })
            .find("expected a boolean, got \"yes\"") != std::string::npos);
  // A strided batch (a general matmul's): every matrix inside its buffer, a count cuBLASLt takes.
  CHECK(manifest_error([&](auto& m) { launch(m, "gemm")["gemm"]["batch"] = {{"count", 2}, {"stride_a", int64_t{1} << 30}, {"stride_b", 1}}; })
            .find("GEMM operand a needs 2 matrices 1073741824 elements apart in its buffer") != std::string::npos);
  CHECK(manifest_error([&](auto& m) { launch(m, "gemm")["gemm"]["batch"] = {{"count", int64_t{1} << 31}, {"stride_a", 1}, {"stride_b", 1}}; })
            .find("expected an integer in [2, 2147483647], got 2147483648") != std::string::npos);
  CHECK(manifest_error([&](auto& m) { launch(m, "kernel")["args"] = std::vector<std::nullptr_t>(65, nullptr); })
            .find("at most 64 kernel argument slots") != std::string::npos);
}

TEST_CASE("device layouts: unknown names, buffers they cannot apply to, and profiles that disagree are rejected") {
  auto buffer = [](nlohmann::json& m, size_t profile, const std::string& name) -> nlohmann::json& {
    for (auto& b : m["profiles"][profile]["buffers"])
      if (b["name"] == name) return b;
    throw std::runtime_error("no buffer " + name);
  };
  CHECK(manifest_error([&](auto& m) { buffer(m, 0, "fc1.weight.data")["device_layout"] = "swizzled"; })
            .find("unknown device layout 'swizzled'") != std::string::npos);
  CHECK(manifest_error([&](auto& m) { buffer(m, 0, "x.data")["device_layout"] = "small_m_tiles"; })
            .find("small_m_tiles takes a constant FP8 [N, K] weight") != std::string::npos);
  CHECK(manifest_error([&](auto& m) { buffer(m, 0, "fc1.bias.data")["device_layout"] = "small_m_tiles"; })
            .find("small_m_tiles takes a constant FP8 [N, K] weight") != std::string::npos);
  CHECK(manifest_error([&](auto& m) { buffer(m, 0, "x.data")["device_layout"] = "mid_m_tiles"; })
            .find("mid_m_tiles takes a constant FP8 or bf16 [N, K] weight with N % 64 == 0 and K bytes % 128 == 0") != std::string::npos);
  // The plan has two profiles sharing the constants; one alone may not permute a weight.
  REQUIRE(valid_plan().manifest["profiles"].size() >= 2);
  CHECK(manifest_error([&](auto& m) { buffer(m, 0, "fc1.weight.data")["device_layout"] = "small_m_tiles"; })
            .find("disagrees with 'fc1.weight.data' there on its size, shape or device layout") != std::string::npos);
}

TEST_CASE("size products that overflow 64 bits, and absurd shapes") {
  CHECK(manifest_error([](auto& m) {
          m["profiles"][0]["buffers"][0]["shape"] = {int64_t{1} << 31, int64_t{1} << 31, int64_t{1} << 31};
        }).find("does not fit in 64 bits") != std::string::npos);
  CHECK(manifest_error([](auto& m) { m["profiles"][0]["buffers"][0]["shape"] = {-4}; }).find("shape entries") !=
        std::string::npos);
  CHECK(manifest_error([](auto& m) { m["profiles"][0]["buffers"][0]["bytes"] = 7; }).find("its shape and dtype need") !=
        std::string::npos);
}

TEST_CASE("unknown ops and bad attributes are caught before a run") {
  nlohmann::json m = valid_plan().manifest;
  m["profiles"][0]["steps"][0]["ops"][0]["op"] = "log_softmax";
  const plan::Plan p = plan::Plan::load(plan::serialize_plan(m, valid_plan().blobs), "hostile.teplan");
  const Error e = test::error_of([&] { reference::Session s(p, p.profiles[0]); });
  CHECK(e.message().find("the plan uses op 'log_softmax', unknown to this tec") != std::string::npos);
  m = valid_plan().manifest;
  m["profiles"][0]["steps"][0]["ops"][0]["attrs"]["eps"] = "tiny";
  const plan::Plan q = plan::Plan::load(plan::serialize_plan(m, valid_plan().blobs), "hostile.teplan");
  CHECK(test::error_of([&] { reference::Session s(q, q.profiles[0]); }).message().find("attribute 'eps' must be float") !=
        std::string::npos);
}

TEST_CASE("ops whose shapes do not fit their inputs are caught before the reference reads out of bounds") {
  // fc1 told it has more input features than its input and weight: the op's own infer objects.
  nlohmann::json m = valid_plan().manifest;
  for (auto& op : m["profiles"][0]["steps"][1]["ops"])
    if (op["node"] == "fc1") op["attrs"]["in_features"] = 128;
  const plan::Plan p = plan::Plan::load(plan::serialize_plan(m, valid_plan().blobs), "hostile.teplan");
  const Error e = test::error_of([&] { reference::Session s(p, p.profiles[0]); });
  CHECK(e.context().node == "fc1");
  CHECK(e.message().find("parameter weight has shape [256, 64], the attributes need [256, 128]") != std::string::npos);
  // An op pointed at a tensor of another shape.
  m = valid_plan().manifest;
  m["profiles"][0]["steps"][2]["ops"][1]["inputs"][1] = "ln";  // y = fc2 + ln (ln is [32, 64] too, but FP8)
  // The reader sees it first: ln's buffer is reused once fc1 has read it.
  CHECK(load_error(plan::serialize_plan(m, valid_plan().blobs)).find("reads 'ln' in step 2, but its buffer 'ln.data' lives in steps [0, 1]") !=
        std::string::npos);
}

// Issue 51: a manifest rewritten with its checksum recomputed moved ln.data over x.data (the
// CPU reference ran to NaN with exit 0) and an output into the constants (an internal error at
// run time). The reader refuses both, and the rest of their class (plan/layout_check.h).
TEST_CASE("crafted buffer layouts are refused at load: overlap while live, wrong regions, lifetimes") {
  auto index_of = [](const nlohmann::json& m, const std::string& name) {
    const auto& buffers = m["profiles"][0]["buffers"];
    for (size_t i = 0; i < buffers.size(); ++i)
      if (buffers[i]["name"] == name) return i;
    FAIL("no buffer " << name);
    return size_t{0};
  };
  const nlohmann::json& m0 = valid_plan().manifest;
  const size_t ln = index_of(m0, "ln.data"), x = index_of(m0, "x.data"), y = index_of(m0, "y.data");
  const std::string overlap = manifest_error([&](nlohmann::json& m) { m["profiles"][0]["buffers"][ln]["offset"] = 256; });
  CHECK(overlap.find("'ln.data'") != std::string::npos);
  CHECK(overlap.find("share bytes while both are live") != std::string::npos);
  CHECK(manifest_error([&](nlohmann::json& m) { m["profiles"][0]["buffers"][y]["region"] = "constants"; }).find("cannot live in") !=
        std::string::npos);
  CHECK(manifest_error([&](nlohmann::json& m) { m["profiles"][0]["buffers"][x]["region"] = "scratch"; }).find("input 'x'") !=
        std::string::npos);
  CHECK(manifest_error([&](nlohmann::json& m) { m["profiles"][0]["buffers"][ln]["lifetime"] = {0, 1000}; })
            .find("lives outside the profile's steps") != std::string::npos);
  // Two constants over each other (a weight read from another's bytes) are refused as well.
  const size_t w1 = index_of(m0, "fc1.weight.data"), w2 = index_of(m0, "fc2.weight.data");
  CHECK(manifest_error([&](nlohmann::json& m) { m["profiles"][0]["buffers"][w2]["offset"] = m["profiles"][0]["buffers"][w1]["offset"]; })
            .find("share bytes") != std::string::npos);
}

}  // namespace tec

