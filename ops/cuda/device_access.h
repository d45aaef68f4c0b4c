// Where a CUDA op's inputs live, as the GPU sees them: its own memory, a peer GPU's, or
// pinned host memory read with zero copy (UVA). Shared by the sampling and gather wrappers.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <initializer_list>
#include <optional>

#include "ops/cuda/row_sampling.h"

namespace quiver::cuda {

// Bits that hold every value below `end`: the end bit of a radix sort over such keys.
inline int bits_below(int64_t end) {
  int bits = 1;
  while (bits < 63 && (int64_t{1} << bits) < end) ++bits;
  return bits;
}

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

// Keeps pinned host inputs out of PyTorch's pinned-memory cache until the work queued on
// `stream` has read them. An op that returns before its kernels finish (sample_neighbors)
// would otherwise let a temporary's block be handed out again (to the next pin_memory())
// while a kernel still reads it. Memory not from that cache is left alone.
inline void keep_until_read(std::initializer_list<const at::Tensor*> inputs, c10::Stream on) {
  at::HostAllocator* cache = at::getHostAllocator(at::kCUDA);
  for (const at::Tensor* t : inputs) {
    if (t == nullptr || !t->device().is_cpu() || t->numel() == 0) continue;
    const c10::DataPtr& data = t->storage().data_ptr();
    cache->record_event(data.get(), data.get_context(), on);
  }
}

// Scratch sets for rows that pick many neighbors without replacement (row_sampling.h),
// cleared on `stream`; undefined when the hop needs none.
inline at::Tensor pick_sets(int64_t fanout, bool replace, int64_t edges, const at::Device& device,
                            cudaStream_t stream) {
  if (!needs_pick_sets(fanout, replace) || edges == 0) return {};
  at::Tensor sets = at::empty({2 * edges}, at::TensorOptions(device).dtype(at::kLong));
  C10_CUDA_CHECK(cudaMemsetAsync(sets.mutable_data_ptr(), 0xFF, sets.nbytes(), stream));
  return sets;
}

}  // namespace quiver::cuda
