// The one CUDA row gather. A block is a grid of (lanes x row slots): the lanes of a row
// move consecutive vectors of it (16 bytes when the layout allows), so a warp reads whole
// row segments; every thread keeps kRowsInFlight rows' loads outstanding before it stores,
// since each row costs a chain of dependent reads (id, position, row) whose latency, over
// PCIe or NVLink especially, only parallelism hides. No division per element: the 2-D
// block shape gives each thread its row and vector directly.
#include "ops/cuda/launch.cuh"
#include "ops/cuda/row_gather.h"

namespace quiver::cuda {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int kMaxLanesPerRow = 32;
// Measured on an H100 (docs/benchmarks.md): 2 and 4 rows in flight tie, 8 and 16 lose.
constexpr int kRowsInFlight = 4;
constexpr int64_t kMaxBlocks = 1 << 20;  // grid-stride beyond this

// A plain store: with no atomics across PCIe, the last failing thread's report stands,
// and any one failure is enough to raise.
__device__ inline void report(uint64_t* error, GatherError code, int64_t index) {
  *reinterpret_cast<volatile uint64_t*>(error) =
      (static_cast<uint64_t>(code) << kGatherErrorShift) | static_cast<uint64_t>(index);
}

template <typename vec_t, typename id_t, typename pos_t>
__global__ void __launch_bounds__(kThreadsPerBlock)
    gather_tiered_rows_kernel(const RowGather<id_t, pos_t> g, int64_t row_vecs) {
  const int64_t rows_per_step = int64_t{blockDim.y} * kRowsInFlight;
  const int64_t tier_end = g.tiers.begin[g.tiers.num_tiers];
  auto* out = static_cast<vec_t*>(g.out);
  for (int64_t first = blockIdx.x * rows_per_step; first < g.num_ids;
       first += int64_t{gridDim.x} * rows_per_step) {
    const vec_t* src[kRowsInFlight];
#pragma unroll
    for (int r = 0; r < kRowsInFlight; ++r) {
      src[r] = nullptr;
      const int64_t i = first + r * int64_t{blockDim.y} + threadIdx.y;
      if (i >= g.num_ids) continue;
      const int64_t id = static_cast<int64_t>(g.ids[i]);
      if (id < 0 || id >= g.num_ids_allowed) {
        if (threadIdx.x == 0) report(g.error, kGatherIdOutOfRange, i);
        continue;
      }
      const int64_t pos = g.positions ? static_cast<int64_t>(g.positions[id]) : id;
      if (pos < 0 || pos >= tier_end) {
        if (threadIdx.x == 0) report(g.error, kGatherPositionOutOfRange, i);
        continue;
      }
      // Tiers are few and their bounds sit in the kernel's parameters: a scan beats a search.
      const void* base = g.tiers.rows[0];
      int64_t local = pos;
#pragma unroll
      for (int k = 1; k < kMaxRowTiers; ++k) {
        if (k >= g.tiers.num_tiers) break;
        if (pos >= g.tiers.begin[k]) {
          base = g.tiers.rows[k];
          local = pos - g.tiers.begin[k];
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
        if (src[r]) {
          const int64_t i = first + r * int64_t{blockDim.y} + threadIdx.y;
          out[i * row_vecs + v] = value[r];
        }
      }
    }
  }
}

template <typename vec_t, typename id_t, typename pos_t>
cudaError_t launch(const RowGather<id_t, pos_t>& g, cudaStream_t stream) {
  const int64_t row_vecs = g.row_bytes / static_cast<int64_t>(sizeof(vec_t));
  const int lanes = static_cast<int>(row_vecs < kMaxLanesPerRow ? row_vecs : kMaxLanesPerRow);
  const dim3 block(lanes, kThreadsPerBlock / lanes);
  const int64_t rows_per_block = int64_t{block.y} * kRowsInFlight;
  int64_t blocks = (g.num_ids + rows_per_block - 1) / rows_per_block;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  gather_tiered_rows_kernel<vec_t, id_t, pos_t>
      <<<static_cast<int>(blocks), block, 0, stream>>>(g, row_vecs);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
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

}  // namespace

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

#define QUIVER_INSTANTIATE(id_t, pos_t) \
  template cudaError_t gather_tiered_rows<id_t, pos_t>(const RowGather<id_t, pos_t>&, cudaStream_t);
QUIVER_INSTANTIATE(int32_t, int32_t)
QUIVER_INSTANTIATE(int32_t, int64_t)
QUIVER_INSTANTIATE(int64_t, int32_t)
QUIVER_INSTANTIATE(int64_t, int64_t)
#undef QUIVER_INSTANTIATE

}  // namespace quiver::cuda
