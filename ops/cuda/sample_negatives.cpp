// CUDA entry point of sample_negatives: one launch (ops/cuda/negatives.cu), then one wait
// that reports any invalid input the kernel met.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "ops/checks.h"
#include "ops/cuda/device_access.h"
#include "ops/cuda/hop_board.h"
#include "ops/cuda/negatives.h"

namespace quiver {
namespace {

at::Tensor sample_negatives_cuda(const at::Tensor& indptr, const at::Tensor& indices,
                                 const at::Tensor& src, int64_t per_src, bool exclude_edges,
                                 int64_t max_trials, bool out_rows,
                                 const std::optional<at::Generator>& generator,
                                 int64_t dst_begin, int64_t dst_count) {
  const int64_t dst_range =
      check_sample_negatives_args(indptr, indices, src, per_src, max_trials, dst_begin, dst_count);
  TORCH_CHECK(src.is_cuda(), "sample_negatives on CUDA needs src on a GPU, got ", src.device());
  const c10::cuda::CUDAGuard guard(src.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const at::Tensor src64 = src.to(at::kLong).contiguous();
  at::Tensor out = at::empty({src64.numel() * per_src}, src64.options());
  if (out.numel() == 0) return out;
  AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "sample_negatives_cuda", [&] {
    const auto csr = cuda::readable_csr<index_t>(indptr, indices, std::nullopt, src.device());
    cuda::HopBoard board(src.device(), /*words=*/1);
    board.upload(stream);
    const cuda::NegativeDraws draws{src64.const_data_ptr<int64_t>(),
                                    src64.numel(),
                                    per_src,
                                    exclude_edges,
                                    max_trials,
                                    out_rows,
                                    dst_begin,
                                    dst_range,
                                    cuda::draw_philox_key(src.device(), 4 * max_trials, generator),
                                    out.mutable_data_ptr<int64_t>()};
    C10_CUDA_CHECK(cuda::sample_negatives(csr, draws, board.status(), stream));
    board.read(stream, csr.num_nodes, csr.num_edges);  // raises what the kernel recorded
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CUDA, m) { m.impl("sample_negatives", &sample_negatives_cuda); }

}  // namespace quiver
