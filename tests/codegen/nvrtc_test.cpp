// Kernel compilation on a machine with no GPU: every variant of every kernel template
// compiles with NVRTC to an sm_90 cubin, the disk cache hits on the second compile (and
// heals a damaged entry), and a compile error shows the source's file and line.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "codegen/kernel_sources.h"
#include "codegen/lower.h"
#include "codegen/quantize_kernels.h"
#include "compiler.h"
#include "mid_m_layout.h"
#include "test_util.h"

namespace tec::codegen {

namespace {
std::string fresh_cache(const char* name) {
  const auto dir = std::filesystem::temp_directory_path() / ("tec_nvrtc_test_" + std::string(name) + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

std::vector<KernelRequest> every_quantize_variant() {
  std::vector<KernelRequest> out;
  for (auto q : {Quantizer::fp8_current(DType::fp8_e4m3), Quantizer::fp8_current(DType::fp8_e5m2, true, 1e-6f),
                 Quantizer::fp8_delayed(DType::fp8_e4m3), Quantizer::fp8_delayed(DType::fp8_e5m2)})
    for (Usage u : {Usage{true, false}, Usage{true, true}, Usage{false, true}})
      out.push_back(per_tensor_quantize_kernel(TensorProto::dense({256, 512}, DType::bf16).with_quantizer(q).update_usage(u), "sm_90"));
  for (int len : {1, 16, 1024, kMaxGpuAmaxHistory}) out.push_back(delayed_update_kernel(len, "sm_90"));
  return out;
}
}  // namespace

TEST_CASE("every quantize kernel variant compiles to an sm_90 cubin; the second compile hits the cache") {
  const auto requests = every_quantize_variant();
  const KernelCompiler compiler(fresh_cache("variants"));
  const auto first = compiler.compile(requests);
  REQUIRE(first.size() == requests.size());
  for (const auto& k : first) {
    CHECK_FALSE(k.cache_hit);
    REQUIRE(k.cubin.size() > 4);
    CHECK(std::string(k.cubin.begin(), k.cubin.begin() + 4) == "\x7f" "ELF");
  }
  const auto second = compiler.compile(requests);
  for (size_t i = 0; i < second.size(); ++i) {
    CHECK(second[i].cache_hit);
    CHECK(second[i].cubin == first[i].cubin);
  }
  MESSAGE("NVRTC " << nvrtc_version() << ": " << requests.size() << " variants, first compile " << first[0].milliseconds
                   << " ms for one");
}

TEST_CASE("every kernel of every example plan under every recipe compiles to an sm_90 cubin without spilling registers; a rebuild is "
          "all cache hits") {
  const std::string cache = fresh_cache("plans");
  int modules = 0;
  double compile_ms = 0;
  for (const char* model : {"mlp_tiny.json", "swiglu_mlp.json", "mlp.json", "moe.json", "llama_layer_small.json"})
    for (RecipeKind recipe : {RecipeKind::bf16, RecipeKind::fp8_current, RecipeKind::fp8_delayed, RecipeKind::fp8_block,
                              RecipeKind::mxfp8, RecipeKind::nvfp4}) {
      CAPTURE(model);
      CAPTURE(to_string(recipe));
      CompileOptions options;
      options.model_path = test::source_dir() + "/examples/" + model;
      options.frontend.recipe = recipe;
      options.cache_dir = cache;
      options.dump_after = "codegen";  // stop before the constants: mlp.json's weights are 134 MB
      const CompileResult cold = compile(options);
      for (const auto& p : cold.profiles) CHECK_MESSAGE(p.gpu.supported, p.gpu.reason);
      REQUIRE(!cold.code.modules.empty());
      // A spill in tec's kernels has meant a slow inner loop (grouped_gemm.cu's producer).
      for (const SpillingKernel& k : cold.codegen.spilling) FAIL_CHECK(k.source << " spills: " << k.ptxas);
      for (const auto& per_arch : cold.code.cubins) {
        REQUIRE(per_arch.size() == 1);
        CHECK(std::string(per_arch[0].begin(), per_arch[0].begin() + 4) == "\x7f" "ELF");
      }
      const CompileResult warm = compile(options);
      CHECK(warm.codegen.cache_hits == warm.codegen.modules);
      CHECK(warm.code.cubins == cold.code.cubins);
      CHECK(warm.codegen.spilling.size() == cold.codegen.spilling.size());
      modules += cold.codegen.modules;
      compile_ms += cold.codegen.compile_milliseconds;
    }
  MESSAGE(modules << " modules across the example plans; " << compile_ms << " ms of NVRTC before the cache");
}

TEST_CASE("a kernel that spills registers is reported, on a compile and on a cache hit; one that does not, is not") {
  const KernelRequest spilling{"spill_check.cu", {}, "sm_90"};
  const KernelCompiler compiler(fresh_cache("spills"));
  const CompiledKernel cold = compiler.compile({spilling}).at(0);
  CHECK_FALSE(cold.cache_hit);
  CHECK(cold.spills.find("spilled to local memory in function 'tec_spill_check'") != std::string::npos);
  const CompiledKernel warm = compiler.compile({spilling}).at(0);
  CHECK(warm.cache_hit);
  CHECK(warm.spills == cold.spills);
  // The grouped GEMM at its leanest producer budget (setmaxnreg's least, 24), fc1 of moe.json.
  KernelRequest lean{"grouped_gemm.cu",
                     {"TEC_PRODUCER_REGISTERS=24", "TEC_N=28672LL", "TEC_TILE_N=256", "TEC_K=4096LL", "TEC_E=8", "TEC_ROWS=16384LL",
                      "TEC_BF16=0", "TEC_BIAS=0", "TEC_OUT=0", "TEC_AMAX=1", "TEC_GATED=1", "TEC_ACT=4"},
                     "sm_90"};
  lean.arch_specific = true;
  CHECK(compiler.compile({lean}).at(0).spills.empty());
}

namespace {
// mlp.json lowered (and its kernels compiled) for the given token counts, recipe and archs.
CompileResult lowered_mlp(std::vector<int64_t> tokens, RecipeKind recipe, std::vector<std::string> archs, bool mid_m_gemm = true) {
  CompileOptions options;
  options.mid_m_gemm = mid_m_gemm;
  options.model_path = test::source_dir() + "/examples/mlp.json";
  options.frontend.recipe = recipe;
  options.frontend.dim_overrides["T"] = std::move(tokens);
  options.archs = std::move(archs);
  options.cache_dir = fresh_cache("mid_m");
  options.dump_after = "codegen";  // stop before the constants: mlp.json's weights are 134 MB
  return compile(options);
}
const Launch* find_entry(const CompiledProfile& p, const std::string& entry) {
  for (const Launch& l : p.gpu.launches)
    if (l.entry == entry) return &l;
  return nullptr;
}
std::string layout_of(const CompiledProfile& p, const std::string& buffer) {
  for (const auto& b : p.memory.buffers)
    if (b.name == buffer) return b.device_layout;
  return "(no buffer " + buffer + ")";
}
}  // namespace

TEST_CASE("with --mid-m-gemm, fc1 of mlp.json at 64-128 tokens with current scaling runs tec's mid-M kernel when every arch is sm_90") {
  for (int64_t t : {64, 100, 128}) {
    CAPTURE(t);
    const CompileResult r = lowered_mlp({t}, RecipeKind::fp8_current, {"sm_90"});
    const CompiledProfile& p = r.profiles.at(0);
    REQUIRE(p.gpu.supported);
    const Launch* mid = find_entry(p, "tec_gemm_mid_m");
    REQUIRE(mid != nullptr);
    CHECK(mid->grid[0] == 16384 / TEC_MID_M_BLOCK_ROWS);
    CHECK(mid->block[0] == (t > 64 ? 384 : 256));  // a producer warpgroup and one per 64 tokens
    CHECK(mid->shared_bytes == tec_mid_m_shared_bytes(t));
    CHECK(mid->shared_bytes > 48 * 1024);
    CHECK(r.code.modules.at(static_cast<size_t>(mid->module)).arch_specific);  // sm_90a: wgmma
    CHECK(layout_of(p, "fc1.weight.data") == "mid_m_tiles");
    CHECK(layout_of(p, "fc2.weight.data").empty());  // N = 4096: cuBLASLt
    const auto& cubin = r.code.cubins.at(static_cast<size_t>(mid->module)).at(0);
    CHECK(std::string(cubin.begin(), cubin.begin() + 4) == "\x7f" "ELF");
  }
}

TEST_CASE("a kernel may launch before the previous one ends only if its source waits for that one in-kernel") {
  // Launched early, a kernel that read its input without the wait would race the kernel that
  // writes it; the runtime trusts the plan's early_launch, so every such source must wait.
  auto source_of = [](const CompileResult& r, const Launch& l) {
    const std::string& name = r.code.modules.at(static_cast<size_t>(l.module)).source;
    for (const KernelSource& s : kernel_sources())
      if (s.name == name) return s.text;
    return std::string();
  };
  int early = 0;
  for (auto [t, recipe] : {std::pair{int64_t{16}, RecipeKind::fp8_current}, std::pair{int64_t{16}, RecipeKind::fp8_delayed},
                           std::pair{int64_t{128}, RecipeKind::fp8_current}, std::pair{int64_t{2048}, RecipeKind::mxfp8}}) {
    CAPTURE(t);
    const CompileResult r = lowered_mlp({t}, recipe, {"sm_90"});
    for (const Launch& l : r.profiles.at(0).gpu.launches) {
      CAPTURE(l.entry);
      if (l.kind != Launch::Kind::kernel) {
        CHECK_FALSE(l.early_launch);
        continue;
      }
      CHECK(l.early_launch == (l.entry != "tec_gemm_mid_m"));  // measured slower with it (lower.cpp)
      if (!l.early_launch) continue;
      ++early;
      const std::string text = source_of(r, l);
      REQUIRE_FALSE(text.empty());
      CHECK(text.find("tec_wait_for_previous_kernel();") != std::string::npos);
    }
  }
  CHECK(early > 0);
}

TEST_CASE("the mid-M kernel is not used unless asked for, for other archs, other recipes, or a weight another profile reads differently") {
  SUBCASE("not asked for: cuBLASLt (the kernel is experimental)") {
    const CompileResult r = lowered_mlp({128}, RecipeKind::fp8_current, {"sm_90"}, false);
    CHECK(find_entry(r.profiles.at(0), "tec_gemm_mid_m") == nullptr);
    CHECK(layout_of(r.profiles.at(0), "fc1.weight.data").empty());
  }
  SUBCASE("an sm_89 target next to sm_90: no wgmma there, and layouts are shared") {
    const CompileResult r = lowered_mlp({128}, RecipeKind::fp8_current, {"sm_90", "sm_89"});
    CHECK(find_entry(r.profiles.at(0), "tec_gemm_mid_m") == nullptr);
  }
  SUBCASE("delayed scaling: cuBLASLt writes FP8 with the D scale, which measured faster") {
    const CompileResult r = lowered_mlp({128}, RecipeKind::fp8_delayed, {"sm_90"});
    CHECK(find_entry(r.profiles.at(0), "tec_gemm_mid_m") == nullptr);
  }
  SUBCASE("T=16 next to T=128: the small-M kernel also reads fc1's weight, so it stays row-major and T=128 takes cuBLASLt") {
    const CompileResult r = lowered_mlp({16, 128}, RecipeKind::fp8_current, {"sm_90"});
    REQUIRE(r.profiles.size() == 2);
    CHECK(find_entry(r.profiles[0], "tec_gemm_small_m") != nullptr);
    CHECK(find_entry(r.profiles[1], "tec_gemm_mid_m") == nullptr);
    CHECK(layout_of(r.profiles[1], "fc1.weight.data").empty());
    bool said_why = false;
    for (const auto& step : r.profiles[1].schedule.steps)
      for (const auto& note : step.fusions) said_why |= note.find("not the mid-M kernel") != std::string::npos;
    CHECK(said_why);
  }
}

TEST_CASE("a damaged cache entry is compiled again and replaced") {
  const std::string cache = fresh_cache("damaged");
  const KernelCompiler compiler(cache);
  const auto request = every_quantize_variant().front();
  const auto good = compiler.compile({request}).at(0);
  for (const auto& entry : std::filesystem::directory_iterator(cache))
    if (entry.path().extension() == ".cubin") std::ofstream(entry.path(), std::ios::trunc) << "garbage";
  const auto again = compiler.compile({request}).at(0);
  CHECK_FALSE(again.cache_hit);
  CHECK(again.cubin == good.cubin);
  CHECK(compiler.compile({request}).at(0).cache_hit);
}

TEST_CASE("a compile error names the kernel, its source file and line, and keeps the generated source") {
  KernelRequest bad = every_quantize_variant().front();
  bad.defines.at(1) = "TEC_ROWWISE=(";  // breaks the kernel's first `#if TEC_ROWWISE`
  const Error e = test::error_of([&] { (void)KernelCompiler(fresh_cache("error")).compile({bad}); });
  CHECK(e.kind() == ErrorKind::compile);
  CHECK(e.message().find("could not compile quantize_per_tensor.cu for sm_90") != std::string::npos);
  CHECK(e.message().find("quantize_per_tensor.cu(") != std::string::npos);  // NVRTC's file(line): error
  CHECK(e.message().find("generated source kept at") != std::string::npos);
}

TEST_CASE("quantizers without a kernel yet say so") {
  CHECK(test::error_of([] { (void)delayed_update_kernel(kMaxGpuAmaxHistory + 1, "sm_90"); }).kind() == ErrorKind::unsupported);
  const auto mx = TensorProto::dense({64, 64}, DType::bf16).with_quantizer(Quantizer::mxfp8(DType::fp8_e4m3));
  CHECK(test::error_of([&] { (void)per_tensor_quantize_kernel(mx, "sm_90"); }).kind() == ErrorKind::unsupported);
}

}  // namespace tec::codegen
