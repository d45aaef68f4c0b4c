#include "ops/checks.h"
#include "ops/cuda/gather_kernels.h"
#include "ops/cuda/sampling_host.h"

#include <torch/library.h>

namespace quiver {
namespace {

// The table may sit on the ids' GPU or in pinned host memory (read over PCIe with zero
// copy); rows land on the ids' GPU either way.
at::Tensor gather_rows_cuda(const at::Tensor& table, const at::Tensor& ids) {
  check_gather_rows_args(table, ids);
  TORCH_CHECK(ids.is_cuda(), "gather_rows on CUDA needs ids on a GPU, got ids on ", ids.device(),
              " (table on ", table.device(), ")");
  const c10::cuda::CUDAGuard guard(ids.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  std::vector<int64_t> shape = table.sizes().vec();
  shape[0] = ids.numel();
  at::Tensor out = at::empty(shape, table.options().device(ids.device()));
  if (out.numel() == 0) return out;
  const void* source = cuda::gpu_readable(table, "table", ids.device());
  const int64_t num_rows = table.size(0);
  const int64_t row_bytes = static_cast<int64_t>(table.nbytes()) / std::max<int64_t>(num_rows, 1);
  cuda::HopBoard board(ids.device(), /*words=*/0);
  AT_DISPATCH_INDEX_TYPES(ids.scalar_type(), "gather_rows_cuda", [&] {
    cuda::gather_rows<index_t>(source, num_rows, row_bytes, ids.const_data_ptr<index_t>(),
                               ids.numel(), out.mutable_data_ptr(), board.status(), stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  board.read_ids_status(stream, num_rows);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CUDA, m) {
  m.impl("gather_rows", &gather_rows_cuda);
}

}  // namespace quiver
