// Host side of a sampling call's bookkeeping: Philox keys from PyTorch's CUDA generator,
// and the one small device-to-host read per batch that both returns sizes and reports the
// invalid input a kernel met (raised through ops/errors.h, as the CPU kernels do).
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAException.h>

#include <cstring>
#include <mutex>

#include "ops/cuda/device_status.h"
#include "ops/cuda/row_sampling.h"
#include "ops/errors.h"

namespace quiver::cuda {

// Reserves `increment` 32-bit draws per Philox stream from `generator`, else from the
// device's default generator, so torch.manual_seed reproduces a call and successive calls
// use fresh numbers.
inline PhiloxKey draw_philox_key(const at::Device& device, uint64_t increment,
                                 const std::optional<at::Generator>& generator) {
  auto* gen = at::get_generator_or_default<at::CUDAGeneratorImpl>(
      generator, at::cuda::detail::getDefaultCUDAGenerator(device.index()));
  // torch.Generator("cuda") names no index (-1): like PyTorch's own ops, take it anywhere.
  TORCH_CHECK(gen->device().index() == device.index() || gen->device().index() < 0,
              "generator must be on the sampling device ", device, ", got a generator on ",
              gen->device());
  std::lock_guard<std::mutex> lock(gen->mutex_);
  const at::PhiloxCudaState state = gen->philox_cuda_state((increment + 3) / 4 * 4);
  TORCH_CHECK(!state.captured_,
              "quiver sampling cannot be captured in a CUDA graph: its output sizes depend on "
              "the data");
  return {state.seed_.val, state.offset_.val};
}

// A device block the kernels report into: a DeviceStatus, then `words` int64 counters of
// the op's own, mirrored in pinned host memory. read() is the op's synchronization point.
class HopBoard {
 public:
  // The last `unread_words` of `words` go to the device only (a batch's seeds): read()
  // leaves them there.
  HopBoard(const at::Device& device, int64_t words, int64_t unread_words = 0)
      : words_(kStatusWords + words),
        read_words_(words_ - unread_words),
        device_(at::zeros({words_}, at::TensorOptions(device).dtype(at::kLong))),
        host_(at::zeros({words_}, at::TensorOptions(at::kLong).pinned_memory(true))) {}

  DeviceStatus* status() { return reinterpret_cast<DeviceStatus*>(device_.mutable_data_ptr()); }
  int64_t* words() { return device_.mutable_data_ptr<int64_t>() + kStatusWords; }
  int64_t* host_words() { return host_.mutable_data_ptr<int64_t>() + kStatusWords; }

  // Zeroes the host mirror (status included), for a board used again.
  void clear_host() { std::memset(host_.mutable_data_ptr(), 0, words_ * sizeof(int64_t)); }

  // Copies the host mirror (after filling host_words()) to the device, asynchronously.
  void upload(cudaStream_t stream) {
    C10_CUDA_CHECK(cudaMemcpyAsync(device_.mutable_data_ptr(), host_.const_data_ptr(),
                                   words_ * sizeof(int64_t), cudaMemcpyHostToDevice, stream));
  }

  // Fetches the block and waits for it, raises on invalid input, returns the counters.
  const int64_t* read(cudaStream_t stream, int64_t num_nodes, int64_t num_edges) {
    C10_CUDA_CHECK(cudaMemcpyAsync(host_.mutable_data_ptr(), device_.const_data_ptr(),
                                   read_words_ * sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
    C10_CUDA_CHECK(cudaStreamSynchronize(stream));
    raise_status(*reinterpret_cast<const DeviceStatus*>(host_.const_data_ptr()), num_nodes,
                 num_edges);
    return host_.const_data_ptr<int64_t>() + kStatusWords;
  }

 private:
  static constexpr int64_t kStatusWords = sizeof(DeviceStatus) / sizeof(int64_t);

  static void raise_status(const DeviceStatus& s, int64_t num_nodes, int64_t num_edges) {
    switch (s.code) {
      case kStatusOk:
        return;
      case kSeedOutOfRange:
        errors::id_out_of_range("seeds", s.index, s.value, num_nodes);
      case kNeighborOutOfRange:
        errors::neighbor_out_of_range(s.value, num_nodes);
      case kRowOutOfBounds:
        errors::row_out_of_bounds(s.index, s.value, s.extra, num_edges);
      case kCsrEnds:
        errors::csr_ends(s.value, s.extra, num_edges);
      case kCachedRowOutOfBounds:
        errors::cached_row_out_of_bounds(s.index, s.value, s.extra);
      case kBadEdgeWeight: {
        double weight;
        std::memcpy(&weight, &s.extra, sizeof(weight));
        errors::bad_edge_weight(s.index, weight, s.value);
      }
      case kEdgeTimeUnsorted:
        errors::edge_time_unsorted(s.index, s.value, s.extra);
      case kCumsumNotIncreasing:
        errors::cumsum_not_increasing(s.index, s.value);
      case kCumsumNotPerRow:
        errors::cumsum_not_per_row(s.index, s.value);
      case kSrcOutOfRange:
        errors::id_out_of_range("src", s.index, s.value, num_nodes);
      case kCooEndpointOutOfRange:
        errors::id_out_of_range(s.extra == 0 ? "row" : "col", s.index, s.value, num_nodes);
      default:
        TORCH_CHECK(false, "quiver CUDA kernel reported unknown status ", s.code);
    }
  }

  int64_t words_;
  int64_t read_words_;
  at::Tensor device_;
  at::Tensor host_;
};

}  // namespace quiver::cuda
