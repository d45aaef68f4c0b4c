// torch.classes.quiver.HostPin: keeps a CPU tensor's memory page-locked in place while
// alive, so GPU kernels read it with zero copy (UVA mode). It pins the tensor's whole
// storage (so torch's is_pinned() agrees for every view of it) and holds the memory it
// pinned for as long as the pin (runtime/held_memory.h): a later share_memory_() moves the
// tensor to new, unpinned memory (which kernels then refuse to read, clearly), but never
// frees memory that is still registered. Pins over the same memory share one registration,
// released by the last of them; memory that is pinned already (pin_memory) is held as is.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/custom_class.h>

#include <memory>

namespace quiver::runtime {

class HostRegistration;  // runtime/host_registration.h: plain C++, no torch

class HostPin : public torch::CustomClassHolder {
 public:
  // Raises RuntimeError naming the cause when the memory cannot be pinned (not a CPU
  // tensor, not contiguous, overlapping a pinned range in part, memlock limits, no GPU).
  explicit HostPin(at::Tensor tensor);
  ~HostPin() override;

  at::Tensor tensor() const { return tensor_; }
  // True when the pin holds a registration of this library (shared with other pins of the
  // same memory), false for memory CUDA's own allocator pinned.
  bool registered_here() const { return registration_ != nullptr; }

 private:
  at::Tensor tensor_;
  c10::Storage storage_;
  std::shared_ptr<void> held_;  // destroyed after the registration: declared before it
  std::shared_ptr<HostRegistration> registration_;
};

}  // namespace quiver::runtime
