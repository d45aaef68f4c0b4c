// The CPU sampling bodies that take what a sampler object holds beyond the op's arguments
// (ops/internal/sampling.h), as ops/cuda/sampling_entries.h does for the CUDA ones: the
// heterogeneous op's relation slice starts, read instead of searching each row's edge ids.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <optional>
#include <tuple>

namespace quiver::cpu {

using NeighborOutputs =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// hetero_neighbor_sample on the CPU, with relation_slice_starts (ops/internal/sampling.h;
// none: each row's slices found by searching its edge ids). The same samples.
NeighborOutputs hetero_neighbor_sample_with(
    const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& edge_ids,
    const at::Tensor& seeds, at::IntArrayRef node_type_offsets,
    at::IntArrayRef relation_src_types, at::IntArrayRef relation_dst_types,
    at::IntArrayRef relation_edge_offsets, at::IntArrayRef fanouts, bool replace,
    const std::optional<at::Tensor>& edge_weight, const std::optional<at::Tensor>& edge_time,
    const std::optional<at::Tensor>& seed_time, bool strict_time,
    c10::string_view temporal_strategy, bool disjoint,
    const std::optional<at::Generator>& generator,
    const std::optional<at::Tensor>& edge_weight_cumsum,
    const std::optional<at::Tensor>& relation_slice_starts);

}  // namespace quiver::cpu
