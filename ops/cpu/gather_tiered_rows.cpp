// CPU entry point of gather_tiered_rows (ops/cpu/row_gather.h).
#include <torch/library.h>

#include "ops/checks.h"
#include "ops/cpu/row_gather.h"
#include "ops/internal/gather.h"

namespace quiver {
namespace {

at::Tensor gather_tiered_rows_cpu(at::TensorList tiers, const std::optional<at::Tensor>& positions,
                                  const at::Tensor& ids) {
  check_gather_tiered_rows_args(tiers, positions, ids);
  return cpu::gather_from_tiers(tiers, positions, ids);
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CPU, m) { m.impl("gather_tiered_rows", &gather_tiered_rows_cpu); }

namespace internal {

void gather_from_tiers_into(at::ArrayRef<at::Tensor> tiers,
                            const std::optional<at::Tensor>& positions, const at::Tensor& ids,
                            at::Tensor& out) {
  cpu::gather_from_tiers_into(tiers, positions, ids, out);
}

void scatter_rows_into(const at::Tensor& rows, const at::Tensor& where, at::Tensor& out) {
  cpu::scatter_rows_into(rows, where, out);
}

}  // namespace internal
}  // namespace quiver
