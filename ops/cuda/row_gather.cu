// The one CUDA row gather. A block is a grid of (lanes x row slots): the lanes of a row
// move consecutive vectors of it (16 bytes when the layout allows), so a warp reads whole
// row segments; every thread keeps kRowsInFlight rows' loads outstanding before it stores,
// since each row costs a chain of dependent reads (id, position, row) whose latency, over
// PCIe or NVLink especially, only parallelism hides. No division per element: the 2-D
// block shape gives each thread its row and vector directly.
#include "ops/internal/launch.cuh"
#include "ops/cuda/row_gather.h"

#include <cub/device/device_radix_sort.cuh>

namespace quiver::cuda {
namespace {

constexpr int kThreadsPerBlock = 256;
// A capped grid (host reads beside a model: RowGather::max_blocks) uses the largest blocks,
// so that its warps sit on as few SMs as possible: a block that shares an SM with a GEMM's
// keeps that SM from the GEMM's next tile. On the H100, 12 blocks of 1024 took a
// prefetching epoch to 0.95-0.98 s against 0.98-1.02 s for 48 blocks of 256, the same warps
// (docs/benchmarks.md).
constexpr int kCappedThreadsPerBlock = 1024;
constexpr int kMaxLanesPerRow = 32;
// Measured on an H100 (docs/benchmarks.md): 2 and 4 rows in flight tie, 8 and 16 lose.
constexpr int kRowsInFlight = 4;
constexpr int64_t kMaxBlocks = 1 << 20;  // grid-stride beyond this

// A plain store: with no atomics across PCIe, the last failing thread's report stands,
// and any one failure is enough to raise. No word: the ids were checked ahead.
__device__ inline void report(uint64_t* error, GatherError code, int64_t index) {
  if (error == nullptr) return;
  *reinterpret_cast<volatile uint64_t*>(error) =
      (static_cast<uint64_t>(code) << kGatherErrorShift) | static_cast<uint64_t>(index);
}

// The position of ids[i], or -1 (reported) when the id or its position is out of range.
template <typename id_t, typename pos_t>
__device__ inline int64_t checked_position(const pos_t* __restrict__ positions,
                                           int64_t num_ids_allowed, int64_t tier_end,
                                           const id_t* __restrict__ ids, int64_t i,
                                           uint64_t* error, bool reporter) {
  const int64_t id = static_cast<int64_t>(ids[i]);
  if (id < 0 || id >= num_ids_allowed) {
    if (reporter) report(error, kGatherIdOutOfRange, i);
    return -1;
  }
  const int64_t pos = positions ? static_cast<int64_t>(positions[id]) : id;
  if (pos < 0 || pos >= tier_end) {
    if (reporter) report(error, kGatherPositionOutOfRange, i);
    return -1;
  }
  return pos;
}

// kGrouped: ids are checked positions in sorted order and out_rows says where each goes.
template <typename vec_t, typename id_t, typename pos_t, bool kGrouped, int kThreads>
__global__ void __launch_bounds__(kThreads)
    gather_tiered_rows_kernel(const RowTiers tiers, const pos_t* __restrict__ positions,
                              int64_t num_ids_allowed, int64_t row_vecs,
                              const id_t* __restrict__ ids, int64_t num_ids,
                              vec_t* __restrict__ out, uint64_t* error,
                              const int64_t* __restrict__ out_rows,
                              const int64_t* __restrict__ ids_end) {
  // Separate __restrict__ parameters (the launcher unpacks RowGather): only then may the
  // compiler issue every row's loads before the stores.
  const int64_t rows_per_step = int64_t{blockDim.y} * kRowsInFlight;
  const int64_t tier_end = tiers.begin[tiers.num_tiers];
  if (ids_end != nullptr && *ids_end < num_ids) num_ids = *ids_end;
  for (int64_t first = blockIdx.x * rows_per_step; first < num_ids;
       first += int64_t{gridDim.x} * rows_per_step) {
    const vec_t* src[kRowsInFlight];
    int64_t dst[kRowsInFlight];
#pragma unroll
    for (int r = 0; r < kRowsInFlight; ++r) {
      src[r] = nullptr;
      const int64_t i = first + r * int64_t{blockDim.y} + threadIdx.y;
      if (i >= num_ids) continue;
      int64_t pos;
      if constexpr (kGrouped) {
        // Checked (and reported) when it was ordered; no ids: rows in order (a scatter).
        pos = ids ? static_cast<int64_t>(ids[i]) : i;
        if (pos < 0 || pos >= tier_end) continue;
        dst[r] = out_rows[i];
      } else {
        pos = checked_position(positions, num_ids_allowed, tier_end, ids, i, error,
                               threadIdx.x == 0);
        if (pos < 0) continue;
        dst[r] = i;
      }
      // Tiers are few and their bounds sit in the kernel's parameters: a scan beats a search.
      const void* base = tiers.rows[0];
      int64_t local = pos;
#pragma unroll
      for (int k = 1; k < kMaxRowTiers; ++k) {
        if (k >= tiers.num_tiers) break;
        if (pos >= tiers.begin[k]) {
          base = tiers.rows[k];
          local = pos - tiers.begin[k];
        }
      }
      src[r] = static_cast<const vec_t*>(base) + local * row_vecs;
    }
    for (int64_t v = threadIdx.x; v < row_vecs; v += blockDim.x) {
      vec_t value[kRowsInFlight];
#pragma unroll
      for (int r = 0; r < kRowsInFlight; ++r) {
        if (src[r]) value[r] = src[r][v];
      }
#pragma unroll
      for (int r = 0; r < kRowsInFlight; ++r) {
        if (src[r]) out[dst[r] * row_vecs + v] = value[r];
      }
    }
  }
}

template <typename vec_t, typename id_t, typename pos_t, int kThreads>
cudaError_t launch_with(const RowGather<id_t, pos_t>& g, cudaStream_t stream) {
  const int64_t row_vecs = g.row_bytes / static_cast<int64_t>(sizeof(vec_t));
  const int lanes = static_cast<int>(row_vecs < kMaxLanesPerRow ? row_vecs : kMaxLanesPerRow);
  const dim3 block(lanes, kThreads / lanes);
  const int64_t rows_per_block = int64_t{block.y} * kRowsInFlight;
  int64_t blocks = (g.num_ids + rows_per_block - 1) / rows_per_block;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  if (g.max_blocks > 0 && blocks > g.max_blocks) blocks = g.max_blocks;
  if (g.out_rows != nullptr) {
    gather_tiered_rows_kernel<vec_t, id_t, pos_t, true, kThreads>
        <<<static_cast<int>(blocks), block, 0, stream>>>(
            g.tiers, g.positions, g.num_ids_allowed, row_vecs, g.ids, g.num_ids,
            static_cast<vec_t*>(g.out), g.error, g.out_rows, g.ids_end);
  } else {
    gather_tiered_rows_kernel<vec_t, id_t, pos_t, false, kThreads>
        <<<static_cast<int>(blocks), block, 0, stream>>>(
            g.tiers, g.positions, g.num_ids_allowed, row_vecs, g.ids, g.num_ids,
            static_cast<vec_t*>(g.out), g.error, nullptr, g.ids_end);
  }
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

template <typename vec_t, typename id_t, typename pos_t>
cudaError_t launch(const RowGather<id_t, pos_t>& g, cudaStream_t stream) {
  if (g.max_blocks > 0) return launch_with<vec_t, id_t, pos_t, kCappedThreadsPerBlock>(g, stream);
  return launch_with<vec_t, id_t, pos_t, kThreadsPerBlock>(g, stream);
}

// The widest vector that divides the row and every tier's and the output's alignment.
template <typename id_t, typename pos_t>
int vector_width(const RowGather<id_t, pos_t>& g) {
  uintptr_t bits = static_cast<uintptr_t>(g.row_bytes) | reinterpret_cast<uintptr_t>(g.out);
  for (int k = 0; k < g.tiers.num_tiers; ++k) bits |= reinterpret_cast<uintptr_t>(g.tiers.rows[k]);
  for (int width = 16; width > 1; width /= 2) {
    if (bits % width == 0) return width;
  }
  return 1;
}

template <typename id_t, typename pos_t>
__global__ void resolve_positions_kernel(const RowTiers tiers, const pos_t* __restrict__ positions,
                                         int64_t num_ids_allowed, const id_t* __restrict__ ids,
                                         int64_t num_ids, int64_t* __restrict__ keys,
                                         int64_t* __restrict__ rows, uint64_t* error) {
  const int64_t tier_end = tiers.begin[tiers.num_tiers];
  QUIVER_GRID_LOOP(i, num_ids) {
    const int64_t pos =
        checked_position(positions, num_ids_allowed, tier_end, ids, i, error, true);
    keys[i] = pos < 0 ? 0 : pos;
    rows[i] = i;
  }
}

template <typename id_t, typename pos_t>
__global__ void check_gather_ids_kernel(const RowTiers tiers, const pos_t* __restrict__ positions,
                                        int64_t num_ids_allowed, const id_t* __restrict__ ids,
                                        int64_t num_ids, uint64_t* error) {
  const int64_t tier_end = tiers.begin[tiers.num_tiers];
  QUIVER_GRID_LOOP(i, num_ids) {
    checked_position(positions, num_ids_allowed, tier_end, ids, i, error, true);
  }
}

__global__ void split_sorted_positions_kernel(const int64_t* __restrict__ sorted_keys,
                                              int64_t num_keys, int64_t host_begin,
                                              double gpu_share, int64_t* bounds) {
  int64_t low = 0, high = num_keys;
  while (low < high) {
    const int64_t mid = low + (high - low) / 2;
    if (sorted_keys[mid] < host_begin) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  bounds[0] = low;
  bounds[1] = low + static_cast<int64_t>(gpu_share * static_cast<double>(num_keys - low));
}

}  // namespace

cudaError_t split_sorted_positions(const int64_t* sorted_keys, int64_t num_keys,
                                   int64_t host_begin, double gpu_share, int64_t* bounds,
                                   cudaStream_t stream) {
  split_sorted_positions_kernel<<<1, 1, 0, stream>>>(sorted_keys, num_keys, host_begin,
                                                     gpu_share, bounds);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

size_t position_order_workspace_bytes(int64_t num_ids, int end_bit) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int64_t*>(nullptr),
                                  static_cast<int64_t*>(nullptr),
                                  static_cast<const int64_t*>(nullptr),
                                  static_cast<int64_t*>(nullptr), num_ids, 0, end_bit);
  return bytes;
}

template <typename id_t, typename pos_t>
cudaError_t order_by_position(const RowGather<id_t, pos_t>& g, const PositionOrder& order,
                              cudaStream_t stream) {
  if (g.num_ids == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  resolve_positions_kernel<id_t, pos_t><<<blocks_for(g.num_ids, kThreads), kThreads, 0, stream>>>(
      g.tiers, g.positions, g.num_ids_allowed, g.ids, g.num_ids, order.keys, order.rows, g.error);
  QUIVER_LAUNCH_TRY();
  size_t workspace_bytes = order.workspace_bytes;
  return cub::DeviceRadixSort::SortPairs(order.workspace, workspace_bytes, order.keys,
                                         order.sorted_keys, order.rows, order.sorted_rows,
                                         g.num_ids, 0, order.end_bit, stream);
}

template <typename id_t, typename pos_t>
cudaError_t check_gather_ids(const RowGather<id_t, pos_t>& g, cudaStream_t stream) {
  if (g.num_ids == 0) return cudaSuccess;
  constexpr int kThreads = 512;
  check_gather_ids_kernel<id_t, pos_t><<<blocks_for(g.num_ids, kThreads), kThreads, 0, stream>>>(
      g.tiers, g.positions, g.num_ids_allowed, g.ids, g.num_ids, g.error);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

template <typename id_t, typename pos_t>
cudaError_t gather_tiered_rows(const RowGather<id_t, pos_t>& g, cudaStream_t stream) {
  if (g.num_ids == 0 || g.row_bytes == 0) return cudaSuccess;
  switch (vector_width(g)) {
    case 16:
      return launch<uint4>(g, stream);
    case 8:
      return launch<uint2>(g, stream);
    case 4:
      return launch<uint32_t>(g, stream);
    case 2:
      return launch<uint16_t>(g, stream);
    default:
      return launch<uint8_t>(g, stream);
  }
}

#define QUIVER_INSTANTIATE(id_t, pos_t)                                                           \
  template cudaError_t gather_tiered_rows<id_t, pos_t>(const RowGather<id_t, pos_t>&,           \
                                                       cudaStream_t);                           \
  template cudaError_t order_by_position<id_t, pos_t>(const RowGather<id_t, pos_t>&,            \
                                                      const PositionOrder&, cudaStream_t);      \
  template cudaError_t check_gather_ids<id_t, pos_t>(const RowGather<id_t, pos_t>&, cudaStream_t);
QUIVER_INSTANTIATE(int32_t, int32_t)
QUIVER_INSTANTIATE(int32_t, int64_t)
QUIVER_INSTANTIATE(int64_t, int32_t)
QUIVER_INSTANTIATE(int64_t, int64_t)
#undef QUIVER_INSTANTIATE

}  // namespace quiver::cuda
