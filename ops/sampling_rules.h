// The rules both sampling backends follow, in one torch-free header that host code and
// CUDA kernels include alike: how many neighbors a node yields, how many nodes a batch can
// reach, how the reindexing table is laid out and sized, and how node ids are hashed into
// it. A change here changes the CPU and the GPU together.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define QUIVER_HOST_DEVICE __host__ __device__
#else
#define QUIVER_HOST_DEVICE
#endif

namespace quiver {

// How many neighbors a node of `degree` yields for `fanout` (-1: all of them).
QUIVER_HOST_DEVICE inline int64_t sampled_count(int64_t degree, int64_t fanout, bool replace) {
  if (fanout < 0) return degree;
  if (degree == 0) return 0;
  return replace ? fanout : (fanout < degree ? fanout : degree);
}

// Edges one hop (or one sample_neighbors call) may sample: edge positions are 32-bit in the
// reindexing table, and past this a batch's outputs alone would pass 100 GB.
constexpr int64_t kMaxHopEdges = (int64_t{1} << 32) - 2;
// Nodes one batch may hold: local indices are int32.
constexpr int64_t kMaxBatchNodes = (int64_t{1} << 31) - 1;

// What saturating arithmetic returns instead of wrapping (INT64_MAX).
constexpr int64_t kSaturated = ~(int64_t{1} << 63);

// a * b for a, b >= 0, saturating at kSaturated instead of wrapping.
QUIVER_HOST_DEVICE inline int64_t saturating_mul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > kSaturated / b ? kSaturated : a * b;
}

// a + b for a, b >= 0, saturating at kSaturated.
QUIVER_HOST_DEVICE inline int64_t saturating_add(int64_t a, int64_t b) {
  return a > kSaturated - b ? kSaturated : a + b;
}

// Most neighbors one node of a graph with num_edges edges can yield for `fanout`.
QUIVER_HOST_DEVICE inline int64_t per_node_bound(int64_t fanout, bool replace, int64_t num_edges) {
  if (fanout < 0) return num_edges;
  if (replace) return fanout;
  return fanout < num_edges ? fanout : num_edges;
}

// 32-bit random draws one row may consume: two per pick, picks of a row with replacement
// drawn at offsets 4j apart; all-neighbor hops draw none.
QUIVER_HOST_DEVICE inline int64_t draws_per_row(int64_t fanout, bool replace, int64_t num_edges) {
  if (fanout < 0) return 4;
  const int64_t picks = per_node_bound(fanout, replace, num_edges);
  return saturating_mul(4, picks > 1 ? picks : 1);
}

// Nodes a batch can reach at most before its first all-neighbors hop: seeds times the
// fanout products, capped by the graph (every node once, plus duplicate seeds). The
// reindexing table starts at this size and grows at an all-neighbors hop, once its exact
// size is known, so that [-1] on a huge graph does not cost a table for the whole graph.
template <typename Fanouts>
int64_t node_bound(int64_t batch_size, const Fanouts& fanouts, int64_t num_nodes) {
  const int64_t cap = num_nodes + batch_size;
  int64_t total = batch_size, frontier = batch_size;
  for (const int64_t fanout : fanouts) {
    if (fanout < 0) return total;
    frontier = saturating_mul(frontier, fanout);
    total = saturating_add(total, frontier);
    if (total >= cap) return cap;
  }
  return total;
}

// Slots of a reindexing table for `nodes` ids: a power of two, at most half full, so that
// linear probing always finds a free slot quickly.
inline int64_t node_table_capacity(int64_t nodes) {
  int64_t capacity = 1024;
  while (capacity < 2 * nodes) capacity <<= 1;
  return capacity;
}

// One slot of the reindexing table, the same 16 bytes on CPU and GPU. Cleared to all ones:
// key -1 (empty), local -1 (not numbered yet), first = no edge yet.
struct alignas(16) NodeSlot {
  int64_t key;     // the global node id, -1 while the slot is empty
  int32_t local;   // its local index once numbered, else -1
  uint32_t first;  // while unnumbered: the first edge position that named this id
};
static_assert(sizeof(NodeSlot) == 16, "one slot per half sector");
constexpr int64_t kEmptyNodeKey = -1;

// The hash that spreads node ids over the table (murmur3's 64-bit finalizer).
QUIVER_HOST_DEVICE inline uint64_t mix_node_id(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// Uniform integer in [0, n) from 64 random bits (multiply-high; bias below n / 2^64).
QUIVER_HOST_DEVICE inline uint64_t scale_to_range(uint64_t bits, uint64_t n) {
#ifdef __CUDA_ARCH__
  return __umul64hi(bits, n);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * n) >> 64);
#endif
}

}  // namespace quiver
