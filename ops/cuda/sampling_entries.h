// The CUDA sampling ops' bodies with the sampler's captured batches as an argument
// (batch_graphs.h: SamplerGraphs). The ops pass none, and so never capture: each call runs
// its kernels as launched. A runtime sampler class passes its own (ops/internal/sampling.h),
// so that its batches are replayed as CUDA graphs and freed with it. sample_subgraph_with
// also takes seeds in host memory (host_seeds_on: the GPU to sample on), which reach the GPU
// with the batch's bookkeeping in one upload instead of a copy of their own.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Device.h>
#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <optional>
#include <tuple>

namespace quiver::cuda {

class SamplerGraphs;

using SubgraphOutputs =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using NeighborOutputs =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

SubgraphOutputs sample_subgraph_with(SamplerGraphs* graphs, const at::Tensor& indptr,
                                     const at::Tensor& indices, const at::Tensor& seeds,
                                     at::IntArrayRef fanouts, bool replace,
                                     const std::optional<at::Tensor>& edge_ids,
                                     const std::optional<at::Generator>& generator,
                                     const std::optional<at::Tensor>& cached_indices,
                                     const std::optional<at::Tensor>& cached_starts,
                                     std::optional<at::Device> host_seeds_on = std::nullopt);

NeighborOutputs neighbor_sample_with(SamplerGraphs* graphs, const at::Tensor& indptr,
                                     const at::Tensor& indices, const at::Tensor& seeds,
                                     at::IntArrayRef fanouts, bool replace,
                                     const std::optional<at::Tensor>& edge_ids,
                                     const std::optional<at::Tensor>& edge_weight,
                                     const std::optional<at::Tensor>& edge_time,
                                     const std::optional<at::Tensor>& seed_time, bool strict_time,
                                     c10::string_view temporal_strategy, bool disjoint,
                                     const std::optional<at::Generator>& generator,
                                     const std::optional<at::Tensor>& edge_weight_cumsum);

NeighborOutputs hetero_neighbor_sample_with(
    SamplerGraphs* graphs, const at::Tensor& indptr, const at::Tensor& indices,
    const at::Tensor& edge_ids, const at::Tensor& seeds, at::IntArrayRef node_type_offsets,
    at::IntArrayRef relation_src_types, at::IntArrayRef relation_dst_types,
    at::IntArrayRef relation_edge_offsets, at::IntArrayRef fanouts, bool replace,
    const std::optional<at::Tensor>& edge_weight, const std::optional<at::Tensor>& edge_time,
    const std::optional<at::Tensor>& seed_time, bool strict_time,
    c10::string_view temporal_strategy, bool disjoint,
    const std::optional<at::Generator>& generator,
    const std::optional<at::Tensor>& edge_weight_cumsum,
    const std::optional<at::Tensor>& relation_slice_starts);

}  // namespace quiver::cuda
