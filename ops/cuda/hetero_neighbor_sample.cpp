// CUDA entry point of hetero_neighbor_sample: neighbor_sample's hop loop (hop_loop.h) with
// rows sliced by relation (RowRules::relations), every relation of a hop in the same
// launches, then the output regrouped by type and relation (hetero_regroup.cu). For a
// sampler that keeps captures (batch_graphs.h: SamplerGraphs), the hop loop is captured as
// a CUDA graph and replayed as neighbor_sample's, and the graph's small tables, which a
// capture reads, stay on the GPU with that sampler; the op itself uploads them each call.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <optional>
#include <string>

#include "ops/checks.h"
#include "ops/cuda/batch_graphs.h"
#include "ops/cuda/device_access.h"
#include "ops/cuda/hetero_regroup.h"
#include "ops/cuda/hop_loop.h"
#include "ops/cuda/sampling_entries.h"
#include "ops/hetero_layout.h"
#include "ops/sampling_rules.h"
#include "ops/tree_keys.h"

namespace quiver {
namespace {

using Outputs =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// A small host table on the GPU without a host wait: copied from pinned memory (PyTorch's
// host allocator keeps the pinned block until the copy is done).
at::Tensor to_device(const std::vector<int64_t>& values, const at::Device& device) {
  return at::tensor(values, at::kLong).pin_memory().to(device, /*non_blocking=*/true);
}

// The hop loop's output regrouped by type and relation (hetero_regroup.cu), the counts
// read back in one copy. `block` is the graph's tables on the GPU.
Outputs regroup_on_gpu(const HeteroTables& tables, const at::Tensor& block,
                       const at::Tensor& node_ids, const at::Tensor& batch,
                       const at::Tensor& rows, const at::Tensor& cols, const at::Tensor& eids,
                       const at::Tensor& nodes_per_hop, const at::Tensor& edges_per_hop) {
  const at::Device device = node_ids.device();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const auto options = node_ids.options();
  const at::Tensor hops = to_device(hop_offsets(nodes_per_hop, edges_per_hop), device);
  const HeteroGroups groups =
      hetero_groups(tables, block.const_data_ptr<int64_t>(), hops.const_data_ptr<int64_t>());
  const int64_t n = node_ids.numel(), m = eids.numel(), most = std::max(n, m);
  // Counts, then each type's start, then the index + 1 of an edge that does not fit.
  at::Tensor counts = at::empty({groups.num_counts() + groups.num_types + 1}, options);
  at::Tensor keys = at::empty({2, most}, options.dtype(at::kInt));
  at::Tensor scratch = at::empty({3, most}, options);  // local ids, iota, order
  const size_t sort_bytes = std::max(
      cuda::group_sort_workspace_bytes(n, groups.num_types),
      cuda::group_sort_workspace_bytes(m, groups.num_relations));
  at::Tensor sort_space = cuda::workspace(sort_bytes, device);
  int32_t* keys_p = keys.mutable_data_ptr<int32_t>();
  int64_t* scratch_p = scratch.mutable_data_ptr<int64_t>();
  at::Tensor out_nodes = at::empty({n}, options), position = at::empty({n}, options);
  at::Tensor out_batch = batch.numel() > 0 ? at::empty({n}, options) : batch;
  C10_CUDA_CHECK(cuda::group_nodes(
      groups, node_ids.const_data_ptr<int64_t>(),
      batch.numel() > 0 ? batch.const_data_ptr<int64_t>() : nullptr, n,
      counts.mutable_data_ptr<int64_t>(), keys_p, keys_p + most, scratch_p, scratch_p + most,
      scratch_p + 2 * most, sort_space.mutable_data_ptr(), sort_bytes,
      out_nodes.mutable_data_ptr<int64_t>(),
      batch.numel() > 0 ? out_batch.mutable_data_ptr<int64_t>() : nullptr,
      position.mutable_data_ptr<int64_t>(), stream));
  at::Tensor out_rows = at::empty({m}, options), out_cols = at::empty({m}, options);
  at::Tensor out_edges = at::empty({m}, options);
  C10_CUDA_CHECK(cuda::group_edges(
      groups, eids.const_data_ptr<int64_t>(), node_ids.const_data_ptr<int64_t>(),
      rows.const_data_ptr<int64_t>(),
      cols.const_data_ptr<int64_t>(), position.const_data_ptr<int64_t>(), m,
      counts.mutable_data_ptr<int64_t>(), keys_p, keys_p + most, scratch_p, scratch_p + most,
      scratch_p + 2 * most, sort_space.mutable_data_ptr(), sort_bytes,
      out_rows.mutable_data_ptr<int64_t>(), out_cols.mutable_data_ptr<int64_t>(),
      out_edges.mutable_data_ptr<int64_t>(), stream));
  const at::Tensor host_counts = counts.to(at::kCPU);
  const int64_t misfit = host_counts[groups.num_counts() + groups.num_types].item<int64_t>();
  if (misfit > 0) {
    edge_does_not_fit(tables, eids[misfit - 1].item<int64_t>(),
                      node_ids[rows[misfit - 1].item<int64_t>()].item<int64_t>(),
                      node_ids[cols[misfit - 1].item<int64_t>()].item<int64_t>());
  }
  auto [per_type, per_relation] =
      count_tables(tables, host_counts.narrow(0, 0, groups.num_counts()));
  return {out_nodes, out_batch, out_rows, out_cols, out_edges, per_type, per_relation};
}

template <typename index_t>
Outputs hetero_kernel(const at::Tensor& indptr, const at::Tensor& indices,
                      const at::Tensor& edge_ids, const at::Tensor& seeds,
                      const HeteroTables& tables, bool replace,
                      const std::optional<at::Tensor>& edge_weight,
                      const std::optional<at::Tensor>& edge_time,
                      const std::optional<at::Tensor>& seed_time, bool strict_time, bool last,
                      bool disjoint, const std::optional<at::Generator>& generator,
                      const std::optional<at::Tensor>& edge_weight_cumsum,
                      const std::optional<at::Tensor>& relation_slice_starts,
                      cuda::SamplerGraphs* graphs) {
  const at::Device device = seeds.device();
  const auto csr = cuda::readable_csr<index_t>(indptr, indices, edge_ids, device);
  const std::optional<at::Tensor> kept =
      graphs != nullptr ? graphs->kept_tables(tables.block, device) : std::nullopt;
  const at::Tensor block = kept ? *kept : to_device(tables.block, device);
  const int64_t* block_p = block.const_data_ptr<int64_t>();
  at::Tensor seed_times;
  cuda::RowRules rules =
      cuda::rule_rows(edge_weight, edge_weight_cumsum, edge_time, seed_time, strict_time, last,
                      disjoint, csr.num_nodes, device, seed_times);
  rules.relations = tables.relation_rows(
      block_p, relation_slice_starts ? static_cast<const int32_t*>(cuda::gpu_readable(
                                           *relation_slice_starts, "relation_slice_starts", device))
                                     : nullptr);

  cuda::BatchShape<index_t> shape{csr,
                                  tables.row_fanouts,
                                  replace,
                                  cuda::uva_rows_sorted(indices, graphs != nullptr
                                                                     ? graphs->uva_row_order()
                                                                     : std::nullopt),
                                  3,
                                  seeds.numel(),
                                  cuda::BoardLayout(tables.num_hops),
                                  rules};
  shape.node_fanouts = tables.node_fanouts;
  shape.relation_fanouts = block_p + tables.fanouts_at();
  const cuda::PhiloxKey key = cuda::batch_philox_key(shape, device, generator);
  // Captured only over kept tables: their address, never reused, stands for their content.
  std::string graph_key;
  if (kept && graphs->captures()) {
    cuda::GraphKey inputs;
    inputs.add(indptr).add(indices).add(edge_ids).add(edge_weight).add(edge_time);
    inputs.add(edge_weight_cumsum).add(relation_slice_starts).add(block);
    inputs.add(shape.batch_size).add(replace).add(shape.sort_rows);
    inputs.add(strict_time).add(last).add(disjoint).add(seed_time.has_value());
    graph_key = inputs.str();
  }
  auto [keys, rows, cols, eids, nodes_per_hop, edges_per_hop] =
      cuda::sample_batch(shape, seeds, seed_times, key, graph_key, graphs, device);
  const auto [node_ids, batch] = split_tree_keys(keys, disjoint, csr.num_nodes);
  return regroup_on_gpu(tables, block, node_ids, batch, rows, cols, eids, nodes_per_hop,
                        edges_per_hop);
}

}  // namespace

cuda::NeighborOutputs cuda::hetero_neighbor_sample_with(
    SamplerGraphs* graphs, const at::Tensor& indptr, const at::Tensor& indices,
    const at::Tensor& edge_ids, const at::Tensor& seeds, at::IntArrayRef node_type_offsets,
    at::IntArrayRef relation_src_types, at::IntArrayRef relation_dst_types,
    at::IntArrayRef relation_edge_offsets, at::IntArrayRef fanouts, bool replace,
    const std::optional<at::Tensor>& edge_weight, const std::optional<at::Tensor>& edge_time,
    const std::optional<at::Tensor>& seed_time, bool strict_time,
    c10::string_view temporal_strategy, bool disjoint,
    const std::optional<at::Generator>& generator,
    const std::optional<at::Tensor>& edge_weight_cumsum,
    const std::optional<at::Tensor>& relation_slice_starts) {
  check_hetero_neighbor_sample_args(indptr, indices, edge_ids, seeds, node_type_offsets,
                                    relation_src_types, relation_dst_types,
                                    relation_edge_offsets, fanouts, replace, edge_weight,
                                    edge_time, seed_time, temporal_strategy, disjoint,
                                    edge_weight_cumsum);
  TORCH_CHECK(seeds.is_cuda(), "hetero_neighbor_sample on CUDA needs seeds on a GPU, got ",
              seeds.device());
  const c10::cuda::CUDAGuard guard(seeds.device());
  const HeteroTables tables =
      hetero_tables(node_type_offsets, relation_src_types, relation_dst_types,
                    relation_edge_offsets, fanouts);
  check_relation_slice_starts(relation_slice_starts, tables.num_slice_starts);
  const at::Tensor seeds64 = seeds.to(at::kLong).contiguous();
  if (seeds64.numel() == 0) {
    const auto options = seeds64.options();
    return {at::empty({0}, options),
            at::empty({0}, options),
            at::empty({0}, options),
            at::empty({0}, options),
            at::empty({0}, options),
            at::zeros({tables.num_types, tables.num_hops + 1}, at::kLong),
            at::zeros({tables.num_relations, tables.num_hops}, at::kLong)};
  }
  const bool last = temporal_strategy == "last";
  return AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "hetero_neighbor_sample_cuda", [&] {
    return hetero_kernel<index_t>(indptr, indices, edge_ids, seeds64, tables, replace,
                                  edge_weight, edge_time, seed_time, strict_time, last,
                                  disjoint, generator, edge_weight_cumsum,
                                  relation_slice_starts, graphs);
  });
}

namespace {

Outputs hetero_neighbor_sample_cuda(
    const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& edge_ids,
    const at::Tensor& seeds, at::IntArrayRef node_type_offsets,
    at::IntArrayRef relation_src_types, at::IntArrayRef relation_dst_types,
    at::IntArrayRef relation_edge_offsets, at::IntArrayRef fanouts, bool replace,
    const std::optional<at::Tensor>& edge_weight, const std::optional<at::Tensor>& edge_time,
    const std::optional<at::Tensor>& seed_time, bool strict_time,
    c10::string_view temporal_strategy, bool disjoint,
    const std::optional<at::Generator>& generator,
    const std::optional<at::Tensor>& edge_weight_cumsum) {
  return cuda::hetero_neighbor_sample_with(
      nullptr, indptr, indices, edge_ids, seeds, node_type_offsets, relation_src_types,
      relation_dst_types, relation_edge_offsets, fanouts, replace, edge_weight, edge_time,
      seed_time, strict_time, temporal_strategy, disjoint, generator, edge_weight_cumsum,
      std::nullopt);
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CUDA, m) {
  m.impl("hetero_neighbor_sample", &hetero_neighbor_sample_cuda);
}

}  // namespace quiver
