// The sampling ops' face for runtime/: the same three samplings as the ops (the same
// checks, the same results), with a sampler's own captured batches. The ops keep no state
// and never capture; a runtime sampler class (runtime/subgraph_sampler.cpp) owns a
// SamplingGraphs, so that on a GPU its batches are captured as CUDA graphs and replayed
// (ops/cuda/batch_graphs.h), and let go of with it. On the CPU these are the ops.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/string_view.h>

#include <memory>
#include <optional>
#include <tuple>

namespace quiver::internal {

// A sampler's captured batches and the small tables they read (nothing in a CPU build),
// and its options that change no sample.
class SamplingGraphs {
 public:
  // `capture_batches` false: every batch runs as launched (to compare, or to keep GPU
  // memory).
  explicit SamplingGraphs(bool capture_batches = true);
  bool captures() const;
  // Whether a large hop over lists in pinned host memory (UVA) visits its rows in the order
  // of their lists' addresses: none, by the lists' size (2 GiB or more); true or false
  // forces it (to measure what it buys, or test it on small graphs).
  void set_uva_row_order(std::optional<bool> order);
  ~SamplingGraphs();
  SamplingGraphs(const SamplingGraphs&) = delete;
  SamplingGraphs& operator=(const SamplingGraphs&) = delete;
  struct State;
  State& state() { return *state_; }

 private:
  std::unique_ptr<State> state_;
};

using SubgraphOutputs =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using NeighborOutputs =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// quiver::sample_subgraph, its GPU batches replayed from `graphs` (none: as the op), with a
// topology cache (cached_indices, cached_starts: some nodes' neighbor lists in GPU memory,
// node v's from cached_starts[v], -1 if absent; both or neither) that moves those reads off
// `indices` (pinned host memory in UVA mode). The samples are the op's. Seeds in host
// memory are sampled on the CPU, or, given `host_seeds_on` (a GPU), on that GPU, carried
// there with the batch's bookkeeping (no copy of their own).
SubgraphOutputs sample_subgraph(SamplingGraphs* graphs, const at::Tensor& indptr,
                                const at::Tensor& indices, const at::Tensor& seeds,
                                at::IntArrayRef fanouts, bool replace,
                                const std::optional<at::Tensor>& edge_ids,
                                const std::optional<at::Generator>& generator,
                                const std::optional<at::Tensor>& cached_indices,
                                const std::optional<at::Tensor>& cached_starts,
                                std::optional<at::Device> host_seeds_on = std::nullopt);

// quiver::neighbor_sample, likewise.
NeighborOutputs neighbor_sample(SamplingGraphs* graphs, const at::Tensor& indptr,
                                const at::Tensor& indices, const at::Tensor& seeds,
                                at::IntArrayRef fanouts, bool replace,
                                const std::optional<at::Tensor>& edge_ids,
                                const std::optional<at::Tensor>& edge_weight,
                                const std::optional<at::Tensor>& edge_time,
                                const std::optional<at::Tensor>& seed_time, bool strict_time,
                                c10::string_view temporal_strategy, bool disjoint,
                                const std::optional<at::Generator>& generator,
                                const std::optional<at::Tensor>& edge_weight_cumsum);

// quiver::hetero_neighbor_sample, likewise (the graph's tables kept with `graphs`), with
// relation_slice_starts (int32; on the seeds' device, or the CPU): for each node of a type
// with R_t > 1 incoming relations, where its relation slices 1..R_t-1 start in its row
// (relative), types in order, R_t - 1 entries a node; read instead of searching the row's
// edge ids. The samples are the op's.
NeighborOutputs hetero_neighbor_sample(
    SamplingGraphs* graphs, const at::Tensor& indptr, const at::Tensor& indices,
    const at::Tensor& edge_ids, const at::Tensor& seeds, at::IntArrayRef node_type_offsets,
    at::IntArrayRef relation_src_types, at::IntArrayRef relation_dst_types,
    at::IntArrayRef relation_edge_offsets, at::IntArrayRef fanouts, bool replace,
    const std::optional<at::Tensor>& edge_weight, const std::optional<at::Tensor>& edge_time,
    const std::optional<at::Tensor>& seed_time, bool strict_time,
    c10::string_view temporal_strategy, bool disjoint,
    const std::optional<at::Generator>& generator,
    const std::optional<at::Tensor>& edge_weight_cumsum,
    const std::optional<at::Tensor>& relation_slice_starts);

}  // namespace quiver::internal
