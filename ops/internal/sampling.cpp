// ops/internal/sampling.h: a sampler's GPU batches go to the CUDA ops' bodies with its
// captured batches (ops/cuda/sampling_entries.h); anything else to the ops themselves.
#include "ops/internal/sampling.h"

#include <quiver/ops.h>

#include "ops/checks.h"
#include "ops/cpu/sampling_entries.h"

#ifdef QUIVER_WITH_CUDA
#include "ops/cuda/batch_graphs.h"
#include "ops/cuda/sampling_entries.h"
#endif

namespace quiver::internal {

struct SamplingGraphs::State {
#ifdef QUIVER_WITH_CUDA
  cuda::SamplerGraphs graphs;
#else
  bool captures = true;  // kept only to be read back: a CPU build captures nothing
#endif
};

SamplingGraphs::SamplingGraphs(bool capture_batches) : state_(std::make_unique<State>()) {
#ifdef QUIVER_WITH_CUDA
  state_->graphs.set_captures(capture_batches);
#else
  state_->captures = capture_batches;
#endif
}

bool SamplingGraphs::captures() const {
#ifdef QUIVER_WITH_CUDA
  return state_->graphs.captures();
#else
  return state_->captures;
#endif
}

void SamplingGraphs::set_uva_row_order(std::optional<bool> order) {
#ifdef QUIVER_WITH_CUDA
  state_->graphs.set_uva_row_order(order);
#else
  (void)order;  // no UVA hops without CUDA
#endif
}
SamplingGraphs::~SamplingGraphs() = default;

namespace {

#ifdef QUIVER_WITH_CUDA
cuda::SamplerGraphs* on_gpu(SamplingGraphs* graphs) {
  return graphs == nullptr ? nullptr : &graphs->state().graphs;
}
#endif

}  // namespace

SubgraphOutputs sample_subgraph(SamplingGraphs* graphs, const at::Tensor& indptr,
                                const at::Tensor& indices, const at::Tensor& seeds,
                                at::IntArrayRef fanouts, bool replace,
                                const std::optional<at::Tensor>& edge_ids,
                                const std::optional<at::Generator>& generator,
                                const std::optional<at::Tensor>& cached_indices,
                                const std::optional<at::Tensor>& cached_starts,
                                std::optional<at::Device> host_seeds_on) {
  const bool to_gpu = host_seeds_on.has_value() && host_seeds_on->is_cuda() && !seeds.is_cuda();
#ifdef QUIVER_WITH_CUDA
  if (seeds.is_cuda() || to_gpu) {
    return cuda::sample_subgraph_with(on_gpu(graphs), indptr, indices, seeds, fanouts, replace,
                                      edge_ids, generator, cached_indices, cached_starts,
                                      to_gpu ? host_seeds_on : std::nullopt);
  }
#else
  TORCH_CHECK(!to_gpu, "sampling on ", *host_seeds_on,
              " needs the CUDA kernels; this build of torch_quiver_ops has none");
#endif
  // A topology cache only moves a GPU's reads from host to GPU memory: the CPU reads
  // indices, and checks the cache it was given.
  check_topology_cache(indptr, indices, cached_indices, cached_starts);
  return quiver::sample_subgraph(indptr, indices, seeds, fanouts, replace, edge_ids, generator);
}

NeighborOutputs neighbor_sample(SamplingGraphs* graphs, const at::Tensor& indptr,
                                const at::Tensor& indices, const at::Tensor& seeds,
                                at::IntArrayRef fanouts, bool replace,
                                const std::optional<at::Tensor>& edge_ids,
                                const std::optional<at::Tensor>& edge_weight,
                                const std::optional<at::Tensor>& edge_time,
                                const std::optional<at::Tensor>& seed_time, bool strict_time,
                                c10::string_view temporal_strategy, bool disjoint,
                                const std::optional<at::Generator>& generator,
                                const std::optional<at::Tensor>& edge_weight_cumsum) {
#ifdef QUIVER_WITH_CUDA
  if (seeds.is_cuda()) {
    return cuda::neighbor_sample_with(on_gpu(graphs), indptr, indices, seeds, fanouts, replace,
                                      edge_ids, edge_weight, edge_time, seed_time, strict_time,
                                      temporal_strategy, disjoint, generator, edge_weight_cumsum);
  }
#endif
  return quiver::neighbor_sample(indptr, indices, seeds, fanouts, replace, edge_ids, edge_weight,
                                 edge_time, seed_time, strict_time, temporal_strategy, disjoint,
                                 generator, edge_weight_cumsum);
}

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
    const std::optional<at::Tensor>& relation_slice_starts) {
#ifdef QUIVER_WITH_CUDA
  if (seeds.is_cuda()) {
    return cuda::hetero_neighbor_sample_with(
        on_gpu(graphs), indptr, indices, edge_ids, seeds, node_type_offsets, relation_src_types,
        relation_dst_types, relation_edge_offsets, fanouts, replace, edge_weight, edge_time,
        seed_time, strict_time, temporal_strategy, disjoint, generator, edge_weight_cumsum,
        relation_slice_starts);
  }
#endif
  // CPU seeds sample on the CPU, which reads every array through host pointers: a graph
  // held on a GPU (GPU and UVA modes) needs its seeds there.
  auto check_on_cpu = [&](const std::optional<at::Tensor>& t, const char* name) {
    TORCH_CHECK_VALUE(!t.has_value() || t->is_cpu(), "hetero_neighbor_sample with seeds on the "
                      "CPU samples there, but ", name, " is on ", t->device(),
                      ": pass the seeds on that device");
  };
  check_on_cpu(indptr, "indptr");
  check_on_cpu(indices, "indices");
  check_on_cpu(edge_ids, "edge_ids");
  check_on_cpu(edge_weight, "edge_weight");
  check_on_cpu(edge_time, "edge_time");
  check_on_cpu(seed_time, "seed_time");
  check_on_cpu(edge_weight_cumsum, "edge_weight_cumsum");
  return cpu::hetero_neighbor_sample_with(
      indptr, indices, edge_ids, seeds, node_type_offsets, relation_src_types,
      relation_dst_types, relation_edge_offsets, fanouts, replace, edge_weight, edge_time,
      seed_time, strict_time, temporal_strategy, disjoint, generator, edge_weight_cumsum,
      relation_slice_starts);
}

}  // namespace quiver::internal
