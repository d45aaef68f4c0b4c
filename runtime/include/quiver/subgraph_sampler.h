// torch.classes.quiver.SubgraphSampler and HeteroSubgraphSampler: a sampler object that
// holds a graph's arrays (where they lie: CPU, GPU, or pinned host memory read by the GPU),
// its fanouts and rules, and its own captured batches. The sampling ops keep no state and
// never capture; a sampler's batches on a GPU are captured as CUDA graphs at the second
// call of a shape and replayed from the third (about 0.05 ms of host launches saved a
// [15, 10, 5] batch), in memory that goes with the sampler. The results are the ops'
// (quiver::sample_subgraph, neighbor_sample, hetero_neighbor_sample), checks included.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <torch/custom_class.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace quiver::internal {
class SamplingGraphs;
}

namespace quiver::runtime {

class SubgraphSampler : public torch::CustomClassHolder {
 public:
  using Subgraph = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
  using Sample =
      std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

  // The arguments of sample_subgraph and neighbor_sample that stay the same from batch to
  // batch. capture_batches false: every batch runs as launched (to compare, or to keep
  // GPU memory).
  SubgraphSampler(at::Tensor indptr, at::Tensor indices, std::optional<at::Tensor> edge_ids,
                  std::vector<int64_t> fanouts, bool replace,
                  std::optional<at::Tensor> cached_indices,
                  std::optional<at::Tensor> cached_starts,
                  std::optional<at::Tensor> edge_weight, std::optional<at::Tensor> edge_time,
                  bool strict_time, std::string temporal_strategy, bool disjoint,
                  std::optional<at::Tensor> edge_weight_cumsum, bool capture_batches);
  ~SubgraphSampler() override;

  // Uniform sampling (no weights, times or trees): sample_subgraph's result.
  Subgraph sample_subgraph(const at::Tensor& seeds, const std::optional<at::Generator>& generator);
  // The same on GPU `device` (its index) from seeds in host memory, which reach the GPU with
  // the batch's bookkeeping in one upload (no copy of their own, none by the caller).
  Subgraph sample_subgraph_on(const at::Tensor& seeds, int64_t device,
                              const std::optional<at::Generator>& generator);
  // neighbor_sample's result, with this sampler's rules.
  Sample neighbor_sample(const at::Tensor& seeds, const std::optional<at::Tensor>& seed_time,
                         const std::optional<at::Generator>& generator);
  bool captures_batches() const;
  // Nodes of the graph (indptr's length less one).
  int64_t num_nodes() const { return indptr_.size(0) - 1; }
  // Whether a large hop over lists in pinned host memory visits its rows in the order of
  // their lists' addresses: -1 by the lists' size (2 GiB or more, the default), 0 never, 1
  // always. The samples are the same; it is there to measure what the order buys.
  void set_uva_row_order(int64_t order);

 private:
  at::Tensor indptr_, indices_;
  std::optional<at::Tensor> edge_ids_, cached_indices_, cached_starts_, edge_weight_, edge_time_,
      edge_weight_cumsum_;
  std::vector<int64_t> fanouts_;
  bool replace_, strict_time_, disjoint_;
  std::string temporal_strategy_;
  std::unique_ptr<internal::SamplingGraphs> graphs_;  // its captures and options
};

class HeteroSubgraphSampler : public torch::CustomClassHolder {
 public:
  using Sample = SubgraphSampler::Sample;

  // hetero_neighbor_sample's arguments that stay the same from batch to batch (see
  // library.cpp); the graph's small tables stay on the GPU with the sampler.
  HeteroSubgraphSampler(at::Tensor indptr, at::Tensor indices, at::Tensor edge_ids,
                        std::vector<int64_t> node_type_offsets,
                        std::vector<int64_t> relation_src_types,
                        std::vector<int64_t> relation_dst_types,
                        std::vector<int64_t> relation_edge_offsets, std::vector<int64_t> fanouts,
                        bool replace, std::optional<at::Tensor> edge_weight,
                        std::optional<at::Tensor> edge_time, bool strict_time,
                        std::string temporal_strategy, bool disjoint,
                        std::optional<at::Tensor> edge_weight_cumsum,
                        std::optional<at::Tensor> relation_slice_starts, bool capture_batches);
  ~HeteroSubgraphSampler() override;

  Sample sample(const at::Tensor& seeds, const std::optional<at::Tensor>& seed_time,
                const std::optional<at::Generator>& generator);
  bool captures_batches() const;
  // Whether a large hop over lists in pinned host memory visits its rows in the order of
  // their lists' addresses: -1 by the lists' size (2 GiB or more, the default), 0 never, 1
  // always. The samples are the same; it is there to measure what the order buys.
  void set_uva_row_order(int64_t order);

 private:
  at::Tensor indptr_, indices_, edge_ids_;
  std::vector<int64_t> node_type_offsets_, relation_src_types_, relation_dst_types_,
      relation_edge_offsets_, fanouts_;
  bool replace_, strict_time_, disjoint_;
  std::optional<at::Tensor> edge_weight_, edge_time_, edge_weight_cumsum_, relation_slice_starts_;
  std::string temporal_strategy_;
  std::unique_ptr<internal::SamplingGraphs> graphs_;
};

}  // namespace quiver::runtime
