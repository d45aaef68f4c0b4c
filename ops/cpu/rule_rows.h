// The rows of neighbor_sample and hetero_neighbor_sample on the CPU, the `Rows` policy of
// the shared hop loop (ops/cpu/hop_loop.h): rows that may be weighted (weighted_rows.h),
// cut by time (temporal_rows.h), kept apart per seed (disjoint trees, keyed
// tree * num_nodes + node) and sliced by relation (sampling_rules.h: RelationRows).
#pragma once

#include <ATen/ATen.h>

#include "ops/checks.h"
#include "ops/cpu/hop_loop.h"
#include "ops/cpu/row_sampling.h"
#include "ops/cpu/temporal_rows.h"
#include "ops/cpu/weighted_rows.h"
#include "ops/sampling_rules.h"

namespace quiver::cpu {

struct RuleRows {
  const int64_t* indptr;
  int64_t num_nodes;
  int64_t num_edges;
  bool replace;
  const float* edge_weight;  // null: uniform
  const double* weight_sums;  // each row's prefix sums of edge_weight, or null
  const int64_t* edge_time;  // null: no time rule
  const int64_t* seed_time;
  bool strict_time;
  bool last;
  bool disjoint;
  int64_t batch_size;
  // Heterogeneous graphs (hetero_neighbor_sample): rows sliced by relation, with the edge
  // ids that name the relations and the fanouts [hop][relation].
  RelationRows relations = {};
  const int64_t* edge_ids = nullptr;
  const int64_t* relation_fanouts = nullptr;

  int64_t key_space() const { return disjoint ? num_nodes * batch_size : num_nodes; }
  int64_t node_of(int64_t key) const { return disjoint ? key % num_nodes : key; }
  int64_t tree_of(int64_t key) const { return disjoint ? key / num_nodes : 0; }

  int64_t rows_per_key() const { return relations.rows_per_node; }
  int64_t rows_of(int64_t key) const {
    if (!relations.active()) return 1;
    const int64_t type = group_of(relations.type_offsets, relations.num_types, node_of(key));
    return relations.type_relations_ptr[type + 1] - relations.type_relations_ptr[type];
  }
  PlannedRow plan(int64_t key, int64_t slot, int64_t hop, int64_t fanout) const {
    RowSpan row = checked_row(indptr, node_of(key), num_edges);
    if (relations.active()) {
      fanout = relation_slice(relations, relation_fanouts + hop * relations.num_relations,
                              edge_ids, node_of(key), slot, row.begin, row.degree);
    }
    if (edge_time != nullptr) {
      row.degree = admitted_prefix(edge_time + row.begin, row.degree, seed_time[tree_of(key)],
                                   strict_time);
    }
    return {row, fanout};
  }
  int64_t count(const RowSpan& row, int64_t fanout) const {
    return sampled_count(row.degree, fanout, replace);
  }
  void pick(int64_t key, const RowSpan& row, int64_t fanout, at::philox_engine& rng,
            int64_t* offsets) const {
    const int64_t picks = count(row, fanout);
    if (last) {
      last_offsets(row.degree, picks, offsets);
    } else if (weight_sums != nullptr) {
      weighted_offsets_by_sums(weight_sums + row.begin, edge_weight + row.begin, row.begin,
                                    node_of(key), row.degree, picks, replace && fanout >= 0, rng,
                                    offsets);
    } else if (edge_weight != nullptr) {
      weighted_offsets(edge_weight + row.begin, row.begin, node_of(key), row.degree, picks,
                            replace && fanout >= 0, rng, offsets);
    } else {
      sample_offsets(row.degree, fanout, replace, rng, offsets);
    }
  }
  int64_t neighbor_key(int64_t key, int64_t neighbor, int64_t pos) const {
    if (neighbor < 0 || neighbor >= num_nodes) errors::neighbor_out_of_range(neighbor, num_nodes);
    if (edge_time != nullptr) {
      const int64_t t = seed_time[tree_of(key)];
      if (strict_time ? edge_time[pos] >= t : edge_time[pos] > t) {
        errors::edge_time_unsorted(node_of(key), pos, t);
      }
    }
    return disjoint ? tree_of(key) * num_nodes + neighbor : neighbor;
  }
};

// The rows of a batch from neighbor_sample's arguments (hetero_neighbor_sample's too).
// `seed_times` keeps a contiguous copy of seed_time alive (one time expanded over every
// seed is a natural way to pass it, and its elements share one address).
inline RuleRows rule_rows(const at::Tensor& indptr, const at::Tensor& indices, bool replace,
                          const std::optional<at::Tensor>& edge_weight,
                          const std::optional<at::Tensor>& edge_weight_cumsum,
                          const std::optional<at::Tensor>& edge_time,
                          const std::optional<at::Tensor>& seed_time, bool strict_time,
                          c10::string_view temporal_strategy, bool disjoint,
                          int64_t batch_size, at::Tensor& seed_times) {
  if (seed_time.has_value()) seed_times = seed_time->contiguous();
  return RuleRows{indptr.const_data_ptr<int64_t>(),
                  indptr.numel() - 1,
                  indices.numel(),
                  replace,
                  edge_weight ? edge_weight->const_data_ptr<float>() : nullptr,
                  edge_weight_cumsum ? edge_weight_cumsum->const_data_ptr<double>() : nullptr,
                  edge_time ? edge_time->const_data_ptr<int64_t>() : nullptr,
                  seed_time ? seed_times.const_data_ptr<int64_t>() : nullptr,
                  strict_time,
                  temporal_strategy == "last",
                  disjoint,
                  batch_size};
}

// The seeds' keys: the seeds, or with disjoint trees tree * num_nodes + seed.
inline at::Tensor seed_keys(const at::Tensor& seeds, bool disjoint, int64_t num_nodes) {
  return disjoint ? seeds + at::arange(seeds.numel(), seeds.options()) * num_nodes : seeds;
}

}  // namespace quiver::cpu
