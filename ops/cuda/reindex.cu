// GPU reindexing for multi-hop sampling (see reindex.h): linear probing in a table at most
// half full, first mentions found by an atomic minimum over edge positions and numbered by
// a CUB scan, so the numbering is deterministic however the threads interleave. The first
// mentions are flagged by a kernel of their own before the scan: read through the scan's
// input iterator, each tile's dependent table reads ran one after another (on the H200,
// 11.3 us for a 15k-edge hop's scan, against 5.6 for flags and scan apart; 15.9 against
// 12.6 for a 525k-edge hop).
#include <cub/device/device_scan.cuh>

#include <cstddef>

#include "ops/cuda/device_status.cuh"
#include "ops/internal/launch.cuh"
#include "ops/cuda/reindex.h"

namespace quiver::cuda {
namespace {

constexpr int kThreads = 256;

__device__ inline int64_t find_or_insert(NodeSlot* slots, int64_t mask, long long key) {
  int64_t h = static_cast<int64_t>(mix_node_id(static_cast<uint64_t>(key)) & mask);
  while (true) {
    const long long seen = *reinterpret_cast<volatile long long*>(&slots[h].key);
    if (seen == key) return h;
    if (seen == kEmptyNodeKey) {
      const auto prev = static_cast<long long>(atomicCAS(
          reinterpret_cast<unsigned long long*>(&slots[h].key),
          static_cast<unsigned long long>(kEmptyNodeKey), static_cast<unsigned long long>(key)));
      if (prev == kEmptyNodeKey || prev == key) return h;
    }
    h = (h + 1) & mask;
  }
}

static_assert(offsetof(NodeSlot, first) == kSlotMentionOffset &&
                  offsetof(NodeSlot, local) == kSlotMentionOffset + 4,
              "first and local form the slot's second word, local in its high half");
constexpr unsigned long long kUnnumberedMention = 0xFFFFFFFFull << 32;

__device__ inline unsigned long long* mention_word(NodeSlot& slot) {
  return reinterpret_cast<unsigned long long*>(reinterpret_cast<char*>(&slot) +
                                               kSlotMentionOffset);
}

__device__ inline int64_t live_edges(const HopEdges& edges) {
  return *edges.num_edges < edges.max_edges ? *edges.num_edges : edges.max_edges;
}

__global__ void rehash_kernel(NodeTable from, NodeTable to) {
  QUIVER_GRID_LOOP(s, from.capacity) {
    const NodeSlot old = from.slots[s];
    if (old.key == kEmptyNodeKey) continue;
    NodeSlot& slot = to.slots[find_or_insert(to.slots, to.capacity - 1, old.key)];
    slot.local = old.local;
    slot.first = old.first;
  }
}

__global__ void insert_nodes_kernel(NodeTable table, const int64_t* nodes, int64_t n,
                                    int64_t* entries) {
  QUIVER_GRID_LOOP(i, n) {
    const long long key = nodes[i];
    if (key < 0) {  // reported by the planning kernel; keep the sentinel out of the table
      entries[i] = -1;
      continue;
    }
    const int64_t h = find_or_insert(table.slots, table.capacity - 1, key);
    entries[i] = h;
    atomicMin(&table.slots[h].first, static_cast<unsigned int>(i));
  }
}

__global__ void number_nodes_kernel(NodeTable table, const int64_t* entries, int64_t n) {
  QUIVER_GRID_LOOP(i, n) {
    const int64_t h = entries[i];
    if (h >= 0 && table.slots[h].first == static_cast<unsigned int>(i)) {
      table.slots[h].local = static_cast<int>(i);
    }
  }
}

__global__ void insert_neighbors_kernel(NodeTable table, HopEdges edges, int64_t num_nodes,
                                        DeviceStatus* status) {
  const int64_t count = live_edges(edges);
  QUIVER_GRID_LOOP(e, count) {
    const long long key = edges.rows[e];
    if (key < 0 || key >= num_nodes) {
      record_status(status, kNeighborOutOfRange, e, key, 0);
      edges.rows[e] = -1;
      continue;
    }
    const int64_t h = find_or_insert(table.slots, table.capacity - 1, key);
    edges.rows[e] = h;
    // Ids numbered in an earlier hop already have their local index (set by a previous
    // launch), so only ids new to this hop compete for their first position: one atomic
    // on the slot's (first, local) word (sampling_rules.h), and none when the word read
    // shows it would change nothing. A hub named thousands of times in a hop would
    // otherwise queue as many atomics on one address.
    unsigned long long* word = mention_word(table.slots[h]);
    const unsigned long long mention = kUnnumberedMention | static_cast<uint32_t>(e);
    if (__ldcg(word) > mention) atomicMin(word, mention);
  }
}

// Flags the first mention of each id new to the table (numbered in no earlier hop): one
// thread an edge, so the table's reads are all in flight at once; flags[max_edges] (and every
// flag past the live edges) is 0, so that an exclusive scan of the flags ends in the hop's
// count of new ids.
__global__ void flag_first_mentions_kernel(const NodeSlot* __restrict__ slots, HopEdges edges,
                                           int32_t* __restrict__ flags) {
  const int64_t count = live_edges(edges);
  QUIVER_GRID_LOOP(e, edges.max_edges + 1) {
    int32_t flag = 0;
    if (e < count) {
      const int64_t h = edges.rows[e];
      if (h >= 0) {
        const NodeSlot slot = slots[h];
        flag = slot.local < 0 && slot.first == static_cast<uint32_t>(e);
      }
    }
    flags[e] = flag;
  }
}

// Numbers the new ids and relabels every edge at once. A new id's number is read from the
// scan at its first mention (slot.first), so an edge need not wait for the thread that
// writes the id's slot: whether it sees that write or not, it finds the same number.
__global__ void number_and_relabel_kernel(NodeTable table, HopEdges edges,
                                          const int32_t* __restrict__ new_pos,
                                          int64_t* node_total, int64_t* new_nodes,
                                          int64_t* hop_edges) {
  const int64_t count = live_edges(edges);
  const int64_t nodes_before = node_total[0];
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *hop_edges = count;
    node_total[1] = nodes_before + new_pos[count];
  }
  QUIVER_GRID_LOOP(e, count) {
    const int64_t h = edges.rows[e];
    if (h < 0) continue;  // -1 already: an invalid neighbor, reported by insert_neighbors
    const int32_t pos = new_pos[e];
    // One load of the whole slot. Its `local` may or may not show the number another
    // thread writes meanwhile; both ways give the same number.
    const NodeSlot seen = table.slots[h];
    int64_t local;
    if (new_pos[e + 1] != pos) {  // the first mention of a new id: it alone writes the slot
      local = nodes_before + pos;
      table.slots[h].local = static_cast<int32_t>(local);
      new_nodes[pos] = seen.key;
    } else {
      local = seen.local >= 0 ? seen.local : nodes_before + new_pos[seen.first];
    }
    edges.rows[e] = local;
  }
}

// The numbering workspace: `items` int32 flags (scanned in place), then CUB's scratch at a
// 256-byte boundary.
size_t flag_bytes(int64_t items) {
  constexpr size_t kAlign = 256;
  return (static_cast<size_t>(items) * sizeof(int32_t) + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

cudaError_t clear_node_table(const NodeTable& table, cudaStream_t stream) {
  return cudaMemsetAsync(table.slots, 0xFF, table.capacity * sizeof(NodeSlot), stream);
}

cudaError_t rehash_node_table(const NodeTable& from, const NodeTable& to, cudaStream_t stream) {
  rehash_kernel<<<blocks_for(from.capacity, kThreads), kThreads, 0, stream>>>(from, to);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

cudaError_t insert_nodes(const NodeTable& table, const int64_t* nodes, int64_t n, int64_t* entries,
                         cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  insert_nodes_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(table, nodes, n, entries);
  QUIVER_LAUNCH_TRY();
  number_nodes_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(table, entries, n);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

cudaError_t insert_neighbors(const NodeTable& table, const HopEdges& edges, int64_t num_nodes,
                             DeviceStatus* status, cudaStream_t stream) {
  insert_neighbors_kernel<<<blocks_for(edges.max_edges, kThreads), kThreads, 0, stream>>>(
      table, edges, num_nodes, status);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

size_t number_new_nodes_workspace_bytes(int64_t max_edges) {
  size_t scan_bytes = 0;
  cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, static_cast<int32_t*>(nullptr),
                                max_edges + 1);
  return flag_bytes(max_edges + 1) + scan_bytes;
}

cudaError_t number_new_nodes(const NodeTable& table, const HopEdges& edges, int64_t* node_total,
                             int64_t* new_nodes, int64_t* hop_edges, void* workspace,
                             size_t workspace_bytes, cudaStream_t stream) {
  const int64_t items = edges.max_edges + 1;
  auto* flags = static_cast<int32_t*>(workspace);
  const size_t flags_end = flag_bytes(items);
  size_t scan_bytes = workspace_bytes - flags_end;  // CUB takes it by reference
  flag_first_mentions_kernel<<<blocks_for(items, kThreads), kThreads, 0, stream>>>(table.slots,
                                                                                   edges, flags);
  QUIVER_LAUNCH_TRY();
  QUIVER_CUDA_TRY(cub::DeviceScan::ExclusiveSum(static_cast<char*>(workspace) + flags_end,
                                                scan_bytes, flags, items, stream));
  number_and_relabel_kernel<<<blocks_for(edges.max_edges, kThreads), kThreads, 0, stream>>>(
      table, edges, flags, node_total, new_nodes, hop_edges);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

}  // namespace quiver::cuda
