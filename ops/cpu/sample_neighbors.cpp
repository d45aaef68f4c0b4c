// CPU entry point of sample_neighbors: one hop of per-row sampling (ops/cpu/row_sampling.h).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "ops/checks.h"
#include "ops/cpu/row_sampling.h"

namespace quiver {
namespace {

// Nodes per parallel task: sampling one node is cheap, so tasks must hold many.
constexpr int64_t kNodesPerTask = 256;

template <typename index_t>
std::tuple<at::Tensor, at::Tensor, at::Tensor> sample_neighbors_kernel(
    const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& seeds, int64_t fanout,
    bool replace, const std::optional<at::Tensor>& edge_ids, uint64_t key) {
  const int64_t num_seeds = seeds.numel();
  const int64_t num_edges = indices.numel();
  const int64_t* indptr_p = indptr.const_data_ptr<int64_t>();
  const index_t* indices_p = indices.const_data_ptr<index_t>();
  const int64_t* seeds_p = seeds.const_data_ptr<int64_t>();
  const int64_t* eid_p = edge_ids ? edge_ids->const_data_ptr<int64_t>() : nullptr;

  at::Tensor counts = at::empty({num_seeds}, seeds.options());
  int64_t* counts_p = counts.mutable_data_ptr<int64_t>();
  at::parallel_for(0, num_seeds, kNodesPerTask, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const auto row = cpu::checked_row(indptr_p, seeds_p[i], num_edges);
      counts_p[i] = sampled_count(row.degree, fanout, replace);
    }
  });
  at::Tensor ends = at::empty({num_seeds}, seeds.options());
  int64_t* ends_p = ends.mutable_data_ptr<int64_t>();
  const int64_t total = cpu::prefix_counts(counts_p, num_seeds, ends_p, /*hop=*/-1,
                                           /*bytes_per_edge=*/2 * sizeof(int64_t));

  at::Tensor neighbors = at::empty({total}, seeds.options());
  at::Tensor sampled_eids = at::empty({total}, seeds.options());
  int64_t* nbr_p = neighbors.mutable_data_ptr<int64_t>();
  int64_t* eid_out = sampled_eids.mutable_data_ptr<int64_t>();
  at::parallel_for(0, num_seeds, kNodesPerTask, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t out = ends_p[i] - counts_p[i];
      const int64_t begin = indptr_p[seeds_p[i]];
      const int64_t degree = indptr_p[seeds_p[i] + 1] - begin;
      at::philox_engine rng(key, static_cast<uint64_t>(i));
      cpu::sample_offsets(degree, fanout, replace, rng, eid_out + out);
      for (int64_t k = out; k < ends_p[i]; ++k) {
        const int64_t pos = begin + eid_out[k];
        nbr_p[k] = static_cast<int64_t>(indices_p[pos]);
        eid_out[k] = eid_p ? eid_p[pos] : pos;
      }
    }
  });
  return {counts, neighbors, sampled_eids};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> sample_neighbors_cpu(
    const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& seeds, int64_t fanout,
    bool replace, const std::optional<at::Tensor>& edge_ids,
    const std::optional<at::Generator>& generator) {
  check_sample_neighbors_args(indptr, indices, seeds, fanout, replace, edge_ids);
  const int64_t num_nodes = indptr.numel() - 1;
  const at::Tensor seeds64 = seeds.to(at::kLong);
  check_ids_in_range(seeds64.const_data_ptr<int64_t>(), seeds64.numel(), num_nodes, "seeds");
  const int64_t* offsets = indptr.const_data_ptr<int64_t>();
  errors::check_csr_ends(offsets[0], offsets[indptr.numel() - 1], indices.numel());
  const uint64_t key = cpu::draw_philox_key(generator);
  return AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "sample_neighbors_cpu", [&] {
    return sample_neighbors_kernel<index_t>(indptr, indices, seeds64, fanout, replace, edge_ids,
                                            key);
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CPU, m) { m.impl("sample_neighbors", &sample_neighbors_cpu); }

}  // namespace quiver
