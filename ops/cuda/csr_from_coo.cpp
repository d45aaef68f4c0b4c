// CUDA entry point of csr_from_coo: check the endpoints (one wait), then a stable radix
// sort of edge positions by row (ops/cuda/coo_sort.cu); the same three outputs as the CPU's
// counting sort, bit for bit.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <limits>

#include "ops/checks.h"
#include "ops/cuda/coo_sort.h"
#include "ops/cuda/device_access.h"
#include "ops/cuda/hop_board.h"

namespace quiver {
namespace {

template <typename index_t, typename position_t>
std::tuple<at::Tensor, at::Tensor, at::Tensor> build_csr(const at::Tensor& row,
                                                         const at::Tensor& col,
                                                         int64_t num_nodes, cudaStream_t stream) {
  using key_t = std::make_unsigned_t<index_t>;
  const int64_t num_edges = row.numel();
  const auto long_options = row.options().dtype(at::kLong);
  const auto position_dtype = sizeof(position_t) == 4 ? at::kInt : at::kLong;
  // The sort's double buffers; rows are copied in, as the caller's row stays untouched.
  at::Tensor keys[2] = {row.clone(), at::empty_like(row)};
  at::Tensor positions[2] = {at::empty({num_edges}, row.options().dtype(position_dtype)),
                             at::empty({num_edges}, row.options().dtype(position_dtype))};
  cuda::EdgeSort<key_t, position_t> sort{
      {reinterpret_cast<key_t*>(keys[0].mutable_data_ptr()),
       reinterpret_cast<key_t*>(keys[1].mutable_data_ptr())},
      {reinterpret_cast<position_t*>(positions[0].mutable_data_ptr()),
       reinterpret_cast<position_t*>(positions[1].mutable_data_ptr())},
      num_edges,
      cuda::bits_below(num_nodes)};
  int current = 0;
  {
    const size_t bytes = cuda::sort_edges_workspace_bytes(sort);
    at::Tensor workspace = cuda::workspace(bytes, row.device());
    C10_CUDA_CHECK(cuda::sort_edges_by_row(sort, &current, workspace.mutable_data_ptr(), bytes,
                                           stream));
  }
  // The other halves go back to the allocator before the outputs take their place.
  keys[1 - current].reset();
  positions[1 - current].reset();
  at::Tensor indptr = at::empty({num_nodes + 1}, long_options);
  C10_CUDA_CHECK(cuda::indptr_from_sorted_rows(sort.keys[current], num_edges, num_nodes,
                                               indptr.mutable_data_ptr<int64_t>(), stream));
  keys[current].reset();
  at::Tensor indices = at::empty_like(col);
  at::Tensor edge_ids = at::empty({num_edges}, long_options);
  C10_CUDA_CHECK(cuda::gather_sorted_columns(col.const_data_ptr<index_t>(),
                                             sort.positions[current], num_edges,
                                             indices.mutable_data_ptr<index_t>(),
                                             edge_ids.mutable_data_ptr<int64_t>(), stream));
  return {indptr, indices, edge_ids};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> csr_from_coo_cuda(const at::Tensor& row,
                                                                 const at::Tensor& col,
                                                                 int64_t num_nodes) {
  check_csr_from_coo_args(row, col, num_nodes);
  const c10::cuda::CUDAGuard guard(row.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const int64_t num_edges = row.numel();
  return AT_DISPATCH_INDEX_TYPES(row.scalar_type(), "csr_from_coo_cuda", [&] {
    if (num_edges > 0) {
      cuda::HopBoard board(row.device(), /*words=*/0);
      C10_CUDA_CHECK(cuda::check_coo_endpoints(row.const_data_ptr<index_t>(),
                                               col.const_data_ptr<index_t>(), num_edges,
                                               num_nodes, board.status(), stream));
      board.read(stream, num_nodes, num_edges);  // raises IndexError naming the endpoint
    }
    // 32-bit positions halve the sort's value traffic while the edges fit them.
    if (num_edges <= std::numeric_limits<uint32_t>::max()) {
      return build_csr<index_t, uint32_t>(row, col, num_nodes, stream);
    }
    return build_csr<index_t, uint64_t>(row, col, num_nodes, stream);
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CUDA, m) { m.impl("csr_from_coo", &csr_from_coo_cuda); }

}  // namespace quiver
