#include "runtime/slotted_batch.h"

#include <ATen/ATen.h>

#ifdef QUIVER_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <ATen/cuda/CUDAEvent.h>

#include "ops/internal/batch_graph.h"
#include "runtime/cuda/slotted_hops.h"
#endif

#include <cstring>

#include "ops/errors.h"

namespace quiver::runtime {

SlottedBatch::SlottedBatch(const at::Tensor& seeds, int64_t num_nodes, at::IntArrayRef fanouts,
                           bool start)
    : num_hops_(static_cast<int64_t>(fanouts.size())),
      numbering_(seeds, num_nodes, fanouts, 3 * num_hops_) {
  if (start) numbering_.start();
}

// Only a few shapes are kept (an epoch has two: full batches and the last); others run as
// usual.
constexpr size_t kMaxCapturedShapes = 3;
constexpr size_t kMaxSeenShapes = 64;

#ifdef QUIVER_WITH_CUDA
struct BoundedBatches::Captured {
  cuda::BatchGraph graph;  // first: destroyed last, after the buffers in its pool
  std::unique_ptr<SlottedBatch> batch;
  at::Tensor seeds_host, seeds, keys_host, keys;  // the inputs: pinned, and the graph's copies
};
#else
struct BoundedBatches::Captured {};
#endif

BoundedBatches::BoundedBatches(bool capture) : capture_(capture) {}
BoundedBatches::~BoundedBatches() = default;

void BoundedBatches::set_capture(bool capture) {
  capture_ = capture;
  if (!capture) drop_captures();
}

void BoundedBatches::outputs_copied() {
#ifdef QUIVER_WITH_CUDA
  if (!outputs_copied_) outputs_copied_ = std::make_shared<at::cuda::CUDAEvent>();
  static_cast<at::cuda::CUDAEvent*>(outputs_copied_.get())->record();
#endif
}

void BoundedBatches::drop_captures() {
  captured_.clear();
  seen_.clear();
}

SlottedBatch& BoundedBatches::run(const at::Tensor& seeds, const at::Device& device,
                                  int64_t num_nodes, at::IntArrayRef fanouts,
                                  const std::vector<int64_t>& slot_rows,
                                  const std::vector<int64_t>& key_words, const Queue& queue) {
  std::vector<int64_t> shape{seeds.numel()};
  shape.insert(shape.end(), slot_rows.begin(), slot_rows.end());
#ifdef QUIVER_WITH_CUDA
  auto found = captured_.find(shape);
  if (seen_.size() > kMaxSeenShapes) seen_.clear();  // batch sizes that keep changing
  const bool capture = capture_ && found == captured_.end() && ++seen_[shape] >= 2 &&
                       captured_.size() < kMaxCapturedShapes;
  if (capture) {
    auto entry = std::make_unique<Captured>();
    const auto pinned = at::TensorOptions().dtype(at::kLong).pinned_memory(true);
    const auto on_device = at::TensorOptions().dtype(at::kLong).device(device);
    entry->seeds_host = at::empty({seeds.numel()}, pinned);
    entry->seeds = at::empty({seeds.numel()}, on_device);
    entry->keys_host = at::empty({static_cast<int64_t>(key_words.size())}, pinned);
    entry->keys = at::empty({static_cast<int64_t>(key_words.size())}, on_device);
    entry->batch = std::make_unique<SlottedBatch>(entry->seeds, num_nodes, fanouts,
                                                  /*start=*/false);
    cuda::CaptureStream& on = cuda::CaptureStream::of(device.index());
    {
      const std::lock_guard<std::mutex> turn(on.turn());
      const c10::cuda::CUDAStreamGuard capturing(on.stream());
      const cudaStream_t stream = on.stream().stream();
      Captured& c = *entry;
      c.graph.capture(device.index(), stream, [&] {
        C10_CUDA_CHECK(cudaMemcpyAsync(c.seeds.mutable_data_ptr(), c.seeds_host.const_data_ptr(),
                                       c.seeds.nbytes(), cudaMemcpyHostToDevice, stream));
        C10_CUDA_CHECK(cudaMemcpyAsync(c.keys.mutable_data_ptr(), c.keys_host.const_data_ptr(),
                                       c.keys.nbytes(), cudaMemcpyHostToDevice, stream));
        c.batch->start();
        queue(*c.batch, c.keys.const_data_ptr<int64_t>());
      });
    }
    found = captured_.emplace(shape, std::move(entry)).first;
  }
  if (found != captured_.end()) {
    Captured& c = *found->second;
    std::memcpy(c.seeds_host.mutable_data_ptr(), seeds.const_data_ptr(), seeds.nbytes());
    std::memcpy(c.keys_host.mutable_data_ptr(), key_words.data(),
                key_words.size() * sizeof(int64_t));
    c.batch->prepare_replay();
    const at::cuda::CUDAStream stream = at::cuda::getCurrentCUDAStream(device.index());
    if (outputs_copied_) {
      static_cast<at::cuda::CUDAEvent*>(outputs_copied_.get())->block(stream);
    }
    c.graph.replay(stream.stream());
    return *c.batch;
  }
#endif
  as_usual_.reset();
  as_usual_ = std::make_unique<SlottedBatch>(seeds.to(device), num_nodes, fanouts);
  as_usual_keys_ = at::tensor(key_words, at::kLong).to(device);
  queue(*as_usual_, as_usual_keys_.const_data_ptr<int64_t>());
  return *as_usual_;
}

#ifdef QUIVER_WITH_CUDA

void SlottedBatch::add_hop(const at::Tensor& slots, const at::Tensor& order, int64_t own_begin,
                           int64_t own_end, int64_t frontier_rows) {
  const int64_t h = numbering_.hops_numbered();
  const int64_t fanout = numbering_.fanout(h);
  TORCH_CHECK(slots.is_cuda() && slots.dim() == 3 && slots.size(1) == 2 &&
                  slots.is_contiguous() && slots.size(0) == order.numel() &&
                  slots.size(2) == fanout && order.device() == slots.device() &&
                  order.scalar_type() == at::kLong && order.is_contiguous(),
              "SlottedBatch: hop ", h, "'s slots must be [", order.numel(), ", 2, ", fanout,
              "] contiguous on order's GPU ", order.device(), ", got ", slots.sizes(), " on ",
              slots.device());
  const c10::cuda::CUDAGuard guard(slots.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const cuda::FrontierSlots answers{slots.const_data_ptr<int64_t>(),
                                    order.const_data_ptr<int64_t>(), slots.size(0), fanout,
                                    own_begin, own_end};
  // Zeroed: a frontier node no slot answers (past the live ones) has no edges.
  at::Tensor counts = at::zeros({frontier_rows}, order.options());
  C10_CUDA_CHECK(cuda::count_slot_edges(answers, counts.mutable_data_ptr<int64_t>(),
                                        numbering_.counter(h), stream));
  // Only the nodes a slot answered have edges: with blocks smaller than the frontier's
  // bound, the hop's buffers are sized by the blocks.
  const internal::HopNumbering::HopEdges edges = numbering_.open_hop(counts, slots.size(0));
  C10_CUDA_CHECK(cuda::unpack_slots(answers, counts.const_data_ptr<int64_t>(),
                                    edges.offsets.const_data_ptr<int64_t>(),
                                    edges.frontier_start, edges.rows.mutable_data_ptr<int64_t>(),
                                    edges.edge_ids.mutable_data_ptr<int64_t>(),
                                    edges.cols.mutable_data_ptr<int64_t>(), stream));
  numbering_.close_hop();
}

namespace {

// Grouped by owner on the GPU (group_by_owner), compact or (`bounded`) in fixed blocks.
std::tuple<at::Tensor, at::Tensor, at::Tensor> grouped(const at::Tensor& frontier,
                                                       const int64_t* live,
                                                       const at::Tensor& owner,
                                                       const at::Tensor& local_index,
                                                       int64_t num_hosts,
                                                       const cuda::BoundedGrouping* bounded) {
  const at::Device device = frontier.device();
  TORCH_CHECK(frontier.is_cuda() && frontier.scalar_type() == at::kLong &&
                  owner.device() == device && local_index.device() == device &&
                  local_index.scalar_type() == at::kLong,
              "group_by_owner: frontier and local_index int64, and owner, on one GPU; got ",
              errors::dtype_name(frontier.scalar_type()), " on ", frontier.device(), ", ",
              errors::dtype_name(owner.scalar_type()), " on ", owner.device(), ", ",
              errors::dtype_name(local_index.scalar_type()), " on ", local_index.device());
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
        requests.mutable_data_ptr<int64_t>(), send_counts.mutable_data_ptr<int64_t>(), live};
    C10_CUDA_CHECK(
        cuda::group_by_owner(grouping, space.mutable_data_ptr(), bytes, stream, bounded));
  };
  if (owner.scalar_type() == at::kShort) {
    group(int16_t{});
  } else {
    TORCH_CHECK(owner.scalar_type() == at::kInt,
                "group_by_owner: owner must be int16 or int32, got ",
                errors::dtype_name(owner.scalar_type()));
    group(int32_t{});
  }
  return {order, requests, send_counts};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_by_owner(const at::Tensor& frontier,
                                                              const at::Tensor& owner,
                                                              const at::Tensor& local_index,
                                                              int64_t num_hosts) {
  return grouped(frontier, nullptr, owner, local_index, num_hosts, nullptr);
}

std::tuple<at::Tensor, at::Tensor> group_into_bounded_slots(
    const at::Tensor& frontier, const int64_t* live, const at::Tensor& owner,
    const at::Tensor& local_index, int64_t num_hosts, int64_t slot_rows, int64_t host,
    int64_t* remote_nodes) {
  TORCH_CHECK(slot_rows >= 0 && live != nullptr,
              "group_into_bounded_slots: blocks of ", slot_rows, " rows, and live, are needed");
  const auto options = frontier.options();
  at::Tensor padded_requests = at::empty({num_hosts, slot_rows + 1}, options);
  at::Tensor slot_order = at::empty({num_hosts * slot_rows}, options);
  const cuda::BoundedGrouping bounded{slot_rows, host, padded_requests.mutable_data_ptr<int64_t>(),
                                      slot_order.mutable_data_ptr<int64_t>(), remote_nodes};
  grouped(frontier, live, owner, local_index, num_hosts, &bounded);
  return {padded_requests, slot_order};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> compact_requests(const at::Tensor& padded_requests,
                                                                int64_t num_hosts,
                                                                int64_t slot_rows,
                                                                int64_t* most_asked) {
  TORCH_CHECK(padded_requests.is_cuda() && padded_requests.scalar_type() == at::kLong &&
                  padded_requests.is_contiguous() &&
                  padded_requests.numel() == num_hosts * (slot_rows + 1),
              "compact_requests: the requests must be contiguous int64 [", num_hosts, ", ",
              slot_rows + 1, "] on a GPU, got ", errors::dtype_name(padded_requests.scalar_type()),
              " ", padded_requests.sizes(), " on ", padded_requests.device());
  static_assert(kMaxBoundedSlotHosts == cuda::kMaxCompactedHosts);
  TORCH_CHECK(num_hosts <= kMaxBoundedSlotHosts, "compact_requests: ", num_hosts,
              " hosts, more than ", kMaxBoundedSlotHosts);
  const c10::cuda::CUDAGuard guard(padded_requests.device());
  const auto options = padded_requests.options();
  at::Tensor asked = at::empty({num_hosts * slot_rows}, options);
  at::Tensor slot_of = at::empty({num_hosts * slot_rows}, options);
  at::Tensor live = at::empty({2}, options);
  C10_CUDA_CHECK(cuda::compact_requests(
      padded_requests.const_data_ptr<int64_t>(), num_hosts, slot_rows,
      asked.mutable_data_ptr<int64_t>(), slot_of.mutable_data_ptr<int64_t>(),
      live.mutable_data_ptr<int64_t>(), most_asked, at::cuda::getCurrentCUDAStream().stream()));
  return {asked, slot_of, live};
}

#else  // a CPU build: DistSampler takes this path for GPU parts only

void SlottedBatch::add_hop(const at::Tensor&, const at::Tensor&, int64_t, int64_t, int64_t) {}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_by_owner(const at::Tensor&,
                                                              const at::Tensor&,
                                                              const at::Tensor&, int64_t) {
  TORCH_CHECK(false, "group_by_owner groups on a GPU: this build has no CUDA");
}

std::tuple<at::Tensor, at::Tensor> group_into_bounded_slots(const at::Tensor&, const int64_t*,
                                                            const at::Tensor&, const at::Tensor&,
                                                            int64_t, int64_t, int64_t, int64_t*) {
  TORCH_CHECK(false, "group_into_bounded_slots groups on a GPU: this build has no CUDA");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> compact_requests(const at::Tensor&, int64_t,
                                                                int64_t, int64_t*) {
  TORCH_CHECK(false, "compact_requests runs on a GPU: this build has no CUDA");
}

#endif

}  // namespace quiver::runtime
