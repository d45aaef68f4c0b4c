// CPU entry point of neighbor_sample: the shared hop loop (ops/cpu/hop_loop.h) over rows
// that may be weighted (ops/cpu/weighted_rows.h), cut by time (ops/cpu/temporal_rows.h) and
// kept apart per seed (disjoint trees, keyed tree * num_nodes + node).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "ops/checks.h"
#include "ops/cpu/hop_loop.h"
#include "ops/cpu/row_sampling.h"
#include "ops/cpu/temporal_rows.h"
#include "ops/cpu/weighted_rows.h"

namespace quiver {
namespace {

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

  int64_t key_space() const { return disjoint ? num_nodes * batch_size : num_nodes; }
  int64_t node_of(int64_t key) const { return disjoint ? key % num_nodes : key; }
  int64_t tree_of(int64_t key) const { return disjoint ? key / num_nodes : 0; }

  cpu::RowSpan span(int64_t key) const {
    cpu::RowSpan row = cpu::checked_row(indptr, node_of(key), num_edges);
    if (edge_time != nullptr) {
      row.degree = cpu::admitted_prefix(edge_time + row.begin, row.degree,
                                        seed_time[tree_of(key)], strict_time);
    }
    return row;
  }
  int64_t count(const cpu::RowSpan& row, int64_t fanout) const {
    return sampled_count(row.degree, fanout, replace);
  }
  void pick(int64_t key, const cpu::RowSpan& row, int64_t fanout, at::philox_engine& rng,
            int64_t* offsets) const {
    const int64_t picks = count(row, fanout);
    if (last) {
      cpu::last_offsets(row.degree, picks, offsets);
    } else if (weight_sums != nullptr) {
      cpu::weighted_offsets_by_sums(weight_sums + row.begin, edge_weight + row.begin, row.begin,
                                    node_of(key), row.degree, picks, replace && fanout >= 0, rng,
                                    offsets);
    } else if (edge_weight != nullptr) {
      cpu::weighted_offsets(edge_weight + row.begin, row.begin, node_of(key), row.degree, picks,
                            replace && fanout >= 0, rng, offsets);
    } else {
      cpu::sample_offsets(row.degree, fanout, replace, rng, offsets);
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
  const at::Tensor seed_keys =
      disjoint ? seeds64 + at::arange(batch_size, seeds64.options()) * num_nodes : seeds64;
  const RuleRows rows{offsets,
                      num_nodes,
                      indices.numel(),
                      replace,
                      edge_weight ? edge_weight->const_data_ptr<float>() : nullptr,
                      edge_weight_cumsum ? edge_weight_cumsum->const_data_ptr<double>() : nullptr,
                      edge_time ? edge_time->const_data_ptr<int64_t>() : nullptr,
                      seed_time ? seed_time->const_data_ptr<int64_t>() : nullptr,
                      strict_time,
                      temporal_strategy == "last",
                      disjoint,
                      batch_size};
  auto out = AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "neighbor_sample_cpu", [&] {
    return cpu::sample_hops<index_t>(rows, indices, edge_ids, seed_keys, fanouts, key);
  });
  at::Tensor node_ids = out.keys, batch = at::empty({0}, seeds64.options());
  if (disjoint && num_nodes > 0) {
    batch = at::div(out.keys, num_nodes, "floor");
    node_ids = out.keys - batch * num_nodes;
  }
  return {node_ids, batch, out.rows, out.cols, out.edge_ids, out.nodes_per_hop, out.edges_per_hop};
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CPU, m) { m.impl("neighbor_sample", &neighbor_sample_cpu); }

}  // namespace quiver
