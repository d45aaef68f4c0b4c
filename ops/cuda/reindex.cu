// GPU reindexing for multi-hop sampling (see reindex.h): linear probing in a table at most
// half full, first mentions found by an atomic minimum over edge positions and numbered by
// a CUB scan, so the numbering is deterministic however the threads interleave.
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <cub/device/device_scan.cuh>

#include "ops/cuda/device_status.cuh"
#include "ops/internal/launch.cuh"
#include "ops/cuda/reindex.h"

namespace quiver::cuda {
namespace {

constexpr int kThreads = 256;

__device__ inline int64_t find_or_insert(NodeSlot* slots, int64_t mask, long long key) {
  int64_t h = static_cast<int64_t>(mix_node_id(static_cast<uint64_t>(key)) & mask);
  while (true) {
    const long long seen = *reinterpret_cast<volatile long long*>(&slots[h].key);
    if (seen == key) return h;
    if (seen == kEmptyNodeKey) {
      const auto prev = static_cast<long long>(atomicCAS(
          reinterpret_cast<unsigned long long*>(&slots[h].key),
          static_cast<unsigned long long>(kEmptyNodeKey), static_cast<unsigned long long>(key)));
      if (prev == kEmptyNodeKey || prev == key) return h;
    }
    h = (h + 1) & mask;
  }
}

__device__ inline int64_t live_edges(const HopEdges& edges) {
  return *edges.num_edges < edges.max_edges ? *edges.num_edges : edges.max_edges;
}

__global__ void rehash_kernel(NodeTable from, NodeTable to) {
  QUIVER_GRID_LOOP(s, from.capacity) {
    const NodeSlot old = from.slots[s];
    if (old.key == kEmptyNodeKey) continue;
    NodeSlot& slot = to.slots[find_or_insert(to.slots, to.capacity - 1, old.key)];
    slot.local = old.local;
    slot.first = old.first;
  }
}

__global__ void insert_nodes_kernel(NodeTable table, const int64_t* nodes, int64_t n,
                                    int64_t* entries) {
  QUIVER_GRID_LOOP(i, n) {
    const long long key = nodes[i];
    if (key < 0) {  // reported by the planning kernel; keep the sentinel out of the table
      entries[i] = -1;
      continue;
    }
    const int64_t h = find_or_insert(table.slots, table.capacity - 1, key);
    entries[i] = h;
    atomicMin(&table.slots[h].first, static_cast<unsigned int>(i));
  }
}

__global__ void number_nodes_kernel(NodeTable table, const int64_t* entries, int64_t n) {
  QUIVER_GRID_LOOP(i, n) {
    const int64_t h = entries[i];
    if (h >= 0 && table.slots[h].first == static_cast<unsigned int>(i)) {
      table.slots[h].local = static_cast<int>(i);
    }
  }
}

__global__ void insert_neighbors_kernel(NodeTable table, HopEdges edges, int64_t num_nodes,
                                        DeviceStatus* status) {
  const int64_t count = live_edges(edges);
  QUIVER_GRID_LOOP(e, count) {
    const long long key = edges.rows[e];
    if (key < 0 || key >= num_nodes) {
      record_status(status, kNeighborOutOfRange, e, key, 0);
      edges.rows[e] = -1;
      continue;
    }
    const int64_t h = find_or_insert(table.slots, table.capacity - 1, key);
    edges.rows[e] = h;
    // Ids numbered in an earlier hop already have their local index (set by a previous
    // launch), so only ids new to this hop compete for their first position.
    if (table.slots[h].local < 0) atomicMin(&table.slots[h].first, static_cast<unsigned int>(e));
  }
}

struct IsFirstMention {
  const NodeSlot* slots;
  const int64_t* rows;
  const int64_t* num_edges;
  __device__ int64_t operator()(int64_t e) const {
    if (e >= *num_edges) return 0;
    const int64_t h = rows[e];
    return h >= 0 && slots[h].local < 0 && slots[h].first == static_cast<unsigned int>(e);
  }
};

__global__ void assign_new_nodes_kernel(NodeTable table, HopEdges edges, const int64_t* new_pos,
                                        int64_t* node_total, int64_t* new_nodes,
                                        int64_t* hop_edges) {
  const int64_t count = live_edges(edges);
  const int64_t nodes_before = node_total[0];
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *hop_edges = count;
    node_total[1] = nodes_before + new_pos[count];
  }
  QUIVER_GRID_LOOP(e, count) {
    const int64_t h = edges.rows[e];
    // Only the first mention of a new id passes; it alone writes that id's slot.
    if (h < 0 || new_pos[e + 1] == new_pos[e]) continue;
    table.slots[h].local = static_cast<int>(nodes_before + new_pos[e]);
    new_nodes[new_pos[e]] = table.slots[h].key;
  }
}

__global__ void relabel_rows_kernel(NodeTable table, HopEdges edges) {
  const int64_t count = live_edges(edges);
  QUIVER_GRID_LOOP(e, count) {
    const int64_t h = edges.rows[e];
    edges.rows[e] = h >= 0 ? table.slots[h].local : -1;
  }
}

auto first_mention_flags(const NodeSlot* slots, const int64_t* rows, const int64_t* num_edges) {
  return thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0),
                                         IsFirstMention{slots, rows, num_edges});
}

}  // namespace

cudaError_t clear_node_table(const NodeTable& table, cudaStream_t stream) {
  return cudaMemsetAsync(table.slots, 0xFF, table.capacity * sizeof(NodeSlot), stream);
}

cudaError_t rehash_node_table(const NodeTable& from, const NodeTable& to, cudaStream_t stream) {
  rehash_kernel<<<blocks_for(from.capacity, kThreads), kThreads, 0, stream>>>(from, to);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

cudaError_t insert_nodes(const NodeTable& table, const int64_t* nodes, int64_t n, int64_t* entries,
                         cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  insert_nodes_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(table, nodes, n, entries);
  QUIVER_LAUNCH_TRY();
  number_nodes_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(table, entries, n);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

cudaError_t insert_neighbors(const NodeTable& table, const HopEdges& edges, int64_t num_nodes,
                             DeviceStatus* status, cudaStream_t stream) {
  insert_neighbors_kernel<<<blocks_for(edges.max_edges, kThreads), kThreads, 0, stream>>>(
      table, edges, num_nodes, status);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

size_t scan_new_nodes_workspace_bytes(int64_t max_edges) {
  size_t bytes = 0;
  cub::DeviceScan::InclusiveSum(nullptr, bytes, first_mention_flags(nullptr, nullptr, nullptr),
                                static_cast<int64_t*>(nullptr), max_edges);
  return bytes;
}

cudaError_t scan_new_nodes(const NodeTable& table, const HopEdges& edges, int64_t* new_pos,
                           void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  QUIVER_CUDA_TRY(cudaMemsetAsync(new_pos, 0, sizeof(int64_t), stream));
  if (edges.max_edges == 0) return cudaSuccess;
  return cub::DeviceScan::InclusiveSum(
      workspace, workspace_bytes, first_mention_flags(table.slots, edges.rows, edges.num_edges),
      new_pos + 1, edges.max_edges, stream);
}

cudaError_t assign_new_nodes(const NodeTable& table, const HopEdges& edges, const int64_t* new_pos,
                             int64_t* node_total, int64_t* new_nodes, int64_t* hop_edges,
                             cudaStream_t stream) {
  assign_new_nodes_kernel<<<blocks_for(edges.max_edges, kThreads), kThreads, 0, stream>>>(
      table, edges, new_pos, node_total, new_nodes, hop_edges);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

cudaError_t relabel_rows(const NodeTable& table, const HopEdges& edges, cudaStream_t stream) {
  relabel_rows_kernel<<<blocks_for(edges.max_edges, kThreads), kThreads, 0, stream>>>(table, edges);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

}  // namespace quiver::cuda
