// Host-side helpers shared by the CUDA sampling wrappers: where the topology lives (device
// memory or pinned host memory), Philox keys from PyTorch's CUDA generator, and the one
// small device-to-host read per hop that both returns sizes and reports invalid input.
#pragma once

#include "ops/cuda/sampling_kernels.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <mutex>

namespace quiver::cuda {

// A pointer the GPU can read for `t`: its own when it is on `device` (GPU mode), or the
// mapped address of pinned host memory (UVA mode: the kernels read it over PCIe).
inline const void* gpu_readable(const at::Tensor& t, const char* name, const at::Device& device) {
  if (t.is_cuda()) {
    TORCH_CHECK(t.device() == device, name, " is on ", t.device(), " but the op runs on ", device,
                ", where its seeds or ids are");
    return t.const_data_ptr();
  }
  TORCH_CHECK(t.device().is_cpu(), name, " must be on ", device, " or in pinned host memory, got ",
              t.device());
  if (t.numel() == 0) return nullptr;  // never dereferenced
  TORCH_CHECK(t.is_pinned(), name, " is in pageable host memory: a kernel on ", device,
              " reads it only from that GPU or from pinned host memory (tensor.pin_memory() or "
              "torch_quiver_ops.uva.pin_in_place(tensor))");
  // Map the storage's start (where pinning began) and offset from there, so views into a
  // pinned table (the host tier is one) work whatever the driver's lookup accepts.
  const auto* base = static_cast<const char*>(t.storage().data());
  void* mapped = nullptr;
  C10_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, const_cast<char*>(base), 0));
  return static_cast<const char*>(mapped) + (static_cast<const char*>(t.const_data_ptr()) - base);
}

template <typename index_t>
Csr<index_t> readable_csr(const at::Tensor& indptr, const at::Tensor& indices,
                          const std::optional<at::Tensor>& edge_ids, const at::Device& device) {
  Csr<index_t> csr;
  csr.indptr = static_cast<const int64_t*>(gpu_readable(indptr, "indptr", device));
  csr.indices = static_cast<const index_t*>(gpu_readable(indices, "indices", device));
  csr.edge_ids = edge_ids ? static_cast<const int64_t*>(gpu_readable(*edge_ids, "edge_ids", device))
                          : nullptr;
  csr.num_nodes = indptr.numel() - 1;
  csr.num_edges = indices.numel();
  return csr;
}

// Reserves `increment` 32-bit draws per Philox stream from the device's default generator,
// so torch.manual_seed reproduces a call and successive calls use fresh numbers.
inline PhiloxKey draw_philox_key(const at::Device& device, uint64_t increment) {
  auto* gen = at::check_generator<at::CUDAGeneratorImpl>(
      at::cuda::detail::getDefaultCUDAGenerator(device.index()));
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
  HopBoard(const at::Device& device, int64_t words)
      : words_(kStatusWords + words),
        device_(at::zeros({words_}, at::TensorOptions(device).dtype(at::kLong))),
        host_(at::zeros({words_}, at::TensorOptions(at::kLong).pinned_memory(true))) {}

  DeviceStatus* status() { return reinterpret_cast<DeviceStatus*>(device_.mutable_data_ptr()); }
  int64_t* words() { return device_.mutable_data_ptr<int64_t>() + kStatusWords; }
  int64_t* host_words() { return host_.mutable_data_ptr<int64_t>() + kStatusWords; }

  // Copies the host mirror (after filling host_words()) to the device, asynchronously.
  void upload(cudaStream_t stream) {
    C10_CUDA_CHECK(cudaMemcpyAsync(device_.mutable_data_ptr(), host_.const_data_ptr(),
                                   words_ * sizeof(int64_t), cudaMemcpyHostToDevice, stream));
  }

  // Fetches the block and waits for it, raises on invalid input, returns the counters.
  const int64_t* read(cudaStream_t stream, int64_t num_nodes, int64_t num_edges) {
    fetch(stream);
    throw_on_status(*reinterpret_cast<const DeviceStatus*>(host_.const_data_ptr()), num_nodes,
                    num_edges);
    return host_.const_data_ptr<int64_t>() + kStatusWords;
  }

 private:
  static constexpr int64_t kStatusWords = sizeof(DeviceStatus) / sizeof(int64_t);

  void fetch(cudaStream_t stream) {
    C10_CUDA_CHECK(cudaMemcpyAsync(host_.mutable_data_ptr(), device_.const_data_ptr(),
                                   words_ * sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
    C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  static void throw_on_status(const DeviceStatus& s, int64_t num_nodes, int64_t num_edges) {
    switch (s.code) {
      case kStatusOk:
        return;
      case kSeedOutOfRange:
        TORCH_CHECK_INDEX(false, "seeds[", s.index, "] = ", s.value, " is out of range [0, ",
                          num_nodes, ")");
      case kNeighborOutOfRange:
        TORCH_CHECK_INDEX(false, "indices holds node id ", s.value, ", out of range [0, ",
                          num_nodes, "): the CSR is corrupt");
      case kRowOutOfBounds:
        TORCH_CHECK_VALUE(false, "indptr and indices disagree at node ", s.index, ": indptr[",
                          s.index, "] = ", s.value, ", indptr[", s.index + 1, "] = ", s.extra,
                          ", indices has ", num_edges, " entries");
      case kCsrEnds:
        TORCH_CHECK_VALUE(false, "indptr and indices disagree: indptr[0] = ", s.value,
                          " and indptr[-1] = ", s.extra, ", but indices has ", num_edges,
                          " entries");
      default:
        TORCH_CHECK(false, "quiver CUDA kernel reported unknown status ", s.code);
    }
  }

  int64_t words_;
  at::Tensor device_;
  at::Tensor host_;
};

inline at::Tensor workspace(size_t bytes, const at::Device& device) {
  return at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions(device).dtype(at::kByte));
}

}  // namespace quiver::cuda
