// Partitioned sampling's hops on the asking host's GPU (see slotted_hops.h): the frontier
// grouped by owner (a one-pass radix sort on the owner's bits), and the slots that came
// back turned into the hop's edges (one thread a slot counts its entries, one thread an
// entry copies it to its place in frontier order).
#include <cub/block/block_reduce.cuh>
#include <cub/device/device_radix_sort.cuh>

#include "runtime/cuda/slotted_hops.h"
#include "ops/internal/launch.cuh"

namespace quiver::cuda {
namespace {

constexpr int kThreads = 256;

int host_bits(int64_t num_hosts) {
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) < num_hosts) ++bits;
  return bits;
}

// Each node's owner as a sort key, its frontier index as the value, and the owners
// counted (one atomic per owner a warp meets). Entries past the live ones (`live` given) are
// keyed num_hosts, so that they sort last, and are not counted.
template <typename owner_t>
__global__ void owner_keys_kernel(OwnerGrouping<owner_t> grouping, int32_t* __restrict__ keys,
                                  int64_t* __restrict__ indices) {
  const int64_t* live = grouping.live;
  const int64_t num_live = live != nullptr ? live[1] - live[0] : grouping.num_frontier;
  QUIVER_GRID_LOOP(i, grouping.num_frontier) {
    const int32_t owner =
        i < num_live ? static_cast<int32_t>(grouping.owner[grouping.frontier[i]])
                     : static_cast<int32_t>(grouping.num_hosts);
    keys[i] = owner;
    indices[i] = i;
    const unsigned same = __match_any_sync(__activemask(), owner);
    if ((threadIdx.x & 31) == __ffs(same) - 1 && owner < grouping.num_hosts) {
      atomicAdd(reinterpret_cast<unsigned long long*>(grouping.send_counts + owner),
                static_cast<unsigned long long>(__popc(same)));
    }
  }
}

template <typename owner_t>
__global__ void owner_requests_kernel(OwnerGrouping<owner_t> grouping) {
  QUIVER_GRID_LOOP(g, grouping.num_frontier) {
    grouping.requests[g] = grouping.local_index[grouping.frontier[grouping.order[g]]];
  }
}

// Bounded grouping: grouped place g (owner p = sorted_keys[g], the r-th of p's nodes) goes
// to p's block of requests and slots, unless r is past the block's rows (an overflow: the
// block's count, which thread 0 writes with this host's remote nodes, says how many the
// owner was due, so the hosts see it and take the batch again in blocks that fit).
template <typename owner_t>
__global__ void bounded_requests_kernel(OwnerGrouping<owner_t> grouping,
                                        BoundedGrouping bounded,
                                        const int32_t* __restrict__ sorted_keys) {
  const int64_t n = grouping.num_frontier, hosts = grouping.num_hosts;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    int64_t remote = 0;
    for (int64_t p = 0; p < hosts; ++p) {
      const int64_t count = grouping.send_counts[p];
      bounded.padded_requests[p * (bounded.slot_rows + 1)] = count;
      if (p != bounded.host) remote += count;
    }
    *bounded.remote_nodes += remote;
  }
  QUIVER_GRID_LOOP(g, n) {
    const int32_t p = sorted_keys[g];
    if (p >= hosts) continue;  // past the live nodes (they sort last)
    int64_t low = 0, high = g;  // p's first grouped place
    while (low < high) {
      const int64_t mid = (low + high) / 2;
      if (sorted_keys[mid] < p) low = mid + 1; else high = mid;
    }
    const int64_t r = g - low, i = grouping.order[g];
    if (r >= bounded.slot_rows) continue;
    bounded.slot_order[p * bounded.slot_rows + r] = i;
    bounded.padded_requests[p * (bounded.slot_rows + 1) + 1 + r] =
        grouping.local_index[grouping.frontier[i]];
  }
}

// An owner's received blocks compacted (compact_requests): each block's start among the
// compacted rows from the counts' prefix sums (a count past the block's rows taken as the
// rows the block holds, a negative one, which only a corrupt peer sends, as none), in
// shared memory.
__global__ void compact_requests_kernel(const int64_t* __restrict__ padded, int64_t hosts,
                                        int64_t slot_rows, int64_t* __restrict__ asked,
                                        int64_t* __restrict__ slot_of, int64_t* __restrict__ live,
                                        int64_t* __restrict__ most_asked) {
  extern __shared__ int64_t starts[];  // hosts + 1
  for (int64_t p = threadIdx.x; p < hosts; p += blockDim.x) {
    starts[p + 1] = padded[p * (slot_rows + 1)];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    starts[0] = 0;
    int64_t most = 0;
    for (int64_t p = 0; p < hosts; ++p) {
      most = max(most, starts[p + 1]);
      starts[p + 1] = starts[p] + min(max(starts[p + 1], int64_t{0}), slot_rows);
    }
    if (blockIdx.x == 0) {
      live[0] = 0;
      live[1] = starts[hosts];
      if (most_asked != nullptr) *most_asked = most;
    }
  }
  __syncthreads();
  QUIVER_GRID_LOOP(slot, hosts * slot_rows) {
    const int64_t p = slot / slot_rows, r = slot - p * slot_rows;
    const int64_t at = starts[p] + r;
    if (at >= starts[p + 1]) continue;  // past p's count
    asked[at] = padded[p * (slot_rows + 1) + 1 + r];
    slot_of[at] = slot;
  }
}

inline size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

size_t sort_bytes_for(int64_t n, int64_t num_hosts) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                  static_cast<int32_t*>(nullptr),
                                  static_cast<const int64_t*>(nullptr),
                                  static_cast<int64_t*>(nullptr), n, 0, host_bits(num_hosts + 1));
  return bytes;
}

// The workspace's parts, in this order: keys in, keys out, frontier indices, CUB's space.
struct GroupingSpace {
  GroupingSpace(void* workspace, int64_t n) {
    char* at = static_cast<char*>(workspace);
    keys_in = reinterpret_cast<int32_t*>(at);
    keys_out = reinterpret_cast<int32_t*>(at + aligned(n * sizeof(int32_t)));
    indices = reinterpret_cast<int64_t*>(at + 2 * aligned(n * sizeof(int32_t)));
    sort_space = at + 2 * aligned(n * sizeof(int32_t)) + aligned(n * sizeof(int64_t));
  }
  int32_t* keys_in;
  int32_t* keys_out;
  int64_t* indices;
  void* sort_space;
};

__global__ void count_slot_edges_kernel(FrontierSlots answers, int64_t* __restrict__ counts,
                                        int64_t* remote_edges) {
  using Reduce = cub::BlockReduce<int64_t, kThreads>;
  __shared__ typename Reduce::TempStorage reduce_space;
  const int64_t stride = 2 * answers.fanout;
  int64_t remote = 0;
  // Every thread of the block takes part in the reduction, so the loop runs whole rounds.
  const int64_t rounds = (answers.num_rows + int64_t{gridDim.x} * kThreads - 1) /
                         (int64_t{gridDim.x} * kThreads);
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t g = (round * gridDim.x + blockIdx.x) * int64_t{kThreads} + threadIdx.x;
    if (g >= answers.num_rows) continue;
    const int64_t i = answers.order[g];
    if (i < 0) continue;  // a bounded slot no node used
    const int64_t* slot = answers.slots + g * stride;
    int64_t count = 0;
    while (count < answers.fanout && slot[count] >= 0) ++count;
    counts[i] = count;
    if (g < answers.own_begin || g >= answers.own_end) remote += count;
  }
  const int64_t block_remote = Reduce(reduce_space).Sum(remote);
  if (threadIdx.x == 0 && block_remote > 0) {
    atomicAdd(reinterpret_cast<unsigned long long*>(remote_edges),
              static_cast<unsigned long long>(block_remote));
  }
}

__global__ void unpack_slots_kernel(FrontierSlots answers, const int64_t* __restrict__ counts,
                                    const int64_t* __restrict__ offsets,
                                    const int64_t* col_base_ptr, int64_t* __restrict__ neighbors,
                                    int64_t* __restrict__ edge_ids, int64_t* __restrict__ cols) {
  const int64_t fanout = answers.fanout;
  const int64_t col_base = *col_base_ptr;
  QUIVER_GRID_LOOP(entry, answers.num_rows * fanout) {
    const int64_t g = entry / fanout, k = entry - g * fanout;
    const int64_t i = answers.order[g];
    if (i < 0 || k >= counts[i]) continue;  // an unused slot, or past the row's sample
    const int64_t* slot = answers.slots + g * 2 * fanout;
    const int64_t at = offsets[i] + k;
    neighbors[at] = slot[k];
    edge_ids[at] = slot[fanout + k];
    cols[at] = col_base + i;
  }
}

}  // namespace

size_t group_by_owner_workspace_bytes(int64_t num_frontier, int64_t num_hosts) {
  return 2 * aligned(num_frontier * sizeof(int32_t)) + aligned(num_frontier * sizeof(int64_t)) +
         sort_bytes_for(num_frontier, num_hosts);
}

template <typename owner_t>
cudaError_t group_by_owner(const OwnerGrouping<owner_t>& grouping, void* workspace,
                           size_t workspace_bytes, cudaStream_t stream,
                           const BoundedGrouping* bounded) {
  const int64_t n = grouping.num_frontier;
  QUIVER_CUDA_TRY(cudaMemsetAsync(grouping.send_counts, 0, grouping.num_hosts * sizeof(int64_t),
                                  stream));
  if (bounded != nullptr) {
    QUIVER_CUDA_TRY(cudaMemsetAsync(bounded->slot_order, 0xff,
                                    grouping.num_hosts * bounded->slot_rows * sizeof(int64_t),
                                    stream));
  }
  if (n == 0) {
    if (bounded == nullptr) return cudaSuccess;
    bounded_requests_kernel<owner_t><<<1, 1, 0, stream>>>(grouping, *bounded, nullptr);
    QUIVER_LAUNCH_TRY();
    return cudaSuccess;
  }
  // The caller sized the workspace: one too small would be written past its end.
  if (workspace_bytes < group_by_owner_workspace_bytes(n, grouping.num_hosts)) {
    return cudaErrorInvalidValue;
  }
  const GroupingSpace space(workspace, n);
  owner_keys_kernel<owner_t><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
      grouping, space.keys_in, space.indices);
  QUIVER_LAUNCH_TRY();
  // LSD radix sort is stable: each owner's nodes keep their frontier order. Bounded, the
  // keys go up to num_hosts (the dead entries).
  size_t sort_bytes = sort_bytes_for(n, grouping.num_hosts);
  QUIVER_CUDA_TRY(cub::DeviceRadixSort::SortPairs(
      space.sort_space, sort_bytes, space.keys_in, space.keys_out, space.indices, grouping.order,
      n, 0, host_bits(grouping.num_hosts + 1), stream));
  if (bounded != nullptr) {
    bounded_requests_kernel<owner_t><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        grouping, *bounded, space.keys_out);
  } else {
    owner_requests_kernel<owner_t><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(grouping);
  }
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

template cudaError_t group_by_owner<int16_t>(const OwnerGrouping<int16_t>&, void*, size_t,
                                             cudaStream_t, const BoundedGrouping*);
template cudaError_t group_by_owner<int32_t>(const OwnerGrouping<int32_t>&, void*, size_t,
                                             cudaStream_t, const BoundedGrouping*);

cudaError_t count_slot_edges(const FrontierSlots& answers, int64_t* counts,
                             int64_t* remote_edges, cudaStream_t stream) {
  if (answers.num_rows == 0) return cudaSuccess;
  count_slot_edges_kernel<<<blocks_for(answers.num_rows, kThreads), kThreads, 0, stream>>>(
      answers, counts, remote_edges);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

cudaError_t unpack_slots(const FrontierSlots& answers, const int64_t* counts,
                         const int64_t* offsets, const int64_t* col_base, int64_t* neighbors, int64_t* edge_ids,
                         int64_t* cols, cudaStream_t stream) {
  const int64_t entries = answers.num_rows * answers.fanout;
  if (entries == 0) return cudaSuccess;
  unpack_slots_kernel<<<blocks_for(entries, kThreads), kThreads, 0, stream>>>(
      answers, counts, offsets, col_base, neighbors, edge_ids, cols);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

cudaError_t compact_requests(const int64_t* padded_requests, int64_t num_hosts,
                             int64_t slot_rows, int64_t* asked, int64_t* slot_of, int64_t* live,
                             int64_t* most_asked, cudaStream_t stream) {
  const size_t shared = (num_hosts + 1) * sizeof(int64_t);
  compact_requests_kernel<<<blocks_for(num_hosts * slot_rows, kThreads), kThreads, shared,
                            stream>>>(padded_requests, num_hosts, slot_rows, asked, slot_of, live,
                                      most_asked);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

}  // namespace quiver::cuda
