// The grouped GEMM's work items (kernels/grouped_schedule.h, the code the kernel runs), walked
// on the host as the kernel's blocks walk them: block b takes items b, b + blocks, ... until one
// is past the last. On the GPU a wrong item is a tile computed twice or never, or a split tile
// whose partial sums never meet; here each routing's walk is checked against the tiles it needs.
#include <doctest/doctest.h>

#include <algorithm>
#include <climits>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "grouped_schedule.h"

namespace tec {

namespace {

// moe.json-like launches: fc1 (K = 4096 bytes of FP8: 32 steps, 112 column tiles of a gated
// 28672), fc2 (K = 14336: 112 steps, 16 column tiles); and a narrow one of few tiles.
TecGroupedShape shape_of(int experts, long long rows, int column_tiles, int steps, int split_slots, long long blocks) {
  return {experts, rows, 128, column_tiles, 128, 8, steps, split_slots, blocks};
}

// m_splits of `rows` over `experts`: uniform, skewed (one expert half the rows), all on one,
// odd experts empty, and random.
std::vector<std::vector<int>> routings(int experts, int rows, std::mt19937& rng) {
  std::vector<std::vector<int>> out;
  auto fill = [&](const std::vector<double>& weights) {
    double total = 0;
    for (double w : weights) total += w;
    std::vector<int> m(experts, 0);
    int given = 0;
    for (int e = 0; e < experts; ++e) given += m[e] = static_cast<int>(rows * weights[e] / total);
    for (int e = 0; given < rows; e = (e + 1) % experts)
      if (weights[e] > 0) ++m[e], ++given;
    out.push_back(m);
  };
  fill(std::vector<double>(experts, 1.0));
  std::vector<double> skewed(experts, 1.0);
  skewed[1] = experts - 1.0;
  fill(skewed);
  std::vector<double> one(experts, 0.0);
  one[experts - 1] = 1.0;
  fill(one);
  std::vector<double> even(experts, 0.0);
  for (int e = 0; e < experts; e += 2) even[e] = 1.0;
  fill(even);
  std::uniform_real_distribution<double> weight(0.0, 1.0);
  for (int i = 0; i < 12; ++i) {
    std::vector<double> w(experts);
    for (double& v : w) v = weight(rng) < 0.2 ? 0.0 : weight(rng);
    w[0] += 1e-3;  // not all empty
    fill(w);
  }
  return out;
}

std::string text(const std::vector<int>& m_splits) {
  std::string out = "[";
  for (int m : m_splits) out += (out.size() > 1 ? ", " : "") + std::to_string(m);
  return out + "]";
}

// What a failing check names: the launch and the routing.
std::string text(const TecGroupedShape& shape, const std::vector<int>& m_splits) {
  return "rows " + std::to_string(shape.rows) + ", " + std::to_string(shape.column_tiles) + " column tiles, " + std::to_string(shape.steps) +
         " steps, " + std::to_string(shape.split_slots) + " split slots, " + std::to_string(shape.blocks) + " blocks; m_splits " + text(m_splits);
}

struct Walk {
  TecSchedule schedule{};
  // Per tile (expert, first row, first column): its rows and the K ranges of its items, with
  // each item's part and the round it ran in.
  struct Item {
    int step0, steps, part, round;
    long long block;
  };
  std::map<std::tuple<int, long long, long long>, std::pair<int, std::vector<Item>>> tiles;
  long long items = 0;
};

Walk walk(const TecGroupedShape& shape, const std::vector<int>& m_splits, bool can_split) {
  Walk w;
  bool bad = true;
  REQUIRE(tec_schedule(shape, m_splits.data(), can_split, w.schedule, bad));
  CHECK_FALSE(bad);
  for (long long block = 0; block < shape.blocks; ++block) {
    TecTile tile{};
    for (long long item = block; tec_find_item(shape, m_splits.data(), w.schedule, item, tile); item += shape.blocks) {
      auto& [rows, items] = w.tiles[{tile.expert, tile.first_row, tile.n0}];
      CHECK((items.empty() || rows == tile.rows));
      rows = tile.rows;
      items.push_back({tile.step0, tile.steps, tile.part, static_cast<int>(item / shape.blocks), block});
      ++w.items;
    }
  }
  return w;
}

}  // namespace

TEST_CASE("every tile a routing needs is computed once, over all of K, and no other tile is") {
  std::mt19937 rng(23);
  for (const TecGroupedShape& base : {shape_of(8, 4096, 112, 32, 0, 132), shape_of(8, 4096, 16, 112, 132, 132),
                                      shape_of(8, 16384, 16, 112, 132, 132), shape_of(4, 128, 1, 64, 132, 132),
                                      shape_of(4, 256, 1, 128, 132, 7), shape_of(4, 300, 3, 2, 132, 1)}) {
    for (const std::vector<int>& m_splits : routings(base.experts, static_cast<int>(base.rows), rng)) {
      const std::string launch = text(base, m_splits);
      CAPTURE(launch);
      const Walk w = walk(base, m_splits, true);
      long long expected_tiles = 0, row = 0;
      for (int e = 0; e < base.experts; ++e) {
        for (long long r = 0; r < m_splits[e]; r += 128)
          for (int c = 0; c < base.column_tiles; ++c) {
            ++expected_tiles;
            const auto found = w.tiles.find({e, row + r, static_cast<long long>(c) * 128});
            REQUIRE(found != w.tiles.end());
            CHECK(found->second.first == std::min<long long>(128, m_splits[e] - r));
            // Its items' ranges of K, in part order, cover [0, steps) with no gap or overlap.
            std::vector<Walk::Item> items = found->second.second;
            std::sort(items.begin(), items.end(), [](const Walk::Item& a, const Walk::Item& b) { return a.step0 < b.step0; });
            int next = 0;
            for (const Walk::Item& item : items) {
              CHECK(item.step0 == next);
              CHECK(item.steps > 0);
              next = item.step0 + item.steps;
            }
            CHECK(next == base.steps);
          }
        row += m_splits[e];
      }
      CHECK(static_cast<long long>(w.tiles.size()) == expected_tiles);
      // The lowering's grid (ceil(rows / 128) + E row tiles per column tile, times TEC_MAX_PARTS
      // when split) holds every item of any routing.
      CHECK(w.items <= ((base.rows + 127) / 128 + base.experts) * base.column_tiles * TEC_MAX_PARTS);
    }
  }
}

TEST_CASE("a short last round is split along K, each split item its block's last, and the partial sums fit the workspace") {
  std::mt19937 rng(29);
  int splits_seen = 0;
  for (const TecGroupedShape& shape :
       {shape_of(8, 4096, 16, 112, 132, 132), shape_of(8, 2048, 16, 112, 132, 132), shape_of(4, 256, 1, 128, 132, 132),
        shape_of(4, 512, 2, 6, 132, 132), shape_of(8, 4096, 16, 112, 20, 132)}) {
    for (const std::vector<int>& m_splits : routings(shape.experts, static_cast<int>(shape.rows), rng)) {
      const std::string launch = text(shape, m_splits);
      CAPTURE(launch);
      const Walk w = walk(shape, m_splits, true);
      const TecSchedule& s = w.schedule;
      const long long tiles = s.whole + s.split, rest = tiles % shape.blocks;
      if (s.split == 0) {
        CHECK(s.parts == 1);
        // Unsplit: no tiles left over, or more than half a round of them, or too few steps to
        // leave an owner two, or more tiles left than the workspace has counters.
        CHECK((rest == 0 || rest * 2 > shape.blocks || shape.steps < 4 || rest > shape.split_slots));
        continue;
      }
      ++splits_seen;
      CHECK(s.split == rest);  // exactly the last round's tiles
      CHECK(s.whole % shape.blocks == 0);
      CHECK(s.parts >= 2);
      CHECK(s.parts <= TEC_MAX_PARTS);
      CHECK(s.split * s.parts <= shape.blocks);                 // one round
      CHECK(s.split * (s.parts - 1) <= shape.split_slots);      // a slot per partial sum
      CHECK(s.split <= shape.split_slots);                      // a counter per split tile
      for (const auto& [key, tile] : w.tiles) {
        const std::vector<Walk::Item>& items = tile.second;
        if (items.size() == 1) {
          CHECK(items[0].part == -1);
          continue;
        }
        CHECK(static_cast<int>(items.size()) == s.parts);
        for (const Walk::Item& item : items) {
          CHECK(item.round == s.whole / shape.blocks);  // the last round: no block has an item after it
          if (item.part == 0) CHECK(item.steps >= 2);   // the owner's staged epilogue holds its last two steps
        }
      }
    }
  }
  CHECK(splits_seen > 10);
  // Never without the workspace, nor where the launch has none.
  const std::vector<int> m_splits{600, 500, 500, 448};
  bool bad = false;
  TecSchedule s{};
  REQUIRE(tec_schedule(shape_of(4, 2048, 16, 112, 0, 132), m_splits.data(), true, s, bad));
  CHECK(s.split == 0);
  REQUIRE(tec_schedule(shape_of(4, 2048, 16, 112, 132, 132), m_splits.data(), false, s, bad));
  CHECK(s.split == 0);
  REQUIRE(tec_schedule(shape_of(4, 2048, 16, 112, 132, 132), m_splits.data(), true, s, bad));
  CHECK(s.split > 0);
}

TEST_CASE("m_splits that are negative or do not sum to the rows are refused before any tile is looked up") {
  const TecGroupedShape shape = shape_of(4, 256, 1, 2, 132, 132);
  for (const std::vector<int>& m_splits : std::vector<std::vector<int>>{{-5, 100, 100, 61},
                                                                         {100, 100, 50, 1},
                                                                         {0, 0, 256, 1},
                                                                         {100, 100, 100, 100},
                                                                         {INT_MAX, INT_MAX, INT_MAX, INT_MAX},
                                                                         {INT_MAX, 1, 0, 0},
                                                                         {INT_MIN, 256, 0, 0},
                                                                         {0, 0, 0, 0}}) {
    const std::string splits = text(m_splits);
      CAPTURE(splits);
    TecSchedule s{};
    bool bad = false;
    CHECK_FALSE(tec_schedule(shape, m_splits.data(), true, s, bad));
    CHECK(bad);
  }
  for (const std::vector<int>& m_splits : std::vector<std::vector<int>>{{64, 0, 150, 42}, {0, 0, 256, 0}, {256, 0, 0, 0}}) {
    const std::string splits = text(m_splits);
      CAPTURE(splits);
    const Walk w = walk(shape, m_splits, true);
    CHECK(w.items == w.schedule.whole + w.schedule.split * w.schedule.parts);
  }
}

}  // namespace tec
