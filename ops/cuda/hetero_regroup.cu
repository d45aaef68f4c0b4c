// hetero_neighbor_sample's regrouping on the GPU (hetero_regroup.h): per element one kernel
// that keys and counts, a one-pass radix sort of the narrow keys (stable: each group keeps
// the hop loop's order), and one kernel that places. Counts go through shared memory when
// they fit, so a batch's half million keys do not queue on a dozen global counters.
#include <cub/device/device_radix_sort.cuh>

#include "ops/cuda/hetero_regroup.h"
#include "ops/internal/launch.cuh"

namespace quiver::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kSharedCounts = 2048;

int bits_for(int64_t values) {
  int bits = 1;
  while ((int64_t{1} << bits) < values) ++bits;
  return bits;
}

// Keys each element (its group: type or relation), records its local id and counts it.
// For edges, `node_ids`, `rows` and `cols` name each edge's ends, and an edge that does
// not fit the layout (HeteroGroups::edge_fits) leaves its index + 1 in `misfit`.
template <bool kNodes>
__global__ void key_kernel(const HeteroGroups groups, const int64_t* __restrict__ ids, int64_t n,
                           int64_t* __restrict__ counts, int64_t counts_at, int64_t num_counts,
                           int32_t* __restrict__ keys, int64_t* __restrict__ local,
                           int64_t* __restrict__ iota, const int64_t* __restrict__ node_ids,
                           const int64_t* __restrict__ rows, const int64_t* __restrict__ cols,
                           int64_t* __restrict__ misfit) {
  __shared__ unsigned long long shared[kSharedCounts];
  const bool in_shared = num_counts <= kSharedCounts;
  if (in_shared) {
    for (int64_t k = threadIdx.x; k < num_counts; k += blockDim.x) shared[k] = 0;
    __syncthreads();
  }
  QUIVER_GRID_LOOP(i, n) {
    if (!kNodes && !groups.edge_fits(ids[i], node_ids[rows[i]], node_ids[cols[i]])) {
      // Still counted (under the relation its id clamps to): the op raises once it reads
      // the counts back.
      atomicMax(reinterpret_cast<unsigned long long*>(misfit), static_cast<unsigned long long>(i + 1));
    }
    int64_t group = 0, id = 0;
    const int64_t at = kNodes ? groups.node_count_at(i, ids[i], group, id)
                              : groups.edge_count_at(i, ids[i], group, id);
    keys[i] = static_cast<int32_t>(group);
    local[i] = id;
    iota[i] = i;
    if (in_shared) {
      atomicAdd(&shared[at - counts_at], 1ull);
    } else {
      atomicAdd(reinterpret_cast<unsigned long long*>(counts + at), 1ull);
    }
  }
  if (in_shared) {
    __syncthreads();
    for (int64_t k = threadIdx.x; k < num_counts; k += blockDim.x) {
      if (shared[k] != 0) {
        atomicAdd(reinterpret_cast<unsigned long long*>(counts + counts_at + k), shared[k]);
      }
    }
  }
}

// Where each type's group starts (the counts are few: one thread).
__global__ void type_starts_kernel(const HeteroGroups groups, int64_t* counts) {
  int64_t* starts = counts + groups.num_counts();
  int64_t start = 0;
  for (int64_t t = 0; t < groups.num_types; ++t) {
    starts[t] = start;
    for (int64_t h = 0; h <= groups.num_hops; ++h) start += counts[t * (groups.num_hops + 1) + h];
  }
}

__global__ void place_nodes_kernel(const int64_t* __restrict__ starts,
                                   const int32_t* __restrict__ sorted_keys,
                                   const int64_t* __restrict__ order,
                                   const int64_t* __restrict__ local,
                                   const int64_t* __restrict__ batch, int64_t n,
                                   int64_t* __restrict__ out_nodes,
                                   int64_t* __restrict__ out_batch,
                                   int64_t* __restrict__ position) {
  QUIVER_GRID_LOOP(j, n) {
    const int64_t i = order[j];
    position[i] = j - starts[sorted_keys[j]];
    out_nodes[j] = local[i];
    if (batch != nullptr) out_batch[j] = batch[i];
  }
}

__global__ void place_edges_kernel(const int64_t* __restrict__ order,
                                   const int64_t* __restrict__ local,
                                   const int64_t* __restrict__ rows,
                                   const int64_t* __restrict__ cols,
                                   const int64_t* __restrict__ position, int64_t m,
                                   int64_t* __restrict__ out_rows, int64_t* __restrict__ out_cols,
                                   int64_t* __restrict__ out_edges) {
  QUIVER_GRID_LOOP(j, m) {
    const int64_t i = order[j];
    out_rows[j] = position[rows[i]];
    out_cols[j] = position[cols[i]];
    out_edges[j] = local[i];
  }
}

cudaError_t sort_by_group(const int32_t* keys, int32_t* sorted_keys, const int64_t* iota,
                          int64_t* order, int64_t n, int64_t groups, void* workspace,
                          size_t workspace_bytes, cudaStream_t stream) {
  size_t bytes = workspace_bytes;
  return cub::DeviceRadixSort::SortPairs(workspace, bytes, keys, sorted_keys, iota, order, n, 0,
                                         bits_for(groups), stream);
}

}  // namespace

size_t group_sort_workspace_bytes(int64_t n, int64_t groups) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                  static_cast<int32_t*>(nullptr),
                                  static_cast<const int64_t*>(nullptr),
                                  static_cast<int64_t*>(nullptr), n, 0, bits_for(groups));
  return bytes;
}

cudaError_t group_nodes(const HeteroGroups& groups, const int64_t* node_ids,
                        const int64_t* batch, int64_t n, int64_t* counts, int32_t* keys,
                        int32_t* sorted_keys, int64_t* local, int64_t* iota, int64_t* order,
                        void* workspace, size_t workspace_bytes, int64_t* out_nodes,
                        int64_t* out_batch, int64_t* position, cudaStream_t stream) {
  const int64_t node_counts = groups.num_types * (groups.num_hops + 1);
  QUIVER_CUDA_TRY(cudaMemsetAsync(
      counts, 0, sizeof(int64_t) * (groups.num_counts() + groups.num_types + 1), stream));
  if (n > 0) {
    key_kernel<true><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        groups, node_ids, n, counts, 0, node_counts, keys, local, iota, nullptr, nullptr,
        nullptr, nullptr);
    QUIVER_LAUNCH_TRY();
  }
  type_starts_kernel<<<1, 1, 0, stream>>>(groups, counts);
  QUIVER_LAUNCH_TRY();
  if (n == 0) return cudaSuccess;
  QUIVER_CUDA_TRY(sort_by_group(keys, sorted_keys, iota, order, n, groups.num_types, workspace,
                                workspace_bytes, stream));
  place_nodes_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
      counts + groups.num_counts(), sorted_keys, order, local, batch, n, out_nodes, out_batch,
      position);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

cudaError_t group_edges(const HeteroGroups& groups, const int64_t* edge_ids,
                        const int64_t* node_ids, const int64_t* rows, const int64_t* cols,
                        const int64_t* position,
                        int64_t m, int64_t* counts, int32_t* keys, int32_t* sorted_keys,
                        int64_t* local, int64_t* iota, int64_t* order, void* workspace,
                        size_t workspace_bytes, int64_t* out_rows, int64_t* out_cols,
                        int64_t* out_edges, cudaStream_t stream) {
  if (m == 0) return cudaSuccess;
  const int64_t node_counts = groups.num_types * (groups.num_hops + 1);
  key_kernel<false><<<blocks_for(m, kThreads), kThreads, 0, stream>>>(
      groups, edge_ids, m, counts, node_counts, groups.num_relations * groups.num_hops, keys,
      local, iota, node_ids, rows, cols, counts + groups.num_counts() + groups.num_types);
  QUIVER_LAUNCH_TRY();
  QUIVER_CUDA_TRY(sort_by_group(keys, sorted_keys, iota, order, m, groups.num_relations,
                                workspace, workspace_bytes, stream));
  place_edges_kernel<<<blocks_for(m, kThreads), kThreads, 0, stream>>>(
      order, local, rows, cols, position, m, out_rows, out_cols, out_edges);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

}  // namespace quiver::cuda
