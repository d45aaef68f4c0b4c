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

// Nodes a batch can reach at most: seeds times the fanout products, capped by the graph
// (every node once, plus duplicate seeds). "All neighbors" hops fall back to the cap.
template <typename Fanouts>
int64_t node_bound(int64_t batch_size, const Fanouts& fanouts, int64_t num_nodes) {
  const int64_t cap = num_nodes + batch_size;
  int64_t total = batch_size, frontier = batch_size;
  for (const int64_t fanout : fanouts) {
    if (fanout < 0 || frontier > cap / (fanout > 1 ? fanout : 1)) return cap;
    frontier *= fanout;
    total += frontier;
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
