// CUDA entry point of sample_subgraph: the shared hop loop (hop_loop.h) over uniform rows,
// its batches captured as CUDA graphs and replayed for a sampler that keeps them
// (batch_graphs.h, sampling_entries.h); the op itself keeps none.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "ops/checks.h"
#include "ops/cuda/batch_graphs.h"
#include "ops/cuda/device_access.h"
#include "ops/cuda/hop_board.h"
#include "ops/cuda/hop_loop.h"
#include "ops/cuda/sampling_entries.h"
#include "ops/sampling_rules.h"

namespace quiver {
namespace {

using cuda::BatchShape;
using cuda::BoardLayout;
using cuda::uva_rows_sorted;

template <typename index_t>
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
sample_subgraph_kernel(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& seeds,
                       at::IntArrayRef fanouts, bool replace,
                       const std::optional<at::Tensor>& edge_ids,
                       const std::optional<at::Generator>& generator,
                       const std::optional<at::Tensor>& cached_indices,
                       const std::optional<at::Tensor>& cached_starts,
                       cuda::SamplerGraphs* graphs, const at::Device& device) {
  const bool host_seeds = !seeds.is_cuda();
  auto csr = cuda::readable_csr<index_t>(indptr, indices, edge_ids, device);
  if (cached_starts.has_value()) {
    TORCH_CHECK(cached_starts->device() == device && cached_indices->device() == device,
                "the topology cache must be in the memory of ", device,
                " (the GPU that samples), got cached_indices on ", cached_indices->device(),
                " and cached_starts on ", cached_starts->device());
    csr.cached_indices = cached_indices->const_data_ptr<index_t>();
    if (cached_starts->scalar_type() == at::kInt) {
      csr.cached_starts32 = cached_starts->const_data_ptr<int32_t>();
    } else {
      csr.cached_starts = cached_starts->const_data_ptr<int64_t>();
    }
    csr.num_cached = cached_indices->numel();
  }
  const int64_t num_hops = static_cast<int64_t>(fanouts.size());
  const BatchShape<index_t> shape{csr,
                                  fanouts,
                                  replace,
                                  uva_rows_sorted(indices, graphs != nullptr
                                                               ? graphs->uva_row_order()
                                                               : std::nullopt),
                                  cached_starts.has_value() ? 4 : 3,
                                  seeds.numel(),
                                  BoardLayout(num_hops, host_seeds ? seeds.numel() : 0)};

  const cuda::PhiloxKey key = cuda::batch_philox_key(shape, device, generator);
  std::string graph_key;
  if (graphs != nullptr && graphs->captures()) {
    cuda::GraphKey inputs;
    inputs.add(indptr).add(indices).add(edge_ids).add(cached_indices).add(cached_starts);
    inputs.add(shape.batch_size).add(replace).add(shape.sort_rows).add(fanouts);
    inputs.add(int64_t{host_seeds});
    graph_key = inputs.str();
  }
  return cuda::sample_batch(shape, seeds, at::Tensor(), key, graph_key, graphs, device);
}

}  // namespace

cuda::SubgraphOutputs cuda::sample_subgraph_with(
    SamplerGraphs* graphs, const at::Tensor& indptr, const at::Tensor& indices,
    const at::Tensor& seeds, at::IntArrayRef fanouts, bool replace,
    const std::optional<at::Tensor>& edge_ids, const std::optional<at::Generator>& generator,
    const std::optional<at::Tensor>& cached_indices,
    const std::optional<at::Tensor>& cached_starts, std::optional<at::Device> host_seeds_on) {
  check_sample_subgraph_args(indptr, indices, seeds, fanouts, replace, edge_ids);
  check_topology_cache(indptr, indices, cached_indices, cached_starts);
  if (host_seeds_on.has_value()) {
    TORCH_CHECK(seeds.device().is_cpu() && host_seeds_on->is_cuda() && host_seeds_on->has_index(),
                "seeds from the host are sampled on a numbered GPU: got seeds on ",
                seeds.device(), " for ", *host_seeds_on);
  } else {
    TORCH_CHECK(seeds.is_cuda(), "sample_subgraph on CUDA needs seeds on a GPU, got ",
                seeds.device());
  }
  const at::Device device = host_seeds_on.value_or(seeds.device());
  const c10::cuda::CUDAGuard guard(device);
  const at::Tensor seeds64 = seeds.to(at::kLong);
  if (seeds64.numel() == 0) {
    const auto options = seeds64.options().device(device);
    return {at::empty({0}, options),
            at::empty({0}, options),
            at::empty({0}, options),
            at::empty({0}, options),
            at::zeros({static_cast<int64_t>(fanouts.size()) + 1}, at::kLong),
            at::zeros({static_cast<int64_t>(fanouts.size())}, at::kLong)};
  }
  return AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "sample_subgraph_cuda", [&] {
    return sample_subgraph_kernel<index_t>(indptr, indices, seeds64, fanouts, replace, edge_ids,
                                           generator, cached_indices, cached_starts, graphs,
                                           device);
  });
}

namespace {

cuda::SubgraphOutputs sample_subgraph_cuda(const at::Tensor& indptr, const at::Tensor& indices,
                                           const at::Tensor& seeds, at::IntArrayRef fanouts,
                                           bool replace, const std::optional<at::Tensor>& edge_ids,
                                           const std::optional<at::Generator>& generator) {
  return cuda::sample_subgraph_with(nullptr, indptr, indices, seeds, fanouts, replace, edge_ids,
                                    generator, std::nullopt, std::nullopt);
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CUDA, m) { m.impl("sample_subgraph", &sample_subgraph_cuda); }

}  // namespace quiver
