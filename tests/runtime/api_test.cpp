// include/tec/runtime.h: nothing throws across it; bad plans and a missing device come back
// as a Status with the CLIs' exit code and a message that says what is wrong.
#include <doctest/doctest.h>
#include <cuda_runtime.h>

#include "compiler.h"
#include "plan/file.h"
#include "tec/runtime.h"
#include "test_util.h"

namespace tec {

namespace {
std::vector<uint8_t> tiny_plan_bytes() {
  CompileOptions options;
  options.model_path = test::source_dir() + "/examples/mlp_tiny.json";
  const CompileResult r = compile(options);
  return plan::serialize_plan(r.plan->manifest, r.plan->blobs);
}
}  // namespace

TEST_CASE("the embedding API loads a plan from memory and describes its inputs and outputs per profile") {
  const auto bytes = tiny_plan_bytes();
  Result<Plan> plan = Plan::load_memory(bytes.data(), bytes.size(), "mlp_tiny");
  REQUIRE(plan.ok());
  CHECK(plan.value().profiles().size() == 2);
  auto inputs = plan.value().inputs({{"T", 128}, {"H", 64}, {"F", 256}});
  REQUIRE(inputs.ok());
  REQUIRE(inputs.value().size() == 1);
  CHECK(inputs.value()[0].name == "x");
  CHECK(inputs.value()[0].dtype == "bf16");
  CHECK(inputs.value()[0].shape == std::vector<int64_t>{128, 64});
  CHECK(inputs.value()[0].bytes == 128 * 64 * 2);
  auto outputs = plan.value().outputs();
  REQUIRE(outputs.ok());
  CHECK(outputs.value()[0].name == "y");
  const auto missing = plan.value().inputs({{"T", 7}});
  CHECK(missing.status().code == 2);
  CHECK(missing.status().message.find("the plan has") != std::string::npos);
}

TEST_CASE("the embedding API returns errors as statuses, never exceptions") {
  const auto bytes = tiny_plan_bytes();
  auto damaged = bytes;
  damaged[300] ^= 0x40;
  const auto bad = Plan::load_memory(damaged.data(), damaged.size(), "damaged");
  CHECK(bad.status().code == 3);
  CHECK(bad.status().message.find("checksum") != std::string::npos);
  CHECK(Plan::load_memory(nullptr, 10).status().code == 2);
  CHECK(Plan::load_file("/nonexistent/plan.teplan").status().code == 6);
  CHECK(Session::create(Plan{}).status().code == 2);

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    const auto plan = Plan::load_memory(bytes.data(), bytes.size());
    const auto session = Session::create(plan.value());
    CHECK(session.status().code == 7);
    CHECK(session.status().message.find("no CUDA device") != std::string::npos);
  }
}

}  // namespace tec
