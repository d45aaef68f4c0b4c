#include "ops/checks.h"
#include "ops/cuda/sampling_host.h"

#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <vector>

namespace quiver {
namespace {

int64_t next_power_of_two(int64_t n) {
  int64_t p = 1024;
  while (p < n) p <<= 1;
  return p;
}

// Nodes a batch can reach at most: seeds times the fanout products, capped by the graph.
int64_t node_bound(int64_t batch_size, at::IntArrayRef fanouts, int64_t num_nodes) {
  const int64_t cap = num_nodes + batch_size;
  int64_t total = batch_size, frontier = batch_size;
  for (const int64_t fanout : fanouts) {
    if (fanout < 0 || frontier > cap / std::max<int64_t>(fanout, 1)) return cap;
    frontier *= fanout;
    total += frontier;
    if (total >= cap) return cap;
  }
  return total;
}

// The reindexing table, at most half full so that probes stay short.
struct NodeTable {
  at::Tensor storage;
  int64_t capacity = 0;

  void allocate(int64_t min_nodes, const at::Device& device, cudaStream_t stream) {
    capacity = next_power_of_two(2 * min_nodes);
    storage = cuda::workspace(capacity * cuda::node_table_slot_bytes(), device);
    cuda::clear_node_table(storage.mutable_data_ptr(), capacity, stream);
  }
  void* data() { return storage.mutable_data_ptr(); }
};

template <typename index_t>
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
sample_subgraph_kernel(const at::Tensor& indptr, const at::Tensor& indices,
                       const at::Tensor& seeds, at::IntArrayRef fanouts, bool replace,
                       const std::optional<at::Tensor>& edge_ids) {
  const at::Device device = seeds.device();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const auto options = seeds.options();
  const auto csr = cuda::readable_csr<index_t>(indptr, indices, edge_ids, device);
  const int64_t batch_size = seeds.numel();
  const int64_t num_hops = static_cast<int64_t>(fanouts.size());
  at::Tensor nodes_per_hop = at::zeros({num_hops + 1}, at::kLong);
  at::Tensor edges_per_hop = at::zeros({num_hops}, at::kLong);
  nodes_per_hop[0] = batch_size;

  cuda::HopBoard board(device);
  NodeTable table;
  table.allocate(node_bound(batch_size, fanouts, csr.num_nodes), device, stream);
  at::Tensor entries = at::empty({batch_size}, options);
  cuda::insert_nodes(table.data(), table.capacity, seeds.const_data_ptr<int64_t>(), batch_size,
                     entries.mutable_data_ptr<int64_t>(), stream);
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  const int64_t max_fanout = *std::max_element(fanouts.begin(), fanouts.end());
  // Every node expanded in this call draws from its own stream (its local index).
  const auto key = cuda::draw_philox_key(device, 4 * std::max<int64_t>(max_fanout, 1));

  std::vector<at::Tensor> node_parts{seeds}, row_parts, col_parts, eid_parts;
  at::Tensor frontier = seeds;
  int64_t frontier_begin = 0;
  int64_t total_nodes = batch_size;
  for (int64_t hop = 0; hop < num_hops; ++hop) {
    const int64_t fanout = fanouts[hop];
    const int64_t frontier_size = frontier.numel();
    if (frontier_size == 0) break;

    at::Tensor plan = at::empty({3, frontier_size}, options);
    int64_t* row_begin = plan.mutable_data_ptr<int64_t>();
    int64_t* row_degree = row_begin + frontier_size;
    int64_t* row_count = row_degree + frontier_size;
    cuda::plan_rows(csr, frontier.const_data_ptr<int64_t>(), frontier_size, fanout, replace,
                    /*nodes_are_seeds=*/hop == 0, /*check_ends=*/hop == 0, row_begin, row_degree,
                    row_count, board.status(), stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    at::Tensor offsets = at::empty({frontier_size + 1}, options);
    const size_t scan_bytes = cuda::offsets_workspace_bytes(frontier_size);
    at::Tensor scan_space = cuda::workspace(scan_bytes, device);
    cuda::offsets_from_counts(row_count, frontier_size, offsets.mutable_data_ptr<int64_t>(),
                              scan_space.mutable_data_ptr(), scan_bytes, stream);
    const int64_t* num_edges = offsets.const_data_ptr<int64_t>() + frontier_size;

    // With a fanout the hop's edges are bounded without a sync; "all neighbors" needs one.
    int64_t max_edges = frontier_size * fanout;
    if (fanout < 0) {
      C10_CUDA_CHECK(cudaMemcpyAsync(board.counts(), num_edges, sizeof(int64_t),
                                     cudaMemcpyDeviceToDevice, stream));
      max_edges = board.read(stream, csr.num_nodes, csr.num_edges)[0];
    }
    TORCH_CHECK(max_edges < std::numeric_limits<uint32_t>::max(), "hop ", hop, " would sample ",
                max_edges, " edges; sample fewer seeds per batch");
    const int64_t max_new = std::min(max_edges, csr.num_nodes);
    TORCH_CHECK(total_nodes + max_new < std::numeric_limits<int32_t>::max(),
                "a batch of more than 2^31 nodes; sample fewer seeds per batch");
    if (2 * (total_nodes + max_new) > table.capacity) {  // rehash everything numbered so far
      table.allocate(total_nodes + max_new, device, stream);
      at::Tensor all_nodes = at::cat(node_parts);
      at::Tensor all_entries = at::empty({total_nodes}, options);
      cuda::insert_nodes(table.data(), table.capacity, all_nodes.const_data_ptr<int64_t>(),
                         total_nodes, all_entries.mutable_data_ptr<int64_t>(), stream);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }

    at::Tensor rows = at::empty({max_edges}, options);
    at::Tensor cols = at::empty({max_edges}, options);
    at::Tensor eids = at::empty({max_edges}, options);
    cuda::sample_rows(csr, row_begin, row_degree, row_count, offsets.const_data_ptr<int64_t>(),
                      frontier_size, fanout, replace, key, static_cast<uint64_t>(frontier_begin),
                      rows.mutable_data_ptr<int64_t>(), eids.mutable_data_ptr<int64_t>(),
                      cols.mutable_data_ptr<int64_t>(), frontier_begin, stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    int64_t* rows_p = rows.mutable_data_ptr<int64_t>();
    cuda::insert_neighbors(table.data(), table.capacity, rows_p, max_edges, num_edges,
                           csr.num_nodes, board.status(), stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    at::Tensor new_pos = at::empty({max_edges + 1}, options);
    const size_t new_scan_bytes = cuda::scan_new_nodes_workspace_bytes(max_edges);
    at::Tensor new_scan_space = cuda::workspace(new_scan_bytes, device);
    cuda::scan_new_nodes(table.data(), rows_p, max_edges, num_edges,
                         new_pos.mutable_data_ptr<int64_t>(), new_scan_space.mutable_data_ptr(),
                         new_scan_bytes, stream);
    at::Tensor new_nodes = at::empty({max_new}, options);
    cuda::assign_new_nodes(table.data(), rows_p, max_edges, num_edges,
                           new_pos.const_data_ptr<int64_t>(), total_nodes,
                           new_nodes.mutable_data_ptr<int64_t>(), board.counts(), stream);
    cuda::relabel_rows(table.data(), rows_p, max_edges, num_edges, stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    const int64_t* counts = board.read(stream, csr.num_nodes, csr.num_edges);
    const int64_t hop_edges = counts[0];
    const int64_t added = counts[1];
    row_parts.push_back(rows.narrow(0, 0, hop_edges));
    col_parts.push_back(cols.narrow(0, 0, hop_edges));
    eid_parts.push_back(eids.narrow(0, 0, hop_edges));
    frontier = new_nodes.narrow(0, 0, added);
    node_parts.push_back(frontier);
    nodes_per_hop[hop + 1] = added;
    edges_per_hop[hop] = hop_edges;
    frontier_begin = total_nodes;
    total_nodes += added;
  }
  auto join = [&](const std::vector<at::Tensor>& parts) {
    return parts.empty() ? at::empty({0}, options) : at::cat(parts);
  };
  return {join(node_parts), join(row_parts),       join(col_parts),
          join(eid_parts),  nodes_per_hop, edges_per_hop};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
sample_subgraph_cuda(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& seeds,
                     at::IntArrayRef fanouts, bool replace,
                     const std::optional<at::Tensor>& edge_ids) {
  check_sample_subgraph_args(indptr, indices, seeds, fanouts, edge_ids);
  TORCH_CHECK(seeds.is_cuda(), "sample_subgraph on CUDA needs seeds on a GPU, got ",
              seeds.device());
  const c10::cuda::CUDAGuard guard(seeds.device());
  const at::Tensor seeds64 = seeds.to(at::kLong);
  if (seeds64.numel() == 0) {
    const auto options = seeds64.options();
    return {at::empty({0}, options),
            at::empty({0}, options),
            at::empty({0}, options),
            at::empty({0}, options),
            at::zeros({static_cast<int64_t>(fanouts.size()) + 1}, at::kLong),
            at::zeros({static_cast<int64_t>(fanouts.size())}, at::kLong)};
  }
  return AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "sample_subgraph_cuda", [&] {
    return sample_subgraph_kernel<index_t>(indptr, indices, seeds64, fanouts, replace, edge_ids);
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CUDA, m) {
  m.impl("sample_subgraph", &sample_subgraph_cuda);
}

}  // namespace quiver
