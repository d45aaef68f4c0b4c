#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <quiver/ipc_buffer.h>

#include "ops/errors.h"

#ifdef QUIVER_WITH_CUDA
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda.h>  // types of the one driver call, reached through the runtime (no -lcuda)
#include <cuda_runtime_api.h>

#include <cstring>
#endif

namespace quiver::runtime {

#ifdef QUIVER_WITH_CUDA
namespace {

// The size of the allocation that `pointer` (an address this process can use) lies in.
size_t allocation_bytes(void* pointer) {
  using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  static GetAddressRange get_range = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    C10_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000,
                                                    cudaEnableDefault, &found));
    TORCH_CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr,
                "the CUDA driver has no cuMemGetAddressRange");
    return reinterpret_cast<GetAddressRange>(fn);
  }();
  CUdeviceptr base = 0;
  size_t bytes = 0;
  const CUresult result = get_range(&base, &bytes, reinterpret_cast<CUdeviceptr>(pointer));
  TORCH_CHECK(result == CUDA_SUCCESS, "cuMemGetAddressRange failed with CUresult ", result);
  return bytes - (reinterpret_cast<CUdeviceptr>(pointer) - base);
}

// A device index of this process's GPUs, else a ValueError naming `what` and its value
// (a DeviceIndex is 8 bits: 256 would wrap to GPU 0).
void check_gpu_index(int64_t device, const char* what) {
  const int64_t count = c10::cuda::device_count();
  TORCH_CHECK_VALUE(device >= 0 && device < count, what, " must be a GPU index in [0, ", count,
                    "), got ", device);
}

}  // namespace

IpcBuffer::IpcBuffer(int64_t nbytes, int64_t device) : nbytes_(nbytes), device_(device) {
  TORCH_CHECK_VALUE(nbytes >= 0, "IpcBuffer: nbytes must be >= 0, got ", nbytes);
  check_gpu_index(device, "IpcBuffer: device");
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  C10_CUDA_CHECK(cudaMalloc(&base_, std::max<int64_t>(nbytes, 1)));
}

IpcBuffer::~IpcBuffer() {
  if (base_ == nullptr || (exported_ && !unmapped_)) return;  // see the header: never early
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  C10_CUDA_CHECK_WARN(cudaFree(base_));
}

at::Tensor IpcBuffer::tensor() {
  const at::Device where(at::kCUDA, static_cast<c10::DeviceIndex>(device_));
  auto keep = c10::intrusive_ptr<IpcBuffer>::reclaim_copy(this);
  return at::from_blob(
      base_, {nbytes_}, [keep](void*) {}, at::TensorOptions(where).dtype(at::kByte), where);
}

at::Tensor IpcBuffer::handle() {
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  cudaIpcMemHandle_t h;
  C10_CUDA_CHECK(cudaIpcGetMemHandle(&h, base_));
  exported_ = true;
  at::Tensor bytes = at::empty({static_cast<int64_t>(sizeof(h))}, at::kByte);
  std::memcpy(bytes.mutable_data_ptr(), &h, sizeof(h));
  return bytes;
}

at::Tensor IpcBuffer::open(const at::Tensor& handle, int64_t nbytes, int64_t owner,
                           int64_t reader) {
  cudaIpcMemHandle_t h;
  TORCH_CHECK_VALUE(handle.device().is_cpu() && handle.scalar_type() == at::kByte &&
                        handle.numel() == static_cast<int64_t>(sizeof(h)),
                    "IpcBuffer.open needs the ", sizeof(h),
                    "-byte CPU uint8 tensor from IpcBuffer.handle, got ",
                    errors::dtype_name(handle.scalar_type()), " of shape ", handle.sizes(), " on ",
                    handle.device());
  TORCH_CHECK_VALUE(nbytes >= 0, "IpcBuffer.open: nbytes must be >= 0, got ", nbytes);
  check_gpu_index(owner, "IpcBuffer.open: owner");
  check_gpu_index(reader, "IpcBuffer.open: reader");
  std::memcpy(&h, handle.contiguous().const_data_ptr(), sizeof(h));
  const auto reader_index = static_cast<c10::DeviceIndex>(reader);
  const c10::cuda::CUDAGuard guard(reader_index);
  void* base = nullptr;
  C10_CUDA_CHECK(cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess));
  const auto close = [reader_index](void* p) {
    const c10::cuda::CUDAGuard close_guard(reader_index);
    C10_CUDA_CHECK_WARN(cudaIpcCloseMemHandle(p));
  };
  size_t mapped = 0;
  try {
    mapped = allocation_bytes(base);
  } catch (...) {
    close(base);  // the mapping must not outlive a failed open
    throw;
  }
  if (static_cast<size_t>(nbytes) > mapped) {
    close(base);
    TORCH_CHECK_VALUE(false, "IpcBuffer.open: nbytes = ", nbytes, " but the handle names a ",
                      mapped, "-byte allocation");
  }
  const at::Device where(at::kCUDA, static_cast<c10::DeviceIndex>(owner));
  return at::from_blob(base, {nbytes}, close, at::TensorOptions(where).dtype(at::kByte), where);
}

#else

IpcBuffer::IpcBuffer(int64_t nbytes, int64_t device) : nbytes_(nbytes), device_(device) {
  TORCH_CHECK(false, "IpcBuffer: torch-quiver-ops was built without CUDA");
}
IpcBuffer::~IpcBuffer() = default;
at::Tensor IpcBuffer::tensor() { TORCH_CHECK(false, "IpcBuffer: built without CUDA"); }
at::Tensor IpcBuffer::handle() { TORCH_CHECK(false, "IpcBuffer: built without CUDA"); }
at::Tensor IpcBuffer::open(const at::Tensor&, int64_t, int64_t, int64_t) {
  TORCH_CHECK(false, "IpcBuffer: torch-quiver-ops was built without CUDA");
}

#endif

}  // namespace quiver::runtime
