// Page-locking existing host memory in place, so that GPUs read it directly (UVA) without
// a pinned copy, shared by everyone who pins the same memory. Plain C++: usable and
// testable without torch.
#pragma once

#include <cstddef>
#include <memory>

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

// A lease on page-locked memory covering [data, data + bytes), from a process-wide
// registry, so that two users of one memory (two UVA samplers over one topology, a store
// and the layouts it hands out) never unpin it under each other:
//  - a range inside one registered by an earlier, still-held lease shares that
//    registration, which ends when its last lease does;
//  - memory CUDA already treats as pinned (cudaHostAlloc, torch's pin_memory) gives an
//    empty lease (nullptr): nothing to register or release;
//  - otherwise the range is registered now.
// Throws std::runtime_error when the range covers only part of a pinned range (a pin
// must lie inside one registration, or its tail would be read unpinned), or when CUDA
// refuses to register it.
std::shared_ptr<HostRegistration> lease_pinned(void* data, size_t bytes);

// True when CUDA already treats `data` as page-locked host memory.
bool is_page_locked(const void* data);

}  // namespace quiver::runtime
