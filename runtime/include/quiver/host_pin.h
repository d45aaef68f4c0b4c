// torch.classes.quiver.HostPin: keeps a CPU tensor page-locked in place while alive, so
// GPU kernels read it with zero copy (UVA mode). A tensor that is pinned already is held
// as is.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/custom_class.h>

#include <memory>

namespace quiver::runtime {

class HostRegistration;  // runtime/host_registration.h: plain C++, no torch

class HostPin : public torch::CustomClassHolder {
 public:
  explicit HostPin(at::Tensor tensor);
  ~HostPin() override;

  at::Tensor tensor() const { return tensor_; }
  // True when this object registered the memory (and unregisters it when destroyed).
  bool registered_here() const { return registration_ != nullptr; }

 private:
  at::Tensor tensor_;
  std::unique_ptr<HostRegistration> registration_;
};

}  // namespace quiver::runtime
