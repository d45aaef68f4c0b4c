#include "runtime/slotted_batch.h"

#include <ATen/ATen.h>

#ifdef QUIVER_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include "runtime/cuda/slotted_hops.h"
#endif

namespace quiver::runtime {

SlottedBatch::SlottedBatch(const at::Tensor& seeds, int64_t num_nodes, at::IntArrayRef fanouts)
    : numbering_(seeds, num_nodes, fanouts, static_cast<int64_t>(fanouts.size())) {}

#ifdef QUIVER_WITH_CUDA

void SlottedBatch::add_hop(const at::Tensor& slots, const at::Tensor& order, int64_t own_begin,
                           int64_t own_end) {
  const int64_t h = numbering_.hops_numbered();
  const int64_t fanout = numbering_.fanout(h);
  TORCH_CHECK(slots.is_cuda() && slots.dim() == 3 && slots.size(1) == 2 &&
                  slots.is_contiguous() && slots.size(0) == order.numel() &&
                  slots.size(2) == fanout && order.device() == slots.device(),
              "SlottedBatch: hop ", h, "'s slots must be [", order.numel(), ", 2, ", fanout,
              "] contiguous on order's GPU ", order.device(), ", got ", slots.sizes(), " on ",
              slots.device());
  const c10::cuda::CUDAGuard guard(slots.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const int64_t frontier = slots.size(0);
  const cuda::FrontierSlots answers{slots.const_data_ptr<int64_t>(),
                                    order.const_data_ptr<int64_t>(), frontier, fanout,
                                    own_begin, own_end};
  at::Tensor counts = at::empty({frontier}, order.options());
  C10_CUDA_CHECK(cuda::count_slot_edges(answers, counts.mutable_data_ptr<int64_t>(),
                                        numbering_.counter(h), stream));
  const internal::HopNumbering::HopEdges edges = numbering_.open_hop(counts);
  C10_CUDA_CHECK(cuda::unpack_slots(answers, counts.const_data_ptr<int64_t>(),
                                    edges.offsets.const_data_ptr<int64_t>(),
                                    edges.frontier_start, edges.rows.mutable_data_ptr<int64_t>(),
                                    edges.edge_ids.mutable_data_ptr<int64_t>(),
                                    edges.cols.mutable_data_ptr<int64_t>(), stream));
  numbering_.close_hop();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_by_owner(const at::Tensor& frontier,
                                                              const at::Tensor& owner,
                                                              const at::Tensor& local_index,
                                                              int64_t num_hosts) {

  const at::Device device = frontier.device();
  TORCH_CHECK(frontier.is_cuda() && frontier.scalar_type() == at::kLong &&
                  owner.device() == device && local_index.device() == device &&
                  local_index.scalar_type() == at::kLong,
              "group_by_owner: frontier and local_index int64, and owner, on one GPU; got ",
              frontier.scalar_type(), " on ", frontier.device(), ", ", owner.scalar_type(),
              " on ", owner.device(), ", ", local_index.scalar_type(), " on ",
              local_index.device());
  const c10::cuda::CUDAGuard guard(device);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const int64_t n = frontier.numel();
  const auto options = frontier.options();
  at::Tensor order = at::empty({n}, options), requests = at::empty({n}, options);
  at::Tensor send_counts = at::empty({num_hosts}, options);
  const size_t bytes = cuda::group_by_owner_workspace_bytes(n, num_hosts);
  at::Tensor space =
      at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions(device).dtype(at::kByte));
  const auto group = [&](auto typed) {
    using owner_t = decltype(typed);
    const cuda::OwnerGrouping<owner_t> grouping{
        frontier.const_data_ptr<int64_t>(), n, owner.const_data_ptr<owner_t>(),
        local_index.const_data_ptr<int64_t>(), num_hosts, order.mutable_data_ptr<int64_t>(),
        requests.mutable_data_ptr<int64_t>(), send_counts.mutable_data_ptr<int64_t>()};
    C10_CUDA_CHECK(cuda::group_by_owner(grouping, space.mutable_data_ptr(), bytes, stream));
  };
  if (owner.scalar_type() == at::kShort) {
    group(int16_t{});
  } else {
    TORCH_CHECK(owner.scalar_type() == at::kInt, "group_by_owner: owner must be int16 or int32, got ",
                owner.scalar_type());
    group(int32_t{});
  }
  return {order, requests, send_counts};
}

#else  // a CPU build: DistSampler takes this path for GPU parts only

void SlottedBatch::add_hop(const at::Tensor&, const at::Tensor&, int64_t, int64_t) {}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_by_owner(const at::Tensor&,
                                                              const at::Tensor&,
                                                              const at::Tensor&, int64_t) {
  TORCH_CHECK(false, "group_by_owner groups on a GPU: this build has no CUDA");
}

#endif

}  // namespace quiver::runtime
