// Page-locking existing host memory in place, so that GPUs read it directly (UVA) without
// a pinned copy. Plain C++: usable and testable without torch.
#pragma once

#include <cstddef>

namespace quiver::runtime {

// Registers [data, data + bytes) with CUDA (cudaHostRegister, mapped and portable) for
// this object's lifetime. Throws std::runtime_error naming the cause when CUDA refuses
// (memory already registered, memlock limits, no GPU, or a build without CUDA).
class HostRegistration {
 public:
  HostRegistration(void* data, size_t bytes);
  ~HostRegistration();
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_;
  size_t bytes_;
};

// True when CUDA already treats `data` as page-locked host memory.
bool is_page_locked(const void* data);

}  // namespace quiver::runtime
