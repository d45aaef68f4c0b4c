// The hash that spreads node ids over the reindexing tables, shared by the CPU and CUDA
// tables so that both behave alike. Torch-free: included by .cpp and .cu files.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define QUIVER_HOST_DEVICE __host__ __device__
#else
#define QUIVER_HOST_DEVICE
#endif

namespace quiver {

QUIVER_HOST_DEVICE inline uint64_t mix_node_id(uint64_t x) {  // murmur3's finalizer
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

}  // namespace quiver
