// Torch-free interface of the kernels behind the distributed fetch over NCCL
// (runtime/slot_exchange.cpp). That exchange moves
// requests and rows in fixed per-host slots, so that every size the collectives need is
// known without reading a count back: one host wait per fetch instead of four.
//
// Layouts, for P peers (the other hosts; a host sends itself nothing) and a capacity of C
// slots per peer, peer blocks in host order:
//  - requests [P, kSlotHeader + C] int64: the block for host h is [count, most ids this host
//    asks of any host, local indices in h's table for slots 0 .. min(count, C) - 1, zeros];
//  - rows [P, R + C] rows of row_bytes: host h's block is R header rows (the first 8 bytes
//    of which carry how many of the requests the owner refused), then the rows of its slots.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace quiver::cuda {

constexpr int64_t kSlotHeader = 2;

// Places each id in its owner's slot. The shard map is packed per global row as
// (owner + 1) << host_shift | local index, owner -1 marking a row every host holds.
template <typename id_t>
struct OwnerSlotting {
  const int64_t* packed_map;
  int64_t num_rows;
  int host_shift;
  const id_t* ids;
  int64_t num_ids;
  int64_t host;  // this host: its own rows are held, not requested
  int64_t capacity;
  int64_t row_header;
  int64_t num_peers;   // blocks of requests: the hosts but this one
  int64_t* requests;   // [num_peers, kSlotHeader + capacity], zeroed by the caller
  int64_t* local_ids;  // [num_ids]: the row in this host's table for held ids, 0 otherwise
  // [num_ids]: the row of the received rows that answers the id, kHeldHere for held ids,
  // kPastCapacity for ids whose owner's slots were full.
  int64_t* where;
  // [2], zeroed by the caller: 1 + the index of the first id outside the map (0: none),
  // and the number of held ids.
  int64_t* status;
};
constexpr int64_t kHeldHere = -1;
constexpr int64_t kPastCapacity = -2;

template <typename id_t>
cudaError_t slot_ids_by_owner(const OwnerSlotting<id_t>& slotting, cudaStream_t stream);

// The owner's side: each requested local index checked against its table of served_rows
// rows; `safe` [num_peers, row_header + capacity] receives the checked indices (0 in header
// and empty slots, and for refused requests, counted per peer in `refused`, zeroed by the
// caller).
cudaError_t check_slot_requests(const int64_t* requests, int64_t num_peers, int64_t capacity,
                                int64_t row_header, int64_t served_rows, int64_t* safe,
                                int64_t* refused, cudaStream_t stream);

// Writes refused[p] into the first 8 bytes of peer p's header rows of `rows`.
cudaError_t write_slot_verdicts(char* rows, int64_t num_peers, int64_t block_bytes,
                                const int64_t* refused, cudaStream_t stream);

// out[i] = rows[where[i]] for every i with where[i] >= 0; other rows of out are left alone.
cudaError_t scatter_slot_rows(const char* rows, int64_t row_bytes, const int64_t* where,
                              int64_t num_ids, char* out, cudaStream_t stream);

// What the host reads after a fetch, in one copy (int64 words), per peer block p:
//  [0, P)   rows this host asked of p          [P, 2P)  rows p asked of this host
//  [2P, 3P) the most p asked of any host       [3P, 4P) requests of p this host refused
//  [4P, 5P) requests of this host p refused    [5P]     the most this host asked of any
// then `extra_words` words of `extra`.
cudaError_t summarize_slot_fetch(const int64_t* requests, const int64_t* requests_in,
                                 int64_t num_peers, int64_t capacity, const int64_t* refused,
                                 const char* rows_in, int64_t block_bytes, const int64_t* extra,
                                 int64_t extra_words, int64_t* summary, cudaStream_t stream);

}  // namespace quiver::cuda
