// Disjoint trees' keys on either backend: a node of seed i's tree is keyed
// i * num_nodes + node in the reindexing table (the CUDA kernels make the seeds' keys with
// tree_keys, row_sampling.h; the CPU with seed_keys, cpu/rule_rows.h). Here the way back.
#pragma once

#include <ATen/ATen.h>

#include <utility>

namespace quiver {

// (node ids, batch) from a batch's keys: batch[k] is node k's tree, empty without trees.
inline std::pair<at::Tensor, at::Tensor> split_tree_keys(const at::Tensor& keys, bool disjoint,
                                                         int64_t num_nodes) {
  if (!disjoint || num_nodes == 0) return {keys, at::empty({0}, keys.options())};
  at::Tensor batch = at::div(keys, num_nodes, "floor");
  return {keys - batch * num_nodes, batch};
}

}  // namespace quiver
