// Tensor parallelism through the embedding API (issue 24): each rank's tec::Session made with
// the caller's NCCL communicator (Session::create_rank), on its own GPU and thread, gives its
// part of the output within the recipe's bound of the CPU reference running every rank; and
// the errors a service meets: no communicator, one of the wrong size, a rank that never joins,
// ranks on different plans.
// tests/gpu/tensor_parallel_gpu.sh runs te-run --tp 2 over every recipe.
#include <cmath>
#include <cstring>
#include <thread>

#include "compiler.h"
#include "gpu_util.h"
#include "plan/file.h"
#include "plan/plan.h"
#include "reference/convert.h"
#include "reference/executor.h"
#include "runtime/nccl.h"
#include "tec/runtime.h"

namespace tec::gpu_test {

namespace {

std::vector<uint8_t> tp_plan_bytes(const std::string& arch, RecipeKind recipe) {
  CompileOptions options;
  options.model_path = std::string(TEC_SOURCE_DIR) + "/examples/mlp_tp.json";
  options.frontend.recipe = recipe;
  options.frontend.dim_overrides["T"] = {64};
  options.archs = {arch};
  const CompileResult compiled = compile(options);
  return plan::serialize_plan(compiled.plan->manifest, compiled.plan->blobs);
}

bool mentions(const Status& s, const std::string& text, const char* what) {
  const bool ok = !s.ok() && s.message.find(text) != std::string::npos;
  std::printf("  %-58s %s%s\n", what, ok ? "ok" : "FAIL: ", ok ? "" : (s.ok() ? "no error" : s.message.c_str()));
  return ok;
}

}  // namespace

int tensor_parallel_test(const std::string& arch) {
  std::printf("\ntensor parallel through the embedding API (examples/mlp_tp.json, --tp 2, bf16, T=64):\n");
  const std::vector<uint8_t> bytes = tp_plan_bytes(arch, RecipeKind::bf16);
  auto loaded = tec::Plan::load_memory(bytes.data(), bytes.size(), "mlp_tp2");
  if (!loaded.ok()) {
    std::printf("  FAIL: %s\n", loaded.status().message.c_str());
    return 1;
  }
  const tec::Plan& plan = loaded.value();
  int failures = 0;
  failures += !mentions(tec::Session::create(plan).status(), "Session::create_rank", "Session::create on a TP plan names create_rank");
  failures += !mentions(tec::Session::create_rank(plan, nullptr, 0).status(), "no NCCL communicator", "create_rank without a communicator");

  const runtime::NcclLibrary* nccl = nullptr;
  try {
    nccl = &runtime::nccl("tests/gpu tensor_parallel");
  } catch (const Error& e) {
    std::printf("  SKIPPED the NCCL cases: %s\n", e.what());
    return failures;
  }
  ncclUniqueId id{};
  nccl->get_unique_id(&id);
  {  // A communicator of one rank for a plan of two.
    ncclComm_t one = runtime::init_communicator(*nccl, id, 1, 0, 60);
    failures += !mentions(tec::Session::create_rank(plan, one, 0).status(), "the communicator has 1 ranks; the plan is tensor parallel over 2",
                          "create_rank with a 1-rank communicator");
    nccl->comm_destroy(one);
  }
  {  // Rank 1 never joins: rank 0's init gives up after its timeout, with an error.
    nccl->get_unique_id(&id);
    std::string message;
    try {
      runtime::init_communicator(*nccl, id, 2, 0, 3.0);
    } catch (const Error& e) {
      message = e.what();
    }
    const bool ok = message.find("did not complete within 3 s") != std::string::npos;
    std::printf("  %-58s %s%s\n", "a rank that never joins: init times out", ok ? "ok" : "FAIL: ", ok ? "" : message.c_str());
    failures += !ok;
  }

  int devices = 0;
  CHECK_CUDA(cudaGetDeviceCount(&devices));
  if (devices < 2) {
    std::printf("  SKIPPED the two-rank run: this machine has %d GPU\n", devices);
    return failures;
  }
  // Two ranks, a thread each: inputs from the reference ranks, outputs compared with theirs.
  const auto internal = std::make_shared<const plan::Plan>(plan::Plan::load(bytes, "mlp_tp2"));
  const plan::Profile& profile = internal->profiles.at(0);
  reference::RankGroup ref(*internal, profile);
  ref.randomize_inputs(7);
  ref.run();
  nccl->get_unique_id(&id);
  std::vector<std::string> results(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        CHECK_CUDA(cudaSetDevice(r));
        ncclComm_t comm = runtime::init_communicator(*nccl, id, 2, r, 120);
        {
          auto session = tec::Session::create_rank(plan, comm, r);
          if (!session.ok()) throw std::runtime_error(session.status().message);
          const TensorView x = session.value().input("x").value();
          const plan::Buffer& xb = profile.buffers.at(static_cast<size_t>(profile.tensors.at("x").buffers.at(BufferRole::data)));
          CHECK_CUDA(cudaMemcpy(x.data, ref.rank(r).arena().data() + xb.offset, x.bytes, cudaMemcpyHostToDevice));
          for (int run = 0; run < 3; ++run)
            if (const Status s = session.value().run(nullptr); !s.ok()) throw std::runtime_error(s.message);
          CHECK_CUDA(cudaDeviceSynchronize());
          const TensorView y = session.value().output("y").value();
          std::vector<uint16_t> got(y.bytes / 2);
          CHECK_CUDA(cudaMemcpy(got.data(), y.data, y.bytes, cudaMemcpyDeviceToHost));
          const HostTensor want = ref.rank(r).read("y");
          double num = 0, den = 0;
          for (size_t i = 0; i < got.size(); ++i) {
            const double d = static_cast<double>(reference::bf16_to_float(got[i])) - want.values[i];
            num += d * d;
            den += static_cast<double>(want.values[i]) * want.values[i];
          }
          const double rel = std::sqrt(num / den);
          char line[160];
          std::snprintf(line, sizeof line, "rank %d: y [%lld rows] rel %.2e against the reference (bound 0.01)%s", r,
                        static_cast<long long>(y.shape.at(0)), rel, rel <= 0.01 ? "" : " FAIL");
          results[static_cast<size_t>(r)] = line;
        }
        nccl->comm_destroy(comm);
      } catch (const std::exception& e) {
        results[static_cast<size_t>(r)] = "rank " + std::to_string(r) + " FAIL: " + e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (const std::string& line : results) {
    std::printf("  %s\n", line.c_str());
    failures += line.find("FAIL") != std::string::npos;
  }

  // Rank 1 on another plan (fp8-current, other collectives): both ranks refuse at creation.
  const std::vector<uint8_t> other_bytes = tp_plan_bytes(arch, RecipeKind::fp8_current);
  auto other = tec::Plan::load_memory(other_bytes.data(), other_bytes.size(), "mlp_tp2_fp8");
  nccl->get_unique_id(&id);
  std::vector<Status> mismatched(2);
  ranks.clear();
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      CHECK_CUDA(cudaSetDevice(r));
      ncclComm_t comm = runtime::init_communicator(*nccl, id, 2, r, 120);
      mismatched[static_cast<size_t>(r)] = tec::Session::create_rank(r == 0 ? plan : other.value(), comm, r).status();
      nccl->comm_destroy(comm);
    });
  for (auto& t : ranks) t.join();
  failures += !mentions(mismatched[0], "runs another plan or profile", "rank 0 when rank 1 loads another plan");
  failures += !mentions(mismatched[1], "runs another plan or profile", "rank 1 on another plan than rank 0");
  return failures;
}

}  // namespace tec::gpu_test
