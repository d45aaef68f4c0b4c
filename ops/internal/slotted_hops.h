// Partitioned sampling in fixed slots, the ops' face for runtime/dist_sampler.cpp. An owner
// answers each row it is asked for in a slot of `fanout` (neighbor id, edge id) pairs laid
// out [rows, 2, fanout]: the row's sampled neighbor ids, then their edge ids, -1 past its
// sample. A hop's answers then take request count x slot bytes, known to both sides
// without a count exchanged or read back, and on a GPU the asking host numbers them where
// they land (SlottedBatch), with the single-host sampler's reindexing. The draws are
// sample_neighbors': uniform, without replacement unless `replace`.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <memory>
#include <optional>
#include <tuple>
#include <vector>

namespace quiver::internal {

class SlottedBatch;

// Rows (local rows of this host's part, int64, where indptr lies) sampled into slots
// [rows, 2, fanout] int64 (fanout >= 0), with the part's generator. Over a GPU part a row
// outside the part is reported to `report`'s next wait (none: waited for here); on the CPU
// it raises here.
at::Tensor sample_into_slots(const at::Tensor& indptr, const at::Tensor& indices,
                             const at::Tensor& edge_ids, const at::Tensor& rows,
                             int64_t fanout, bool replace,
                             const std::optional<at::Generator>& generator,
                             SlottedBatch* report = nullptr);

// A hop's frontier (global ids, int64 on a GPU) grouped by owner, stable, on that GPU:
// (order: grouped place g holds frontier node order[g]; requests: each one's row at its
// owner; send_counts: per host, the nodes it owns). owner (int16 or int32) and local_index
// (int64) hold every node of the graph, on the same GPU.
std::tuple<at::Tensor, at::Tensor, at::Tensor> group_by_owner(const at::Tensor& frontier,
                                                              const at::Tensor& owner,
                                                              const at::Tensor& local_index,
                                                              int64_t num_hosts);

// Slots as sample_neighbors' outputs, in slot order, on the slots' device: (per slot its
// sample's size, the (neighbor, edge id) pairs [k, 2]).
std::pair<at::Tensor, at::Tensor> slots_as_samples(const at::Tensor& slots);

// One batch's nodes numbered on the GPU hop by hop as the slots arrive: seeds first, then
// each hop's new nodes in order of first appearance (sample_subgraph's layout). One wait
// on the device a hop (frontier()) and one at the end (finish()).
class SlottedBatch {
 public:
  // seeds: int64 on the GPU; num_nodes: the graph's; fanouts: every hop's, each >= 0.
  SlottedBatch(const at::Tensor& seeds, int64_t num_nodes, at::IntArrayRef fanouts);
  ~SlottedBatch();
  SlottedBatch(const SlottedBatch&) = delete;
  SlottedBatch& operator=(const SlottedBatch&) = delete;

  // The next hop's frontier (global ids, exactly sized): the seeds, then the nodes the
  // last hop added, read from the device (which raises any bad input a kernel met).
  at::Tensor frontier();
  // The frontier's slots, grouped by owner (slot g answers frontier node order[g]; slots
  // [own_begin, own_end) answered by this host), queued for numbering.
  void add_hop(const at::Tensor& slots, const at::Tensor& order, int64_t own_begin,
               int64_t own_end);
  // (node_ids, rows, cols, edge_ids on the GPU; nodes_per_hop, edges_per_hop on the CPU),
  // sample_subgraph's outputs, and per hop the edges other hosts answered.
  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
             std::vector<int64_t>>
  finish();

  struct State;
  State& state() { return *state_; }

 private:
  std::unique_ptr<State> state_;
};

}  // namespace quiver::internal
