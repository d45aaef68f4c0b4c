// Partitioned sampling in fixed slots, the ops' face for runtime/ (DistSampler,
// runtime/slotted_batch.h). An owner answers each row it is asked for in a slot of `fanout`
// (neighbor id, edge id) pairs laid out [rows, 2, fanout]: the row's sampled neighbor ids,
// then their edge ids, -1 past its sample. A hop's answers then take request count x slot
// bytes, known to both sides without a count exchanged or read back. The draws are
// sample_neighbors': uniform, without replacement unless `replace`. On a GPU the asking host
// numbers the edges it gets back with the single-host sampler's reindexing (HopNumbering).
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

namespace quiver::internal {

class HopNumbering;

// Where a GPU part's rows land when the host does not know how many there are (slots
// sized by bounds): only the first live[1] - live[0] rows are real (`live`: device words),
// and row k is answered in slot slot_of[k] (int64 on the GPU, one per row) instead of k.
// Each row draws as row k, so the samples are those of the rows given exactly.
// With device_key (device words {seed, offset}, from draw_slots_key) the rows draw from
// that key, read when the kernels run (a replayed CUDA graph's own), not from `generator`.
struct SlotPlacement {
  const int64_t* live = nullptr;
  at::Tensor slot_of;
  const int64_t* device_key = nullptr;
};

// The Philox key {seed, offset} sample_into_slots draws from `generator` (or the GPU's
// default) for rows of `fanout` over a part of num_edges edges on `device`: drawn ahead,
// for SlotPlacement::device_key.
std::pair<int64_t, int64_t> draw_slots_key(const at::Device& device, int64_t fanout,
                                           bool replace, int64_t num_edges,
                                           const std::optional<at::Generator>& generator);

// Rows (local rows of this host's part, int64, where indptr lies) sampled into slots
// [rows, 2, fanout] int64 (fanout >= 0), with the part's generator. Over a GPU part a row
// outside the part is reported to `report`'s next read (none: waited for here); on the
// CPU it raises here.
at::Tensor sample_into_slots(const at::Tensor& indptr, const at::Tensor& indices,
                             const at::Tensor& edge_ids, const at::Tensor& rows,
                             int64_t fanout, bool replace,
                             const std::optional<at::Generator>& generator,
                             HopNumbering* report = nullptr,
                             const SlotPlacement& placement = {});

// Slots as sample_neighbors' outputs, in slot order, on the slots' device: (per slot its
// sample's size, the (neighbor, edge id) pairs [k, 2]).
std::pair<at::Tensor, at::Tensor> slots_as_samples(const at::Tensor& slots);

// One batch's nodes numbered on a GPU hop by hop, for a runtime sampler whose hops' edges
// come from elsewhere: seeds first, then each hop's new nodes in order of first appearance
// (sample_subgraph's layout), with the single-host sampler's reindexing (one wait on the
// device a hop, frontier(), and one at the end, finish()). A hop: open_hop() lays out its
// edges by per-node counts, the caller fills them on the current stream, close_hop()
// numbers them.
class HopNumbering {
 public:
  // seeds: int64 on the GPU; num_nodes: the graph's; fanouts: every hop's, each >= 0;
  // `counters`: device words of the caller's own, zeroed, read back by finish(). The
  // constructor allocates; start() queues the batch's first work (the board's upload, the
  // seeds into the reindexing table) on the current stream.
  HopNumbering(const at::Tensor& seeds, int64_t num_nodes, at::IntArrayRef fanouts,
               int64_t counters = 0);
  void start();
  // For a replay of a captured batch (whose capture began with start()): the board's host
  // half as start() leaves it, for the captured upload to copy again.
  void prepare_replay();
  ~HopNumbering();
  HopNumbering(const HopNumbering&) = delete;
  HopNumbering& operator=(const HopNumbering&) = delete;

  // The next hop's frontier (global ids, exactly sized): the seeds, then the nodes the
  // last hop added, read from the device (which raises any bad input a kernel met).
  at::Tensor frontier();
  // The same without a wait: the frontier at its bound's size, of which only the first
  // live[1] - live[0] entries are real (`live`: device words of the numbering's board).
  std::pair<at::Tensor, const int64_t*> frontier_bound();

  // The open hop's edges: node i of the frontier (of counts' size) fills counts[i] edges
  // from offsets[i] of rows (its neighbors' global ids), cols (its local index,
  // *frontier_start + i) and edge_ids; offsets[frontier] is the hop's edge count.
  // answered_rows (when >= 0): at most that many of the frontier's nodes have edges (the
  // slots that came back), which bounds the hop's buffers below the frontier's size.
  struct HopEdges {
    at::Tensor offsets, rows, cols, edge_ids;
    const int64_t* frontier_start;  // device word
  };
  HopEdges open_hop(const at::Tensor& counts, int64_t answered_rows = -1);
  void close_hop();
  // Device word `i` of the caller's counters.
  int64_t* counter(int64_t i);
  // The hops closed so far (the open one's index), and hop h's fanout.
  int64_t hops_numbered() const;
  int64_t fanout(int64_t hop) const;

  // (node_ids, rows, cols, edge_ids on the GPU; nodes_per_hop, edges_per_hop on the CPU),
  // sample_subgraph's outputs, and the caller's counters.
  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
             std::vector<int64_t>>
  finish();

  struct State;
  State& state() { return *state_; }
  const State& state() const { return *state_; }

 private:
  std::unique_ptr<State> state_;
};

}  // namespace quiver::internal
