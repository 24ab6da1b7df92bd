// The memory planner: over 500 random graphs no two buffers live at the same time overlap,
// every offset is aligned, and the peak is at most the naive sum; and mlp.json's arena.
#include <doctest/doctest.h>

#include <random>

#include "passes/memory_plan.h"
#include "test_util.h"

namespace tec {

namespace {

MemoryPlan plan_of(const Graph& g, bool fuse) { return memory_plan(g, schedule(g, fusion(g, {.enabled = fuse}))); }

bool overlap(int64_t a, int64_t a_bytes, int64_t b, int64_t b_bytes) { return a < b + b_bytes && b < a + a_bytes; }

void check_invariants(const MemoryPlan& plan) {
  CHECK(plan.scratch_peak_bytes <= plan.scratch_naive_bytes);
  CHECK(plan.arena_bytes <= plan.naive_bytes);
  for (size_t i = 0; i < plan.buffers.size(); ++i) {
    const PlannedBuffer& a = plan.buffers[i];
    CAPTURE(a.name);
    CHECK(a.offset % kArenaAlignment == 0);
    CHECK(a.offset + a.bytes <= (a.region == Region::constants ? plan.constant_bytes : plan.arena_bytes));
    for (size_t j = i + 1; j < plan.buffers.size(); ++j) {
      const PlannedBuffer& b = plan.buffers[j];
      if ((a.region == Region::constants) != (b.region == Region::constants)) continue;
      const bool live_together = a.first_step <= b.last_step && b.first_step <= a.last_step;
      if (live_together && overlap(a.offset, a.bytes, b.offset, b.bytes))
        FAIL_CHECK("buffers " << a.name << " [" << a.offset << ", +" << a.bytes << ") and " << b.name << " [" << b.offset
                              << ", +" << b.bytes << ") are live together and overlap");
    }
  }
}

}  // namespace

TEST_CASE("memory plan property: 500 random graphs, no live overlap, aligned, peak <= naive") {
  std::mt19937 rng(2026);
  const RecipeKind recipes[] = {RecipeKind::bf16, RecipeKind::fp8_current, RecipeKind::fp8_delayed, RecipeKind::mxfp8,
                                RecipeKind::fp8_block, RecipeKind::nvfp4};
  int shared = 0;
  for (int i = 0; i < 500; ++i) {
    const std::string text = test::random_graph(rng);
    CAPTURE(text);
    const RecipeKind recipe = recipes[rng() % 6];
    const Graph g = test::compile_text(text, test::with_recipe(recipe)).at(0);
    const MemoryPlan plan = plan_of(g, rng() % 2 == 0);
    check_invariants(plan);
    shared += plan.scratch_peak_bytes < plan.scratch_naive_bytes;
  }
  CHECK(shared > 100);  // the property is not vacuous: many plans do share storage
}

TEST_CASE("pack_intervals on random intervals: no live overlap, aligned offsets") {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<Interval> intervals;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      const int first = static_cast<int>(rng() % 20);
      intervals.push_back({1 + static_cast<int64_t>(rng() % 100000), kArenaAlignment, first, first + static_cast<int>(rng() % 6)});
    }
    std::vector<int64_t> offsets;
    const int64_t total = pack_intervals(intervals, offsets);
    int64_t naive = 0;
    for (const auto& in : intervals) naive += round_up(in.bytes, kArenaAlignment);
    CHECK(total <= naive);
    for (int i = 0; i < n; ++i) {
      CHECK(offsets[static_cast<size_t>(i)] % kArenaAlignment == 0);
      CHECK(offsets[static_cast<size_t>(i)] + intervals[static_cast<size_t>(i)].bytes <= total);
      for (int j = i + 1; j < n; ++j) {
        const auto& a = intervals[static_cast<size_t>(i)];
        const auto& b = intervals[static_cast<size_t>(j)];
        if (a.first <= b.last && b.first <= a.last)
          CHECK_FALSE(overlap(offsets[static_cast<size_t>(i)], a.bytes, offsets[static_cast<size_t>(j)], b.bytes));
      }
    }
  }
}

TEST_CASE("mlp.json at T=2048 (fp8-current): the arena, stated") {
  FrontendOptions opts;
  opts.dim_overrides["T"] = {2048};
  const Graph g = test::compile_file(test::source_dir() + "/examples/mlp.json", opts).at(0);
  // Fused (3 steps): ln (8 MiB FP8) and act (32 MiB FP8) are both live in fc1's step, so
  // nothing can share: scratch = 40 MiB + two 256-byte scale_inv slots. Inputs and outputs
  // (x, y: 16 MiB bf16 each) sit in their own regions.
  const MemoryPlan fused = plan_of(g, true);
  check_invariants(fused);
  CHECK(fused.scratch_peak_bytes == 41943552);
  CHECK(fused.arena_bytes == 75497984);
  CHECK(fused.constant_bytes == 134275584);  // FP8 weights 2 x 64 MiB, bf16 biases and norm params
  // Unfused (5 steps): ln shares with act, fc1's bf16 output with fc2's.
  const MemoryPlan unfused = plan_of(g, false);
  check_invariants(unfused);
  CHECK(unfused.scratch_peak_bytes == 100663552);
  CHECK(unfused.scratch_naive_bytes == 125829632);
  CHECK(unfused.scratch_peak_bytes < unfused.scratch_naive_bytes);
}

}  // namespace tec
