// Torch-free interface of negative sampling on the GPU (sample_negatives): one thread a
// negative, uniform draws redrawn while they are true edges. The host wrapper validates
// arguments and passes the current stream; the kernel bounds-checks every id and CSR row it
// reads and records a violation in a DeviceStatus.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/device_status.h"
#include "ops/cuda/row_sampling.h"

namespace quiver::cuda {

// out[k] for k < num_src * per_src: a node for source src[k / per_src], drawn from Philox
// stream k of `key`.
struct NegativeDraws {
  const int64_t* src;
  int64_t num_src;
  int64_t per_src;
  bool exclude_edges;
  int64_t max_trials;
  bool out_rows;  // rows list destinations (else sources): see sample_negatives
  int64_t dst_begin;  // draws in [dst_begin, dst_begin + dst_range)
  int64_t dst_range;
  PhiloxKey key;
  int64_t* out;
};

template <typename index_t>
cudaError_t sample_negatives(const Csr<index_t>& csr, const NegativeDraws& draws,
                             DeviceStatus* status, cudaStream_t stream);

}  // namespace quiver::cuda
