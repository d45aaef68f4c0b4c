// DistSampler's batches of a part on a GPU (runtime/dist_sampler.cpp): each hop's frontier
// grouped by owner, and the slots that come back (ops/internal/slotted_hops.h) unpacked and
// numbered where they land, with the kernels of runtime/cuda/slotted_hops.h and the
// single-host sampler's reindexing (internal::HopNumbering).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "ops/internal/slotted_hops.h"

namespace quiver::runtime {

// A hop's frontier (global ids, int64 on a GPU) grouped by owner, stable, on that GPU:
// (order: grouped place g holds frontier node order[g]; requests: each one's row at its
// owner; send_counts: per host, the nodes it owns). owner (int16 or int32) and local_index
// (int64) hold every node of the graph, on the same GPU.
std::tuple<at::Tensor, at::Tensor, at::Tensor> group_by_owner(const at::Tensor& frontier,
                                                              const at::Tensor& owner,
                                                              const at::Tensor& local_index,
                                                              int64_t num_hosts);

// Slots sized by bounds: the frontier (at its bound's size, `live` its device {begin, end})
// grouped into a fixed block per owner: (padded_requests [num_hosts, slot_rows + 1], each
// block its count then its rows; slot_order [num_hosts * slot_rows], the frontier index
// each slot answers, -1 where none). A block holds at most slot_rows rows; its count is
// what the owner was due, so an owner sees a block that overflowed (compact_requests'
// most_asked). *remote_nodes (a device word) += the live nodes other hosts own. Nothing is
// read back: the hop stays on the stream.
std::tuple<at::Tensor, at::Tensor> group_into_bounded_slots(
    const at::Tensor& frontier, const int64_t* live, const at::Tensor& owner,
    const at::Tensor& local_index, int64_t num_hosts, int64_t slot_rows, int64_t host,
    int64_t* remote_nodes);

// The most hosts slots sized by bounds serve (compact_requests keeps their counts' prefix
// sums in a block's shared memory).
constexpr int64_t kMaxBoundedSlotHosts = 4096;

// What an owner received in slots sized by bounds ([num_hosts, slot_rows + 1]) as the rows
// an exact exchange would have brought, in the same order: (asked [num_hosts * slot_rows],
// of which the first live[1] - live[0] are real; slot_of, each one's slot; live [2]), for
// internal::sample_into_slots' SlotPlacement. *most_asked (a device word, when given): the
// largest count a host sent, past slot_rows when its block overflowed.
std::tuple<at::Tensor, at::Tensor, at::Tensor> compact_requests(const at::Tensor& padded_requests,
                                                                int64_t num_hosts,
                                                                int64_t slot_rows,
                                                                int64_t* most_asked = nullptr);

// One batch: seeds first, then each hop's new nodes in order of first appearance. One wait
// on the device a hop (frontier()) and one at the end (finish()); or, in slots sized by
// bounds (frontier_bound()), the one at the end alone.
class SlottedBatch {
 public:
  // seeds: int64 on the GPU; num_nodes: the graph's; fanouts: every hop's, each >= 0.
  // Unless `start` is false (a batch to capture, which calls start() under capture), the
  // batch's first work is queued here.
  SlottedBatch(const at::Tensor& seeds, int64_t num_nodes, at::IntArrayRef fanouts,
               bool start = true);
  void start() { numbering_.start(); }
  void prepare_replay() { numbering_.prepare_replay(); }

  // The next hop's frontier (global ids, exactly sized), read from the device.
  at::Tensor frontier() { return numbering_.frontier(); }
  // The same at its bound's size, without a wait (see HopNumbering::frontier_bound).
  std::pair<at::Tensor, const int64_t*> frontier_bound() { return numbering_.frontier_bound(); }
  // The frontier's slots [rows, 2, fanout], grouped by owner (slot g answers frontier node
  // order[g], none when -1; slots [own_begin, own_end) answered by this host), queued for
  // numbering; frontier_rows: the frontier's size (or bound).
  void add_hop(const at::Tensor& slots, const at::Tensor& order, int64_t own_begin,
               int64_t own_end, int64_t frontier_rows);
  // Device word counting hop h's frontier nodes other hosts own (slots sized by bounds).
  int64_t* remote_nodes_counter(int64_t hop) { return numbering_.counter(num_hops_ + hop); }
  // Device words, one a hop: the most rows any host asked any owner for in hop h (slots
  // sized by bounds; the caller writes them).
  int64_t* most_asked_counters() { return numbering_.counter(2 * num_hops_); }
  // (node_ids, rows, cols, edge_ids on the GPU; nodes_per_hop, edges_per_hop on the CPU),
  // sample_subgraph's outputs, and per hop the edges other hosts answered, then per hop
  // remote_nodes_counter's count, then most_asked_counters'.
  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
             std::vector<int64_t>>
  finish() { return numbering_.finish(); }
  // Where the owners' sampling reports a bad request (read at the next frontier()).
  internal::HopNumbering* report() { return &numbering_; }

 private:
  int64_t num_hops_;
  // counters: each hop's edges answered by other hosts, then each hop's remote nodes, then
  // each hop's most rows asked of an owner
  internal::HopNumbering numbering_;
};

// Batches in slots sized by bounds as CUDA graphs. Their every size follows from the
// agreed bounds, so a batch can be captured whole, exchanges (NCCL driven directly) and
// owners' sampling included: a replay is one launch where a batch as usual is about 100
// kernels and allocations, which take the host longer than the GPU. The first batch of a
// shape (this host's seed count and the hops' bounds) runs as usual, the second is
// captured, later ones replay it; every host sends and receives the same either way, so
// the hosts need not agree on it. The draws' keys are given per batch.
class BoundedBatches {
 public:
  // Queues every hop of `batch` on the current stream, its rows drawing from `keys`
  // (device words: hop h's Philox {seed, offset} at 2h).
  using Queue = std::function<void(SlottedBatch& batch, const int64_t* keys)>;
  explicit BoundedBatches(bool capture);
  ~BoundedBatches();
  // Off, the captures are let go of too: every batch runs as launched.
  void set_capture(bool capture);
  // Lets go of every captured batch (their graphs and buffers).
  void drop_captures();
  bool captures() const { return capture_; }
  // One batch of `seeds` (int64 on the CPU) on `device` through `queue`, as usual, captured
  // or replayed; key_words: two a hop. The batch returned is to be finished (its board read)
  // before the next run.
  SlottedBatch& run(const at::Tensor& seeds, const at::Device& device, int64_t num_nodes,
                    at::IntArrayRef fanouts, const std::vector<int64_t>& slot_rows,
                    const std::vector<int64_t>& key_words, const Queue& queue);
  // After the batch's outputs were copied out (finish(), on the current stream): the next
  // replay, on whatever stream, waits for those copies before it writes the same buffers.
  void outputs_copied();

 private:
  struct Captured;
  bool capture_;
  std::map<std::vector<int64_t>, std::unique_ptr<Captured>> captured_;
  std::map<std::vector<int64_t>, int64_t> seen_;
  std::unique_ptr<SlottedBatch> as_usual_;
  at::Tensor as_usual_keys_;
  std::shared_ptr<void> outputs_copied_;  // a CUDA event, where the build has CUDA
};

}  // namespace quiver::runtime
