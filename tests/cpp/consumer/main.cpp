// Samples a ring graph through the installed library: proves the CMake package works.
#include <quiver/ops.h>
#include <torch/torch.h>

#include <iostream>

int main() {
  const int64_t n = 100;
  at::Tensor ids = torch::arange(n);
  auto [indptr, indices, eid] = quiver::csr_from_coo(
      torch::cat({ids, ids}), torch::cat({(ids + 1) % n, (ids + n - 1) % n}), n);
  auto [node_ids, rows, cols, eids, nodes_per_hop, edges_per_hop] =
      quiver::sample_subgraph(indptr, indices, torch::tensor({0, 50}), {2, 2});
  at::Tensor diff = (node_ids.index_select(0, rows) - node_ids.index_select(0, cols)).remainder(n);
  if (!((diff == 1) | (diff == n - 1)).all().item<bool>()) {
    std::cerr << "sampled a non-edge\n";
    return 1;
  }
  std::cout << "consumer sampled " << node_ids.numel() << " nodes, " << rows.numel() << " edges\n";
  return 0;
}
