// The CPU multi-hop loop shared by sample_subgraph (uniform rows) and neighbor_sample
// (weighted, temporal and disjoint rows): each hop plans its frontier's rows, samples them,
// inserts the sampled ids into a concurrent table (ops/cpu/node_table.h) and numbers the
// new ones by first appearance, exactly the rule the GPU follows and PyG uses (seeds first,
// then each hop's new nodes in order). What differs between the ops is only how one row is
// sampled, the `Rows` policy:
//   int64_t key_space() const: frontier keys lie in [0, key_space) (node ids, or
//       tree * num_nodes + node for disjoint trees);
//   int64_t rows_per_key() const: the most rows one key expands into (1, or on a
//       heterogeneous graph the most relations ending at a node type: sampling_rules.h,
//       RelationRows), and int64_t rows_of(int64_t key) const: the rows of this key (its
//       type's relations), the first slots of its rows_per_key;
//   cpu::PlannedRow plan(int64_t key, int64_t slot, int64_t hop, int64_t fanout) const: the
//       CSR edges row `slot` of the key may take (checked), and its fanout (the hop's, or
//       its relation's);
//   int64_t count(const cpu::RowSpan&, int64_t fanout) const;
//   void pick(int64_t key, const cpu::RowSpan&, int64_t fanout, at::philox_engine&,
//             int64_t* offsets) const: count() offsets into the span;
//   int64_t neighbor_key(int64_t key, int64_t neighbor, int64_t pos) const: the key a
//       sampled edge adds to the table (checks any rule the edge must obey).
// Frontier keys are what the table holds; the caller turns them into node ids.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

#include "ops/checks.h"
#include "ops/cpu/node_table.h"
#include "ops/cpu/row_sampling.h"
#include "ops/sampling_rules.h"

namespace quiver::cpu {

constexpr int64_t kHopNodesPerTask = 256;
constexpr int64_t kHopEdgesPerTask = 1 << 14;
// A sampling task's rows end at kHopNodesPerTask rows or past this many picks: 256 rows a
// task had put a batch of 32 hubs of 1,000 picks each on one thread of sixteen.
constexpr int64_t kHopPicksPerTask = 2048;

// The first row of each sampling task, then num_rows: a task every kHopNodesPerTask rows,
// and one more at each row whose picks cross a multiple of kHopPicksPerTask (`ends`: the
// rows' inclusive prefix sums of picks). A row's picks stay in one task: its draws are one
// stream, and the results do not depend on the tasks.
inline std::vector<int64_t> sampling_tasks(const std::vector<int64_t>& ends) {
  const int64_t num_rows = static_cast<int64_t>(ends.size());
  const int64_t picks = num_rows == 0 ? 0 : ends.back();
  std::vector<int64_t> starts;
  for (int64_t r = 0; r < num_rows; r += kHopNodesPerTask) starts.push_back(r);
  for (int64_t e = kHopPicksPerTask; e < picks; e += kHopPicksPerTask) {
    starts.push_back(std::upper_bound(ends.begin(), ends.end(), e) - ends.begin());
  }
  starts.push_back(num_rows);
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  return starts;
}

// One row of a hop: the edges it may take and how many to sample (-1: all).
struct PlannedRow {
  RowSpan span;
  int64_t fanout;
};

// Hop outputs in PyG's layout: keys seeds first, local (rows, cols), edge ids, counts.
struct HopOutputs {
  at::Tensor keys, rows, cols, edge_ids, nodes_per_hop, edges_per_hop;
};

// Each hop samples the nodes the previous hop added (the seeds for the first hop), so
// every node is expanded once and its neighbor set is the same at every layer. With several
// rows a key, `fanouts` are only the hops' sizes' bounds: the most one key may yield a hop.
template <typename index_t, typename Rows>
HopOutputs sample_hops(const Rows& rows_policy, const at::Tensor& indices,
                       const std::optional<at::Tensor>& edge_ids, const at::Tensor& seed_keys,
                       at::IntArrayRef fanouts, uint64_t key) {
  const int64_t rows_per_key = rows_policy.rows_per_key();
  const int64_t key_space = rows_policy.key_space();
  const index_t* indices_p = indices.const_data_ptr<index_t>();
  const int64_t* eid_p = edge_ids ? edge_ids->const_data_ptr<int64_t>() : nullptr;
  const int64_t batch_size = seed_keys.numel();
  const int64_t num_hops = static_cast<int64_t>(fanouts.size());
  const auto options = seed_keys.options();

  check_batch_nodes(batch_size);  // before the seeds' local indices are numbered in int32
  // Sized for the nodes the batch can reach before an all-neighbors hop (initial_table_nodes
  // caps it); each hop grows it to its exact bound, so it never fills past half.
  NodeTable table(initial_table_nodes(batch_size, fanouts, key_space));
  int64_t nodes_bound = batch_size;  // nodes the table may hold so far
  const int64_t* seeds_p = seed_keys.const_data_ptr<int64_t>();
  for (int64_t i = 0; i < batch_size; ++i) {  // a repeated seed keeps its first index
    NodeSlot& slot = table[table.find_or_insert(seeds_p[i])];
    if (slot.local < 0) slot.local = static_cast<int32_t>(i);
  }

  std::vector<at::Tensor> node_parts{seed_keys}, row_parts, col_parts, eid_parts;
  at::Tensor nodes_per_hop = at::zeros({num_hops + 1}, at::kLong);
  at::Tensor edges_per_hop = at::zeros({num_hops}, at::kLong);
  nodes_per_hop[0] = batch_size;
  at::Tensor frontier = seed_keys;
  int64_t frontier_begin = 0;
  int64_t total_nodes = batch_size;

  for (int64_t hop = 0; hop < num_hops && frontier.numel() > 0; ++hop) {
    const int64_t frontier_size = frontier.numel();
    const int64_t* frontier_p = frontier.const_data_ptr<int64_t>();
    // Each key's own rows only: planned for every slot of the type with the most relations,
    // a knowledge graph's frontier had cost time and memory for each of its hundreds of
    // relations, most of them empty rows (a probe: 2.8 s and 1.9 GB for a batch that took
    // 0.2 s and 66 MB, at 400 relations ending at one other type).
    std::vector<int64_t> first_row, row_key;  // key i's rows from first_row[i]; row r's key
    int64_t num_rows = frontier_size;
    if (rows_per_key > 1) {
      first_row.assign(frontier_size + 1, 0);
      at::parallel_for(0, frontier_size, kHopNodesPerTask, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) first_row[i + 1] = rows_policy.rows_of(frontier_p[i]);
      });
      for (int64_t i = 0; i < frontier_size; ++i) first_row[i + 1] += first_row[i];
      num_rows = first_row[frontier_size];
      row_key.resize(num_rows);
      at::parallel_for(0, frontier_size, kHopNodesPerTask, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          std::fill(row_key.begin() + first_row[i], row_key.begin() + first_row[i + 1], i);
        }
      });
    }
    auto key_of_row = [&](int64_t r) { return rows_per_key > 1 ? row_key[r] : r; };
    auto slot_of_row = [&](int64_t r) {
      return rows_per_key > 1 ? r - first_row[row_key[r]] : int64_t{0};
    };

    std::vector<PlannedRow> planned(num_rows);
    std::vector<int64_t> counts(num_rows), ends(num_rows);
    at::parallel_for(0, num_rows, kHopNodesPerTask, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        planned[r] = rows_policy.plan(frontier_p[key_of_row(r)], slot_of_row(r), hop,
                                      fanouts[hop]);
        counts[r] = rows_policy.count(planned[r].span, planned[r].fanout);
      }
    });
    const int64_t hop_edges = prefix_counts(counts.data(), num_rows, ends.data(), hop,
                                            /*bytes_per_edge=*/3 * sizeof(int64_t));
    nodes_bound = std::min(nodes_bound + std::min(hop_edges, key_space), key_space + batch_size);
    check_batch_nodes(nodes_bound);
    table.reserve(nodes_bound);
    at::Tensor rows = at::empty({hop_edges}, options);
    at::Tensor cols = at::empty({hop_edges}, options);
    at::Tensor eids = at::empty({hop_edges}, options);
    int64_t* rows_p = rows.mutable_data_ptr<int64_t>();
    int64_t* cols_p = cols.mutable_data_ptr<int64_t>();
    int64_t* eids_p = eids.mutable_data_ptr<int64_t>();
    const std::vector<int64_t> tasks = sampling_tasks(ends);
    at::parallel_for(0, static_cast<int64_t>(tasks.size()) - 1, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t r = tasks[lo]; r < tasks[hi]; ++r) {
        const int64_t out_begin = r == 0 ? 0 : ends[r - 1];
        if (ends[r] == out_begin) continue;
        const int64_t i = key_of_row(r);
        const RowSpan& span = planned[r].span;
        // One Philox stream per row: its expanded node's local index (and slot), numbered
        // as if every key had rows_per_key rows (the GPU's numbering).
        at::philox_engine rng(
            key, static_cast<uint64_t>((frontier_begin + i) * rows_per_key + slot_of_row(r)));
        rows_policy.pick(frontier_p[i], span, planned[r].fanout, rng,
                         eids_p + out_begin);  // offsets first, edge ids below
        for (int64_t k = out_begin; k < ends[r]; ++k) {
          const int64_t pos = span.begin + eids_p[k];
          const int64_t neighbor = static_cast<int64_t>(indices_p[pos]);
          rows_p[k] = table.find_or_insert(rows_policy.neighbor_key(frontier_p[i], neighbor, pos));
          cols_p[k] = frontier_begin + i;  // a table slot until relabeled, above
          eids_p[k] = eid_p ? eid_p[pos] : pos;
          if (table[rows_p[k]].local < 0) {
            table.note_first(rows_p[k], static_cast<uint32_t>(k));
          }
        }
      }
    });

    // Number the new ids by first mention: count per chunk, scan the chunks, then assign.
    const int64_t chunks =
        std::max<int64_t>(1, (hop_edges + kHopEdgesPerTask - 1) / kHopEdgesPerTask);
    std::vector<int64_t> chunk_new(chunks + 1, 0);
    auto first_mention = [&](int64_t e) {
      const NodeSlot& slot = table[rows_p[e]];
      return slot.local < 0 && slot.first == static_cast<uint32_t>(e);
    };
    at::parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        const int64_t stop = std::min(hop_edges, (c + 1) * kHopEdgesPerTask);
        for (int64_t e = c * kHopEdgesPerTask; e < stop; ++e) chunk_new[c + 1] += first_mention(e);
      }
    });
    for (int64_t c = 0; c < chunks; ++c) chunk_new[c + 1] += chunk_new[c];
    const int64_t added = chunk_new[chunks];
    at::Tensor new_nodes = at::empty({added}, options);
    int64_t* new_nodes_p = new_nodes.mutable_data_ptr<int64_t>();
    at::parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        int64_t next = chunk_new[c];
        const int64_t stop = std::min(hop_edges, (c + 1) * kHopEdgesPerTask);
        for (int64_t e = c * kHopEdgesPerTask; e < stop; ++e) {
          if (!first_mention(e)) continue;
          NodeSlot& slot = table[rows_p[e]];
          slot.local = static_cast<int32_t>(total_nodes + next);
          new_nodes_p[next++] = slot.key;
        }
      }
    });
    at::parallel_for(0, hop_edges, kHopEdgesPerTask, [&](int64_t lo, int64_t hi) {
      for (int64_t e = lo; e < hi; ++e) rows_p[e] = table[rows_p[e]].local;
    });

    row_parts.push_back(rows);
    col_parts.push_back(cols);
    eid_parts.push_back(eids);
    node_parts.push_back(new_nodes);
    nodes_per_hop[hop + 1] = added;
    edges_per_hop[hop] = hop_edges;
    frontier = new_nodes;
    frontier_begin = total_nodes;
    total_nodes += added;
  }
  auto join = [&](const std::vector<at::Tensor>& parts) {
    return parts.empty() ? at::empty({0}, options) : at::cat(parts);
  };
  return {join(node_parts), join(row_parts), join(col_parts),
          join(eid_parts),  nodes_per_hop,   edges_per_hop};
}

}  // namespace quiver::cpu
