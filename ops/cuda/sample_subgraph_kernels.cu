// GPU reindexing for multi-hop sampling: an open-addressing hash table (linear probing,
// at most half full) from global node id to local index. New ids of a hop are numbered
// in order of their first appearance among the hop's sampled edges, so that the GPU
// output equals the CPU's numbering rule and PyG's: seeds first, then each hop's new nodes.
#include "ops/cuda/device_status.cuh"
#include "ops/cuda/sampling_kernels.h"
#include "ops/node_hash.h"

#include <cub/device/device_scan.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

namespace quiver::cuda {
namespace {

constexpr int kThreads = 256;
constexpr long long kEmptyKey = -1;

// Cleared to all ones: key = -1 (empty), local = -1 (not numbered yet), first = kNoEdge.
struct alignas(16) NodeSlot {
  long long key;
  int local;           // local index, set once numbered
  unsigned int first;  // while unnumbered: the first position that named this id
};
static_assert(sizeof(NodeSlot) == 16, "one slot per half sector");

__device__ inline int64_t find_or_insert(NodeSlot* table, int64_t mask, long long key) {
  int64_t h = static_cast<int64_t>(mix_node_id(static_cast<uint64_t>(key)) & mask);
  while (true) {
    const long long seen = *reinterpret_cast<volatile long long*>(&table[h].key);
    if (seen == key) return h;
    if (seen == kEmptyKey) {
      const auto prev = static_cast<long long>(
          atomicCAS(reinterpret_cast<unsigned long long*>(&table[h].key),
                    static_cast<unsigned long long>(kEmptyKey), static_cast<unsigned long long>(key)));
      if (prev == kEmptyKey || prev == key) return h;
    }
    h = (h + 1) & mask;
  }
}

int blocks_for(int64_t items) {
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > (1 << 30) ? (1 << 30) : blocks));
}

#define QUIVER_GRID_LOOP(i, n)                                                 \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

__global__ void insert_nodes_kernel(NodeSlot* table, int64_t mask, const int64_t* nodes, int64_t n,
                                    int64_t* entries) {
  QUIVER_GRID_LOOP(i, n) {
    const long long key = nodes[i];
    if (key < 0) {  // reported by the planning kernel; keep the sentinel out of the table
      entries[i] = -1;
      continue;
    }
    const int64_t h = find_or_insert(table, mask, key);
    entries[i] = h;
    atomicMin(&table[h].first, static_cast<unsigned int>(i));
  }
}

__global__ void number_nodes_kernel(NodeSlot* table, const int64_t* entries, int64_t n) {
  QUIVER_GRID_LOOP(i, n) {
    const int64_t h = entries[i];
    if (h >= 0 && table[h].first == static_cast<unsigned int>(i)) table[h].local = static_cast<int>(i);
  }
}

__global__ void insert_neighbors_kernel(NodeSlot* table, int64_t mask, int64_t* rows,
                                        int64_t max_edges, const int64_t* num_edges,
                                        int64_t num_nodes, DeviceStatus* status) {
  const int64_t edges = *num_edges;
  QUIVER_GRID_LOOP(e, edges < max_edges ? edges : max_edges) {
    const long long key = rows[e];
    if (key < 0 || key >= num_nodes) {
      record_status(status, kNeighborOutOfRange, e, key, 0);
      rows[e] = -1;
      continue;
    }
    const int64_t h = find_or_insert(table, mask, key);
    rows[e] = h;
    // Ids numbered in an earlier hop already have their local index (set by a previous
    // launch), so only ids new to this hop compete for their first position.
    if (table[h].local < 0) atomicMin(&table[h].first, static_cast<unsigned int>(e));
  }
}

struct IsFirstMention {
  const NodeSlot* table;
  const int64_t* rows;
  const int64_t* num_edges;
  __device__ int64_t operator()(int64_t e) const {
    if (e >= *num_edges) return 0;
    const int64_t h = rows[e];
    return h >= 0 && table[h].local < 0 && table[h].first == static_cast<unsigned int>(e);
  }
};

__global__ void assign_new_nodes_kernel(NodeSlot* table, const int64_t* rows, int64_t max_edges,
                                        const int64_t* num_edges, const int64_t* new_pos,
                                        int64_t* node_total, int64_t* new_nodes,
                                        int64_t* hop_edges) {
  const int64_t edges = *num_edges < max_edges ? *num_edges : max_edges;
  const int64_t nodes_before = node_total[0];
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *hop_edges = edges;
    node_total[1] = nodes_before + new_pos[edges];
  }
  QUIVER_GRID_LOOP(e, edges) {
    const int64_t h = rows[e];
    // Only the first mention of a new id passes; it alone writes that id's slot.
    if (h < 0 || new_pos[e + 1] == new_pos[e]) continue;
    table[h].local = static_cast<int>(nodes_before + new_pos[e]);
    new_nodes[new_pos[e]] = table[h].key;
  }
}

__global__ void relabel_rows_kernel(const NodeSlot* table, int64_t* rows, int64_t max_edges,
                                    const int64_t* num_edges) {
  const int64_t edges = *num_edges < max_edges ? *num_edges : max_edges;
  QUIVER_GRID_LOOP(e, edges) {
    const int64_t h = rows[e];
    rows[e] = h >= 0 ? table[h].local : -1;
  }
}

auto first_mention_flags(const void* table, const int64_t* rows, const int64_t* num_edges) {
  return thrust::make_transform_iterator(
      thrust::counting_iterator<int64_t>(0),
      IsFirstMention{static_cast<const NodeSlot*>(table), rows, num_edges});
}

}  // namespace

size_t node_table_slot_bytes() { return sizeof(NodeSlot); }

void clear_node_table(void* table, int64_t capacity, cudaStream_t stream) {
  cudaMemsetAsync(table, 0xFF, capacity * sizeof(NodeSlot), stream);
}

void insert_nodes(void* table, int64_t capacity, const int64_t* nodes, int64_t n,
                  int64_t* entries, cudaStream_t stream) {
  if (n == 0) return;
  auto* slots = static_cast<NodeSlot*>(table);
  insert_nodes_kernel<<<blocks_for(n), kThreads, 0, stream>>>(slots, capacity - 1, nodes, n,
                                                              entries);
  number_nodes_kernel<<<blocks_for(n), kThreads, 0, stream>>>(slots, entries, n);
}

void insert_neighbors(void* table, int64_t capacity, int64_t* rows, int64_t max_edges,
                      const int64_t* num_edges, int64_t num_nodes, DeviceStatus* status,
                      cudaStream_t stream) {
  insert_neighbors_kernel<<<blocks_for(max_edges), kThreads, 0, stream>>>(
      static_cast<NodeSlot*>(table), capacity - 1, rows, max_edges, num_edges, num_nodes, status);
}

size_t scan_new_nodes_workspace_bytes(int64_t max_edges) {
  size_t bytes = 0;
  cub::DeviceScan::InclusiveSum(nullptr, bytes, first_mention_flags(nullptr, nullptr, nullptr),
                                static_cast<int64_t*>(nullptr), max_edges);
  return bytes;
}

void scan_new_nodes(const void* table, const int64_t* rows, int64_t max_edges,
                    const int64_t* num_edges, int64_t* new_pos, void* workspace,
                    size_t workspace_bytes, cudaStream_t stream) {
  cudaMemsetAsync(new_pos, 0, sizeof(int64_t), stream);
  if (max_edges == 0) return;
  cub::DeviceScan::InclusiveSum(workspace, workspace_bytes,
                                first_mention_flags(table, rows, num_edges), new_pos + 1,
                                max_edges, stream);
}

void assign_new_nodes(void* table, const int64_t* rows, int64_t max_edges,
                      const int64_t* num_edges, const int64_t* new_pos, int64_t* node_total,
                      int64_t* new_nodes, int64_t* hop_edges, cudaStream_t stream) {
  assign_new_nodes_kernel<<<blocks_for(max_edges), kThreads, 0, stream>>>(
      static_cast<NodeSlot*>(table), rows, max_edges, num_edges, new_pos, node_total, new_nodes,
      hop_edges);
}

void relabel_rows(const void* table, int64_t* rows, int64_t max_edges, const int64_t* num_edges,
                  cudaStream_t stream) {
  relabel_rows_kernel<<<blocks_for(max_edges), kThreads, 0, stream>>>(
      static_cast<const NodeSlot*>(table), rows, max_edges, num_edges);
}

}  // namespace quiver::cuda
