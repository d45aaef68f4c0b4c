// Negative sampling on the GPU (see negatives.h). A true edge is found by scanning the
// drawn node's row for the source: rows list each node's sources, and a uniform draw has
// the graph's average degree, so the scan is short.
#include <curand_kernel.h>

#include "ops/cuda/device_status.cuh"
#include "ops/internal/launch.cuh"
#include "ops/cuda/negatives.h"
#include "ops/sampling_rules.h"

namespace quiver::cuda {
namespace {

constexpr int kThreads = 256;

template <typename index_t>
__global__ void sample_negatives_kernel(const Csr<index_t> csr, const NegativeDraws draws,
                                        DeviceStatus* status) {
  QUIVER_GRID_LOOP(k, draws.num_src * draws.per_src) {
    const int64_t i = k / draws.per_src;
    const int64_t source = draws.src[i];
    if (source < 0 || source >= csr.num_nodes) {
      record_status(status, kSrcOutOfRange, i, source, 0);
      draws.out[k] = 0;
      continue;
    }
    curandStatePhilox4_32_10_t state;
    curand_init(draws.key.seed, static_cast<uint64_t>(k), draws.key.offset, &state);
    int64_t drawn = 0;
    for (int64_t trial = 0; trial < draws.max_trials; ++trial) {
      const uint64_t high = curand(&state);  // two statements: a fixed order of the draws
      const uint64_t low = curand(&state);
      drawn = draws.dst_begin +
              static_cast<int64_t>(scale_to_range((high << 32) | low, draws.dst_range));
      if (!draws.exclude_edges) break;
      // (source, drawn) is an edge when one is in the other's row.
      const int64_t scanned = draws.out_rows ? source : drawn;
      const int64_t wanted = draws.out_rows ? drawn : source;
      const int64_t begin = csr.indptr[scanned];
      const int64_t end = csr.indptr[scanned + 1];
      if (!(0 <= begin && begin <= end && end <= csr.num_edges)) {
        record_status(status, kRowOutOfBounds, scanned, begin, end);
        break;
      }
      bool edge = false;
      for (int64_t e = begin; e < end && !edge; ++e) edge = csr.indices[e] == wanted;
      if (!edge) break;
    }
    draws.out[k] = drawn;
  }
}

}  // namespace

template <typename index_t>
cudaError_t sample_negatives(const Csr<index_t>& csr, const NegativeDraws& draws,
                             DeviceStatus* status, cudaStream_t stream) {
  const int64_t n = draws.num_src * draws.per_src;
  if (n == 0) return cudaSuccess;
  sample_negatives_kernel<index_t><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(csr, draws,
                                                                                    status);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

template cudaError_t sample_negatives<int32_t>(const Csr<int32_t>&, const NegativeDraws&,
                                               DeviceStatus*, cudaStream_t);
template cudaError_t sample_negatives<int64_t>(const Csr<int64_t>&, const NegativeDraws&,
                                               DeviceStatus*, cudaStream_t);

}  // namespace quiver::cuda
