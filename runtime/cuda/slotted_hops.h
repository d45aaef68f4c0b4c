// Torch-free kernels of partitioned sampling in fixed slots (runtime/slotted_batch.h; the
// slots: ops/internal/slotted_hops.h). They serve DistSampler, no op.
// An owner samples each row it is asked for into a slot of 2 * fanout int64 entries: the
// sampled neighbor ids, then their edge ids, each padded with -1 past the row's sample
// (row_sampling.h writes a row's picks from its slot's start). So every size an exchange
// needs is a request count times the slot, known without reading the device. The asking
// host turns the slots that came back into one hop's edges, which reindex.h numbers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace quiver::cuda {

// A hop's frontier grouped by owner, stable (each owner's nodes keep their frontier order):
// order[g] = the frontier index of grouped place g, requests[g] = that node's row at its
// owner, send_counts[p] = the frontier nodes host p owns. owner and local_index are per
// global node (the sampler's maps, checked when it was made); frontier ids are the batch's.
//
// With `live` (device {begin, end}, the numbering's node totals) only the frontier's first
// live[1] - live[0] entries are real: it is its bound's size, so that the hop is queued
// before the host knows its size. Slots sized by bounds (`bounded` given, with `live`):
// each owner p gets a fixed block of slot_rows + 1 words at
// padded_requests[p * (slot_rows + 1)], its count then its rows, and
// slot_order[p * slot_rows + r] = the frontier index of the r-th node p owns, -1 past
// send_counts[p] (cleared here); nodes past a block's slot_rows are left out, and its count
// (send_counts[p], the rows p was due) says so; *remote_nodes += the live nodes hosts other
// than `host` own. `order` and `requests` are then scratch.
struct BoundedGrouping {
  int64_t slot_rows;
  int64_t host;
  int64_t* padded_requests;
  int64_t* slot_order;
  int64_t* remote_nodes;
};
template <typename owner_t>
struct OwnerGrouping {
  const int64_t* frontier;
  int64_t num_frontier;
  const owner_t* owner;
  const int64_t* local_index;
  int64_t num_hosts;
  int64_t* order;
  int64_t* requests;
  int64_t* send_counts;
  const int64_t* live = nullptr;
};

// Scratch of group_by_owner: owner keys twice, frontier indices, and CUB's radix sort over
// the bits that number the hosts (one pass up to 256 hosts).
size_t group_by_owner_workspace_bytes(int64_t num_frontier, int64_t num_hosts);
template <typename owner_t>
cudaError_t group_by_owner(const OwnerGrouping<owner_t>& grouping, void* workspace,
                           size_t workspace_bytes, cudaStream_t stream,
                           const BoundedGrouping* bounded = nullptr);

// What an owner received in slots sized by bounds: from each host p a block of slot_rows + 1
// words (the count, then the rows; see BoundedGrouping), compacted into the order the
// exact exchange would have given: asked[k], the hosts' rows one after another, each
// answered in slot slot_of[k] = p * slot_rows + r; live = {0, rows asked in all}; a block
// whose count passes slot_rows gives its slot_rows. *most_asked (when given): the largest
// count. Up to kMaxCompactedHosts hosts (their counts' prefix sums are kept in shared
// memory).
constexpr int64_t kMaxCompactedHosts = 4096;
cudaError_t compact_requests(const int64_t* padded_requests, int64_t num_hosts,
                             int64_t slot_rows, int64_t* asked, int64_t* slot_of, int64_t* live,
                             int64_t* most_asked, cudaStream_t stream);

// The slots that came back for one hop's frontier, grouped by owner: slot g answers
// frontier node order[g] (none when -1: a bounded slot no node used); slots
// [own_begin, own_end) this host answered itself.
struct FrontierSlots {
  const int64_t* slots;  // [num_rows, 2, fanout]
  const int64_t* order;
  int64_t num_rows;
  int64_t fanout;
  int64_t own_begin;
  int64_t own_end;
};

// counts[order[g]] = the sampled entries of slot g (its prefix of ids >= 0); *remote_edges
// += those of the slots other hosts answered. Entries no slot names keep their value.
cudaError_t count_slot_edges(const FrontierSlots& answers, int64_t* counts,
                             int64_t* remote_edges, cudaStream_t stream);

// Frontier node i's counts[i] entries, in frontier order, at offsets[i]: neighbor ids
// (global) into neighbors, edge ids into edge_ids, and *col_base + i (its local index) into
// cols.
cudaError_t unpack_slots(const FrontierSlots& answers, const int64_t* counts,
                         const int64_t* offsets,
                         const int64_t* col_base, int64_t* neighbors, int64_t* edge_ids,
                         int64_t* cols, cudaStream_t stream);

}  // namespace quiver::cuda
