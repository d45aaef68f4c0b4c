// CUDA entry point of gather_rows: a one-tier gather_tiered_rows. The table may sit on the
// ids' GPU or in pinned host memory (read over PCIe with zero copy); rows land on the ids'
// GPU either way.
#include <torch/library.h>

#include "ops/checks.h"
#include "ops/cuda/gather_tiered_rows.h"

namespace quiver {
namespace {

at::Tensor gather_rows_cuda(const at::Tensor& table, const at::Tensor& ids) {
  check_gather_rows_args(table, ids);
  return cuda::gather_from_tiers({table}, std::nullopt, ids, /*group_host_reads=*/true,
                                 /*stage_host_rows=*/false, "gather_rows");
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CUDA, m) { m.impl("gather_rows", &gather_rows_cuda); }

}  // namespace quiver
