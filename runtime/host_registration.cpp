#include "runtime/host_registration.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>

#ifdef QUIVER_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace quiver::runtime {
namespace {

// The registrations made for leases, by start address, each with its count of leases; a
// lease's release and a new lease both happen under the one mutex, so a range is never
// registered again while its old registration is being undone. Registered ranges never
// overlap (CUDA refuses), so the one that could contain a range is the last that starts at
// or before it.
struct Registry {
  struct Entry {
    std::unique_ptr<HostRegistration> registration;
    size_t leases = 0;
  };
  std::mutex mutex;
  std::map<uintptr_t, Entry> entries;
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: leases may outlive static teardown
  return *r;
}

}  // namespace

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
  if (data == nullptr) return false;
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

namespace {

std::string describe(uintptr_t begin, uintptr_t end) {
  std::ostringstream out;
  out << "[0x" << std::hex << begin << ", 0x" << end << ")";
  return out.str();
}

}  // namespace

std::shared_ptr<HostRegistration> lease_pinned(void* data, size_t bytes) {
  if (bytes == 0) return nullptr;
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t end = begin + bytes;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.entries.upper_bound(begin);
  Registry::Entry* shared = nullptr;
  uintptr_t shared_begin = 0;
  if (it != r.entries.begin()) {
    auto before = std::prev(it);
    const uintptr_t held_end = before->first + before->second.registration->bytes();
    if (begin < held_end) {
      if (end > held_end) {
        throw std::runtime_error("the range " + describe(begin, end) +
                                 " covers only part of the pinned range " +
                                 describe(before->first, held_end) +
                                 ", so its tail would be read unpinned; pin the whole tensor "
                                 "(or its whole storage) once");
      }
      shared = &before->second;  // inside an earlier lease's registration: share it
      shared_begin = before->first;
    }
  }
  if (shared == nullptr) {
    if (it != r.entries.end() && it->first < end) {
      throw std::runtime_error("the range " + describe(begin, end) + " covers the pinned range " +
                               describe(it->first, it->first + it->second.registration->bytes()) +
                               " in part; pin the whole tensor (or its whole storage) once");
    }
    const bool first_locked = is_page_locked(data);
    const bool last_locked = is_page_locked(reinterpret_cast<const char*>(data) + bytes - 1);
    if (first_locked && last_locked) return nullptr;  // pinned by CUDA's own allocator
    if (first_locked != last_locked) {
      throw std::runtime_error("the range " + describe(begin, end) +
                               " is page-locked at one end only (part of it was pinned "
                               "elsewhere), so its tail would be read unpinned; pin the whole "
                               "tensor once, or copy it with .pin_memory()");
    }
    Registry::Entry entry;
    entry.registration = std::make_unique<HostRegistration>(data, bytes);
    shared = &(r.entries[begin] = std::move(entry));
    shared_begin = begin;
  }
  ++shared->leases;
  // Each lease releases itself: the last one erases the entry, which unregisters the range.
  return std::shared_ptr<HostRegistration>(
      shared->registration.get(), [shared_begin](HostRegistration*) {
        Registry& registry_ = registry();
        std::lock_guard<std::mutex> release_lock(registry_.mutex);
        auto found = registry_.entries.find(shared_begin);
        if (found != registry_.entries.end() && --found->second.leases == 0) {
          registry_.entries.erase(found);
        }
      });
}

}  // namespace quiver::runtime
