// check_csr, check_permutation and check_fanouts for every device: the scans are ATen reductions over the
// arrays where they lie (ops/checks.h: check_whole_csr and check_permutation, which runtime
// classes holding a CSR or a hot order call too).
#include <torch/library.h>

#include "ops/checks.h"

namespace quiver {
namespace {

void check_csr(const at::Tensor& indptr, const at::Tensor& indices,
               const std::optional<at::Tensor>& edge_ids, int64_t num_nodes) {
  check_whole_csr(indptr, indices, edge_ids, num_nodes);
}

void check_fanouts_op(at::IntArrayRef fanouts, bool replace, c10::string_view what) {
  check_fanouts(fanouts, replace, std::string(what));
}

void check_permutation_op(const at::Tensor& order, int64_t num_rows, c10::string_view what) {
  check_permutation(order, num_rows, std::string(what).c_str());
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CompositeExplicitAutograd, m) {
  m.impl("check_csr", &check_csr);
  m.impl("check_permutation", &check_permutation_op);
  m.impl("check_fanouts", &check_fanouts_op);
}

}  // namespace quiver
