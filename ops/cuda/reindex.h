// Torch-free interface of GPU reindexing for multi-hop sampling: an open-addressing table
// (ops/sampling_rules.h: NodeSlot, mix_node_id, node_table_capacity) from global node id
// to local index. New ids of a hop are numbered in order of their first appearance among
// the hop's sampled edges: the CPU's rule and PyG's (seeds first, then each hop's new
// nodes). Every launcher returns the cudaError_t of its last launch or CUB call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/device_status.h"
#include "ops/sampling_rules.h"

namespace quiver::cuda {

// `capacity` slots (a power of two), sized for every node a batch can reach so that the
// table is at most half full.
struct NodeTable {
  NodeSlot* slots;
  int64_t capacity;
};

// The sampled neighbors of one hop: the first *num_edges (device) of max_edges entries of
// `rows` are real; rows holds global ids on entry and local indices once relabeled.
struct HopEdges {
  int64_t* rows;
  int64_t max_edges;
  const int64_t* num_edges;
};

cudaError_t clear_node_table(const NodeTable& table, cudaStream_t stream);

// Moves every id of `from` (with its local index and first mention) into `to`, a larger
// cleared table; slot indices of `from` are void afterwards.
cudaError_t rehash_node_table(const NodeTable& from, const NodeTable& to, cudaStream_t stream);

// Inserts the seeds nodes[0..n) with local index = position of each id's first occurrence.
// `entries` is scratch of n entries.
cudaError_t insert_nodes(const NodeTable& table, const int64_t* nodes, int64_t n, int64_t* entries,
                         cudaStream_t stream);

// One hop's reindexing:
//  1. insert_neighbors: insert each id, rows[e] becomes its table slot, and an id new to
//     the table records the first edge e that named it;
//  2. number_new_nodes (three launches: flags, their scan, numbering): a new id's local
//     index = node_total[0] + (new ids first named before its first edge); new_nodes lists
//     the new ids in order of first appearance; rows[e] becomes the local index of its id;
//     writes *hop_edges = *num_edges and node_total[1] = node_total[0] + the number of new
//     nodes (all on the device). `workspace` holds number_new_nodes_workspace_bytes.
cudaError_t insert_neighbors(const NodeTable& table, const HopEdges& edges, int64_t num_nodes,
                             DeviceStatus* status, cudaStream_t stream);
size_t number_new_nodes_workspace_bytes(int64_t max_edges);
cudaError_t number_new_nodes(const NodeTable& table, const HopEdges& edges, int64_t* node_total,
                             int64_t* new_nodes, int64_t* hop_edges, void* workspace,
                             size_t workspace_bytes, cudaStream_t stream);

}  // namespace quiver::cuda
