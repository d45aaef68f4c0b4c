// One block row a part (blockIdx.y), its blocks striding over the part's entries: short
// parts (the seeds, a hop's new nodes) finish at once beside the long ones.
#include "ops/cuda/join_parts.h"

#include "ops/internal/launch.cuh"

namespace quiver::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocksPerPart = 256;

__global__ void __launch_bounds__(kThreads) join_parts_kernel(const JoinedParts parts) {
  const int k = blockIdx.y;
  const int64_t* __restrict__ from = parts.from[k];
  int64_t* __restrict__ to = parts.to[k];
  const int64_t count = parts.count[k];
  for (int64_t i = int64_t{blockIdx.x} * kThreads + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * kThreads) {
    to[i] = from[i];
  }
}

}  // namespace

cudaError_t join_parts(const JoinedParts& parts, cudaStream_t stream) {
  if (parts.num_parts == 0 || parts.longest == 0) return cudaSuccess;
  int64_t blocks = (parts.longest + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocksPerPart) blocks = kMaxBlocksPerPart;
  join_parts_kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(parts.num_parts)),
                      kThreads, 0, stream>>>(parts);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

}  // namespace quiver::cuda
