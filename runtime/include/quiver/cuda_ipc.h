// torch.classes.quiver.CudaIpc: GPU memory that other processes map through CUDA IPC, for
// the shards of a p2p_clique_replicate cache. Why not torch's own tensor sharing: torch
// opens a handle in the context of the GPU that holds the memory, and a kernel running on
// a peer GPU then cannot read it; a peer must open the handle in its own context (with
// lazy peer access, as NCCL does), which open_handle does.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/custom_class.h>

namespace quiver::runtime {

struct CudaIpc : torch::CustomClassHolder {
  // nbytes of uint8 on GPU `device`, from cudaMalloc itself (never sub-allocated), so that a
  // handle names exactly this memory. Freed when the last tensor viewing it dies.
  static at::Tensor allocate(int64_t nbytes, int64_t device);
  // The 64-byte handle (a CPU uint8 tensor) of memory from allocate().
  static at::Tensor export_handle(const at::Tensor& memory);
  // Maps another process's allocate() memory of nbytes, held on GPU `owner`, for kernels on
  // GPU `reader`. The mapping closes when the returned tensor (on `owner`) dies; the
  // exporting process must keep its memory alive until then.
  static at::Tensor open_handle(const at::Tensor& handle, int64_t nbytes, int64_t owner,
                                int64_t reader);
};

}  // namespace quiver::runtime
