// Launch plumbing shared by the torch-free CUDA kernels: grid sizes, the grid-stride loop,
// and result codes that are returned, never dropped. Every launcher returns the
// cudaError_t of its last launch or library call; the host wrapper checks it
// (C10_CUDA_CHECK), so no failure is lost between a kernel and the caller.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace quiver::cuda {

// Blocks for `items` at `per_block` items a block: at least one, at most 2^30 (the kernels
// stride over the rest).
inline int blocks_for(int64_t items, int64_t per_block) {
  const int64_t blocks = (items + per_block - 1) / per_block;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > (1 << 30) ? (1 << 30) : blocks));
}

}  // namespace quiver::cuda

// for (i in [0, n)) spread over the whole grid.
#define QUIVER_GRID_LOOP(i, n)                                              \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

// Returns from the enclosing launcher when a CUDA call or launch failed.
#define QUIVER_CUDA_TRY(expr)                               \
  do {                                                      \
    const cudaError_t quiver_error_ = (expr);               \
    if (quiver_error_ != cudaSuccess) return quiver_error_; \
  } while (0)

// After a <<<...>>> launch: its configuration error, if any (and cleared, so that it never
// surfaces later as another launch's error).
#define QUIVER_LAUNCH_TRY() QUIVER_CUDA_TRY(cudaGetLastError())
