// GPU CSR build (see coo_sort.h). The sort compares only the bits a row id can use, so a
// graph of 111M nodes sorts on 27 bits rather than 32 or 64.
#include <cub/device/device_radix_sort.cuh>

#include "ops/cuda/coo_sort.h"
#include "ops/cuda/device_status.cuh"
#include "ops/internal/launch.cuh"

namespace quiver::cuda {
namespace {

constexpr int kThreads = 256;

template <typename index_t>
__global__ void check_endpoints_kernel(const index_t* row, const index_t* col, int64_t num_edges,
                                       int64_t num_nodes, DeviceStatus* status) {
  QUIVER_GRID_LOOP(e, num_edges) {
    const int64_t r = row[e], c = col[e];
    if (r < 0 || r >= num_nodes) record_status(status, kCooEndpointOutOfRange, e, r, 0);
    if (c < 0 || c >= num_nodes) record_status(status, kCooEndpointOutOfRange, e, c, 1);
  }
}

template <typename position_t>
__global__ void iota_kernel(position_t* positions, int64_t n) {
  QUIVER_GRID_LOOP(k, n) positions[k] = static_cast<position_t>(k);
}

// Each row's first position is where the sorted rows step up to it; rows with no edges
// between two that have some take the same start. Rows after the last edge start at the end.
template <typename key_t>
__global__ void row_starts_kernel(const key_t* sorted_rows, int64_t num_edges, int64_t* indptr) {
  QUIVER_GRID_LOOP(k, num_edges) {
    const int64_t row = static_cast<int64_t>(sorted_rows[k]);
    const int64_t previous = k == 0 ? -1 : static_cast<int64_t>(sorted_rows[k - 1]);
    for (int64_t v = previous + 1; v <= row; ++v) indptr[v] = k;
  }
}

__global__ void tail_starts_kernel(int64_t first_row, int64_t num_nodes, int64_t num_edges,
                                   int64_t* indptr) {
  QUIVER_GRID_LOOP(i, num_nodes + 1 - first_row) indptr[first_row + i] = num_edges;
}

template <typename key_t>
__global__ void tail_row_kernel(const key_t* sorted_rows, int64_t num_edges, int64_t num_nodes,
                                int64_t* indptr) {
  // Rows after the last edge's row: started here, on the device, as the last row is known
  // only there.
  const int64_t first = static_cast<int64_t>(sorted_rows[num_edges - 1]) + 1;
  for (int64_t v = first + blockIdx.x * int64_t{blockDim.x} + threadIdx.x; v <= num_nodes;
       v += int64_t{gridDim.x} * blockDim.x) {
    indptr[v] = num_edges;
  }
}

template <typename index_t, typename position_t>
__global__ void gather_columns_kernel(const index_t* col, const position_t* positions,
                                      int64_t num_edges, index_t* indices, int64_t* edge_ids) {
  QUIVER_GRID_LOOP(k, num_edges) {
    const int64_t e = static_cast<int64_t>(positions[k]);
    indices[k] = col[e];
    edge_ids[k] = e;
  }
}

}  // namespace

template <typename index_t>
cudaError_t check_coo_endpoints(const index_t* row, const index_t* col, int64_t num_edges,
                                int64_t num_nodes, DeviceStatus* status, cudaStream_t stream) {
  check_endpoints_kernel<<<blocks_for(num_edges, kThreads * 4), kThreads, 0, stream>>>(
      row, col, num_edges, num_nodes, status);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

template <typename key_t, typename position_t>
size_t sort_edges_workspace_bytes(const EdgeSort<key_t, position_t>& sort) {
  cub::DoubleBuffer<key_t> keys(sort.keys[0], sort.keys[1]);
  cub::DoubleBuffer<position_t> values(sort.positions[0], sort.positions[1]);
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys, values, sort.num_edges, 0, sort.key_bits);
  return bytes;
}

template <typename key_t, typename position_t>
cudaError_t sort_edges_by_row(EdgeSort<key_t, position_t>& sort, int* current, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  iota_kernel<<<blocks_for(sort.num_edges, kThreads * 4), kThreads, 0, stream>>>(
      sort.positions[0], sort.num_edges);
  QUIVER_LAUNCH_TRY();
  cub::DoubleBuffer<key_t> keys(sort.keys[0], sort.keys[1]);
  cub::DoubleBuffer<position_t> values(sort.positions[0], sort.positions[1]);
  QUIVER_CUDA_TRY(cub::DeviceRadixSort::SortPairs(workspace, workspace_bytes, keys, values,
                                                  sort.num_edges, 0, sort.key_bits, stream));
  // Keys and values move together through every pass, so both end in the same buffer.
  *current = keys.selector;
  return cudaSuccess;
}

template <typename key_t>
cudaError_t indptr_from_sorted_rows(const key_t* sorted_rows, int64_t num_edges,
                                    int64_t num_nodes, int64_t* indptr, cudaStream_t stream) {
  if (num_edges == 0) {
    tail_starts_kernel<<<blocks_for(num_nodes + 1, kThreads * 4), kThreads, 0, stream>>>(
        0, num_nodes, 0, indptr);
    QUIVER_LAUNCH_TRY();
    return cudaSuccess;
  }
  row_starts_kernel<<<blocks_for(num_edges, kThreads * 4), kThreads, 0, stream>>>(
      sorted_rows, num_edges, indptr);
  QUIVER_LAUNCH_TRY();
  tail_row_kernel<<<blocks_for(num_nodes + 1, kThreads * 4), kThreads, 0, stream>>>(
      sorted_rows, num_edges, num_nodes, indptr);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

template <typename index_t, typename position_t>
cudaError_t gather_sorted_columns(const index_t* col, const position_t* positions,
                                  int64_t num_edges, index_t* indices, int64_t* edge_ids,
                                  cudaStream_t stream) {
  gather_columns_kernel<<<blocks_for(num_edges, kThreads * 4), kThreads, 0, stream>>>(
      col, positions, num_edges, indices, edge_ids);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

#define QUIVER_INSTANTIATE_INDEX(index_t, key_t)                                              \
  template cudaError_t check_coo_endpoints<index_t>(const index_t*, const index_t*, int64_t,  \
                                                    int64_t, DeviceStatus*, cudaStream_t);   \
  template cudaError_t indptr_from_sorted_rows<key_t>(const key_t*, int64_t, int64_t,         \
                                                      int64_t*, cudaStream_t);               \
  QUIVER_INSTANTIATE_SORT(index_t, key_t, uint32_t)                                           \
  QUIVER_INSTANTIATE_SORT(index_t, key_t, uint64_t)

#define QUIVER_INSTANTIATE_SORT(index_t, key_t, position_t)                                   \
  template size_t sort_edges_workspace_bytes<key_t, position_t>(                              \
      const EdgeSort<key_t, position_t>&);                                                    \
  template cudaError_t sort_edges_by_row<key_t, position_t>(EdgeSort<key_t, position_t>&,    \
                                                            int*, void*, size_t,             \
                                                            cudaStream_t);                   \
  template cudaError_t gather_sorted_columns<index_t, position_t>(                            \
      const index_t*, const position_t*, int64_t, index_t*, int64_t*, cudaStream_t);

QUIVER_INSTANTIATE_INDEX(int32_t, uint32_t)
QUIVER_INSTANTIATE_INDEX(int64_t, uint64_t)

}  // namespace quiver::cuda
