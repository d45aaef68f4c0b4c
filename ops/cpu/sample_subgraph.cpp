#include "ops/checks.h"
#include "ops/cpu/uniform_sampling.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <vector>

namespace quiver {
namespace {

constexpr int64_t kNodesPerTask = 256;

at::Tensor to_tensor(const std::vector<int64_t>& values) {
  at::Tensor out = at::empty({static_cast<int64_t>(values.size())}, at::kLong);
  std::copy(values.begin(), values.end(), out.mutable_data_ptr<int64_t>());
  return out;
}

// Each hop samples the nodes the previous hop added (the seeds for the first hop), so
// every node is expanded once and its neighbor set is the same at every layer. Sampling
// runs in parallel; the reindexing that follows is one ordered pass so that new nodes are
// numbered by first appearance, exactly as PyG numbers them.
template <typename index_t>
std::vector<at::Tensor> sample_subgraph_kernel(const at::Tensor& indptr, const at::Tensor& indices,
                                               const at::Tensor& seeds, at::IntArrayRef fanouts,
                                               bool replace,
                                               const std::optional<at::Tensor>& edge_ids,
                                               uint64_t key) {
  const int64_t num_edges = indices.numel();
  const int64_t* indptr_p = indptr.const_data_ptr<int64_t>();
  const index_t* indices_p = indices.const_data_ptr<index_t>();
  const int64_t* eid_p = edge_ids ? edge_ids->const_data_ptr<int64_t>() : nullptr;
  const int64_t* seeds_p = seeds.const_data_ptr<int64_t>();
  const int64_t batch_size = seeds.numel();

  std::vector<int64_t> nodes(seeds_p, seeds_p + batch_size);
  ska::flat_hash_map<int64_t, int64_t> local_of;
  local_of.reserve(static_cast<size_t>(batch_size) * 8);
  for (int64_t i = 0; i < batch_size; ++i) local_of.emplace(seeds_p[i], i);

  std::vector<int64_t> rows, cols, sampled_eids;
  std::vector<int64_t> nodes_per_hop{batch_size}, edges_per_hop;
  std::vector<int64_t> ends;
  int64_t frontier_begin = 0;
  int64_t frontier_end = batch_size;
  uint64_t subsequence = 0;  // one Philox stream per expanded node, across hops

  for (const int64_t fanout : fanouts) {
    const int64_t frontier = frontier_end - frontier_begin;
    ends.assign(frontier, 0);
    at::parallel_for(0, frontier, kNodesPerTask, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const auto row = cpu::checked_row(indptr_p, nodes[frontier_begin + i], num_edges);
        ends[i] = cpu::sampled_count(row.degree, fanout, replace);
      }
    });
    for (int64_t i = 1; i < frontier; ++i) ends[i] += ends[i - 1];
    const int64_t hop_edges = frontier == 0 ? 0 : ends[frontier - 1];
    const int64_t first = static_cast<int64_t>(rows.size());
    rows.resize(first + hop_edges);
    cols.resize(first + hop_edges);
    sampled_eids.resize(first + hop_edges);

    at::parallel_for(0, frontier, kNodesPerTask, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t node = nodes[frontier_begin + i];
        const int64_t begin = indptr_p[node];
        const int64_t out_begin = first + (i == 0 ? 0 : ends[i - 1]);
        const int64_t out_end = first + ends[i];
        at::philox_engine rng(key, subsequence + static_cast<uint64_t>(i));
        int64_t* offsets = sampled_eids.data() + out_begin;  // reused as scratch, then overwritten
        cpu::sample_offsets(indptr_p[node + 1] - begin, fanout, replace, rng, offsets);
        for (int64_t k = out_begin; k < out_end; ++k) {
          const int64_t pos = begin + sampled_eids[k];
          rows[k] = static_cast<int64_t>(indices_p[pos]);  // global id until reindexed below
          cols[k] = frontier_begin + i;
          sampled_eids[k] = eid_p ? eid_p[pos] : pos;
        }
      }
    });

    for (int64_t k = first; k < first + hop_edges; ++k) {
      const auto [it, inserted] =
          local_of.emplace(rows[k], static_cast<int64_t>(nodes.size()));
      if (inserted) nodes.push_back(rows[k]);
      rows[k] = it->second;
    }
    subsequence += static_cast<uint64_t>(frontier);
    frontier_begin = frontier_end;
    frontier_end = static_cast<int64_t>(nodes.size());
    nodes_per_hop.push_back(frontier_end - frontier_begin);
    edges_per_hop.push_back(hop_edges);
  }
  return {to_tensor(nodes),         to_tensor(rows),          to_tensor(cols),
          to_tensor(sampled_eids), to_tensor(nodes_per_hop), to_tensor(edges_per_hop)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
sample_subgraph_cpu(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& seeds,
                    at::IntArrayRef fanouts, bool replace,
                    const std::optional<at::Tensor>& edge_ids) {
  check_sample_subgraph_args(indptr, indices, seeds, fanouts, edge_ids);
  for (const auto* t : {&indptr, &indices, &seeds}) {
    TORCH_CHECK(t->device().is_cpu(), "sample_subgraph on CPU needs every tensor on the CPU, got ",
                t->device());
  }
  const at::Tensor seeds64 = seeds.to(at::kLong);
  check_ids_in_range(seeds64.const_data_ptr<int64_t>(), seeds64.numel(), indptr.numel() - 1,
                     "seeds");
  const int64_t* offsets = indptr.const_data_ptr<int64_t>();
  check_csr_ends(offsets[0], offsets[indptr.numel() - 1], indices.numel());
  const uint64_t key = cpu::draw_philox_key();
  const auto out = AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "sample_subgraph_cpu", [&] {
    return sample_subgraph_kernel<index_t>(indptr, indices, seeds64, fanouts, replace, edge_ids,
                                           key);
  });
  return {out[0], out[1], out[2], out[3], out[4], out[5]};
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CPU, m) {
  m.impl("sample_subgraph", &sample_subgraph_cpu);
}

}  // namespace quiver
