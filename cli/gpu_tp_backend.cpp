// te-run on a tensor-parallel plan (ARCHITECTURE.md §9, §14): every rank on its own GPU, in
// this process, one thread per rank, each with its NCCL communicator, stream and session (whose
// CUDA graph holds the collectives). Inputs and outputs are whole tensors, split and joined
// by the plan's layouts, as te-run --backend cpu does; the CPU reference running every rank
// (reference::RankGroup) is the oracle.
#include <barrier>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/npy.h"
#include "gpu_backend.h"
#include "gpu_common.h"
#include "plan/file.h"
#include "reference/executor.h"
#include "runtime/nccl.h"
#include "runtime/session.h"

namespace tec::cli {

namespace {

using json = nlohmann::json;

struct Rank {
  cudaStream_t stream = nullptr;
  ncclComm_t comm = nullptr;
  std::unique_ptr<runtime::Session> session;
};

// Runs `body(r)` for every rank on its own thread, with rank r's GPU current, and rethrows the
// first rank's exception once all are done. A rank that fails leaves the others waiting at a
// collective only until their timeout (Session::wait, check_nccl), never forever.
void on_every_rank(int ranks, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        TEC_CLI_CUDA(cudaSetDevice(r));
        body(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}


}  // namespace

int run_gpu_tensor_parallel(std::shared_ptr<const plan::Plan> plan, const GpuRunOptions& o) {
  const plan::Profile& profile =
      plan->profile(o.dims.empty() && plan->profiles.size() > 1 ? plan->profiles[0].dims : o.dims);
  const int ranks = static_cast<int>(plan->tp_size);
  runtime::require_device();
  int devices = 0;
  TEC_CLI_CUDA(cudaGetDeviceCount(&devices));
  TEC_USER_CHECK(devices >= ranks, (ErrorContext{"runtime", "", "", plan->name}))
      << "the plan is tensor parallel over " << ranks << " ranks, one per GPU, and this machine has " << devices
      << " GPU(s) (te-run --backend cpu runs every rank on the CPU reference)";
  TEC_USER_CHECK(o.rotate == 1, (ErrorContext{"runtime", "", "", plan->name})) << "--rotate does not work on a tensor-parallel plan yet";
  const runtime::NcclLibrary& nccl = runtime::nccl("plan '" + plan->name + "' (tensor parallel over " + std::to_string(ranks) + " ranks)");
  ncclUniqueId id{};
  runtime::check_nccl(nccl, nullptr, nccl.get_unique_id(&id), "ncclGetUniqueId", "", o.collective_timeout);

  // The reference ranks draw the inputs, so that both backends read the same bytes.
  reference::RankGroup ref(*plan, profile);
  ref.randomize_inputs(o.seed);
  for (const auto& [name, values] : o.inputs) ref.set_input(name, values);
  for (const auto& [name, value] : o.scalars)
    for (int r = 0; r < ranks; ++r) ref.rank(r).set_scalar(name, value);

  std::vector<Rank> rank(static_cast<size_t>(ranks));
  struct Cleanup {
    std::vector<Rank>& ranks;
    const runtime::NcclLibrary& nccl;
    ~Cleanup() {
      // After an error a peer may still wait in a collective: abort, which never blocks.
      const bool failed = std::uncaught_exceptions() > 0;
      for (Rank& r : ranks) {
        r.session.reset();
        if (r.comm) failed ? nccl.comm_abort(r.comm) : nccl.comm_destroy(r.comm);
        if (r.stream) cudaStreamDestroy(r.stream);
      }
    }
  } cleanup{rank, nccl};
  auto upload_inputs = [&](int r) {
    Rank& me = rank[static_cast<size_t>(r)];
    const std::vector<uint8_t>& arena = ref.rank(r).arena();
    for (size_t i = 0; i < profile.buffers.size(); ++i) {
      const plan::Buffer& b = profile.buffers[i];
      if (b.region == "input") me.session->upload(static_cast<int>(i), arena.data() + b.offset, static_cast<size_t>(b.bytes), me.stream);
    }
  };
  on_every_rank(ranks, [&](int r) {
    Rank& me = rank[static_cast<size_t>(r)];
    TEC_CLI_CUDA(cudaStreamCreateWithFlags(&me.stream, cudaStreamNonBlocking));
    me.comm = runtime::init_communicator(nccl, id, ranks, r, o.collective_timeout);
    me.session = std::make_unique<runtime::Session>(plan, profile, runtime::Communicator{me.comm, r});
    upload_inputs(r);
    for (const auto& [name, value] : o.scalars) me.session->set_scalar(name, value, me.stream);
  });
  runtime::Session& first = *rank[0].session;
  const int nccl_version = nccl.version;
  std::printf("te-run: %d GPUs (%s), tensor parallel over %d ranks, one thread per rank; NCCL %d.%d.%d (%s); plan %s, recipe %s, "
              "profile %s, %d launches per rank in one CUDA graph\n",
              ranks, first.device_name().c_str(), ranks, nccl_version / 10000, nccl_version / 100 % 100, nccl_version % 100,
              nccl.library.path().c_str(), plan->name.c_str(), plan->recipe.c_str(), profile_name(profile.dims).c_str(),
              first.launch_count());
  json report{{"plan", plan->name},          {"recipe", plan->recipe},        {"profile", profile.dims},
              {"device", first.device_name()}, {"tp_size", ranks},              {"launches_per_rank", first.launch_count()},
              {"arena_bytes", first.arena_bytes()}, {"constant_bytes_per_rank", first.constant_bytes()}};
  int exit_code = 0;

  auto run_all = [&](bool graph) {
    on_every_rank(ranks, [&](int r) {
      Rank& me = rank[static_cast<size_t>(r)];
      graph ? me.session->run(me.stream) : me.session->run_eager(me.stream);
      me.session->wait(me.stream, o.collective_timeout);
    });
  };
  // Each rank's GPU arena, in a reference group: read() joins the ranks' parts of an output.
  auto gpu_view = [&] {
    auto view = std::make_unique<reference::RankGroup>(*plan, profile);
    on_every_rank(ranks, [&](int r) { view->rank(r).set_arena(rank[static_cast<size_t>(r)].session->download_arena(rank[static_cast<size_t>(r)].stream)); });
    return view;
  };
  // Outputs with a layout are compared whole; a rank's own (a weight gradient shard) per rank.
  auto compared_names = [&] {
    std::vector<std::pair<std::string, int>> names;  // name, rank (-1: whole)
    for (const auto& name : profile.outputs) {
      if (profile.tp_layouts.count(name)) names.push_back({name, -1});
      else
        for (int r = 0; r < ranks; ++r) names.push_back({name, r});
    }
    return names;
  };

  if (o.verify_cpu) {
    const double bound = output_bound(plan->recipe, profile);
    const int runs = profile.train ? o.verify_steps : 1;
    std::printf("\nverify against the CPU reference running all %d ranks (same inputs, seed %llu%s):\n", ranks,
                static_cast<unsigned long long>(o.seed),
                runs > 1 ? (", " + std::to_string(runs) + " training steps, state carried over").c_str() : "");
    std::printf("  %-4s %-28s %14s %14s  %s\n", "run", "tensor", "|out-ref|/|ref|", "max |out-ref|", "verdict");
    json outputs = json::array();
    for (int run = 0; run < runs; ++run) {
      on_every_rank(ranks, [&](int r) { rank[static_cast<size_t>(r)].session->poison(rank[static_cast<size_t>(r)].stream); });
      run_all(true);
      ref.run();
      const auto view = gpu_view();
      for (const auto& [name, r] : compared_names()) {
        const std::string label = r < 0 ? name : name + ".rank" + std::to_string(r);
        const Compare c = r < 0 ? compare(view->read(name), ref.read(name)) : compare(view->rank(r).read(name), ref.rank(r).read(name));
        const bool ok = c.finite && c.rel <= bound;
        if (!ok) exit_code = 1;
        std::printf("  %-4d %-28s %14.3e %14.3e  %s (bound %.2g)\n", run, label.c_str(), c.rel, c.max_abs, ok ? "ok" : "FAIL", bound);
        outputs.push_back({{"run", run}, {"name", label}, {"rel_error", c.rel}, {"max_abs_error", c.max_abs}, {"bound", bound}, {"ok", ok}});
      }
    }
    // Replays: every rank's outputs, byte for byte, the same each time from the same state
    // (delayed scaling's histories move on with each run: restored before each). Inference
    // plans; a train plan's masters move on too. Collectives reduce in a fixed order.
    int replays = 0;
    bool identical = true;
    if (!profile.train) {
      std::vector<std::vector<uint8_t>> want(static_cast<size_t>(ranks)), state(static_cast<size_t>(ranks));
      on_every_rank(ranks, [&](int r) {
        Rank& me = rank[static_cast<size_t>(r)];
        state_bytes(profile, *me.session, state[static_cast<size_t>(r)], false, me.stream);
      });
      run_all(true);
      on_every_rank(ranks, [&](int r) { want[static_cast<size_t>(r)] = output_bytes(profile, *rank[static_cast<size_t>(r)].session, rank[static_cast<size_t>(r)].stream); });
      replays = 100;
      std::mutex mutex;
      on_every_rank(ranks, [&](int r) {
        Rank& me = rank[static_cast<size_t>(r)];
        for (int i = 0; i < replays; ++i) {
          state_bytes(profile, *me.session, state[static_cast<size_t>(r)], true, me.stream);
          me.session->poison(me.stream);
          me.session->run(me.stream);
          me.session->wait(me.stream, o.collective_timeout);
          if (output_bytes(profile, *me.session, me.stream) != want[static_cast<size_t>(r)]) {
            std::lock_guard lock(mutex);
            identical = false;
          }
        }
      });
      if (!identical) exit_code = 1;
      std::printf("  %d replays on every rank, outputs poisoned before each: %s\n", replays,
                  identical ? "bit-identical" : "DIFFER (FAIL)");
    }
    std::printf("  (step-by-step checks need every rank's arena at each collective: not done for tensor-parallel plans yet)\n");
    report["verify"] = {{"outputs", outputs}, {"replays", replays}, {"replays_identical", identical}, {"ok", exit_code == 0}};
    std::printf("verify: %s\n", exit_code == 0 ? "PASS" : "FAIL");
    on_every_rank(ranks, upload_inputs);
  }

  // Benchmark: all ranks start each run together (a barrier), each times its run with events;
  // a run takes as long as its slowest rank.
  auto time_all = [&](bool graph) {
    std::vector<std::vector<double>> us(static_cast<size_t>(ranks));
    std::barrier sync(ranks);
    on_every_rank(ranks, [&](int r) {
      Rank& me = rank[static_cast<size_t>(r)];
      cudaEvent_t start, stop;
      TEC_CLI_CUDA(cudaEventCreate(&start));
      TEC_CLI_CUDA(cudaEventCreate(&stop));
      try {
        for (int i = 0; i < o.warmup + o.iterations; ++i) {
          sync.arrive_and_wait();
          TEC_CLI_CUDA(cudaEventRecord(start, me.stream));
          graph ? me.session->run(me.stream) : me.session->run_eager(me.stream);
          TEC_CLI_CUDA(cudaEventRecord(stop, me.stream));
          me.session->wait(me.stream, o.collective_timeout);
          float ms = 0;
          TEC_CLI_CUDA(cudaEventElapsedTime(&ms, start, stop));
          if (i >= o.warmup) us[static_cast<size_t>(r)].push_back(ms * 1000.0);
        }
      } catch (...) {
        sync.arrive_and_drop();  // the other ranks stop waiting for this one at the barrier
        throw;
      }
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
    });
    std::vector<double> slowest(static_cast<size_t>(o.iterations), 0.0);
    for (const auto& per_rank : us)
      for (size_t i = 0; i < per_rank.size(); ++i) slowest[i] = std::max(slowest[i], per_rank[i]);
    return stats_of(slowest);
  };
  const Stats eager = time_all(false);
  Stats graph;
  if (!o.no_graph) graph = time_all(true);
  std::printf("\nlatency over %d runs after %d warm-up, the slowest rank of each run (us):\n", o.iterations, o.warmup);
  std::printf("  %-8s %10s %10s %10s %10s %10s\n", "", "p50", "p90", "p99", "mean", "min");
  if (!o.no_graph)
    std::printf("  %-8s %10.1f %10.1f %10.1f %10.1f %10.1f\n", "graph", graph.p50, graph.p90, graph.p99, graph.mean, graph.min);
  std::printf("  %-8s %10.1f %10.1f %10.1f %10.1f %10.1f\n", "eager", eager.p50, eager.p90, eager.p99, eager.mean, eager.min);
  std::printf("memory: arena %.2f MiB and constants %.2f MiB per rank\n", static_cast<double>(first.arena_bytes()) / 1048576.0,
              static_cast<double>(first.constant_bytes()) / 1048576.0);
  report["iterations"] = o.iterations;
  report["warmup"] = o.warmup;
  report["eager"] = stats_json(eager);
  if (!o.no_graph) report["graph"] = stats_json(graph);

  if (o.profile || !o.trace_path.empty()) {
    // Per step, eager, every rank starting each run together; a step takes as long as it does
    // on its slowest rank in that run.
    std::vector<std::vector<StepTimes>> per_rank(static_cast<size_t>(ranks));
    std::barrier sync(ranks);
    on_every_rank(ranks, [&](int r) {
      Rank& me = rank[static_cast<size_t>(r)];
      try {
        for (int i = 0; i < std::max(1, o.iterations); ++i) {
          sync.arrive_and_wait();
          per_rank[static_cast<size_t>(r)].push_back(
              time_steps_eager(*me.session, me.stream, [&] { me.session->wait(me.stream, o.collective_timeout); }));
        }
      } catch (...) {
        sync.arrive_and_drop();
        throw;
      }
    });
    std::vector<StepTimes> slowest = per_rank[0];
    for (size_t i = 0; i < slowest.size(); ++i)
      for (const auto& other : per_rank) {
        TEC_INTERNAL_CHECK(other[i].keys == slowest[i].keys, (ErrorContext{"runtime", "", "", plan->name})) << "the ranks ran different steps";
        for (size_t k = 0; k < slowest[i].us.size(); ++k) slowest[i].us[k] = std::max(slowest[i].us[k], other[i].us[k]);
      }
    report_step_times(profile, slowest, o.profile, "per step (eager, median us of the slowest rank)", o.trace_path, report);
  }

  if (!o.save_dir.empty()) {
    on_every_rank(ranks, [&](int r) { rank[static_cast<size_t>(r)].session->poison(rank[static_cast<size_t>(r)].stream); });
    run_all(!o.no_graph);
    const auto view = gpu_view();
    std::vector<NamedTensor> outputs;
    for (const auto& [name, r] : compared_names())
      outputs.emplace_back(r < 0 ? name : name + ".rank" + std::to_string(r), r < 0 ? view->read(name) : view->rank(r).read(name));
    std::printf("whole tensors; a rank's own as NAME.rank<r>.npy\n");
    save_outputs(o.save_dir, outputs);
  }
  if (!o.json_path.empty()) {
    const std::string text = report.dump(2) + "\n";
    tec::write_text_file(o.json_path, text);
    std::printf("wrote %s\n", o.json_path.c_str());
  }
  return exit_code;
}

}  // namespace tec::cli
