#include "runtime/host_registration.h"

#include <stdexcept>
#include <string>

#ifdef QUIVER_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace quiver::runtime {

#ifdef QUIVER_WITH_CUDA

namespace {
std::string explain(cudaError_t error, size_t bytes) {
  std::string message = "cudaHostRegister of " + std::to_string(bytes) +
                        " bytes failed: " + cudaGetErrorString(error) + ". ";
  switch (error) {
    case cudaErrorHostMemoryAlreadyRegistered:
      return message +
             "Part of this memory is already registered (an overlapping pin is alive, or the "
             "tensor shares pages with one); pin the whole tensor once, or copy it with "
             ".pin_memory().";
    case cudaErrorMemoryAllocation:
      return message +
             "The system refused to lock this much memory: check `ulimit -l` (memlock) and "
             "the free host memory.";
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      return message + "A CUDA GPU and driver are needed to pin memory for the GPU.";
    default:
      return message + "Check `ulimit -l` (memlock) and that the memory is ordinary host memory.";
  }
}
}  // namespace

HostRegistration::HostRegistration(void* data, size_t bytes) : data_(data), bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t error =
      cudaHostRegister(data, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (error != cudaSuccess) {
    cudaGetLastError();  // the failure must not surface later as someone else's launch error
    throw std::runtime_error(explain(error, bytes));
  }
}

HostRegistration::~HostRegistration() {
  if (bytes_ == 0) return;
  if (cudaHostUnregister(data_) != cudaSuccess) cudaGetLastError();
}

bool is_page_locked(const void* data) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, data) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

#else

HostRegistration::HostRegistration(void* data, size_t bytes) : data_(data), bytes_(bytes) {
  throw std::runtime_error(
      "torch-quiver-ops was built without CUDA, so it cannot pin memory for a GPU");
}
HostRegistration::~HostRegistration() = default;
bool is_page_locked(const void*) { return false; }

#endif

}  // namespace quiver::runtime
