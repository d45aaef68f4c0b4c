#include "runtime/held_memory.h"

#include <c10/core/CPUAllocator.h>

namespace quiver::runtime {
namespace {

struct Held {
  c10::DataPtr original;
};

// The deleter of the DataPtr a storage holds in place of its original: drops the
// storage's reference to the hold.
void drop_reference(void* context) { delete static_cast<std::shared_ptr<Held>*>(context); }

}  // namespace

std::shared_ptr<void> hold_storage_memory(const c10::Storage& storage) {
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  if (impl == nullptr) return nullptr;
  const c10::DataPtr& current = impl->data_ptr();
  if (current.get() == nullptr) return nullptr;
  if (current.get_deleter() == &drop_reference) {  // held already
    return *static_cast<std::shared_ptr<Held>*>(current.get_context());
  }
  const c10::DeleterFnPtr deleter = current.get_deleter();
  if (deleter == nullptr || (deleter != c10::GetDefaultCPUAllocator()->raw_deleter() &&
                             deleter != c10::GetCPUAllocator()->raw_deleter())) {
    return nullptr;
  }
  auto held = std::make_shared<Held>();
  void* data = current.get();
  const c10::Device device = current.device();
  c10::DataPtr standing_in(data, new std::shared_ptr<Held>(held), &drop_reference, device);
  held->original = impl->set_data_ptr(std::move(standing_in));
  return held;
}

}  // namespace quiver::runtime
