// CPU entry point of gather_rows: a one-tier row gather (ops/cpu/row_gather.h).
#include <torch/library.h>

#include "ops/checks.h"
#include "ops/cpu/row_gather.h"

namespace quiver {
namespace {

at::Tensor gather_rows_cpu(const at::Tensor& table, const at::Tensor& ids) {
  check_gather_rows_args(table, ids);
  return cpu::gather_from_tiers({table}, std::nullopt, ids);
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CPU, m) { m.impl("gather_rows", &gather_rows_cpu); }

}  // namespace quiver
