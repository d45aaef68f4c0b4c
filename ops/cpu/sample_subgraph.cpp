// CPU entry point of sample_subgraph: every hop runs per-row sampling (ops/cpu/row_sampling.h)
// and reindexing through a concurrent node table (ops/cpu/node_table.h).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <vector>

#include "ops/checks.h"
#include "ops/cpu/node_table.h"
#include "ops/cpu/row_sampling.h"
#include "ops/sampling_rules.h"

namespace quiver {
namespace {

constexpr int64_t kNodesPerTask = 256;
constexpr int64_t kEdgesPerTask = 1 << 14;

// Each hop samples the nodes the previous hop added (the seeds for the first hop), so
// every node is expanded once and its neighbor set is the same at every layer. All steps
// run in parallel: sampling, inserting the sampled ids into a concurrent table, and
// numbering the new ones by first appearance with a two-pass scan, exactly the rule the
// GPU follows and PyG uses (seeds first, then each hop's new nodes in order).
template <typename index_t>
std::vector<at::Tensor> sample_subgraph_kernel(const at::Tensor& indptr, const at::Tensor& indices,
                                               const at::Tensor& seeds, at::IntArrayRef fanouts,
                                               bool replace,
                                               const std::optional<at::Tensor>& edge_ids,
                                               uint64_t key) {
  const int64_t num_nodes = indptr.numel() - 1;
  const int64_t num_edges = indices.numel();
  const int64_t* indptr_p = indptr.const_data_ptr<int64_t>();
  const index_t* indices_p = indices.const_data_ptr<index_t>();
  const int64_t* eid_p = edge_ids ? edge_ids->const_data_ptr<int64_t>() : nullptr;
  const int64_t batch_size = seeds.numel();
  const int64_t num_hops = static_cast<int64_t>(fanouts.size());
  const auto options = seeds.options();

  // Sized for every node the batch can reach before an all-neighbors hop; such a hop grows
  // it once its size is known, so it never fills past half.
  cpu::NodeTable table(node_bound(batch_size, fanouts, num_nodes));
  int64_t nodes_bound = batch_size;  // nodes the table may hold so far
  const int64_t* seeds_p = seeds.const_data_ptr<int64_t>();
  for (int64_t i = 0; i < batch_size; ++i) {  // a repeated seed keeps its first index
    NodeSlot& slot = table[table.find_or_insert(seeds_p[i])];
    if (slot.local < 0) slot.local = static_cast<int32_t>(i);
  }

  std::vector<at::Tensor> node_parts{seeds}, row_parts, col_parts, eid_parts;
  at::Tensor nodes_per_hop = at::zeros({num_hops + 1}, at::kLong);
  at::Tensor edges_per_hop = at::zeros({num_hops}, at::kLong);
  nodes_per_hop[0] = batch_size;
  at::Tensor frontier = seeds;
  int64_t frontier_begin = 0;
  int64_t total_nodes = batch_size;

  for (int64_t hop = 0; hop < num_hops && frontier.numel() > 0; ++hop) {
    const int64_t fanout = fanouts[hop];
    const int64_t frontier_size = frontier.numel();
    const int64_t* frontier_p = frontier.const_data_ptr<int64_t>();

    std::vector<int64_t> counts(frontier_size), ends(frontier_size);
    at::parallel_for(0, frontier_size, kNodesPerTask, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const auto row = cpu::checked_row(indptr_p, frontier_p[i], num_edges);
        counts[i] = sampled_count(row.degree, fanout, replace);
      }
    });
    const int64_t hop_edges = cpu::prefix_counts(counts.data(), frontier_size, ends.data(), hop);
    nodes_bound = std::min(nodes_bound + std::min(hop_edges, num_nodes), num_nodes + batch_size);
    check_batch_nodes(nodes_bound);
    table.reserve(nodes_bound);
    at::Tensor rows = at::empty({hop_edges}, options);
    at::Tensor cols = at::empty({hop_edges}, options);
    at::Tensor eids = at::empty({hop_edges}, options);
    int64_t* rows_p = rows.mutable_data_ptr<int64_t>();
    int64_t* cols_p = cols.mutable_data_ptr<int64_t>();
    int64_t* eids_p = eids.mutable_data_ptr<int64_t>();
    at::parallel_for(0, frontier_size, kNodesPerTask, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t node = frontier_p[i];
        const int64_t begin = indptr_p[node];
        const int64_t out_begin = i == 0 ? 0 : ends[i - 1];
        // One Philox stream per expanded node: its local index.
        at::philox_engine rng(key, static_cast<uint64_t>(frontier_begin + i));
        cpu::sample_offsets(indptr_p[node + 1] - begin, fanout, replace, rng,
                            eids_p + out_begin);  // offsets first, edge ids below
        for (int64_t k = out_begin; k < ends[i]; ++k) {
          const int64_t pos = begin + eids_p[k];
          const int64_t neighbor = static_cast<int64_t>(indices_p[pos]);
          if (neighbor < 0 || neighbor >= num_nodes)
            errors::neighbor_out_of_range(neighbor, num_nodes);
          rows_p[k] = table.find_or_insert(neighbor);  // a table slot until relabeled
          cols_p[k] = frontier_begin + i;
          eids_p[k] = eid_p ? eid_p[pos] : pos;
          if (table[rows_p[k]].local < 0) {
            table.note_first(rows_p[k], static_cast<uint32_t>(k));
          }
        }
      }
    });

    // Number the new ids by first mention: count per chunk, scan the chunks, then assign.
    const int64_t chunks = std::max<int64_t>(1, (hop_edges + kEdgesPerTask - 1) / kEdgesPerTask);
    std::vector<int64_t> chunk_new(chunks + 1, 0);
    auto first_mention = [&](int64_t e) {
      const NodeSlot& slot = table[rows_p[e]];
      return slot.local < 0 && slot.first == static_cast<uint32_t>(e);
    };
    at::parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        const int64_t stop = std::min(hop_edges, (c + 1) * kEdgesPerTask);
        for (int64_t e = c * kEdgesPerTask; e < stop; ++e) chunk_new[c + 1] += first_mention(e);
      }
    });
    for (int64_t c = 0; c < chunks; ++c) chunk_new[c + 1] += chunk_new[c];
    const int64_t added = chunk_new[chunks];
    at::Tensor new_nodes = at::empty({added}, options);
    int64_t* new_nodes_p = new_nodes.mutable_data_ptr<int64_t>();
    at::parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        int64_t next = chunk_new[c];
        const int64_t stop = std::min(hop_edges, (c + 1) * kEdgesPerTask);
        for (int64_t e = c * kEdgesPerTask; e < stop; ++e) {
          if (!first_mention(e)) continue;
          NodeSlot& slot = table[rows_p[e]];
          slot.local = static_cast<int32_t>(total_nodes + next);
          new_nodes_p[next++] = slot.key;
        }
      }
    });
    at::parallel_for(0, hop_edges, kEdgesPerTask, [&](int64_t lo, int64_t hi) {
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

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
sample_subgraph_cpu(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& seeds,
                    at::IntArrayRef fanouts, bool replace,
                    const std::optional<at::Tensor>& edge_ids,
                    const std::optional<at::Generator>& generator,
                    const std::optional<at::Tensor>& cached_indices,
                    const std::optional<at::Tensor>& cached_starts) {
  check_sample_subgraph_args(indptr, indices, seeds, fanouts, replace, edge_ids);
  // A topology cache only moves reads from host to GPU memory: the CPU reads indices.
  check_topology_cache(indptr, indices, cached_indices, cached_starts);
  const at::Tensor seeds64 = seeds.to(at::kLong);
  check_ids_in_range(seeds64.const_data_ptr<int64_t>(), seeds64.numel(), indptr.numel() - 1,
                     "seeds");
  const int64_t* offsets = indptr.const_data_ptr<int64_t>();
  errors::check_csr_ends(offsets[0], offsets[indptr.numel() - 1], indices.numel());
  const uint64_t key = cpu::draw_philox_key(generator);
  const auto out = AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "sample_subgraph_cpu", [&] {
    return sample_subgraph_kernel<index_t>(indptr, indices, seeds64, fanouts, replace, edge_ids,
                                           key);
  });
  return {out[0], out[1], out[2], out[3], out[4], out[5]};
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CPU, m) { m.impl("sample_subgraph", &sample_subgraph_cpu); }

}  // namespace quiver
