// Sizing rules shared by the CPU and CUDA multi-hop samplers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace quiver {

// Nodes a batch can reach at most: seeds times the fanout products, capped by the graph
// (every node once, plus duplicate seeds). "All neighbors" hops fall back to the cap.
template <typename Fanouts>
int64_t node_bound(int64_t batch_size, const Fanouts& fanouts, int64_t num_nodes) {
  const int64_t cap = num_nodes + batch_size;
  int64_t total = batch_size, frontier = batch_size;
  for (const int64_t fanout : fanouts) {
    if (fanout < 0 || frontier > cap / std::max<int64_t>(fanout, 1)) return cap;
    frontier *= fanout;
    total += frontier;
    if (total >= cap) return cap;
  }
  return total;
}

// Slots of a reindexing table for `nodes` ids: a power of two, at most half full.
inline int64_t node_table_capacity(int64_t nodes) {
  int64_t capacity = 1024;
  while (capacity < 2 * nodes) capacity <<= 1;
  return capacity;
}

}  // namespace quiver
