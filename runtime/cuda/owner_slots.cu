// Kernels of the slotted distributed fetch (owner_slots.h).
#include "ops/internal/launch.cuh"
#include "runtime/cuda/owner_slots.h"

namespace quiver::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;

// One atomic per warp and owner, not per id: a batch sends ~10^5 ids to a few owners, and
// as many atomics on one counter would serialize in L2 (tens of microseconds).
__device__ inline int64_t claim_slot(unsigned long long* counter, long long key) {
  const unsigned active = __activemask();
  const unsigned peers = __match_any_sync(active, key);
  const int lane = threadIdx.x % kWarp;
  const int leader = __ffs(peers) - 1;
  unsigned long long base = 0;
  if (lane == leader) base = atomicAdd(counter, static_cast<unsigned long long>(__popc(peers)));
  base = __shfl_sync(peers, base, leader);
  return static_cast<int64_t>(base) + __popc(peers & ((1u << lane) - 1));
}

template <typename id_t>
__global__ void slot_ids_kernel(OwnerSlotting<id_t> s) {
  const int64_t block = kSlotHeader + s.capacity;
  const int64_t local_mask = (int64_t{1} << s.host_shift) - 1;
  QUIVER_GRID_LOOP(i, s.num_ids) {
    const int64_t id = static_cast<int64_t>(s.ids[i]);
    int64_t owner = -1, local = 0;
    if (id < 0 || id >= s.num_rows) {
      atomicCAS(reinterpret_cast<unsigned long long*>(s.status), 0ull,
                static_cast<unsigned long long>(i + 1));
    } else {
      const int64_t packed = s.packed_map[id];
      owner = (packed >> s.host_shift) - 1;
      local = packed & local_mask;
    }
    const bool held = owner < 0 || owner == s.host;
    const int64_t peer = owner - (owner > s.host);  // its block: none for this host
    auto* counter =
        reinterpret_cast<unsigned long long*>(held ? s.status + 1 : s.requests + peer * block);
    const int64_t slot = claim_slot(counter, held ? -1 : peer);
    if (held) {
      s.local_ids[i] = local;
      s.where[i] = kHeldHere;
    } else {
      s.local_ids[i] = 0;
      if (slot < s.capacity) {
        s.requests[peer * block + kSlotHeader + slot] = local;
        s.where[i] = peer * (s.row_header + s.capacity) + s.row_header + slot;
      } else {
        s.where[i] = kPastCapacity;
      }
    }
  }
}

// Every block's second word: the most ids this host asks of any one host.
__global__ void finish_headers_kernel(int64_t* requests, int64_t num_peers, int64_t capacity) {
  const int64_t block = kSlotHeader + capacity;
  int64_t most = 0;
  for (int64_t p = 0; p < num_peers; ++p) most = max(most, requests[p * block]);
  for (int64_t p = threadIdx.x; p < num_peers; p += blockDim.x) requests[p * block + 1] = most;
}

__global__ void check_requests_kernel(const int64_t* requests, int64_t num_peers, int64_t capacity,
                                      int64_t row_header, int64_t served_rows, int64_t* safe,
                                      int64_t* refused) {
  const int64_t block = row_header + capacity;
  QUIVER_GRID_LOOP(k, num_peers * block) {
    const int64_t h = k / block;
    const int64_t j = k - h * block - row_header;
    int64_t value = 0;
    if (j >= 0) {
      const int64_t* asked = requests + h * (kSlotHeader + capacity);
      if (j < min(asked[0], capacity)) {  // a host past capacity sent only `capacity`
        const int64_t index = asked[kSlotHeader + j];
        if (0 <= index && index < served_rows) {
          value = index;
        } else {
          atomicAdd(reinterpret_cast<unsigned long long*>(refused + h), 1ull);
        }
      }
    }
    safe[k] = value;
  }
}

__global__ void write_verdicts_kernel(char* rows, int64_t num_peers, int64_t block_bytes,
                                      const int64_t* refused) {
  QUIVER_GRID_LOOP(k, num_peers * 8) {
    const int64_t h = k / 8;
    const auto* value = reinterpret_cast<const char*>(refused + h);
    rows[h * block_bytes + k % 8] = value[k % 8];
  }
}

// A warp a row, in words of W bytes (the widest that rows and pointers align to).
template <typename W>
__global__ void scatter_rows_kernel(const char* __restrict__ rows, int64_t row_words,
                                    const int64_t* __restrict__ where, int64_t num_ids,
                                    char* __restrict__ out) {
  const int lane = threadIdx.x % kWarp;
  const int64_t first = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / kWarp;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x / kWarp;
  for (int64_t i = first; i < num_ids; i += stride) {
    const int64_t from = where[i];
    if (from < 0) continue;
    const W* src = reinterpret_cast<const W*>(rows) + from * row_words;
    W* dst = reinterpret_cast<W*>(out) + i * row_words;
    for (int64_t w = lane; w < row_words; w += kWarp) dst[w] = src[w];
  }
}

__global__ void summarize_kernel(const int64_t* requests, const int64_t* requests_in,
                                 int64_t num_peers, int64_t capacity, const int64_t* refused,
                                 const char* rows_in, int64_t block_bytes, const int64_t* extra,
                                 int64_t extra_words, int64_t* summary) {
  const int64_t block = kSlotHeader + capacity;
  for (int64_t p = threadIdx.x; p < num_peers; p += blockDim.x) {
    summary[p] = requests[p * block];
    summary[num_peers + p] = requests_in[p * block];
    summary[2 * num_peers + p] = requests_in[p * block + 1];
    summary[3 * num_peers + p] = refused[p];
    int64_t verdict = 0;  // byte by byte: a block need not start 8-byte aligned
    auto* bytes = reinterpret_cast<char*>(&verdict);
    for (int b = 0; b < 8; ++b) bytes[b] = rows_in[p * block_bytes + b];
    summary[4 * num_peers + p] = verdict;
  }
  if (threadIdx.x == 0) {
    int64_t most = 0;
    for (int64_t p = 0; p < num_peers; ++p) most = max(most, requests[p * block]);
    summary[5 * num_peers] = most;
  }
  for (int64_t k = threadIdx.x; k < extra_words; k += blockDim.x) {
    summary[5 * num_peers + 1 + k] = extra[k];
  }
}

}  // namespace

template <typename id_t>
cudaError_t slot_ids_by_owner(const OwnerSlotting<id_t>& slotting, cudaStream_t stream) {
  if (slotting.num_ids > 0) {
    slot_ids_kernel<id_t>
        <<<blocks_for(slotting.num_ids, kThreads), kThreads, 0, stream>>>(slotting);
    QUIVER_LAUNCH_TRY();
  }
  finish_headers_kernel<<<1, kWarp, 0, stream>>>(slotting.requests, slotting.num_peers,
                                                 slotting.capacity);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

template cudaError_t slot_ids_by_owner<int32_t>(const OwnerSlotting<int32_t>&, cudaStream_t);
template cudaError_t slot_ids_by_owner<int64_t>(const OwnerSlotting<int64_t>&, cudaStream_t);

cudaError_t check_slot_requests(const int64_t* requests, int64_t num_peers, int64_t capacity,
                                int64_t row_header, int64_t served_rows, int64_t* safe,
                                int64_t* refused, cudaStream_t stream) {
  const int64_t items = num_peers * (row_header + capacity);
  if (items == 0) return cudaSuccess;
  check_requests_kernel<<<blocks_for(items, kThreads), kThreads, 0, stream>>>(
      requests, num_peers, capacity, row_header, served_rows, safe, refused);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

cudaError_t write_slot_verdicts(char* rows, int64_t num_peers, int64_t block_bytes,
                                const int64_t* refused, cudaStream_t stream) {
  if (num_peers == 0) return cudaSuccess;
  write_verdicts_kernel<<<blocks_for(num_peers * 8, kThreads), kThreads, 0, stream>>>(
      rows, num_peers, block_bytes, refused);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

cudaError_t scatter_slot_rows(const char* rows, int64_t row_bytes, const int64_t* where,
                              int64_t num_ids, char* out, cudaStream_t stream) {
  if (num_ids == 0 || row_bytes == 0) return cudaSuccess;
  const auto aligned = [&](int64_t bytes) {
    return row_bytes % bytes == 0 && reinterpret_cast<uintptr_t>(rows) % bytes == 0 &&
           reinterpret_cast<uintptr_t>(out) % bytes == 0;
  };
  const int blocks = blocks_for(num_ids * kWarp, kThreads);
  if (aligned(16)) {
    scatter_rows_kernel<uint4>
        <<<blocks, kThreads, 0, stream>>>(rows, row_bytes / 16, where, num_ids, out);
  } else if (aligned(4)) {
    scatter_rows_kernel<uint32_t>
        <<<blocks, kThreads, 0, stream>>>(rows, row_bytes / 4, where, num_ids, out);
  } else {
    scatter_rows_kernel<uint8_t>
        <<<blocks, kThreads, 0, stream>>>(rows, row_bytes, where, num_ids, out);
  }
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

cudaError_t summarize_slot_fetch(const int64_t* requests, const int64_t* requests_in,
                                 int64_t num_peers, int64_t capacity, const int64_t* refused,
                                 const char* rows_in, int64_t block_bytes, const int64_t* extra,
                                 int64_t extra_words, int64_t* summary, cudaStream_t stream) {
  summarize_kernel<<<1, kThreads, 0, stream>>>(requests, requests_in, num_peers, capacity, refused,
                                               rows_in, block_bytes, extra, extra_words, summary);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

}  // namespace quiver::cuda
