// Torch-free interface of hetero_neighbor_sample's regrouping on the GPU (the rule:
// sampling_rules.h, HeteroGroups): nodes grouped by type and edges by relation, each group
// in the hop loop's order, in a handful of launches. The host wrapper
// (ops/hetero_layout.h) allocates, then reads the counts back once.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ops/sampling_rules.h"

namespace quiver::cuda {

// Scratch bytes of the radix sort of `n` keys of `groups` groups (types or relations).
size_t group_sort_workspace_bytes(int64_t n, int64_t groups);

// Nodes: counts (num_counts() entries, zeroed here, then num_types of scratch: where each
// type's group starts, then one slot group_edges fills) and, per node, its type and id within
// the type; then the nodes in type order (stable): out_nodes, out_batch (when batch is
// given) and each node's position within its type's group. `keys`, `sorted_keys`, `order`
// and `iota` are n-entry scratch.
cudaError_t group_nodes(const HeteroGroups& groups, const int64_t* node_ids,
                        const int64_t* batch, int64_t n, int64_t* counts, int32_t* keys,
                        int32_t* sorted_keys, int64_t* local, int64_t* iota, int64_t* order,
                        void* workspace, size_t workspace_bytes, int64_t* out_nodes,
                        int64_t* out_batch, int64_t* position, cudaStream_t stream);

// Edges (after group_nodes, whose positions map rows and cols): grouped by relation,
// out_rows/out_cols as positions in their types' groups and ids local to the relation. An
// edge that does not fit the layout (HeteroGroups::edge_fits, its ends read through
// node_ids) leaves its index + 1 in counts[num_counts() + num_types] (0: every edge fits).
cudaError_t group_edges(const HeteroGroups& groups, const int64_t* edge_ids,
                        const int64_t* node_ids, const int64_t* rows, const int64_t* cols,
                        const int64_t* position,
                        int64_t m, int64_t* counts, int32_t* keys, int32_t* sorted_keys,
                        int64_t* local, int64_t* iota, int64_t* order, void* workspace,
                        size_t workspace_bytes, int64_t* out_rows, int64_t* out_cols,
                        int64_t* out_edges, cudaStream_t stream);

}  // namespace quiver::cuda
