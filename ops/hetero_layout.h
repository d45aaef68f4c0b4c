// What hetero_neighbor_sample's CPU and CUDA entries share around the hop loop: the small
// tables that describe a heterogeneous graph (node types, relations, per-relation fanouts)
// turned into the loop's RelationRows and bounds, and the tables of the regrouping of the
// loop's homogeneous output (global node ids numbered by first appearance, global edge ids)
// into pyg-lib's heterogeneous layout (the rule: sampling_rules.h, HeteroGroups), with the
// CPU's regrouping; the GPU's is ops/cuda/hetero_regroup.cu. No loop over types.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

#include "ops/sampling_rules.h"

namespace quiver {

// The graph's tables from the op's int[] arguments (checked by check_hetero_args), as one
// int64 block that the GPU can copy at once, and the hop bounds the loop needs.
struct HeteroTables {
  int64_t num_types = 0, num_relations = 0, num_hops = 0;
  // [type_offsets (T + 1) | type_relations_ptr (T + 1) | type_relations (R) |
  //  relation_edge_offsets (R + 1) | fanouts (H x R) | slice_bases (T) |
  //  relation_src_types (R) | relation_dst_types (R)]
  std::vector<int64_t> block;
  int64_t num_slice_starts = 0;  // entries relation_slice_starts must hold
  int64_t rows_per_node = 1;
  std::vector<int64_t> row_fanouts;   // per hop: the largest fanout of one relation
  std::vector<int64_t> node_fanouts;  // per hop: the most one node may yield (-1: unbounded)

  int64_t type_relations_ptr_at() const { return num_types + 1; }
  int64_t type_relations_at() const { return 2 * (num_types + 1); }
  int64_t relation_edge_offsets_at() const { return type_relations_at() + num_relations; }
  int64_t fanouts_at() const { return relation_edge_offsets_at() + num_relations + 1; }
  int64_t slice_bases_at() const { return fanouts_at() + num_hops * num_relations; }
  int64_t relation_src_types_at() const { return slice_bases_at() + num_types; }
  int64_t relation_dst_types_at() const { return relation_src_types_at() + num_relations; }

  // The RelationRows over a copy of `block` at `base` (host or device), with the slice
  // starts when given (`slice_starts`: where relation_rows reads them).
  RelationRows relation_rows(const int64_t* base, const int32_t* slice_starts = nullptr) const {
    RelationRows rows;
    rows.rows_per_node = rows_per_node;
    rows.type_offsets = base;
    rows.num_types = num_types;
    rows.type_relations_ptr = base + type_relations_ptr_at();
    rows.type_relations = base + type_relations_at();
    rows.relation_edge_offsets = base + relation_edge_offsets_at();
    rows.num_relations = num_relations;
    rows.slice_starts = slice_starts;
    rows.slice_bases = base + slice_bases_at();
    return rows;
  }
};

inline HeteroTables hetero_tables(at::IntArrayRef node_type_offsets,
                                  at::IntArrayRef relation_src_types,
                                  at::IntArrayRef relation_dst_types,
                                  at::IntArrayRef relation_edge_offsets, at::IntArrayRef fanouts) {
  HeteroTables tables;
  const int64_t T = static_cast<int64_t>(node_type_offsets.size()) - 1;
  const int64_t R = static_cast<int64_t>(relation_dst_types.size());
  const int64_t H = static_cast<int64_t>(fanouts.size()) / R;
  tables.num_types = T;
  tables.num_relations = R;
  tables.num_hops = H;
  auto& block = tables.block;
  block.assign(node_type_offsets.begin(), node_type_offsets.end());
  // Relations grouped by the type they end at, in relation order.
  std::vector<int64_t> ptr(T + 1, 0), grouped;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t r = 0; r < R; ++r) {
      if (relation_dst_types[r] == t) grouped.push_back(r);
    }
    ptr[t + 1] = static_cast<int64_t>(grouped.size());
    tables.rows_per_node = std::max(tables.rows_per_node, ptr[t + 1] - ptr[t]);
  }
  block.insert(block.end(), ptr.begin(), ptr.end());
  block.insert(block.end(), grouped.begin(), grouped.end());
  block.insert(block.end(), relation_edge_offsets.begin(), relation_edge_offsets.end());
  block.insert(block.end(), fanouts.begin(), fanouts.end());
  for (int64_t t = 0; t < T; ++t) {  // slice starts: R_t - 1 a node of a type with R_t > 1
    block.push_back(tables.num_slice_starts);
    const int64_t extra = std::max<int64_t>(ptr[t + 1] - ptr[t] - 1, 0);
    tables.num_slice_starts += extra * (node_type_offsets[t + 1] - node_type_offsets[t]);
  }
  block.insert(block.end(), relation_src_types.begin(), relation_src_types.end());
  block.insert(block.end(), relation_dst_types.begin(), relation_dst_types.end());

  for (int64_t h = 0; h < H; ++h) {
    int64_t row_fanout = -1, node_fanout = 0;
    for (int64_t r = 0; r < R; ++r) row_fanout = std::max(row_fanout, fanouts[h * R + r]);
    for (int64_t t = 0; t < T && node_fanout >= 0; ++t) {
      int64_t sum = 0;
      for (int64_t k = ptr[t]; k < ptr[t + 1]; ++k) {
        const int64_t f = fanouts[h * R + grouped[k]];
        if (f < 0) {
          sum = -1;
          break;
        }
        sum = saturating_add(sum, f);
      }
      node_fanout = sum < 0 ? -1 : std::max(node_fanout, sum);
    }
    tables.row_fanouts.push_back(row_fanout);
    tables.node_fanouts.push_back(node_fanout);
  }
  return tables;
}

// Where each hop's nodes and edges start, [num_hops + 2 | num_hops + 1] entries, from the
// loop's counts per hop (int64 CPU tensors).
inline std::vector<int64_t> hop_offsets(const at::Tensor& nodes_per_hop,
                                        const at::Tensor& edges_per_hop) {
  const int64_t H = edges_per_hop.numel();
  const int64_t* nodes = nodes_per_hop.const_data_ptr<int64_t>();
  const int64_t* edges = edges_per_hop.const_data_ptr<int64_t>();
  std::vector<int64_t> offsets{0};
  for (int64_t h = 0; h <= H; ++h) offsets.push_back(offsets.back() + nodes[h]);
  offsets.push_back(0);
  for (int64_t h = 0; h < H; ++h) offsets.push_back(offsets.back() + edges[h]);
  return offsets;
}

// HeteroGroups over copies (host or device) of the graph's block and of hop_offsets.
inline HeteroGroups hetero_groups(const HeteroTables& tables, const int64_t* block,
                                  const int64_t* hops) {
  return HeteroGroups{block,
                      tables.num_types,
                      block + tables.relation_edge_offsets_at(),
                      tables.num_relations,
                      hops,
                      hops + tables.num_hops + 2,
                      tables.num_hops,
                      block + tables.relation_src_types_at(),
                      block + tables.relation_dst_types_at()};
}

// The error for a sampled edge that does not fit the layout (HeteroGroups::edge_fits):
// global edge id `edge` read from node `target` to its neighbor `source`.
[[noreturn]] inline void edge_does_not_fit(const HeteroTables& tables, int64_t edge,
                                           int64_t source, int64_t target) {
  const int64_t* block = tables.block.data();
  const int64_t* edge_offsets = block + tables.relation_edge_offsets_at();
  const int64_t num_edges = edge_offsets[tables.num_relations];
  TORCH_CHECK_INDEX(edge >= 0 && edge < num_edges, "hetero_neighbor_sample: edge_ids holds ",
                    edge, " at a sampled position of node ", target, "'s row, outside [0, ",
                    num_edges, "): edge_ids and relation_edge_offsets disagree");
  const int64_t relation = group_of(edge_offsets, tables.num_relations, edge);
  const int64_t source_type = group_of(block, tables.num_types, source);
  const int64_t target_type = group_of(block, tables.num_types, target);
  TORCH_CHECK_VALUE(false, "hetero_neighbor_sample: edge ", edge, " (relation ", relation,
                    ", from type ", block[tables.relation_src_types_at() + relation], " to type ",
                    block[tables.relation_dst_types_at() + relation], ") was read in the row of "
                    "node ", target, " (type ", target_type, ") to neighbor ", source, " (type ",
                    source_type, "): indices, edge_ids and the type tables disagree");
}

using HeteroOutputs =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// The counts read back ([num_counts()] at `counts`) as the op's two int64 tables.
inline std::pair<at::Tensor, at::Tensor> count_tables(const HeteroTables& tables,
                                                      const at::Tensor& counts) {
  const int64_t T = tables.num_types, R = tables.num_relations, H = tables.num_hops;
  return {counts.narrow(0, 0, T * (H + 1)).view({T, H + 1}).clone(),
          counts.narrow(0, T * (H + 1), R * H).view({R, H}).clone()};
}

// The hop loop's output regrouped on the CPU: a counting sort by type, then by relation
// (stable: each group keeps the loop's order), by the rule of HeteroGroups.
inline HeteroOutputs regroup_on_cpu(const HeteroTables& tables, const at::Tensor& node_ids,
                                    const at::Tensor& batch, const at::Tensor& rows,
                                    const at::Tensor& cols, const at::Tensor& edge_ids,
                                    const at::Tensor& nodes_per_hop,
                                    const at::Tensor& edges_per_hop) {
  const std::vector<int64_t> hops = hop_offsets(nodes_per_hop, edges_per_hop);
  const HeteroGroups groups = hetero_groups(tables, tables.block.data(), hops.data());
  const int64_t n = node_ids.numel(), m = edge_ids.numel();
  const auto options = node_ids.options();
  at::Tensor counts = at::zeros({groups.num_counts()}, options);
  int64_t* counts_p = counts.mutable_data_ptr<int64_t>();
  std::vector<int64_t> group(std::max(n, m)), local(std::max(n, m));

  const int64_t* ids = node_ids.const_data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) ++counts_p[groups.node_count_at(i, ids[i], group[i], local[i])];
  std::vector<int64_t> next(groups.num_types);
  for (int64_t t = 0; t < groups.num_types; ++t) next[t] = groups.type_start(counts_p, t);
  const std::vector<int64_t> starts = next;
  at::Tensor out_nodes = at::empty({n}, options), position = at::empty({n}, options);
  at::Tensor out_batch = batch.numel() > 0 ? at::empty({n}, options) : batch;
  int64_t* out_nodes_p = out_nodes.mutable_data_ptr<int64_t>();
  int64_t* position_p = position.mutable_data_ptr<int64_t>();
  const int64_t* batch_p = batch.numel() > 0 ? batch.const_data_ptr<int64_t>() : nullptr;
  int64_t* out_batch_p = batch.numel() > 0 ? out_batch.mutable_data_ptr<int64_t>() : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = next[group[i]]++;
    position_p[i] = at - starts[group[i]];
    out_nodes_p[at] = local[i];
    if (batch_p != nullptr) out_batch_p[at] = batch_p[i];
  }

  const int64_t* edges = edge_ids.const_data_ptr<int64_t>();
  const int64_t* rows_p = rows.const_data_ptr<int64_t>();
  const int64_t* cols_p = cols.const_data_ptr<int64_t>();
  const int64_t edge_counts_at = groups.num_types * (groups.num_hops + 1);
  for (int64_t i = 0; i < m; ++i) {
    if (!groups.edge_fits(edges[i], ids[rows_p[i]], ids[cols_p[i]])) {
      edge_does_not_fit(tables, edges[i], ids[rows_p[i]], ids[cols_p[i]]);
    }
    ++counts_p[groups.edge_count_at(i, edges[i], group[i], local[i])];
  }
  next.assign(groups.num_relations, 0);
  for (int64_t r = 1; r < groups.num_relations; ++r) {
    next[r] = next[r - 1];
    for (int64_t h = 0; h < groups.num_hops; ++h) {
      next[r] += counts_p[edge_counts_at + (r - 1) * groups.num_hops + h];
    }
  }
  at::Tensor out_rows = at::empty({m}, options), out_cols = at::empty({m}, options);
  at::Tensor out_edges = at::empty({m}, options);
  int64_t* out_rows_p = out_rows.mutable_data_ptr<int64_t>();
  int64_t* out_cols_p = out_cols.mutable_data_ptr<int64_t>();
  int64_t* out_edges_p = out_edges.mutable_data_ptr<int64_t>();
  for (int64_t i = 0; i < m; ++i) {
    const int64_t at = next[group[i]]++;
    out_rows_p[at] = position_p[rows_p[i]];
    out_cols_p[at] = position_p[cols_p[i]];
    out_edges_p[at] = local[i];
  }
  auto [per_type, per_relation] = count_tables(tables, counts);
  return {out_nodes, out_batch, out_rows, out_cols, out_edges, per_type, per_relation};
}

}  // namespace quiver
