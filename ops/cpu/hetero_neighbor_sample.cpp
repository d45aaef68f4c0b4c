// CPU entry point of hetero_neighbor_sample: neighbor_sample's rows (ops/cpu/rule_rows.h)
// sliced by relation (sampling_rules.h: RelationRows), one row per relation ending at a
// node's type, through the shared hop loop; the output regrouped by type and relation
// (ops/hetero_layout.h).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "ops/checks.h"
#include "ops/cpu/hop_loop.h"
#include "ops/cpu/sampling_entries.h"
#include "ops/cpu/rule_rows.h"
#include "ops/hetero_layout.h"
#include "ops/tree_keys.h"

namespace quiver {

cpu::NeighborOutputs cpu::hetero_neighbor_sample_with(
    const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& edge_ids,
    const at::Tensor& seeds, at::IntArrayRef node_type_offsets,
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
  const HeteroTables tables =
      hetero_tables(node_type_offsets, relation_src_types, relation_dst_types,
                    relation_edge_offsets, fanouts);
  check_relation_slice_starts(relation_slice_starts, tables.num_slice_starts);
  TORCH_CHECK(!relation_slice_starts.has_value() || relation_slice_starts->is_cpu(),
              "relation_slice_starts must be on the CPU to sample there, got ",
              relation_slice_starts->device());
  const int64_t num_nodes = indptr.numel() - 1;
  const at::Tensor seeds64 = seeds.to(at::kLong);
  const int64_t batch_size = seeds64.numel();
  check_ids_in_range(seeds64.const_data_ptr<int64_t>(), batch_size, num_nodes, "seeds");
  const int64_t* offsets = indptr.const_data_ptr<int64_t>();
  errors::check_csr_ends(offsets[0], offsets[num_nodes], indices.numel());
  const uint64_t key = cpu::draw_philox_key(generator);
  const at::Tensor seed_keys = cpu::seed_keys(seeds64, disjoint, num_nodes);
  at::Tensor seed_times;  // rows read seed_time from it
  cpu::RuleRows rows =
      cpu::rule_rows(indptr, indices, replace, edge_weight, edge_weight_cumsum, edge_time,
                     seed_time, strict_time, temporal_strategy, disjoint, batch_size,
                     seed_times);
  rows.relations = tables.relation_rows(
      tables.block.data(), relation_slice_starts ? relation_slice_starts->const_data_ptr<int32_t>()
                                                 : nullptr);
  rows.edge_ids = edge_ids.const_data_ptr<int64_t>();
  rows.relation_fanouts = tables.block.data() + tables.fanouts_at();
  // The loop's fanouts bound each hop: the most one node may yield.
  auto out = AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "hetero_neighbor_sample_cpu", [&] {
    return cpu::sample_hops<index_t>(rows, indices, edge_ids, seed_keys, tables.node_fanouts,
                                     key);
  });
  const auto [node_ids, batch] = split_tree_keys(out.keys, disjoint, num_nodes);
  return regroup_on_cpu(tables, node_ids, batch, out.rows, out.cols, out.edge_ids,
                        out.nodes_per_hop, out.edges_per_hop);
}

namespace {

cpu::NeighborOutputs hetero_neighbor_sample_cpu(
    const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& edge_ids,
    const at::Tensor& seeds, at::IntArrayRef node_type_offsets,
    at::IntArrayRef relation_src_types, at::IntArrayRef relation_dst_types,
    at::IntArrayRef relation_edge_offsets, at::IntArrayRef fanouts, bool replace,
    const std::optional<at::Tensor>& edge_weight, const std::optional<at::Tensor>& edge_time,
    const std::optional<at::Tensor>& seed_time, bool strict_time,
    c10::string_view temporal_strategy, bool disjoint,
    const std::optional<at::Generator>& generator,
    const std::optional<at::Tensor>& edge_weight_cumsum) {
  return cpu::hetero_neighbor_sample_with(
      indptr, indices, edge_ids, seeds, node_type_offsets, relation_src_types,
      relation_dst_types, relation_edge_offsets, fanouts, replace, edge_weight, edge_time,
      seed_time, strict_time, temporal_strategy, disjoint, generator, edge_weight_cumsum,
      std::nullopt);
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CPU, m) {
  m.impl("hetero_neighbor_sample", &hetero_neighbor_sample_cpu);
}

}  // namespace quiver
