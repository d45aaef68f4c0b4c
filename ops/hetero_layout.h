// What hetero_neighbor_sample's CPU and CUDA entries share around the hop loop: the small
// tables that describe a heterogeneous graph (node types, relations, per-relation fanouts)
// turned into the loop's RelationRows and bounds, and the loop's homogeneous output (global
// node ids numbered by first appearance, global edge ids) regrouped into pyg-lib's
// heterogeneous layout by a few device-wide sorts and counts: no loop over types, one copy
// of the counts to the host.
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
  //  relation_edge_offsets (R + 1) | fanouts (H x R)]
  std::vector<int64_t> block;
  int64_t rows_per_node = 1;
  std::vector<int64_t> row_fanouts;   // per hop: the largest fanout of one relation
  std::vector<int64_t> node_fanouts;  // per hop: the most one node may yield (-1: unbounded)

  int64_t type_relations_ptr_at() const { return num_types + 1; }
  int64_t type_relations_at() const { return 2 * (num_types + 1); }
  int64_t relation_edge_offsets_at() const { return type_relations_at() + num_relations; }
  int64_t fanouts_at() const { return relation_edge_offsets_at() + num_relations + 1; }

  // The RelationRows over a copy of `block` at `base` (host or device).
  RelationRows relation_rows(const int64_t* base) const {
    RelationRows rows;
    rows.rows_per_node = rows_per_node;
    rows.type_offsets = base;
    rows.num_types = num_types;
    rows.type_relations_ptr = base + type_relations_ptr_at();
    rows.type_relations = base + type_relations_at();
    rows.relation_edge_offsets = base + relation_edge_offsets_at();
    rows.num_relations = num_relations;
    return rows;
  }
};

inline HeteroTables hetero_tables(at::IntArrayRef node_type_offsets,
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

// The permutation that sorts `keys` (values in [0, num_keys)) stably, and the keys sorted.
// On the CPU a counting sort (a pass to count, one to place); on the GPU a radix sort of
// the narrowest integer type that holds the keys (one or two byte passes, not eight).
inline std::pair<at::Tensor, at::Tensor> stable_order(const at::Tensor& keys, int64_t num_keys) {
  if (keys.is_cpu()) {
    const int64_t n = keys.numel();
    const int64_t* k = keys.const_data_ptr<int64_t>();
    std::vector<int64_t> next(num_keys + 1, 0);
    for (int64_t i = 0; i < n; ++i) ++next[k[i] + 1];
    for (int64_t v = 0; v < num_keys; ++v) next[v + 1] += next[v];
    at::Tensor order = at::empty({n}, keys.options());
    at::Tensor sorted = at::empty({n}, keys.options());
    int64_t* order_p = order.mutable_data_ptr<int64_t>();
    int64_t* sorted_p = sorted.mutable_data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t at = next[k[i]]++;
      order_p[at] = i;
      sorted_p[at] = k[i];
    }
    return {order, sorted};
  }
  const at::ScalarType narrow =
      num_keys <= 256 ? at::kByte : (num_keys <= 32768 ? at::kShort : at::kInt);
  auto [sorted, order] = at::sort(keys.to(narrow), /*stable=*/true, 0, false);
  return {order, sorted.to(at::kLong)};
}

// The hop loop's output regrouped: nodes grouped by type (each type's in sampling order,
// seeds first) as ids local to their type, edges grouped by relation with rows/cols as
// positions in their source/target type's group and ids local to their relation, and the
// counts per type and hop [T, H + 1] and per relation and hop [R, H], on the host.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
regroup_by_type(const HeteroTables& tables, const at::Tensor& node_ids, const at::Tensor& batch,
                const at::Tensor& rows, const at::Tensor& cols, const at::Tensor& edge_ids,
                const at::Tensor& nodes_per_hop, const at::Tensor& edges_per_hop) {
  const int64_t T = tables.num_types, R = tables.num_relations, H = tables.num_hops;
  const auto options = node_ids.options();
  // One upload: the graph's tables, then where each hop's nodes and edges end.
  std::vector<int64_t> host = tables.block;
  const int64_t hop_ends_at = static_cast<int64_t>(host.size());
  int64_t total = 0;
  for (int64_t h = 0; h <= H; ++h) host.push_back(total += nodes_per_hop[h].item<int64_t>());
  total = 0;
  for (int64_t h = 0; h < H; ++h) host.push_back(total += edges_per_hop[h].item<int64_t>());
  const at::Tensor block = at::tensor(host, at::kLong).to(node_ids.device());
  const at::Tensor type_offsets = block.narrow(0, 0, T + 1);
  const at::Tensor relation_offsets = block.narrow(0, tables.relation_edge_offsets_at(), R + 1);
  const at::Tensor node_hop_ends = block.narrow(0, hop_ends_at, H + 1);
  const at::Tensor edge_hop_ends = block.narrow(0, hop_ends_at + H + 1, H);
  // Counts per (type, hop) then per (relation, hop): histograms with their range given
  // (bincount reads the keys' min and max back to the host; atomic adds of every key into a
  // handful of counters serialize on the GPU). histc counts in float, exact below 2^24 a
  // bin: larger outputs take bincount, sync and all.
  std::vector<at::Tensor> count_parts;
  auto count = [&](int64_t bins, const at::Tensor& key) {
    count_parts.push_back(key.numel() < (int64_t{1} << 24)
                              ? at::histc(key.to(at::kFloat), bins, 0, bins).to(at::kLong)
                              : at::bincount(key, {}, bins));
  };
  // Which hop added position i of a list ordered by hop.
  auto hop_of = [&](const at::Tensor& ends, int64_t n) {
    return at::searchsorted(ends, at::arange(n, options), false, true);
  };

  const int64_t num_nodes = node_ids.numel();
  const at::Tensor node_type = at::searchsorted(type_offsets, node_ids, false, true) - 1;
  const auto [node_order, sorted_types] = stable_order(node_type, T);
  count(T * (H + 1), node_type * (H + 1) + hop_of(node_hop_ends, num_nodes));
  const at::Tensor type_totals = count_parts[0].view({T, H + 1}).sum(1);
  const at::Tensor type_start = at::cumsum(type_totals, 0) - type_totals;
  // Each node's position within its type's group.
  at::Tensor position = at::empty({num_nodes}, options);
  position.index_put_({node_order},
                      at::arange(num_nodes, options) - type_start.index({sorted_types}));
  const at::Tensor out_nodes = (node_ids - type_offsets.index({node_type})).index({node_order});
  const at::Tensor out_batch = batch.numel() > 0 ? batch.index({node_order}) : batch;

  const int64_t num_edges = edge_ids.numel();
  const at::Tensor relation = at::searchsorted(relation_offsets, edge_ids, false, true) - 1;
  const at::Tensor edge_order = stable_order(relation, R).first;
  count(R * H, relation * H + hop_of(edge_hop_ends, num_edges));
  const at::Tensor out_rows = position.index({rows.index({edge_order})});
  const at::Tensor out_cols = position.index({cols.index({edge_order})});
  const at::Tensor out_edges =
      (edge_ids - relation_offsets.index({relation})).index({edge_order});

  // One copy to the host for both tables of counts.
  const at::Tensor counts = at::cat(count_parts).to(at::kCPU);
  return {out_nodes,
          out_batch,
          out_rows,
          out_cols,
          out_edges,
          counts.narrow(0, 0, T * (H + 1)).view({T, H + 1}).clone(),
          counts.narrow(0, T * (H + 1), R * H).view({R, H}).clone()};
}

}  // namespace quiver
