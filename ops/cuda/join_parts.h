// Torch-free interface of one launch that copies many int64 arrays end to end: a sampled
// batch's outputs (node ids, rows, cols, edge ids, each in a part a hop) cut out of the
// buffers a captured batch reuses. at::cat took a launch, and about 15 us of the host's
// time, per output; this takes one launch for all of them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace quiver::cuda {

// Parts passed by value in the kernel's parameters (1.5 KB of the 4 KB allowed).
constexpr int kMaxJoinedParts = 64;

// Part k: count[k] entries copied from from[k] to to[k] (the arrays do not overlap).
struct JoinedParts {
  const int64_t* from[kMaxJoinedParts];
  int64_t* to[kMaxJoinedParts];
  int64_t count[kMaxJoinedParts];
  int num_parts = 0;
  int64_t longest = 0;  // the largest count
};

cudaError_t join_parts(const JoinedParts& parts, cudaStream_t stream);

}  // namespace quiver::cuda
