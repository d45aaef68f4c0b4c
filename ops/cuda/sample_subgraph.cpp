// CUDA entry point of sample_subgraph: every hop runs row sampling (row_sampling.cu) and
// reindexing (reindex.cu), queued back to back with one host wait per batch.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "ops/checks.h"
#include "ops/cuda/device_access.h"
#include "ops/cuda/hop_board.h"
#include "ops/cuda/reindex.h"
#include "ops/sampling_rules.h"

namespace quiver {
namespace {

// Hops are queued back to back without waiting for the GPU: each is sized by its upper
// bound (frontier bound x fanout) and reads its true size from the device. The host waits
// once per batch, at the end, unless the next hop's bound is too loose (an all-neighbors
// hop, or more than this many edges), in which case it reads the exact sizes first.
constexpr int64_t kQueuedEdgeLimit = int64_t{1} << 24;

// In UVA mode a hop with at least this many rows visits them in the order of their
// neighbor lists' addresses (row_sampling.h: order_rows_by_begin), when the lists take at
// least kSortedRowsMinBytes: measured on the H100, a papers-sized graph (6.5 GB of lists)
// samples 1.18x faster, a products-sized one (0.5 GB) no faster. A smaller hop gains less
// than the sort costs. QUIVER_UVA_SORTED_ROWS=0 turns the ordering off and =1 on whatever
// the lists' size (to measure it, and to test it on small graphs).
constexpr int64_t kSortedRowsMin = int64_t{1} << 14;
constexpr int64_t kSortedRowsMinBytes = int64_t{2} << 30;

bool uva_rows_sorted(const at::Tensor& indices) {
  if (indices.is_cuda()) return false;
  const char* value = std::getenv("QUIVER_UVA_SORTED_ROWS");
  if (value != nullptr && value[0] == '0') return false;
  if (value != nullptr && value[0] == '1') return true;
  return static_cast<int64_t>(indices.nbytes()) >= kSortedRowsMinBytes;
}

template <typename index_t>
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
sample_subgraph_kernel(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& seeds,
                       at::IntArrayRef fanouts, bool replace,
                       const std::optional<at::Tensor>& edge_ids,
                       const std::optional<at::Generator>& generator,
                       const std::optional<at::Tensor>& cached_indices,
                       const std::optional<at::Tensor>& cached_starts) {
  const at::Device device = seeds.device();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const auto options = seeds.options();
  auto csr = cuda::readable_csr<index_t>(indptr, indices, edge_ids, device);
  if (cached_starts.has_value()) {
    TORCH_CHECK(cached_starts->device() == device && cached_indices->device() == device,
                "the topology cache must be in the memory of ", device,
                " (the seeds' GPU), got cached_indices on ", cached_indices->device(),
                " and cached_starts on ", cached_starts->device());
    csr.cached_indices = cached_indices->const_data_ptr<index_t>();
    if (cached_starts->scalar_type() == at::kInt) {
      csr.cached_starts32 = cached_starts->const_data_ptr<int32_t>();
    } else {
      csr.cached_starts = cached_starts->const_data_ptr<int64_t>();
    }
    csr.num_cached = cached_indices->numel();
  }
  const int64_t plan_arrays = cached_starts.has_value() ? 4 : 3;
  const bool sort_rows = uva_rows_sorted(indices);
  const int64_t batch_size = seeds.numel();
  const int64_t num_hops = static_cast<int64_t>(fanouts.size());

  // Device counters: [0] scratch, [1 .. num_hops + 2] node_total (node_total[h] = nodes
  // numbered before hop h - 1 adds any, so hop h's frontier is [node_total[h],
  // node_total[h + 1])), then edges per hop.
  const int64_t total_at = 1, edges_at = total_at + num_hops + 2;
  cuda::HopBoard board(device, edges_at + num_hops);
  board.host_words()[total_at + 1] = batch_size;
  board.upload(stream);
  int64_t* node_total = board.words() + total_at;

  // Sized for every node the batch can reach before an all-neighbors hop; such a hop grows
  // it once its exact size is known, so the table never fills past half.
  at::Tensor table_space;
  cuda::NodeTable table{nullptr, 0};
  auto reserve_table = [&](int64_t nodes) {
    const int64_t capacity = node_table_capacity(nodes);
    if (capacity <= table.capacity) return;
    at::Tensor grown = cuda::workspace(capacity * sizeof(NodeSlot), device);
    const cuda::NodeTable bigger{static_cast<NodeSlot*>(grown.mutable_data_ptr()), capacity};
    C10_CUDA_CHECK(cuda::clear_node_table(bigger, stream));
    if (table.slots != nullptr) C10_CUDA_CHECK(cuda::rehash_node_table(table, bigger, stream));
    table_space = grown;  // the old table returns to the allocator in stream order
    table = bigger;
  };
  reserve_table(node_bound(batch_size, fanouts, csr.num_nodes));
  int64_t nodes_bound = batch_size;  // nodes the table may hold so far
  at::Tensor entries = at::empty({batch_size}, options);
  C10_CUDA_CHECK(cuda::insert_nodes(table, seeds.const_data_ptr<int64_t>(), batch_size,
                                    entries.mutable_data_ptr<int64_t>(), stream));

  // Each row reserves the draws its hop may take; with the hop limits below these never wrap.
  int64_t draws = 4;
  for (const int64_t fanout : fanouts) {
    draws = std::max(draws, draws_per_row(fanout, replace, csr.num_edges));
  }
  const auto key = cuda::draw_philox_key(device, draws, generator);

  std::vector<at::Tensor> new_node_parts, row_parts, col_parts, eid_parts;
  at::Tensor frontier = seeds;  // its first node_total[h + 1] - node_total[h] rows are live
  uint64_t stream_base = 0;     // one Philox stream per frontier slot of the call
  for (int64_t hop = 0; hop < num_hops; ++hop) {
    const int64_t fanout = fanouts[hop];
    const int64_t frontier_bound = frontier.numel();
    if (frontier_bound == 0) break;  // known empty: the remaining hops add nothing

    at::Tensor plan_space = at::empty({plan_arrays, frontier_bound}, options);
    int64_t* plan_p = plan_space.mutable_data_ptr<int64_t>();
    cuda::RowPlan plan{frontier.const_data_ptr<int64_t>(),
                       node_total + hop,
                       frontier_bound,
                       plan_p,
                       plan_p + frontier_bound,
                       plan_p + 2 * frontier_bound,
                       plan_arrays == 4 ? plan_p + 3 * frontier_bound : nullptr};
    const cuda::HopRule rule{fanout, replace, key, stream_base};
    C10_CUDA_CHECK(cuda::plan_rows(csr, plan, rule,
                                   {/*nodes_are_seeds=*/hop == 0,
                                    /*csr_ends=*/hop == 0},
                                   board.status(), stream));
    at::Tensor order_space, sort_space;
    if (sort_rows && frontier_bound >= kSortedRowsMin) {
      const int end_bit = cuda::bits_below(csr.num_edges + 1);
      const size_t sort_bytes = cuda::row_order_workspace_bytes(frontier_bound, end_bit);
      order_space = at::empty({3 * frontier_bound}, options);
      sort_space = cuda::workspace(sort_bytes, device);
      int64_t* order_p = order_space.mutable_data_ptr<int64_t>();
      C10_CUDA_CHECK(cuda::order_rows_by_begin(plan, end_bit, order_p, order_p + frontier_bound,
                                               order_p + 2 * frontier_bound,
                                               sort_space.mutable_data_ptr(), sort_bytes, stream));
      plan.order = order_p + 2 * frontier_bound;
    }
    at::Tensor offsets = at::empty({frontier_bound + 1}, options);
    const size_t scan_bytes = cuda::offsets_workspace_bytes(frontier_bound);
    at::Tensor scan_space = cuda::workspace(scan_bytes, device);
    C10_CUDA_CHECK(cuda::offsets_from_counts(plan.count, frontier_bound,
                                             offsets.mutable_data_ptr<int64_t>(),
                                             scan_space.mutable_data_ptr(), scan_bytes, stream));
    const int64_t* num_edges = offsets.const_data_ptr<int64_t>() + frontier_bound;

    // The hop's edges: its bound when tight, else (all neighbors, or a fanout far above
    // the degrees) the exact count, read from the device. No product can wrap: the bound
    // saturates, and the scan's sums stay below it.
    const int64_t bound =
        saturating_mul(frontier_bound, per_node_bound(fanout, replace, csr.num_edges));
    // With replacement every live row with neighbors yields `fanout`; a saturated bound
    // could wrap the scan's sums.
    if ((replace && bound > kMaxHopEdges) || bound == kSaturated) {
      errors::batch_too_large(errors::hop_edges_name(hop), bound, kMaxHopEdges);
    }
    int64_t max_edges = bound;
    if (fanout < 0 || bound > kQueuedEdgeLimit) {
      C10_CUDA_CHECK(cudaMemcpyAsync(board.words(), num_edges, sizeof(int64_t),
                                     cudaMemcpyDeviceToDevice, stream));
      max_edges = board.read(stream, csr.num_nodes, csr.num_edges)[0];
    }
    if (max_edges > kMaxHopEdges) {
      errors::batch_too_large(errors::hop_edges_name(hop), max_edges, kMaxHopEdges);
    }
    const int64_t max_new = std::min(max_edges, csr.num_nodes);
    nodes_bound = std::min(nodes_bound + max_new, csr.num_nodes + batch_size);
    check_batch_nodes(nodes_bound);
    reserve_table(nodes_bound);

    at::Tensor rows = at::empty({max_edges}, options);
    at::Tensor cols = at::empty({max_edges}, options);
    at::Tensor eids = at::empty({max_edges}, options);
    int64_t* rows_p = rows.mutable_data_ptr<int64_t>();
    at::Tensor pick_sets = cuda::pick_sets(fanout, replace, max_edges, device, stream);
    const cuda::HopOutput out{
        offsets.const_data_ptr<int64_t>(),
        rows_p,
        eids.mutable_data_ptr<int64_t>(),
        cols.mutable_data_ptr<int64_t>(),
        node_total + hop,
        pick_sets.defined() ? pick_sets.mutable_data_ptr<int64_t>() : nullptr};
    C10_CUDA_CHECK(cuda::sample_rows(csr, plan, rule, out, stream));
    const cuda::HopEdges edges{rows_p, max_edges, num_edges};
    C10_CUDA_CHECK(cuda::insert_neighbors(table, edges, csr.num_nodes, board.status(), stream));
    at::Tensor new_pos = at::empty({max_edges + 1}, options);
    const size_t new_scan_bytes = cuda::scan_new_nodes_workspace_bytes(max_edges);
    at::Tensor new_scan_space = cuda::workspace(new_scan_bytes, device);
    C10_CUDA_CHECK(cuda::scan_new_nodes(table, edges, new_pos.mutable_data_ptr<int64_t>(),
                                        new_scan_space.mutable_data_ptr(), new_scan_bytes, stream));
    at::Tensor new_nodes = at::empty({max_new}, options);
    C10_CUDA_CHECK(cuda::assign_new_nodes(
        table, edges, new_pos.const_data_ptr<int64_t>(), node_total + hop + 1,
        new_nodes.mutable_data_ptr<int64_t>(), board.words() + edges_at + hop, stream));
    C10_CUDA_CHECK(cuda::relabel_rows(table, edges, stream));

    row_parts.push_back(rows);
    col_parts.push_back(cols);
    eid_parts.push_back(eids);
    new_node_parts.push_back(new_nodes);
    stream_base += static_cast<uint64_t>(frontier_bound);
    frontier = new_nodes;
    const bool last = hop + 1 == num_hops;
    if (!last && (fanouts[hop + 1] < 0 ||
                  saturating_mul(max_new, per_node_bound(fanouts[hop + 1], replace,
                                                         csr.num_edges)) > kQueuedEdgeLimit)) {
      const int64_t* counts = board.read(stream, csr.num_nodes, csr.num_edges);
      frontier = new_nodes.narrow(0, 0, counts[total_at + hop + 2] - counts[total_at + hop + 1]);
    }
  }

  // The batch's one wait: true sizes, and any invalid input the kernels met.
  const int64_t* counts = board.read(stream, csr.num_nodes, csr.num_edges);
  at::Tensor nodes_per_hop = at::zeros({num_hops + 1}, at::kLong);
  at::Tensor edges_per_hop = at::zeros({num_hops}, at::kLong);
  int64_t* nodes_per_hop_p = nodes_per_hop.mutable_data_ptr<int64_t>();
  int64_t* edges_per_hop_p = edges_per_hop.mutable_data_ptr<int64_t>();
  nodes_per_hop_p[0] = batch_size;
  std::vector<at::Tensor> node_parts{seeds};
  for (size_t hop = 0; hop < row_parts.size(); ++hop) {
    const int64_t hop_edges = counts[edges_at + hop];
    const int64_t added = counts[total_at + hop + 2] - counts[total_at + hop + 1];
    row_parts[hop] = row_parts[hop].narrow(0, 0, hop_edges);
    col_parts[hop] = col_parts[hop].narrow(0, 0, hop_edges);
    eid_parts[hop] = eid_parts[hop].narrow(0, 0, hop_edges);
    node_parts.push_back(new_node_parts[hop].narrow(0, 0, added));
    nodes_per_hop_p[hop + 1] = added;
    edges_per_hop_p[hop] = hop_edges;
  }
  auto join = [&](const std::vector<at::Tensor>& parts) {
    return parts.empty() ? at::empty({0}, options) : at::cat(parts);
  };
  return {join(node_parts), join(row_parts), join(col_parts),
          join(eid_parts),  nodes_per_hop,   edges_per_hop};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
sample_subgraph_cuda(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& seeds,
                     at::IntArrayRef fanouts, bool replace,
                     const std::optional<at::Tensor>& edge_ids,
                     const std::optional<at::Generator>& generator,
                     const std::optional<at::Tensor>& cached_indices,
                     const std::optional<at::Tensor>& cached_starts) {
  check_sample_subgraph_args(indptr, indices, seeds, fanouts, replace, edge_ids);
  check_topology_cache(indptr, indices, cached_indices, cached_starts);
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
    return sample_subgraph_kernel<index_t>(indptr, indices, seeds64, fanouts, replace, edge_ids,
                                           generator, cached_indices, cached_starts);
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CUDA, m) { m.impl("sample_subgraph", &sample_subgraph_cuda); }

}  // namespace quiver
