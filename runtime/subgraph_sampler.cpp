#include <quiver/subgraph_sampler.h>

#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include "ops/checks.h"
#include "ops/internal/sampling.h"

namespace quiver::runtime {

namespace {

void check_strategy(const std::string& strategy) {
  TORCH_CHECK_VALUE(strategy == "uniform" || strategy == "last",
                    "temporal_strategy must be 'uniform' or 'last', got '", strategy, "'");
}

}  // namespace

SubgraphSampler::SubgraphSampler(at::Tensor indptr, at::Tensor indices,
                                 std::optional<at::Tensor> edge_ids, std::vector<int64_t> fanouts,
                                 bool replace, std::optional<at::Tensor> cached_indices,
                                 std::optional<at::Tensor> cached_starts,
                                 std::optional<at::Tensor> edge_weight,
                                 std::optional<at::Tensor> edge_time, bool strict_time,
                                 std::string temporal_strategy, bool disjoint,
                                 std::optional<at::Tensor> edge_weight_cumsum,
                                 bool capture_batches)
    : indptr_(std::move(indptr)),
      indices_(std::move(indices)),
      edge_ids_(std::move(edge_ids)),
      cached_indices_(std::move(cached_indices)),
      cached_starts_(std::move(cached_starts)),
      edge_weight_(std::move(edge_weight)),
      edge_time_(std::move(edge_time)),
      edge_weight_cumsum_(std::move(edge_weight_cumsum)),
      fanouts_(std::move(fanouts)),
      replace_(replace),
      strict_time_(strict_time),
      disjoint_(disjoint),
      temporal_strategy_(std::move(temporal_strategy)) {
  // What stays the same is checked once here; the seeds, and the rows a batch touches, by
  // the op's own checks each batch.
  check_csr_shapes(indptr_, indices_, edge_ids_);
  check_fanouts(fanouts_, replace_);
  check_topology_cache(indptr_, indices_, cached_indices_, cached_starts_);
  check_strategy(temporal_strategy_);
  graphs_ = std::make_unique<internal::SamplingGraphs>(capture_batches);
}

SubgraphSampler::~SubgraphSampler() = default;

namespace {

// -1 (by the lists' size), 0 or 1 as SamplingGraphs takes it.
std::optional<bool> uva_row_order_of(int64_t order) {
  TORCH_CHECK_VALUE(order >= -1 && order <= 1,
                    "uva_row_order must be -1 (by the lists' size), 0 (never) or 1 (always), "
                    "got ", order);
  if (order < 0) return std::nullopt;
  return order == 1;
}

}  // namespace

bool SubgraphSampler::captures_batches() const { return graphs_->captures(); }

void SubgraphSampler::set_uva_row_order(int64_t order) {
  graphs_->set_uva_row_order(uva_row_order_of(order));
}

SubgraphSampler::Subgraph SubgraphSampler::sample_subgraph(
    const at::Tensor& seeds, const std::optional<at::Generator>& generator) {
  TORCH_CHECK_VALUE(!edge_weight_ && !edge_time_ && !disjoint_,
                    "SubgraphSampler.sample_subgraph is uniform sampling; this sampler has "
                    "weights, times or trees: call neighbor_sample");
  return internal::sample_subgraph(graphs_.get(), indptr_, indices_, seeds, fanouts_, replace_,
                                   edge_ids_, generator, cached_indices_, cached_starts_);
}

SubgraphSampler::Subgraph SubgraphSampler::sample_subgraph_on(
    const at::Tensor& seeds, int64_t device, const std::optional<at::Generator>& generator) {
  TORCH_CHECK_VALUE(!edge_weight_ && !edge_time_ && !disjoint_,
                    "SubgraphSampler.sample_subgraph_on is uniform sampling; this sampler has "
                    "weights, times or trees: call neighbor_sample");
  const int64_t gpus = static_cast<int64_t>(at::getNumGPUs());
  TORCH_CHECK_VALUE(device >= 0 && device < gpus, "device must be a GPU index below ", gpus,
                    " (this process's GPUs), got ", device);
  if (seeds.is_cuda()) {
    TORCH_CHECK_VALUE(seeds.get_device() == device, "seeds are on cuda:", seeds.get_device(),
                      " but device is ", device, ": pass host seeds, or seeds on that GPU");
    return sample_subgraph(seeds, generator);
  }
  return internal::sample_subgraph(graphs_.get(), indptr_, indices_, seeds, fanouts_, replace_,
                                   edge_ids_, generator, cached_indices_, cached_starts_,
                                   at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device)));
}

SubgraphSampler::Sample SubgraphSampler::neighbor_sample(
    const at::Tensor& seeds, const std::optional<at::Tensor>& seed_time,
    const std::optional<at::Generator>& generator) {
  TORCH_CHECK_VALUE(!cached_indices_, "a topology cache serves uniform sampling only "
                    "(SubgraphSampler.sample_subgraph)");
  return internal::neighbor_sample(graphs_.get(), indptr_, indices_, seeds, fanouts_, replace_,
                                   edge_ids_, edge_weight_, edge_time_, seed_time, strict_time_,
                                   temporal_strategy_, disjoint_, generator, edge_weight_cumsum_);
}

HeteroSubgraphSampler::HeteroSubgraphSampler(
    at::Tensor indptr, at::Tensor indices, at::Tensor edge_ids,
    std::vector<int64_t> node_type_offsets, std::vector<int64_t> relation_src_types,
    std::vector<int64_t> relation_dst_types, std::vector<int64_t> relation_edge_offsets,
    std::vector<int64_t> fanouts, bool replace, std::optional<at::Tensor> edge_weight,
    std::optional<at::Tensor> edge_time, bool strict_time, std::string temporal_strategy,
    bool disjoint, std::optional<at::Tensor> edge_weight_cumsum,
    std::optional<at::Tensor> relation_slice_starts, bool capture_batches)
    : indptr_(std::move(indptr)),
      indices_(std::move(indices)),
      edge_ids_(std::move(edge_ids)),
      node_type_offsets_(std::move(node_type_offsets)),
      relation_src_types_(std::move(relation_src_types)),
      relation_dst_types_(std::move(relation_dst_types)),
      relation_edge_offsets_(std::move(relation_edge_offsets)),
      fanouts_(std::move(fanouts)),
      replace_(replace),
      strict_time_(strict_time),
      disjoint_(disjoint),
      edge_weight_(std::move(edge_weight)),
      edge_time_(std::move(edge_time)),
      edge_weight_cumsum_(std::move(edge_weight_cumsum)),
      relation_slice_starts_(std::move(relation_slice_starts)),
      temporal_strategy_(std::move(temporal_strategy)) {
  check_csr_shapes(indptr_, indices_, edge_ids_);
  check_strategy(temporal_strategy_);
  for (const int64_t f : fanouts_) check_fanout(f, replace_, "fanouts");
  graphs_ = std::make_unique<internal::SamplingGraphs>(capture_batches);
}

HeteroSubgraphSampler::~HeteroSubgraphSampler() = default;

bool HeteroSubgraphSampler::captures_batches() const { return graphs_->captures(); }

void HeteroSubgraphSampler::set_uva_row_order(int64_t order) {
  graphs_->set_uva_row_order(uva_row_order_of(order));
}

HeteroSubgraphSampler::Sample HeteroSubgraphSampler::sample(
    const at::Tensor& seeds, const std::optional<at::Tensor>& seed_time,
    const std::optional<at::Generator>& generator) {
  return internal::hetero_neighbor_sample(
      graphs_.get(), indptr_, indices_, edge_ids_, seeds, node_type_offsets_,
      relation_src_types_, relation_dst_types_, relation_edge_offsets_, fanouts_, replace_,
      edge_weight_, edge_time_, seed_time, strict_time_, temporal_strategy_, disjoint_, generator,
      edge_weight_cumsum_, relation_slice_starts_);
}

}  // namespace quiver::runtime
