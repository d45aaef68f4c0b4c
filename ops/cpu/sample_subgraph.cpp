// CPU entry point of sample_subgraph: the shared hop loop (ops/cpu/hop_loop.h) over
// uniform rows (ops/cpu/row_sampling.h).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "ops/checks.h"
#include "ops/cpu/hop_loop.h"
#include "ops/cpu/row_sampling.h"

namespace quiver {
namespace {

// Every key is a node id; each row's picks are uniform (Floyd's algorithm, or independent
// draws with replacement).
struct UniformRows {
  const int64_t* indptr;
  int64_t num_nodes;
  int64_t num_edges;
  bool replace;

  int64_t key_space() const { return num_nodes; }
  int64_t rows_per_key() const { return 1; }
  int64_t rows_of(int64_t) const { return 1; }
  cpu::PlannedRow plan(int64_t node, int64_t, int64_t, int64_t fanout) const {
    return {cpu::checked_row(indptr, node, num_edges), fanout};
  }
  int64_t count(const cpu::RowSpan& row, int64_t fanout) const {
    return sampled_count(row.degree, fanout, replace);
  }
  void pick(int64_t, const cpu::RowSpan& row, int64_t fanout, at::philox_engine& rng,
            int64_t* offsets) const {
    cpu::sample_offsets(row.degree, fanout, replace, rng, offsets);
  }
  int64_t neighbor_key(int64_t, int64_t neighbor, int64_t) const {
    if (neighbor < 0 || neighbor >= num_nodes) errors::neighbor_out_of_range(neighbor, num_nodes);
    return neighbor;
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
sample_subgraph_cpu(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& seeds,
                    at::IntArrayRef fanouts, bool replace,
                    const std::optional<at::Tensor>& edge_ids,
                    const std::optional<at::Generator>& generator) {
  check_sample_subgraph_args(indptr, indices, seeds, fanouts, replace, edge_ids);
  const at::Tensor seeds64 = seeds.to(at::kLong);
  check_ids_in_range(seeds64.const_data_ptr<int64_t>(), seeds64.numel(), indptr.numel() - 1,
                     "seeds");
  const int64_t* offsets = indptr.const_data_ptr<int64_t>();
  errors::check_csr_ends(offsets[0], offsets[indptr.numel() - 1], indices.numel());
  const uint64_t key = cpu::draw_philox_key(generator);
  const auto out = AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "sample_subgraph_cpu", [&] {
    const UniformRows rows{offsets, indptr.numel() - 1, indices.numel(), replace};
    return cpu::sample_hops<index_t>(rows, indices, edge_ids, seeds64, fanouts, key);
  });
  return {out.keys, out.rows, out.cols, out.edge_ids, out.nodes_per_hop, out.edges_per_hop};
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CPU, m) { m.impl("sample_subgraph", &sample_subgraph_cpu); }

}  // namespace quiver
