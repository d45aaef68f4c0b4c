#include <c10/util/Exception.h>
#include <quiver/host_pin.h>

#include <stdexcept>

#include "runtime/held_memory.h"
#include "runtime/host_registration.h"

namespace quiver::runtime {

HostPin::HostPin(at::Tensor tensor) : tensor_(std::move(tensor)) {
  TORCH_CHECK(tensor_.device().is_cpu(), "HostPin needs a CPU tensor, got one on ",
              tensor_.device());
  TORCH_CHECK(tensor_.is_contiguous(), "HostPin needs a contiguous tensor");
  if (tensor_.numel() == 0) return;
  storage_ = tensor_.storage();
  try {
    registration_ = lease_pinned(storage_.mutable_data(), storage_.nbytes());
    if (registration_) held_ = hold_storage_memory(storage_);
  } catch (const std::runtime_error& error) {
    TORCH_CHECK(false, "could not pin a tensor of shape ", tensor_.sizes(),
                " in place: ", error.what());
  }
}

HostPin::~HostPin() = default;

}  // namespace quiver::runtime
