// Per-row neighbor sampling on the GPU: planning (degrees and output counts), the offsets
// scan, and the sampling itself. Rows are spread over groups of G lanes so that many rows
// are in flight per block; the lanes of a group read a row's picks together, which
// coalesces reads of small rows and of "take all" rows (essential over PCIe in UVA mode).
#include "ops/cuda/device_status.cuh"
#include "ops/cuda/sampling_kernels.h"

#include <cooperative_groups.h>
#include <cub/device/device_scan.cuh>
#include <curand_kernel.h>

namespace cg = cooperative_groups;

namespace quiver::cuda {
namespace {

constexpr int kBlock = 128;
constexpr int kSharedPicks = 32;  // picks per row kept in shared memory; more go to scratch

__host__ __device__ inline int64_t sampled_count(int64_t degree, int64_t fanout, bool replace) {
  if (fanout < 0) return degree;
  if (degree == 0) return 0;
  return replace ? fanout : (fanout < degree ? fanout : degree);
}

int blocks_for(int64_t items, int64_t items_per_block) {
  const int64_t blocks = (items + items_per_block - 1) / items_per_block;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > (1 << 30) ? (1 << 30) : blocks));
}

template <typename index_t>
__global__ void plan_rows_kernel(Csr<index_t> csr, const int64_t* __restrict__ nodes,
                                 int64_t num_rows, const int64_t* live, int64_t fanout,
                                 bool replace, bool nodes_are_seeds, bool check_ends,
                                 int64_t* __restrict__ row_begin, int64_t* __restrict__ row_degree,
                                 int64_t* __restrict__ row_count, DeviceStatus* status) {
  if (check_ends && blockIdx.x == 0 && threadIdx.x == 0) {
    const int64_t first = csr.indptr[0];
    const int64_t last = csr.indptr[csr.num_nodes];
    if (first != 0 || last != csr.num_edges) record_status(status, kCsrEnds, 0, first, last);
  }
  const int64_t live_rows = live ? live[1] - live[0] : num_rows;
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r < num_rows;
       r += int64_t{gridDim.x} * blockDim.x) {
    int64_t begin = 0, degree = 0;  // rows past the live ones yield nothing
    if (r < live_rows) {
      const int64_t node = nodes[r];
      if (node < 0 || node >= csr.num_nodes) {
        record_status(status, nodes_are_seeds ? kSeedOutOfRange : kNeighborOutOfRange, r, node,
                      0);
      } else {
        begin = csr.indptr[node];
        const int64_t end = csr.indptr[node + 1];
        if (0 <= begin && begin <= end && end <= csr.num_edges) {
          degree = end - begin;
        } else {
          record_status(status, kRowOutOfBounds, node, begin, end);
          begin = 0;
        }
      }
    }
    row_begin[r] = begin;
    row_degree[r] = degree;
    row_count[r] = sampled_count(degree, fanout, replace);
  }
}

__device__ inline uint64_t uniform_below(curandStatePhilox4_32_10_t* state, uint64_t n) {
  const uint64_t bits = (static_cast<uint64_t>(curand(state)) << 32) | curand(state);
  return __umul64hi(bits, n);  // bias below n / 2^64
}

template <typename index_t, int G>
__global__ void __launch_bounds__(kBlock)
    sample_rows_kernel(Csr<index_t> csr, const int64_t* __restrict__ row_begin,
                       const int64_t* __restrict__ row_degree,
                       const int64_t* __restrict__ row_count,
                       const int64_t* __restrict__ out_offsets, int64_t num_rows, int64_t fanout,
                       bool replace, PhiloxKey key, uint64_t stream_base,
                       int64_t* __restrict__ neighbors_out, int64_t* edge_ids_out,
                       int64_t* __restrict__ cols_out, const int64_t* col_base_ptr) {
  constexpr int kGroups = kBlock / G;
  const int64_t col_base = cols_out ? *col_base_ptr : 0;
  __shared__ int64_t shared_picks[kGroups][kSharedPicks];
  const auto group = cg::tiled_partition<G>(cg::this_thread_block());
  const int lane = group.thread_rank();
  const int slot = threadIdx.x / G;

  for (int64_t r = blockIdx.x * int64_t{kGroups} + slot; r < num_rows;
       r += int64_t{gridDim.x} * kGroups) {
    const int64_t count = row_count[r];
    if (count == 0) continue;
    const int64_t begin = row_begin[r];
    const int64_t degree = row_degree[r];
    const int64_t out = out_offsets[r];

    auto emit = [&](int64_t j, int64_t offset) {
      const int64_t pos = begin + offset;
      neighbors_out[out + j] = static_cast<int64_t>(csr.indices[pos]);
      edge_ids_out[out + j] = csr.edge_ids ? csr.edge_ids[pos] : pos;
      if (cols_out) cols_out[out + j] = col_base + r;
    };

    if (fanout < 0 || (!replace && count == degree)) {
      for (int64_t j = lane; j < count; j += G) emit(j, j);
    } else if (replace) {
      for (int64_t j = lane; j < count; j += G) {
        curandStatePhilox4_32_10_t state;
        curand_init(key.seed, stream_base + r, key.offset + 4 * j, &state);
        emit(j, static_cast<int64_t>(uniform_below(&state, degree)));
      }
    } else {
      // Floyd's algorithm in one lane (every k-subset equally likely), then all lanes
      // fetch the picks. Beyond kSharedPicks the picks wait in the edge-id output, each
      // slot later overwritten by the lane that reads it.
      int64_t* picks = count <= kSharedPicks ? shared_picks[slot] : edge_ids_out + out;
      if (lane == 0) {
        curandStatePhilox4_32_10_t state;
        curand_init(key.seed, stream_base + r, key.offset, &state);
        for (int64_t j = degree - count, m = 0; j < degree; ++j, ++m) {
          int64_t t = static_cast<int64_t>(uniform_below(&state, j + 1));
          for (int64_t q = 0; q < m; ++q) {
            if (picks[q] == t) {
              t = j;
              break;
            }
          }
          picks[m] = t;
        }
      }
      group.sync();
      for (int64_t j = lane; j < count; j += G) emit(j, picks[j]);
      group.sync();  // the group's shared picks are reused by its next row
    }
  }
}

template <typename index_t, int G>
void launch_sample_rows(const Csr<index_t>& csr, const int64_t* row_begin,
                        const int64_t* row_degree, const int64_t* row_count,
                        const int64_t* out_offsets, int64_t num_rows, int64_t fanout, bool replace,
                        PhiloxKey key, uint64_t stream_base, int64_t* neighbors_out,
                        int64_t* edge_ids_out, int64_t* cols_out, const int64_t* col_base,
                        cudaStream_t stream) {
  sample_rows_kernel<index_t, G><<<blocks_for(num_rows, kBlock / G), kBlock, 0, stream>>>(
      csr, row_begin, row_degree, row_count, out_offsets, num_rows, fanout, replace, key,
      stream_base, neighbors_out, edge_ids_out, cols_out, col_base);
}

}  // namespace

template <typename index_t>
void plan_rows(const Csr<index_t>& csr, const int64_t* nodes, int64_t max_rows,
               const int64_t* live, int64_t fanout, bool replace, bool nodes_are_seeds,
               bool check_ends, int64_t* row_begin, int64_t* row_degree, int64_t* row_count,
               DeviceStatus* status, cudaStream_t stream) {
  constexpr int kThreads = 256;
  plan_rows_kernel<index_t><<<blocks_for(max_rows, kThreads), kThreads, 0, stream>>>(
      csr, nodes, max_rows, live, fanout, replace, nodes_are_seeds, check_ends, row_begin,
      row_degree, row_count, status);
}

size_t offsets_workspace_bytes(int64_t n) {
  size_t bytes = 0;
  cub::DeviceScan::InclusiveSum(nullptr, bytes, static_cast<const int64_t*>(nullptr),
                                static_cast<int64_t*>(nullptr), n);
  return bytes;
}

void offsets_from_counts(const int64_t* values, int64_t n, int64_t* offsets, void* workspace,
                         size_t workspace_bytes, cudaStream_t stream) {
  cudaMemsetAsync(offsets, 0, sizeof(int64_t), stream);
  if (n > 0) {
    cub::DeviceScan::InclusiveSum(workspace, workspace_bytes, values, offsets + 1, n, stream);
  }
}

template <typename index_t>
void sample_rows(const Csr<index_t>& csr, const int64_t* row_begin, const int64_t* row_degree,
                 const int64_t* row_count, const int64_t* out_offsets, int64_t num_rows,
                 int64_t fanout, bool replace, PhiloxKey key, uint64_t stream_base,
                 int64_t* neighbors_out, int64_t* edge_ids_out, int64_t* cols_out,
                 const int64_t* col_base, cudaStream_t stream) {
  // Enough lanes per row for the fanout, so that small fanouts keep more rows in flight.
  if (fanout >= 0 && fanout <= 8) {
    launch_sample_rows<index_t, 8>(csr, row_begin, row_degree, row_count, out_offsets, num_rows,
                                   fanout, replace, key, stream_base, neighbors_out,
                                   edge_ids_out, cols_out, col_base, stream);
  } else if (fanout >= 0 && fanout <= 16) {
    launch_sample_rows<index_t, 16>(csr, row_begin, row_degree, row_count, out_offsets, num_rows,
                                    fanout, replace, key, stream_base, neighbors_out,
                                    edge_ids_out, cols_out, col_base, stream);
  } else {
    launch_sample_rows<index_t, 32>(csr, row_begin, row_degree, row_count, out_offsets, num_rows,
                                    fanout, replace, key, stream_base, neighbors_out,
                                    edge_ids_out, cols_out, col_base, stream);
  }
}

#define QUIVER_INSTANTIATE(index_t)                                                            \
  template void plan_rows<index_t>(const Csr<index_t>&, const int64_t*, int64_t,                \
                                   const int64_t*, int64_t, bool, bool, bool, int64_t*, int64_t*, \
                                   int64_t*, DeviceStatus*, cudaStream_t);                        \
  template void sample_rows<index_t>(const Csr<index_t>&, const int64_t*, const int64_t*,         \
                                     const int64_t*, const int64_t*, int64_t, int64_t, bool,      \
                                     PhiloxKey, uint64_t, int64_t*, int64_t*, int64_t*,           \
                                     const int64_t*, cudaStream_t);
QUIVER_INSTANTIATE(int32_t)
QUIVER_INSTANTIATE(int64_t)
#undef QUIVER_INSTANTIATE

}  // namespace quiver::cuda
