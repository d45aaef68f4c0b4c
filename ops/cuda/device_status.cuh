// Device-side recording of the first invalid input a kernel meets (see device_status.h).
#pragma once

#include "ops/cuda/device_status.h"

namespace quiver::cuda {

__device__ inline void record_status(DeviceStatus* status, long long code, long long index,
                                     long long value, long long extra) {
  auto* word = reinterpret_cast<unsigned long long*>(&status->code);
  if (atomicCAS(word, 0ull, static_cast<unsigned long long>(code)) == 0ull) {
    status->index = index;
    status->value = value;
    status->extra = extra;
  }
}

}  // namespace quiver::cuda
