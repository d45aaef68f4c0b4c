// Torch-free interface of the CUDA row gather.
#pragma once

#include "ops/cuda/sampling_kernels.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace quiver::cuda {

// out[i] = table[ids[i]] for rows of row_bytes bytes; table may be device memory or mapped
// pinned host memory. Ids outside [0, num_rows) are recorded in `status` (kSeedOutOfRange
// with index i) and their output rows left unwritten.
template <typename id_t>
void gather_rows(const void* table, int64_t num_rows, int64_t row_bytes, const id_t* ids,
                 int64_t num_ids, void* out, DeviceStatus* status, cudaStream_t stream);

}  // namespace quiver::cuda
