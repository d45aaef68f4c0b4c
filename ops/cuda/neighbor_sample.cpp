// CUDA entry point of neighbor_sample: the shared hop loop (hop_loop.h) with the rows'
// rules (row_sampling.h: RowRules): weighted rows (weighted_rows.cu), time cuts and
// disjoint trees (row_rules.cuh). One host wait per batch, and batches replayed as CUDA
// graphs for a sampler that keeps them, as sample_subgraph's.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>

#include "ops/checks.h"
#include "ops/cuda/batch_graphs.h"
#include "ops/cuda/device_access.h"
#include "ops/cuda/hop_board.h"
#include "ops/cuda/hop_loop.h"
#include "ops/cuda/sampling_entries.h"
#include "ops/sampling_rules.h"
#include "ops/tree_keys.h"

namespace quiver {
namespace {

using Outputs =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

template <typename index_t>
Outputs neighbor_sample_kernel(const at::Tensor& indptr, const at::Tensor& indices,
                               const at::Tensor& seeds, at::IntArrayRef fanouts, bool replace,
                               const std::optional<at::Tensor>& edge_ids,
                               const std::optional<at::Tensor>& edge_weight,
                               const std::optional<at::Tensor>& edge_time,
                               const std::optional<at::Tensor>& seed_time, bool strict_time,
                               bool last, bool disjoint,
                               const std::optional<at::Generator>& generator,
                               const std::optional<at::Tensor>& edge_weight_cumsum,
                               cuda::SamplerGraphs* graphs) {
  const at::Device device = seeds.device();
  const auto csr = cuda::readable_csr<index_t>(indptr, indices, edge_ids, device);
  at::Tensor seed_times;
  cuda::RowRules rules =
      cuda::rule_rows(edge_weight, edge_weight_cumsum, edge_time, seed_time, strict_time, last,
                      disjoint, csr.num_nodes, device, seed_times);

  const int64_t num_hops = static_cast<int64_t>(fanouts.size());
  const cuda::BatchShape<index_t> shape{csr,
                                        fanouts,
                                        replace,
                                        cuda::uva_rows_sorted(indices, graphs != nullptr
                                                                     ? graphs->uva_row_order()
                                                                     : std::nullopt),
                                        3,
                                        seeds.numel(),
                                        cuda::BoardLayout(num_hops),
                                        rules};
  const cuda::PhiloxKey key = cuda::batch_philox_key(shape, device, generator);
  // Replayed as a CUDA graph from the third call of a shape (batch_graphs.h), like
  // sample_subgraph: the seed times are one more input copied in before each replay.
  std::string graph_key;
  if (graphs != nullptr && graphs->captures()) {
    cuda::GraphKey inputs;
    inputs.add(indptr).add(indices).add(edge_ids).add(edge_weight).add(edge_time);
    inputs.add(edge_weight_cumsum);
    inputs.add(shape.batch_size).add(replace).add(shape.sort_rows).add(fanouts);
    inputs.add(strict_time).add(last).add(disjoint).add(seed_time.has_value());
    graph_key = inputs.str();
  }
  auto [keys, rows, cols, eids, nodes_per_hop, edges_per_hop] =
      cuda::sample_batch(shape, seeds, seed_times, key, graph_key, graphs, device);
  const auto [node_ids, batch] = split_tree_keys(keys, disjoint, csr.num_nodes);
  return {node_ids, batch, rows, cols, eids, nodes_per_hop, edges_per_hop};
}

}  // namespace

cuda::NeighborOutputs cuda::neighbor_sample_with(
    SamplerGraphs* graphs, const at::Tensor& indptr, const at::Tensor& indices,
    const at::Tensor& seeds, at::IntArrayRef fanouts, bool replace,
    const std::optional<at::Tensor>& edge_ids, const std::optional<at::Tensor>& edge_weight,
    const std::optional<at::Tensor>& edge_time, const std::optional<at::Tensor>& seed_time,
    bool strict_time, c10::string_view temporal_strategy, bool disjoint,
    const std::optional<at::Generator>& generator,
    const std::optional<at::Tensor>& edge_weight_cumsum) {
  check_neighbor_sample_args(indptr, indices, seeds, fanouts, replace, edge_ids, edge_weight,
                             edge_time, seed_time, temporal_strategy, disjoint,
                             edge_weight_cumsum);
  TORCH_CHECK(seeds.is_cuda(), "neighbor_sample on CUDA needs seeds on a GPU, got ",
              seeds.device());
  const c10::cuda::CUDAGuard guard(seeds.device());
  const at::Tensor seeds64 = seeds.to(at::kLong).contiguous();
  if (seeds64.numel() == 0) {
    const auto options = seeds64.options();
    return {at::empty({0}, options),
            at::empty({0}, options),
            at::empty({0}, options),
            at::empty({0}, options),
            at::empty({0}, options),
            at::zeros({static_cast<int64_t>(fanouts.size()) + 1}, at::kLong),
            at::zeros({static_cast<int64_t>(fanouts.size())}, at::kLong)};
  }
  const bool last = temporal_strategy == "last";
  return AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "neighbor_sample_cuda", [&] {
    return neighbor_sample_kernel<index_t>(indptr, indices, seeds64, fanouts, replace, edge_ids,
                                           edge_weight, edge_time, seed_time, strict_time, last,
                                           disjoint, generator, edge_weight_cumsum, graphs);
  });
}

namespace {

Outputs neighbor_sample_cuda(const at::Tensor& indptr, const at::Tensor& indices,
                             const at::Tensor& seeds, at::IntArrayRef fanouts, bool replace,
                             const std::optional<at::Tensor>& edge_ids,
                             const std::optional<at::Tensor>& edge_weight,
                             const std::optional<at::Tensor>& edge_time,
                             const std::optional<at::Tensor>& seed_time, bool strict_time,
                             c10::string_view temporal_strategy, bool disjoint,
                             const std::optional<at::Generator>& generator,
                             const std::optional<at::Tensor>& edge_weight_cumsum) {
  return cuda::neighbor_sample_with(nullptr, indptr, indices, seeds, fanouts, replace, edge_ids,
                                    edge_weight, edge_time, seed_time, strict_time,
                                    temporal_strategy, disjoint, generator, edge_weight_cumsum);
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CUDA, m) { m.impl("neighbor_sample", &neighbor_sample_cuda); }

}  // namespace quiver
