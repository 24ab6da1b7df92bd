// The grouped GEMM's work items (kernels/grouped_gemm.cu): which tile, or which range of a
// tile's steps of K, item i of a run is under that run's m_splits, read on the device. Shared
// with tests/codegen/grouped_schedule_test.cpp, which walks it on the host over every kind of
// routing, since on the GPU a wrong item is a tile computed twice or never.
#pragma once

#ifdef __CUDACC__
#define TEC_SCHEDULE_FUNCTION __host__ __device__ __forceinline__
#else
#define TEC_SCHEDULE_FUNCTION inline
#endif

// A split tile is cut into at most this many ranges of K.
#define TEC_MAX_PARTS 4

// A launch's shape: its defines (constants, so the kernel's code folds them) and its grid.
struct TecGroupedShape {
  int experts;       // m_splits' length
  long long rows;    // what m_splits must sum to: X's and D's rows
  int tile_rows;     // rows per tile
  int column_tiles;  // tiles across D's columns
  int tile_columns;  // D's columns per tile
  int group;         // column tiles walked together over an expert's row tiles (W stays in L2)
  int steps;         // steps of K per tile
  int split_slots;   // partial sums the workspace holds; 0: never split
  long long blocks;  // the grid: item i's block is i % blocks, which takes i, i + blocks, ...
};

// A block's work item: a tile, or (the last round split) a range of a tile's steps of K.
struct TecTile {
  int expert;
  long long first_row;  // of the tile, in X and D
  int rows;             // valid rows in the tile, 1..tile_rows
  long long n0;         // first column of D
  int step0, steps;     // the item's steps of K
  int part;             // -1: the whole tile; 0: the split tile's owner, which adds the others' sums; > 0: a partial sum
  int split;            // which split tile
};

// The run's items. When the tiles left after the last full round of `blocks` are at most half
// the blocks, each of them is cut into `parts` ranges of K, one item each, so that the round's
// blocks all work. Items below `whole` are whole tiles; then `split` tiles of `parts` items
// each, all in the last round (so a split item is its block's last, and an owner waits only on
// blocks that wait for nothing).
struct TecSchedule {
  long long whole, split;
  int parts;
};

// False, and `bad`, when m_splits has a negative entry or does not sum to the rows; the other
// functions here assume splits that passed.
TEC_SCHEDULE_FUNCTION bool tec_schedule(const TecGroupedShape& shape, const int* m_splits, bool can_split, TecSchedule& schedule,
                                        bool& bad) {
  long long row = 0, tiles = 0;
  bad = false;
  for (int e = 0; e < shape.experts; ++e) {
    const long long m = m_splits[e];
    if (m < 0 || m > shape.rows - row) {
      bad = true;
      return false;
    }
    tiles += (m + shape.tile_rows - 1) / shape.tile_rows * shape.column_tiles;
    row += m;
  }
  bad = row != shape.rows;
  if (bad) return false;
  const long long rest = tiles % shape.blocks;
  long long parts = shape.split_slots > 0 && rest > 0 && can_split ? shape.blocks / rest : 1;
  parts = parts < TEC_MAX_PARTS ? parts : TEC_MAX_PARTS;
  parts = parts < shape.steps / 2 ? parts : shape.steps / 2;  // an owner's range keeps the staged epilogue's two steps
  // The partial sums fit the workspace's slots (and then its counters, one per split tile).
  if (rest > 0 && parts > shape.split_slots / rest + 1) parts = shape.split_slots / rest + 1;
  schedule.parts = parts >= 2 ? (int)parts : 1;
  schedule.split = parts >= 2 ? rest : 0;
  schedule.whole = tiles - schedule.split;
  return true;
}

// Which tile `index` is; false when the routing needs fewer tiles. An expert's tiles go in
// groups of `group` column tiles, each group over all the expert's row tiles.
TEC_SCHEDULE_FUNCTION bool tec_find_tile(const TecGroupedShape& shape, const int* m_splits, long long index, TecTile& tile) {
  long long row = 0, left = index;
  for (int e = 0; e < shape.experts; ++e) {
    const long long m = m_splits[e];
    const long long row_tiles = (m + shape.tile_rows - 1) / shape.tile_rows, tiles = row_tiles * shape.column_tiles;
    if (left < tiles) {
      const long long group = left / (row_tiles * shape.group), within = left % (row_tiles * shape.group);
      const long long row_tile = within % row_tiles, column_tile = group * shape.group + within / row_tiles;
      tile.expert = e;
      tile.first_row = row + row_tile * shape.tile_rows;
      tile.rows = (int)(m - row_tile * shape.tile_rows < shape.tile_rows ? m - row_tile * shape.tile_rows : shape.tile_rows);
      tile.n0 = column_tile * shape.tile_columns;
      return true;
    }
    left -= tiles;
    row += m;
  }
  return false;
}

// Item `item` of the schedule; false past the last.
TEC_SCHEDULE_FUNCTION bool tec_find_item(const TecGroupedShape& shape, const int* m_splits, const TecSchedule& schedule, long long item,
                                         TecTile& tile) {
  long long index = item;
  tile.step0 = 0;
  tile.steps = shape.steps;
  tile.part = -1;
  tile.split = 0;
  if (item >= schedule.whole) {
    const long long within = item - schedule.whole;
    if (within >= schedule.split * schedule.parts) return false;
    tile.split = (int)(within / schedule.parts);
    tile.part = (int)(within % schedule.parts);
    index = schedule.whole + tile.split;
    tile.step0 = tile.part * shape.steps / schedule.parts;
    tile.steps = (tile.part + 1) * shape.steps / schedule.parts - tile.step0;
  }
  return tec_find_tile(shape, m_splits, index, tile);
}
