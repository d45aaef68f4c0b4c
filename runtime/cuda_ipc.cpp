#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <quiver/cuda_ipc.h>

#ifdef QUIVER_WITH_CUDA
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <mutex>
#include <unordered_set>
#endif

namespace quiver::runtime {

#ifdef QUIVER_WITH_CUDA
namespace {

// Bases of live allocate() memory: only these may be exported.
std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::unordered_set<const void*>& registry() {
  static std::unordered_set<const void*> bases;
  return bases;
}

}  // namespace

at::Tensor CudaIpc::allocate(int64_t nbytes, int64_t device) {
  TORCH_CHECK_VALUE(nbytes >= 0, "CudaIpc.allocate: nbytes must be >= 0, got ", nbytes);
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  void* base = nullptr;
  // One byte at least, so that even an empty shard has a handle.
  C10_CUDA_CHECK(cudaMalloc(&base, std::max<int64_t>(nbytes, 1)));
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry().insert(base);
  }
  const auto free = [](void* p) {
    {
      std::lock_guard<std::mutex> lock(registry_mutex());
      registry().erase(p);
    }
    C10_CUDA_CHECK_WARN(cudaFree(p));
  };
  const at::Device where(at::kCUDA, static_cast<c10::DeviceIndex>(device));
  return at::from_blob(base, {nbytes}, free, at::TensorOptions(where).dtype(at::kByte), where);
}

at::Tensor CudaIpc::export_handle(const at::Tensor& memory) {
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    TORCH_CHECK(memory.is_cuda() && registry().count(memory.const_data_ptr()),
                "CudaIpc.export_handle needs memory from CudaIpc.allocate (a tensor starting at "
                "its first byte), got a tensor on ",
                memory.device());
  }
  const c10::cuda::CUDAGuard guard(memory.device());
  cudaIpcMemHandle_t handle;
  C10_CUDA_CHECK(cudaIpcGetMemHandle(&handle, const_cast<void*>(memory.const_data_ptr())));
  at::Tensor bytes = at::empty({static_cast<int64_t>(sizeof(handle))}, at::kByte);
  std::memcpy(bytes.mutable_data_ptr(), &handle, sizeof(handle));
  return bytes;
}

at::Tensor CudaIpc::open_handle(const at::Tensor& handle, int64_t nbytes, int64_t owner,
                                int64_t reader) {
  cudaIpcMemHandle_t h;
  TORCH_CHECK_VALUE(handle.device().is_cpu() && handle.scalar_type() == at::kByte &&
                        handle.numel() == static_cast<int64_t>(sizeof(h)),
                    "CudaIpc.open_handle needs the ", sizeof(h),
                    "-byte CPU uint8 tensor from export_handle, got ", handle.scalar_type(),
                    " of shape ", handle.sizes(), " on ", handle.device());
  std::memcpy(&h, handle.contiguous().const_data_ptr(), sizeof(h));
  const auto reader_index = static_cast<c10::DeviceIndex>(reader);
  const c10::cuda::CUDAGuard guard(reader_index);
  void* base = nullptr;
  C10_CUDA_CHECK(cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess));
  const auto close = [reader_index](void* p) {
    const c10::cuda::CUDAGuard close_guard(reader_index);
    C10_CUDA_CHECK_WARN(cudaIpcCloseMemHandle(p));
  };
  const at::Device where(at::kCUDA, static_cast<c10::DeviceIndex>(owner));
  return at::from_blob(base, {nbytes}, close, at::TensorOptions(where).dtype(at::kByte), where);
}

#else

at::Tensor CudaIpc::allocate(int64_t, int64_t) {
  TORCH_CHECK(false, "CudaIpc: torch-quiver-ops was built without CUDA");
}
at::Tensor CudaIpc::export_handle(const at::Tensor&) {
  TORCH_CHECK(false, "CudaIpc: torch-quiver-ops was built without CUDA");
}
at::Tensor CudaIpc::open_handle(const at::Tensor&, int64_t, int64_t, int64_t) {
  TORCH_CHECK(false, "CudaIpc: torch-quiver-ops was built without CUDA");
}

#endif

}  // namespace quiver::runtime
