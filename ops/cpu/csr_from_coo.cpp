// CPU entry point of csr_from_coo: a parallel counting sort by row.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>

#include "ops/checks.h"
#include "ops/cpu/row_sampling.h"

namespace quiver {
namespace {

constexpr int64_t kEdgesPerTask = 1 << 16;
constexpr int64_t kRowsPerTask = 1 << 12;

// Counting sort by row: count degrees, scan, scatter edge positions with atomic cursors
// (in parallel, so edges of one row land in arbitrary order), then sort each row's
// positions to restore input order: the result is deterministic and stable.
template <typename index_t>
std::tuple<at::Tensor, at::Tensor, at::Tensor> csr_from_coo_kernel(const at::Tensor& row,
                                                                   const at::Tensor& col,
                                                                   int64_t num_nodes) {
  const int64_t num_edges = row.numel();
  const index_t* row_p = row.const_data_ptr<index_t>();
  const index_t* col_p = col.const_data_ptr<index_t>();

  at::parallel_for(0, num_edges, kEdgesPerTask, [&](int64_t lo, int64_t hi) {
    for (int64_t e = lo; e < hi; ++e) {
      const int64_t r = row_p[e], c = col_p[e];
      if (r < 0 || r >= num_nodes) errors::id_out_of_range("row", e, r, num_nodes);
      if (c < 0 || c >= num_nodes) errors::id_out_of_range("col", e, c, num_nodes);
    }
  });

  at::Tensor indptr = at::zeros({num_nodes + 1}, row.options().dtype(at::kLong));
  int64_t* indptr_p = indptr.mutable_data_ptr<int64_t>();
  at::parallel_for(0, num_edges, kEdgesPerTask, [&](int64_t lo, int64_t hi) {
    for (int64_t e = lo; e < hi; ++e) {
      __atomic_fetch_add(&indptr_p[static_cast<int64_t>(row_p[e]) + 1], 1, __ATOMIC_RELAXED);
    }
  });
  for (int64_t v = 0; v < num_nodes; ++v) indptr_p[v + 1] += indptr_p[v];

  at::Tensor cursor = indptr.narrow(0, 0, num_nodes).clone();
  int64_t* cursor_p = cursor.mutable_data_ptr<int64_t>();
  at::Tensor edge_ids = at::empty({num_edges}, indptr.options());
  int64_t* eid_p = edge_ids.mutable_data_ptr<int64_t>();
  at::parallel_for(0, num_edges, kEdgesPerTask, [&](int64_t lo, int64_t hi) {
    for (int64_t e = lo; e < hi; ++e) {
      const int64_t slot = __atomic_fetch_add(&cursor_p[row_p[e]], 1, __ATOMIC_RELAXED);
      eid_p[slot] = e;
    }
  });
  at::parallel_for(0, num_nodes, kRowsPerTask, [&](int64_t lo, int64_t hi) {
    for (int64_t v = lo; v < hi; ++v) std::sort(eid_p + indptr_p[v], eid_p + indptr_p[v + 1]);
  });

  at::Tensor indices = at::empty({num_edges}, col.options());
  index_t* indices_p = indices.mutable_data_ptr<index_t>();
  at::parallel_for(0, num_edges, kEdgesPerTask, [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) indices_p[k] = col_p[eid_p[k]];
  });
  return {indptr, indices, edge_ids};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> csr_from_coo_cpu(const at::Tensor& row,
                                                                const at::Tensor& col,
                                                                int64_t num_nodes) {
  check_csr_from_coo_args(row, col, num_nodes);
  cpu::check_fits_host_memory(num_nodes + 1, 8,
                              "num_nodes = " + std::to_string(num_nodes) + ": its offsets alone",
                              "check num_nodes (it is the largest id + 1, not a byte count)");
  return AT_DISPATCH_INDEX_TYPES(row.scalar_type(), "csr_from_coo_cpu",
                                 [&] { return csr_from_coo_kernel<index_t>(row, col, num_nodes); });
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CPU, m) { m.impl("csr_from_coo", &csr_from_coo_cpu); }

}  // namespace quiver
