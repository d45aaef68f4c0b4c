// CUDA entry point of sample_neighbors: plan the seeds' rows (ops/cuda/row_sampling.cu),
// read the total once, then sample into exactly sized outputs.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "ops/checks.h"
#include "ops/cuda/device_access.h"
#include "ops/cuda/hop_board.h"
#include "ops/sampling_rules.h"

namespace quiver {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> sample_neighbors_cuda(
    const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& seeds, int64_t fanout,
    bool replace, const std::optional<at::Tensor>& edge_ids,
    const std::optional<at::Generator>& generator) {
  check_sample_neighbors_args(indptr, indices, seeds, fanout, replace, edge_ids);
  TORCH_CHECK(seeds.is_cuda(), "sample_neighbors on CUDA needs seeds on a GPU, got ",
              seeds.device());
  const c10::cuda::CUDAGuard guard(seeds.device());
  const c10::cuda::CUDAStream current = at::cuda::getCurrentCUDAStream();
  const cudaStream_t stream = current.stream();
  const at::Tensor seeds64 = seeds.to(at::kLong);
  const int64_t num_seeds = seeds64.numel();
  const auto options = seeds64.options();
  at::Tensor counts = at::empty({num_seeds}, options);
  if (num_seeds == 0) return {counts, at::empty({0}, options), at::empty({0}, options)};

  return AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "sample_neighbors_cuda", [&] {
    const auto csr = cuda::readable_csr<index_t>(indptr, indices, edge_ids, seeds.device());
    cuda::HopBoard board(seeds.device(), /*words=*/1);
    at::Tensor plan_space = at::empty({2, num_seeds}, options);
    const cuda::RowPlan plan{seeds64.const_data_ptr<int64_t>(),
                             nullptr,
                             num_seeds,
                             plan_space.mutable_data_ptr<int64_t>(),
                             plan_space.mutable_data_ptr<int64_t>() + num_seeds,
                             counts.mutable_data_ptr<int64_t>()};
    // No sum of the counts may wrap: refuse a bound that could (see sampling_rules.h).
    const int64_t bound =
        saturating_mul(num_seeds, per_node_bound(fanout, replace, csr.num_edges));
    if ((replace && bound > kMaxHopEdges) || bound == kSaturated) {
      errors::batch_too_large(errors::hop_edges_name(-1), bound, kMaxHopEdges);
    }
    cuda::HopRule rule{fanout, replace, {}, 0};
    C10_CUDA_CHECK(cuda::plan_rows(csr, plan, rule, {/*nodes_are_seeds=*/true, /*csr_ends=*/true},
                                   board.status(), stream));
    at::Tensor offsets = at::empty({num_seeds + 1}, options);
    const size_t scan_bytes = cuda::offsets_workspace_bytes(num_seeds);
    at::Tensor scan_space = cuda::workspace(scan_bytes, seeds.device());
    C10_CUDA_CHECK(cuda::offsets_from_counts(plan.count, num_seeds,
                                             offsets.mutable_data_ptr<int64_t>(),
                                             scan_space.mutable_data_ptr(), scan_bytes, stream));
    C10_CUDA_CHECK(cudaMemcpyAsync(board.words(), offsets.const_data_ptr<int64_t>() + num_seeds,
                                   sizeof(int64_t), cudaMemcpyDeviceToDevice, stream));
    const int64_t total = board.read(stream, csr.num_nodes, csr.num_edges)[0];
    if (total > kMaxHopEdges) errors::batch_too_large(errors::hop_edges_name(-1), total, kMaxHopEdges);

    at::Tensor neighbors = at::empty({total}, options);
    at::Tensor sampled_eids = at::empty({total}, options);
    rule.key = cuda::draw_philox_key(seeds.device(),
                                     draws_per_row(fanout, replace, csr.num_edges), generator);
    at::Tensor pick_sets = cuda::pick_sets(fanout, replace, total, seeds.device(), stream);
    const cuda::HopOutput out{offsets.const_data_ptr<int64_t>(),
                              neighbors.mutable_data_ptr<int64_t>(),
                              sampled_eids.mutable_data_ptr<int64_t>(),
                              nullptr,
                              nullptr,
                              pick_sets.defined() ? pick_sets.mutable_data_ptr<int64_t>() : nullptr};
    C10_CUDA_CHECK(cuda::sample_rows(csr, plan, rule, out, stream));
    // The only wait was before sampling: pinned inputs must outlive the kernel's reads.
    const std::optional<at::Tensor>& eid = edge_ids;
    cuda::keep_until_read({&indptr, &indices, eid ? &*eid : nullptr}, current.unwrap());
    return std::make_tuple(counts, neighbors, sampled_eids);
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CUDA, m) { m.impl("sample_neighbors", &sample_neighbors_cuda); }

}  // namespace quiver
