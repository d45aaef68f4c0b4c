// Concurrent node-id -> local-index table for parallel reindexing on the CPU: the layout,
// hash and sizing of ops/sampling_rules.h and the first-appearance numbering of the GPU
// kernels (ops/cuda/reindex.cu), so all threads insert at once and the numbering stays
// deterministic.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdint>
#include <cstring>

#include "ops/sampling_rules.h"

namespace quiver::cpu {

class NodeTable {
 public:
  // Room for `nodes` ids at most half full.
  explicit NodeTable(int64_t nodes) { allocate(node_table_capacity(nodes)); }

  // Grows the table, keeping every id with its slot's contents, when `nodes` ids would
  // fill it past half. Slot indices handed out before are void afterwards.
  void reserve(int64_t nodes) {
    const int64_t wanted = node_table_capacity(nodes);
    if (wanted <= capacity_) return;
    const at::Tensor old_storage = storage_;
    const NodeSlot* old = slots_;
    const int64_t old_capacity = capacity_;
    allocate(wanted);
    at::parallel_for(0, old_capacity, 1 << 14, [&](int64_t lo, int64_t hi) {
      for (int64_t s = lo; s < hi; ++s) {
        if (old[s].key == kEmptyNodeKey) continue;
        NodeSlot& slot = slots_[find_or_insert(old[s].key)];
        slot.local = old[s].local;
        slot.first = old[s].first;
      }
    });
  }

  int64_t capacity() const { return capacity_; }
  NodeSlot& operator[](int64_t slot) { return slots_[slot]; }

  // Thread-safe: the slot holding `key`, claimed if the key is new.
  int64_t find_or_insert(int64_t key) {
    const uint64_t mask = static_cast<uint64_t>(capacity_ - 1);
    uint64_t h = mix_node_id(static_cast<uint64_t>(key)) & mask;
    while (true) {
      int64_t seen = __atomic_load_n(&slots_[h].key, __ATOMIC_RELAXED);
      if (seen == key) return static_cast<int64_t>(h);
      if (seen == kEmptyNodeKey) {
        if (__atomic_compare_exchange_n(&slots_[h].key, &seen, key, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED) ||
            seen == key) {
          return static_cast<int64_t>(h);
        }
      }
      h = (h + 1) & mask;
    }
  }

  // Thread-safe: records `position` as the slot's first mention if it is the smallest.
  void note_first(int64_t slot, uint32_t position) {
    uint32_t current = __atomic_load_n(&slots_[slot].first, __ATOMIC_RELAXED);
    while (position < current &&
           !__atomic_compare_exchange_n(&slots_[slot].first, &current, position, true,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
  }

 private:
  void allocate(int64_t capacity) {
    capacity_ = capacity;
    storage_ = at::empty({capacity_ * static_cast<int64_t>(sizeof(NodeSlot))}, at::kByte);
    slots_ = reinterpret_cast<NodeSlot*>(storage_.mutable_data_ptr());
    at::parallel_for(0, capacity_, 1 << 16, [&](int64_t lo, int64_t hi) {
      std::memset(slots_ + lo, 0xFF, (hi - lo) * sizeof(NodeSlot));
    });
  }

  int64_t capacity_ = 0;
  at::Tensor storage_;
  NodeSlot* slots_ = nullptr;
};

}  // namespace quiver::cpu
