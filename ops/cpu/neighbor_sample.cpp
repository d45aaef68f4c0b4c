// CPU entry point of neighbor_sample: the shared hop loop (ops/cpu/hop_loop.h) over rows
// that may be weighted, cut by time and kept apart per seed (ops/cpu/rule_rows.h).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "ops/checks.h"
#include "ops/cpu/hop_loop.h"
#include "ops/cpu/rule_rows.h"
#include "ops/tree_keys.h"

namespace quiver {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
neighbor_sample_cpu(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& seeds,
                    at::IntArrayRef fanouts, bool replace,
                    const std::optional<at::Tensor>& edge_ids,
                    const std::optional<at::Tensor>& edge_weight,
                    const std::optional<at::Tensor>& edge_time,
                    const std::optional<at::Tensor>& seed_time, bool strict_time,
                    c10::string_view temporal_strategy, bool disjoint,
                    const std::optional<at::Generator>& generator,
                    const std::optional<at::Tensor>& edge_weight_cumsum) {
  check_neighbor_sample_args(indptr, indices, seeds, fanouts, replace, edge_ids, edge_weight,
                             edge_time, seed_time, temporal_strategy, disjoint,
                             edge_weight_cumsum);
  const int64_t num_nodes = indptr.numel() - 1;
  const at::Tensor seeds64 = seeds.to(at::kLong);
  const int64_t batch_size = seeds64.numel();
  check_ids_in_range(seeds64.const_data_ptr<int64_t>(), batch_size, num_nodes, "seeds");
  const int64_t* offsets = indptr.const_data_ptr<int64_t>();
  errors::check_csr_ends(offsets[0], offsets[num_nodes], indices.numel());
  const uint64_t key = cpu::draw_philox_key(generator);
  const at::Tensor seed_keys = cpu::seed_keys(seeds64, disjoint, num_nodes);
  at::Tensor seed_times;  // rows read seed_time from it
  const cpu::RuleRows rows =
      cpu::rule_rows(indptr, indices, replace, edge_weight, edge_weight_cumsum, edge_time,
                     seed_time, strict_time, temporal_strategy, disjoint, batch_size,
                     seed_times);
  auto out = AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "neighbor_sample_cpu", [&] {
    return cpu::sample_hops<index_t>(rows, indices, edge_ids, seed_keys, fanouts, key);
  });
  const auto [node_ids, batch] = split_tree_keys(out.keys, disjoint, num_nodes);
  return {node_ids, batch, out.rows, out.cols, out.edge_ids, out.nodes_per_hop, out.edges_per_hop};
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CPU, m) { m.impl("neighbor_sample", &neighbor_sample_cpu); }

}  // namespace quiver
