// Keeps the host memory under a registration (pinned for a GPU, or registered with an RDMA
// NIC) alive for as long as the registration, whatever later happens to the tensor that
// handed it over.
//
// Why: a storage's memory can be swapped from under it. `share_memory_()` (which pickling
// a tensor for worker processes runs) copies a storage into shared memory, points the
// *same* StorageImpl at the copy and frees the old memory; holding the Storage does not
// keep that memory. A registration left on freed memory is undefined: a NIC serves peers
// whatever malloc puts there next, and a GPU registry would take the next allocation at
// that address for pinned.
//
// How: the storage's DataPtr is replaced by one over the same bytes whose deleter only
// drops a reference; the original DataPtr (and so the memory) goes when the storage and
// every holder have let go. Only memory of the default CPU allocator is held so (its
// deleter is known and nothing else reads it); other memory is returned unheld (shared or
// file mappings, which share_memory_ does not move, and other allocators' blocks).
#pragma once

#include <c10/core/Storage.h>

#include <memory>

namespace quiver::runtime {

// A reference that keeps `storage`'s current memory allocated while it lives (null when
// the memory is not held: see above). Holding memory that is held already shares the hold.
std::shared_ptr<void> hold_storage_memory(const c10::Storage& storage);

}  // namespace quiver::runtime
