// Torch-free interface of the GPU CSR build (csr_from_coo on CUDA): check the endpoints,
// sort edge positions by row with CUB's stable radix sort (so a row's edges keep input
// order, as the CPU's counting sort leaves them), find each row's start in the sorted rows,
// then read the columns in that order. Every launcher returns the cudaError_t of its last
// launch or CUB call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/device_status.h"

namespace quiver::cuda {

// Records (kCooEndpointOutOfRange) an endpoint of row or col outside [0, num_nodes).
template <typename index_t>
cudaError_t check_coo_endpoints(const index_t* row, const index_t* col, int64_t num_edges,
                                int64_t num_nodes, DeviceStatus* status, cudaStream_t stream);

// Keys are rows (checked non-negative, so compared as unsigned); values are edge positions,
// 32-bit while the edges fit. Both live in double buffers: `keys[0]` holds the rows and
// `positions[0]` is filled with 0, 1, ...; the sort leaves its result in buffer
// *current (0 or 1) of each. Only the low `key_bits` bits of a row are compared.
template <typename key_t, typename position_t>
struct EdgeSort {
  key_t* keys[2];
  position_t* positions[2];
  int64_t num_edges;
  int key_bits;
};

template <typename key_t, typename position_t>
size_t sort_edges_workspace_bytes(const EdgeSort<key_t, position_t>& sort);

// Fills positions[0] and sorts; *current is where the result is (host memory).
template <typename key_t, typename position_t>
cudaError_t sort_edges_by_row(EdgeSort<key_t, position_t>& sort, int* current, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream);

// indptr[v] = first position of row v in the sorted rows (num_nodes + 1 entries).
template <typename key_t>
cudaError_t indptr_from_sorted_rows(const key_t* sorted_rows, int64_t num_edges,
                                    int64_t num_nodes, int64_t* indptr, cudaStream_t stream);

// indices[k] = col[positions[k]], edge_ids[k] = positions[k].
template <typename index_t, typename position_t>
cudaError_t gather_sorted_columns(const index_t* col, const position_t* positions,
                                  int64_t num_edges, index_t* indices, int64_t* edge_ids,
                                  cudaStream_t stream);

}  // namespace quiver::cuda
