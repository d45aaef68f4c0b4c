// Where a CUDA op's inputs live, as the GPU sees them: its own memory, a peer GPU's, or
// pinned host memory read with zero copy (UVA). Shared by the sampling and gather wrappers.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>

#include <optional>

#include "ops/cuda/row_sampling.h"

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
  csr.edge_ids =
      edge_ids ? static_cast<const int64_t*>(gpu_readable(*edge_ids, "edge_ids", device)) : nullptr;
  csr.num_nodes = indptr.numel() - 1;
  csr.num_edges = indices.numel();
  return csr;
}

// Scratch bytes for CUB and the node table, from PyTorch's caching allocator (stream-ordered
// on the current stream), never a raw cudaMalloc per call.
inline at::Tensor workspace(size_t bytes, const at::Device& device) {
  return at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions(device).dtype(at::kByte));
}

}  // namespace quiver::cuda
