// torch.classes.quiver.IpcBuffer: GPU memory that other processes map through CUDA IPC, for
// the shards of a p2p_clique_replicate cache.
//
// Why not torch's own tensor sharing: torch opens a handle in the context of the GPU that
// holds the memory, and a kernel running on a peer GPU then cannot read it; a peer must
// open the handle in its own context (with lazy peer access, as NCCL does), which open()
// does.
//
// Lifetime: freeing exported memory while another process still has it mapped is
// undefined in CUDA, and this process cannot see the other's mappings. So a buffer whose
// handle was exported is freed only after mark_unmapped() says every importer closed it
// (after a barrier, see Feature.close); until then it stays allocated (at the latest, the
// driver frees it when this process ends).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/custom_class.h>

#include <atomic>

namespace quiver::runtime {

class IpcBuffer : public torch::CustomClassHolder {
 public:
  // nbytes of GPU memory on `device`, from cudaMalloc itself (never sub-allocated, at
  // least one byte so that even an empty shard has a handle).
  IpcBuffer(int64_t nbytes, int64_t device);
  ~IpcBuffer() override;

  // The memory as a uint8 tensor of nbytes on the device; it keeps the buffer alive.
  at::Tensor tensor();
  // The 64-byte handle (a CPU uint8 tensor) another process passes to open().
  at::Tensor handle();
  // Every process that opened the handle has closed its mapping: the memory may be freed
  // when this buffer dies.
  void mark_unmapped() { unmapped_ = true; }
  int64_t nbytes() const { return nbytes_; }
  int64_t device() const { return device_; }

  // Maps another process's buffer of nbytes, held on GPU `owner`, for kernels on GPU
  // `reader`, as a uint8 tensor (on `owner`); the mapping closes when the tensor dies.
  // nbytes is checked against the size of the allocation the handle names.
  static at::Tensor open(const at::Tensor& handle, int64_t nbytes, int64_t owner, int64_t reader);

 private:
  void* base_ = nullptr;
  int64_t nbytes_;
  int64_t device_;
  std::atomic<bool> exported_{false};
  std::atomic<bool> unmapped_{false};
};

}  // namespace quiver::runtime
