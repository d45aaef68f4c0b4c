// Device helpers of neighbor_sample's row rules (row_sampling.h: RowRules), shared by the
// uniform and the weighted row kernels: the time cut of a row, and the key a sampled edge
// adds to the batch (its neighbor, in its row's tree when trees are disjoint).
#pragma once

#include "ops/cuda/device_status.cuh"
#include "ops/cuda/row_sampling.h"

namespace quiver::cuda {

// Rows up to this degree count their admitted edges in one pass of independent loads
// instead of a binary search: over PCIe (UVA mode) a search is log2(degree) round trips.
constexpr int64_t kCountedTimes = 64;

// How many of a row's `degree` edges, sorted by time from `times`, are admitted for seed
// time `t`: time <= t, or < t when strict.
__device__ inline int64_t admitted_prefix(const int64_t* times, int64_t degree, int64_t t,
                                          bool strict) {
  if (degree <= kCountedTimes) {
    int64_t admitted = 0;
#pragma unroll 8
    for (int64_t j = 0; j < degree; ++j) admitted += strict ? times[j] < t : times[j] <= t;
    return admitted;
  }
  int64_t lo = 0, hi = degree;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    const int64_t v = times[mid];
    if (strict ? v < t : v <= t) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// What one row needs to key its sampled edges.
struct RowTree {
  int64_t node;       // the row's node id
  int64_t base;       // tree * tree_nodes (0 without trees)
  int64_t seed_time;  // its tree's seed time (with edge_time)
};

__device__ inline RowTree row_tree(const RowRules& rules, int64_t key) {
  RowTree tree{key, 0, 0};
  if (rules.tree_nodes > 0) {
    const int64_t index = key / rules.tree_nodes;
    tree.base = index * rules.tree_nodes;
    tree.node = key - tree.base;
    if (rules.seed_time != nullptr) tree.seed_time = rules.seed_time[index];
  }
  return tree;
}

// The key of a sampled edge at CSR position `pos` to `neighbor`: checks the time rule (a
// violation means the row is not sorted) and, with trees, the neighbor's range (the
// reindexing table checks only keys, which would hide it).
__device__ inline int64_t rule_neighbor_key(const RowRules& rules, const RowTree& tree,
                                            int64_t neighbor, int64_t pos, int64_t num_nodes) {
  if (rules.edge_time != nullptr) {
    const int64_t t = rules.edge_time[pos];
    if (rules.strict_time ? t >= tree.seed_time : t > tree.seed_time) {
      record_status(rules.status, kEdgeTimeUnsorted, tree.node, pos, tree.seed_time);
    }
  }
  if (rules.tree_nodes > 0) {
    if (neighbor < 0 || neighbor >= num_nodes) {
      record_status(rules.status, kNeighborOutOfRange, pos, neighbor, 0);
      neighbor = 0;
    }
    neighbor += tree.base;
  }
  return neighbor;
}

}  // namespace quiver::cuda
