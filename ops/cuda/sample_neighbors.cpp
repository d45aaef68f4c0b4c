#include "ops/checks.h"
#include "ops/cuda/sampling_host.h"

#include <torch/library.h>

namespace quiver {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> sample_neighbors_cuda(
    const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& seeds, int64_t fanout,
    bool replace, const std::optional<at::Tensor>& edge_ids) {
  check_sample_neighbors_args(indptr, indices, seeds, fanout, edge_ids);
  TORCH_CHECK(seeds.is_cuda(), "sample_neighbors on CUDA needs seeds on a GPU, got ",
              seeds.device());
  const c10::cuda::CUDAGuard guard(seeds.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const at::Tensor seeds64 = seeds.to(at::kLong);
  const int64_t num_seeds = seeds64.numel();
  const auto options = seeds64.options();
  at::Tensor counts = at::empty({num_seeds}, options);
  if (num_seeds == 0) return {counts, at::empty({0}, options), at::empty({0}, options)};

  return AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "sample_neighbors_cuda", [&] {
    const auto csr = cuda::readable_csr<index_t>(indptr, indices, edge_ids, seeds.device());
    cuda::HopBoard board(seeds.device(), /*words=*/1);
    at::Tensor plan = at::empty({2, num_seeds}, options);
    int64_t* row_begin = plan.mutable_data_ptr<int64_t>();
    int64_t* row_degree = row_begin + num_seeds;
    cuda::plan_rows(csr, seeds64.const_data_ptr<int64_t>(), num_seeds, nullptr, fanout, replace,
                    /*nodes_are_seeds=*/true, /*check_ends=*/true, row_begin, row_degree,
                    counts.mutable_data_ptr<int64_t>(), board.status(), stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    at::Tensor offsets = at::empty({num_seeds + 1}, options);
    const size_t scan_bytes = cuda::offsets_workspace_bytes(num_seeds);
    at::Tensor scan_space = cuda::workspace(scan_bytes, seeds.device());
    cuda::offsets_from_counts(counts.const_data_ptr<int64_t>(), num_seeds,
                              offsets.mutable_data_ptr<int64_t>(), scan_space.mutable_data_ptr(),
                              scan_bytes, stream);
    C10_CUDA_CHECK(cudaMemcpyAsync(board.words(), offsets.const_data_ptr<int64_t>() + num_seeds,
                                   sizeof(int64_t), cudaMemcpyDeviceToDevice, stream));
    const int64_t total = board.read(stream, csr.num_nodes, csr.num_edges)[0];

    at::Tensor neighbors = at::empty({total}, options);
    at::Tensor sampled_eids = at::empty({total}, options);
    const auto key = cuda::draw_philox_key(seeds.device(), 4 * std::max<int64_t>(fanout, 1));
    cuda::sample_rows(csr, row_begin, row_degree, counts.const_data_ptr<int64_t>(),
                      offsets.const_data_ptr<int64_t>(), num_seeds, fanout, replace, key, 0,
                      neighbors.mutable_data_ptr<int64_t>(),
                      sampled_eids.mutable_data_ptr<int64_t>(), nullptr, nullptr, stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return std::make_tuple(counts, neighbors, sampled_eids);
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CUDA, m) {
  m.impl("sample_neighbors", &sample_neighbors_cuda);
}

}  // namespace quiver
