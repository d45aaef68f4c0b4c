// The first invalid input a sampling kernel met, recorded on the device and raised by the
// host at its next synchronization (ops/cuda/hop_board.h) through ops/errors.h. Kernels
// never assert on user input: an assert would poison the CUDA context.
#pragma once

namespace quiver::cuda {

enum StatusCode : long long {
  kStatusOk = 0,
  kSeedOutOfRange = 1,      // index = seed position, value = seed
  kNeighborOutOfRange = 2,  // value = node id found in indices
  kRowOutOfBounds = 3,      // index = node, value = indptr[node], extra = indptr[node + 1]
  kCsrEnds = 4,             // value = indptr[0], extra = indptr[num_nodes]
  kCooEndpointOutOfRange = 5,  // index = edge, value = node id, extra = 0 (row) / 1 (col)
  kCachedRowOutOfBounds = 6,   // index = node, value = cached_starts[node], extra = degree
  kBadEdgeWeight = 7,          // index = CSR position, value = node, extra = weight (double bits)
  kEdgeTimeUnsorted = 8,       // index = node, value = CSR position, extra = seed time
  kSrcOutOfRange = 9,          // index = position in src, value = node id
  kCumsumNotIncreasing = 10,   // index = CSR position, value = node
  kCumsumNotPerRow = 11,       // index = CSR position (a row's first), value = node
};

// Written once (the first error wins), read by the host after the batch's one wait.
struct DeviceStatus {
  long long code;
  long long index;
  long long value;
  long long extra;
};

}  // namespace quiver::cuda
