// Row gather: each thread moves one vector (16 bytes when the row layout allows) of one
// row, so a warp covers consecutive vectors of a row and many rows are in flight at once.
#include "ops/cuda/device_status.cuh"
#include "ops/cuda/gather_kernels.h"

namespace quiver::cuda {
namespace {

constexpr int kThreads = 256;

template <typename vec_t, typename id_t>
__global__ void gather_rows_kernel(const vec_t* __restrict__ table, int64_t num_rows,
                                   int64_t row_vecs, const id_t* __restrict__ ids, int64_t num_ids,
                                   vec_t* __restrict__ out, DeviceStatus* status) {
  const int64_t total = num_ids * row_vecs;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = t / row_vecs;
    const int64_t v = t - i * row_vecs;
    const int64_t id = static_cast<int64_t>(ids[i]);
    if (id < 0 || id >= num_rows) {
      if (v == 0) record_status(status, kSeedOutOfRange, i, id, 0);
      continue;
    }
    out[t] = table[id * row_vecs + v];
  }
}

template <typename vec_t, typename id_t>
void launch(const void* table, int64_t num_rows, int64_t row_bytes, const id_t* ids,
            int64_t num_ids, void* out, DeviceStatus* status, cudaStream_t stream) {
  const int64_t row_vecs = row_bytes / static_cast<int64_t>(sizeof(vec_t));
  const int64_t total = num_ids * row_vecs;
  if (total == 0) return;
  int64_t blocks = (total + kThreads - 1) / kThreads;
  if (blocks > (1 << 20)) blocks = 1 << 20;  // grid-stride beyond this
  gather_rows_kernel<vec_t, id_t><<<static_cast<int>(blocks), kThreads, 0, stream>>>(
      static_cast<const vec_t*>(table), num_rows, row_vecs, ids, num_ids,
      static_cast<vec_t*>(out), status);
}

bool aligned(const void* p, int64_t row_bytes, int64_t width) {
  return row_bytes % width == 0 && reinterpret_cast<uintptr_t>(p) % width == 0;
}

}  // namespace

template <typename id_t>
void gather_rows(const void* table, int64_t num_rows, int64_t row_bytes, const id_t* ids,
                 int64_t num_ids, void* out, DeviceStatus* status, cudaStream_t stream) {
  if (aligned(table, row_bytes, 16) && aligned(out, row_bytes, 16)) {
    launch<uint4, id_t>(table, num_rows, row_bytes, ids, num_ids, out, status, stream);
  } else if (aligned(table, row_bytes, 8) && aligned(out, row_bytes, 8)) {
    launch<uint2, id_t>(table, num_rows, row_bytes, ids, num_ids, out, status, stream);
  } else if (aligned(table, row_bytes, 4) && aligned(out, row_bytes, 4)) {
    launch<uint32_t, id_t>(table, num_rows, row_bytes, ids, num_ids, out, status, stream);
  } else if (aligned(table, row_bytes, 2) && aligned(out, row_bytes, 2)) {
    launch<uint16_t, id_t>(table, num_rows, row_bytes, ids, num_ids, out, status, stream);
  } else {
    launch<uint8_t, id_t>(table, num_rows, row_bytes, ids, num_ids, out, status, stream);
  }
}

template void gather_rows<int32_t>(const void*, int64_t, int64_t, const int32_t*, int64_t, void*,
                                   DeviceStatus*, cudaStream_t);
template void gather_rows<int64_t>(const void*, int64_t, int64_t, const int64_t*, int64_t, void*,
                                   DeviceStatus*, cudaStream_t);

}  // namespace quiver::cuda
