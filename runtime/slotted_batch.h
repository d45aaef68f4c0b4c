// DistSampler's batches of a part on a GPU (runtime/dist_sampler.cpp): each hop's frontier
// grouped by owner, and the slots that come back (ops/internal/slotted_hops.h) unpacked and
// numbered where they land, with the kernels of runtime/cuda/slotted_hops.h and the
// single-host sampler's reindexing (internal::HopNumbering).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

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

// One batch: seeds first, then each hop's new nodes in order of first appearance. One wait
// on the device a hop (frontier()) and one at the end (finish()).
class SlottedBatch {
 public:
  // seeds: int64 on the GPU; num_nodes: the graph's; fanouts: every hop's, each >= 0.
  SlottedBatch(const at::Tensor& seeds, int64_t num_nodes, at::IntArrayRef fanouts);

  // The next hop's frontier (global ids, exactly sized), read from the device.
  at::Tensor frontier() { return numbering_.frontier(); }
  // The frontier's slots [frontier, 2, fanout], grouped by owner (slot g answers frontier
  // node order[g]; slots [own_begin, own_end) answered by this host), queued for numbering.
  void add_hop(const at::Tensor& slots, const at::Tensor& order, int64_t own_begin,
               int64_t own_end);
  // (node_ids, rows, cols, edge_ids on the GPU; nodes_per_hop, edges_per_hop on the CPU),
  // sample_subgraph's outputs, and per hop the edges other hosts answered.
  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
             std::vector<int64_t>>
  finish() { return numbering_.finish(); }
  // Where the owners' sampling reports a bad request (read at the next frontier()).
  internal::HopNumbering* report() { return &numbering_; }

 private:
  internal::HopNumbering numbering_;  // counters: each hop's edges answered by other hosts
};

}  // namespace quiver::runtime
