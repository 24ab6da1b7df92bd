// A kernel that faults (illegal address) loses the device for the process: the run that hits
// it, every later run and every new session report it as fatal (code 8, naming the first
// error), and te-run exits 8.
//
//   sticky_test TE_COMPILE TE_RUN MODEL WORK_DIR
//
// It builds WORK_DIR/faulting.teplan: MODEL compiled for sm_90, with the module of its first
// kernel replaced by one whose kernels store to address 0x10. The plan is valid - it loads and
// runs on the CPU reference, which executes no cubins - and its GPU code faults: a plan carries
// code, so load only plans you trust. Without a GPU it checks that much and exits 77.
#include <cuda_runtime.h>
#include <nvrtc.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "plan/file.h"
#include "plan/plan.h"
#include "tec/runtime.h"

namespace {

int g_failures = 0;

void fail(const std::string& what) {
  std::fprintf(stderr, "sticky_test: FAIL: %s\n", what.c_str());
  ++g_failures;
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "sticky_test: %s\n", what.c_str());
  std::exit(2);
}

int run_command(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<uint8_t> faulting_cubin(const std::set<std::string>& entries, const std::string& arch) {
  // The same parameter as kernels/row.cu's TecArgs: the session passes one slot struct.
  std::string source = "struct Slots { unsigned long long slot[8]; };\n";
  for (const std::string& e : entries)
    source += "extern \"C\" __global__ void " + e + "(Slots) { *(volatile int*)0x10 = 1; }\n";
  nvrtcProgram program = nullptr;
  if (nvrtcCreateProgram(&program, source.c_str(), "faulting.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS) die("nvrtcCreateProgram");
  const std::string arch_option = "--gpu-architecture=" + arch;
  const char* options[] = {arch_option.c_str()};
  if (nvrtcCompileProgram(program, 1, options) != NVRTC_SUCCESS) {
    size_t size = 0;
    nvrtcGetProgramLogSize(program, &size);
    std::string log(size, '\0');
    nvrtcGetProgramLog(program, log.data());
    die("NVRTC: " + log);
  }
  size_t size = 0;
  nvrtcGetCUBINSize(program, &size);
  std::vector<uint8_t> cubin(size);
  nvrtcGetCUBIN(program, reinterpret_cast<char*>(cubin.data()));
  nvrtcDestroyProgram(&program);
  return cubin;
}

// The base plan with its first kernel's module replaced by faulting code.
void write_faulting_plan(const std::string& base, const std::string& out) {
  const std::vector<uint8_t> bytes = tec::plan::read_plan_file(base);
  const tec::plan::Plan typed = tec::plan::Plan::load(bytes, base);
  tec::plan::PlanFile file = tec::plan::parse_plan_file(bytes, base);
  int module = -1;
  for (const auto& l : typed.profiles.at(0).launches)
    if (l.kind == "kernel") {
      module = l.module;
      break;
    }
  if (module < 0) die(base + " has no kernel");
  std::set<std::string> entries;
  for (const auto& p : typed.profiles)
    for (const auto& l : p.launches)
      if (l.module == module) entries.insert(l.entry);
  std::vector<tec::plan::Blob> blobs;
  for (const auto& b : file.manifest["blobs"]) {
    const auto offset = b["offset"].get<size_t>(), size = b["size"].get<size_t>();
    const auto blob_bytes = file.blobs.subspan(offset, size);
    blobs.push_back({b["name"].get<std::string>(), std::vector<uint8_t>(blob_bytes.begin(), blob_bytes.end())});
  }
  for (const auto& [arch, blob_name] : file.manifest["modules"][static_cast<size_t>(module)]["cubins"].items())
    for (auto& b : blobs)
      if (b.name == blob_name.get<std::string>()) b.bytes = faulting_cubin(entries, arch);
  tec::write_file_atomically(out, tec::plan::serialize_plan(file.manifest, blobs));
  std::printf("wrote %s: module %d (%s, %zu kernels) stores to address 0x10\n", out.c_str(), module,
              typed.modules.at(static_cast<size_t>(module)).source.c_str(), entries.size());
}

void expect_lost(const tec::Status& s, const std::string& what) {
  if (s.code != 8 || s.message.find("cudaErrorIllegalAddress") == std::string::npos)
    fail(what + ": expected code 8 naming cudaErrorIllegalAddress, got " + std::to_string(s.code) + ": " + s.message);
  else
    std::printf("%s: %s\n", what.c_str(), s.message.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) die("usage: sticky_test TE_COMPILE TE_RUN MODEL WORK_DIR");
  const std::string te_compile = argv[1], te_run = argv[2], model = argv[3], work = argv[4];
  const std::string base = work + "/base.teplan", faulting = work + "/faulting.teplan";
  if (run_command("mkdir -p '" + work + "' && '" + te_compile + "' '" + model + "' -o '" + base +
                  "' --recipe fp8-delayed --shape T=32 -q --cache-dir none") != 0)
    die("te-compile failed");
  write_faulting_plan(base, faulting);

  // Valid as a plan: the CPU reference runs it.
  const auto loaded = tec::Plan::load_file(faulting);
  if (!loaded.ok()) die("the faulting plan does not load: " + loaded.status().message);
  const tec::Plan plan = loaded.value();
  {
    auto cpu = tec::Session::create(plan, {}, tec::Backend::cpu);
    if (!cpu.ok() || !cpu.value().run().ok()) fail("the faulting plan does not run on the CPU reference");
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("sticky_test: SKIPPED: no CUDA device (the faulting kernel needs a GPU)\n");
    return g_failures ? 1 : 77;
  }

  // The run is asynchronous: the fault surfaces at the next synchronisation.
  auto created = tec::Session::create(plan, {}, tec::Backend::gpu);
  if (!created.ok()) die("session: " + created.status().message);
  tec::Session session = created.value();
  if (!session.run().ok()) fail("the first run failed before executing");
  const cudaError_t synced = cudaDeviceSynchronize();
  if (synced != cudaErrorIllegalAddress) fail(std::string("the faulting kernel gave ") + cudaGetErrorName(synced));
  expect_lost(session.run(), "the next run");
  expect_lost(session.run(), "the run after it");
  expect_lost(session.state().status(), "state()");
  expect_lost(tec::Session::create(plan, {}, tec::Backend::gpu).status(), "a new session");
  // The CPU backend does not need the GPU and keeps working.
  {
    auto cpu = tec::Session::create(plan, {}, tec::Backend::cpu);
    if (!cpu.ok() || !cpu.value().run().ok()) fail("after the fault, the CPU backend does not run");
  }

  // te-run, in its own process, exits 8 and names the error.
  const std::string log = work + "/te-run.log";
  const int code = run_command("'" + te_run + "' '" + faulting + "' --iterations 10 > '" + log + "' 2>&1");
  const std::string text = read_text(log);
  if (code != 8 || text.find("cudaErrorIllegalAddress") == std::string::npos)
    fail("te-run exited " + std::to_string(code) + " (expected 8 naming cudaErrorIllegalAddress):\n" + text);
  else
    std::printf("te-run exits 8: %s", text.substr(text.find("te-run: error") == std::string::npos ? 0 : text.find("te-run: error")).c_str());

  if (g_failures) return 1;
  std::printf("sticky_test: a faulting kernel is fatal for every session, and te-run exits 8\n");
  return 0;
}
