// check_csr for every device: the scan is ATen reductions over the arrays where they lie
// (ops/checks.h: check_whole_csr, which runtime classes holding a CSR call too).
#include <torch/library.h>

#include "ops/checks.h"

namespace quiver {
namespace {

void check_csr(const at::Tensor& indptr, const at::Tensor& indices,
               const std::optional<at::Tensor>& edge_ids, int64_t num_nodes) {
  check_whole_csr(indptr, indices, edge_ids, num_nodes);
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CompositeExplicitAutograd, m) { m.impl("check_csr", &check_csr); }

}  // namespace quiver
