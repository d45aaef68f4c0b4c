// The CUDA multi-hop loop shared by sample_subgraph (uniform rows, optionally captured as a
// CUDA graph) and neighbor_sample (rows with RowRules: weighted, temporal, disjoint trees):
// every hop runs row planning and sampling (row_sampling.cu, weighted_rows.cu) and
// reindexing (reindex.cu), queued back to back with one host wait per batch. The rules
// change only what one row yields and how its neighbors are keyed; the loop is the same.
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "ops/checks.h"
#include "ops/cuda/device_access.h"
#include "ops/cuda/hop_board.h"
#include "ops/cuda/join_parts.h"
#include "ops/cuda/reindex.h"
#include "ops/cuda/row_sampling.h"
#include "ops/sampling_rules.h"

namespace quiver::cuda {

// Hops are queued back to back without waiting for the GPU: each is sized by its upper
// bound (frontier bound x fanout) and reads its true size from the device. The host waits
// once per batch, at the end, unless the next hop's bound is too loose (an all-neighbors
// hop, or more than this many edges), in which case it reads the exact sizes first.
constexpr int64_t kQueuedEdgeLimit = int64_t{1} << 24;

// In UVA mode a hop with at least this many rows visits them in the order of their
// neighbor lists' addresses (row_sampling.h: order_rows_by_begin), when the lists take at
// least kSortedRowsMinBytes: measured on the H100, a papers-sized graph (6.5 GB of lists)
// samples 1.18x faster, a products-sized one (0.5 GB) no faster. A smaller hop gains less
// than the sort costs. A sampler object may force it (`forced`: its uva_row_order option,
// batch_graphs.h), to measure it, and to test it on small graphs.
constexpr int64_t kSortedRowsMin = int64_t{1} << 14;
constexpr int64_t kSortedRowsMinBytes = int64_t{2} << 30;

inline bool uva_rows_sorted(const at::Tensor& indices, std::optional<bool> forced) {
  if (indices.is_cuda()) return false;
  if (forced.has_value()) return *forced;
  return static_cast<int64_t>(indices.nbytes()) >= kSortedRowsMinBytes;
}

// Where a batch's words sit on its HopBoard: [0] scratch, then node_total (num_hops + 2
// words: node_total[h] = nodes numbered before hop h - 1 adds any, so hop h's frontier is
// [node_total[h], node_total[h + 1])), the edges of each hop, and the call's Philox key
// {seed, offset}, which the kernels read from the device (so a replayed graph gets each
// call's own). With `host_seeds`, the batch's seeds (from host memory) follow: they reach
// the GPU in the board's one upload, with no copy of their own, and are never read back.
struct BoardLayout {
  explicit BoardLayout(int64_t num_hops, int64_t host_seeds = 0)
      : edges_at(total_at + num_hops + 2),
        key_at(edges_at + num_hops),
        seeds_at(key_at + 2),
        host_seeds(host_seeds),
        words(seeds_at + host_seeds) {}
  int64_t total_at = 1;
  int64_t edges_at;
  int64_t key_at;
  int64_t seeds_at;
  int64_t host_seeds;  // seeds on the board (0: the seeds are a device tensor of their own)
  int64_t words;
};

inline std::unique_ptr<cuda::HopBoard> board_for(const BoardLayout& layout,
                                                 const at::Device& device) {
  return std::make_unique<cuda::HopBoard>(device, layout.words, layout.host_seeds);
}

// The seeds as the kernels read them: the device tensor given, or the board's copy.
inline at::Tensor board_seeds(cuda::HopBoard& board, const BoardLayout& layout,
                              const at::Tensor& seeds, const at::Device& device) {
  if (layout.host_seeds == 0) return seeds;
  // The device named, so that no pointer lookup runs on every call.
  return at::for_blob(board.words() + layout.seeds_at, {layout.host_seeds})
      .options(at::TensorOptions(device).dtype(at::kLong))
      .target_device(device)
      .make_tensor();
}

// The host's half of a board before a call: the seeds counted, the key, the seeds
// themselves when they ride on the board (int64, contiguous, in host memory), nothing else.
inline void prepare_board(cuda::HopBoard& board, const BoardLayout& layout, int64_t batch_size,
                          const cuda::PhiloxKey& key, const at::Tensor& seeds) {
  board.clear_host();
  int64_t* words = board.host_words();
  words[layout.total_at + 1] = batch_size;
  words[layout.key_at] = static_cast<int64_t>(key.seed);
  words[layout.key_at + 1] = static_cast<int64_t>(key.offset);
  if (layout.host_seeds > 0) {
    std::memcpy(words + layout.seeds_at, seeds.const_data_ptr<int64_t>(),
                layout.host_seeds * sizeof(int64_t));
  }
}

// What a queued batch leaves on the GPU: each hop's outputs, sized by their bounds (the true
// sizes are on the board).
struct QueuedBatch {
  std::vector<at::Tensor> new_node_parts, row_parts, col_parts, eid_parts;
  at::Tensor seed_keys;  // disjoint trees: the seeds' keys (else the seeds themselves)
  bool waited = false;  // the host read sizes before the end (such a batch is never captured)
};

// The inputs of a batch that stay the same from call to call.
template <typename index_t>
struct BatchShape {
  cuda::Csr<index_t> csr;
  at::IntArrayRef fanouts;
  bool replace;
  bool sort_rows;
  int64_t plan_arrays;
  int64_t batch_size;
  BoardLayout layout;
  RowRules rules = {};  // neighbor_sample's; none for sample_subgraph
  // Heterogeneous graphs (rules.relations set): `fanouts` holds each hop's largest fanout
  // of one relation (what sizes a plan row), node_fanouts the most one node may yield (the
  // sum over the relations ending at a type, the largest over types; -1 when any relation
  // takes all), and relation_fanouts the device table [hop][relation] of fanouts.
  at::IntArrayRef node_fanouts = {};
  const int64_t* relation_fanouts = nullptr;

  // Keys the reindexing table holds: node ids, or tree * num_nodes + node.
  int64_t key_space() const {
    return rules.tree_nodes > 0 ? rules.tree_nodes * batch_size : csr.num_nodes;
  }
  // What one node of the frontier may yield at `hop`, for the hop's bounds.
  int64_t node_fanout(int64_t hop) const {
    return node_fanouts.empty() ? fanouts[hop] : node_fanouts[hop];
  }
  at::IntArrayRef bound_fanouts() const { return node_fanouts.empty() ? fanouts : node_fanouts; }
  bool sliced() const { return rules.relations.active(); }
};

// neighbor_sample's rules from the op's arguments (hetero_neighbor_sample's too): the
// per-edge arrays where the GPU reads them, and the seed times copied to the device
// (`seed_times` keeps them alive).
inline RowRules rule_rows(const std::optional<at::Tensor>& edge_weight,
                          const std::optional<at::Tensor>& edge_weight_cumsum,
                          const std::optional<at::Tensor>& edge_time,
                          const std::optional<at::Tensor>& seed_time, bool strict_time,
                          bool last, bool disjoint, int64_t num_nodes, const at::Device& device,
                          at::Tensor& seed_times) {
  RowRules rules;
  if (edge_weight.has_value()) {
    rules.edge_weight = static_cast<const float*>(gpu_readable(*edge_weight, "edge_weight", device));
  }
  if (edge_weight_cumsum.has_value()) {
    rules.weight_sums = static_cast<const double*>(
        gpu_readable(*edge_weight_cumsum, "edge_weight_cumsum", device));
  }
  if (edge_time.has_value()) {
    rules.edge_time = static_cast<const int64_t*>(gpu_readable(*edge_time, "edge_time", device));
    seed_times = seed_time->to(device, /*non_blocking=*/false).contiguous();
    rules.seed_time = seed_times.const_data_ptr<int64_t>();
  }
  rules.strict_time = strict_time;
  rules.last = last;
  rules.tree_nodes = disjoint ? num_nodes : 0;
  return rules;
}

// Queues every hop of a batch on the current stream: the board's upload first (so all the
// GPU reads of the host is that one copy), then per hop planning, sampling and reindexing.
template <typename index_t>
void queue_batch(const BatchShape<index_t>& shape, const at::Tensor& seeds, cuda::HopBoard& board,
                 QueuedBatch& queued) {
  const auto& csr = shape.csr;
  const auto& layout = shape.layout;
  const at::IntArrayRef fanouts = shape.fanouts;
  const bool replace = shape.replace;
  const int64_t plan_arrays = shape.plan_arrays, batch_size = shape.batch_size;
  const int64_t num_hops = static_cast<int64_t>(fanouts.size());
  const int64_t total_at = layout.total_at, edges_at = layout.edges_at;
  const bool sort_rows = shape.sort_rows;
  const at::Device device = seeds.device();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const auto options = seeds.options();
  board.upload(stream);
  int64_t* node_total = board.words() + total_at;
  const int64_t key_space = shape.key_space();
  RowRules rules = shape.rules;
  rules.status = board.status();
  at::Tensor seed_keys = seeds;
  if (rules.tree_nodes > 0) {
    seed_keys = at::empty({batch_size}, options);
    C10_CUDA_CHECK(tree_keys(seeds.const_data_ptr<int64_t>(), batch_size, rules.tree_nodes,
                             seed_keys.mutable_data_ptr<int64_t>(), board.status(), stream));
    queued.seed_keys = seed_keys;
  }

  check_batch_nodes(batch_size);  // before the seeds' local indices are numbered in int32
  // Sized for the nodes the batch can reach before an all-neighbors hop (initial_table_nodes
  // caps it); each hop grows it to its exact bound, so the table never fills past half.
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
  reserve_table(initial_table_nodes(batch_size, shape.bound_fanouts(), key_space));
  int64_t nodes_bound = batch_size;  // nodes the table may hold so far
  at::Tensor entries = at::empty({batch_size}, options);
  C10_CUDA_CHECK(cuda::insert_nodes(table, seed_keys.const_data_ptr<int64_t>(), batch_size,
                                    entries.mutable_data_ptr<int64_t>(), stream));

  auto& new_node_parts = queued.new_node_parts;
  auto& row_parts = queued.row_parts;
  auto& col_parts = queued.col_parts;
  auto& eid_parts = queued.eid_parts;
  at::Tensor frontier = seed_keys;  // its first node_total[h + 1] - node_total[h] rows are live
  uint64_t stream_base = 0;     // one Philox stream per frontier slot of the call
  const int64_t rows_per_node = rules.relations.rows_per_node;
  for (int64_t hop = 0; hop < num_hops; ++hop) {
    const int64_t fanout = fanouts[hop];  // of one plan row
    const int64_t node_fanout = shape.node_fanout(hop);
    const int64_t frontier_bound = frontier.numel();
    if (frontier_bound == 0) break;  // known empty: the remaining hops add nothing

    // One plan row per frontier node, or rows_per_node (its relations) when sliced.
    const int64_t plan_rows = frontier_bound * rows_per_node;
    const int64_t arrays = plan_arrays + (shape.sliced() ? 1 : 0);
    at::Tensor plan_space = at::empty({arrays, plan_rows}, options);
    int64_t* plan_p = plan_space.mutable_data_ptr<int64_t>();
    cuda::RowPlan plan{frontier.const_data_ptr<int64_t>(),
                       node_total + hop,
                       plan_rows,
                       plan_p,
                       plan_p + plan_rows,
                       plan_p + 2 * plan_rows,
                       plan_arrays == 4 ? plan_p + 3 * plan_rows : nullptr};
    if (shape.sliced()) plan.fanout = plan_p + plan_arrays * plan_rows;
    cuda::HopRule rule{fanout, replace, {}, stream_base, board.words() + layout.key_at};
    rule.rules = rules;
    if (shape.sliced()) {
      rule.rules.hop_fanouts = shape.relation_fanouts + hop * rules.relations.num_relations;
    }
    C10_CUDA_CHECK(cuda::plan_rows(csr, plan, rule,
                                   {/*nodes_are_seeds=*/hop == 0,
                                    /*csr_ends=*/hop == 0},
                                   board.status(), stream));
    at::Tensor order_space, sort_space;
    if (sort_rows && plan_rows >= kSortedRowsMin) {
      const int end_bit = cuda::bits_below(csr.num_edges + 1);
      const size_t sort_bytes = cuda::row_order_workspace_bytes(plan_rows, end_bit);
      order_space = at::empty({3 * plan_rows}, options);
      sort_space = cuda::workspace(sort_bytes, device);
      int64_t* order_p = order_space.mutable_data_ptr<int64_t>();
      C10_CUDA_CHECK(cuda::order_rows_by_begin(plan, end_bit, order_p, order_p + plan_rows,
                                               order_p + 2 * plan_rows,
                                               sort_space.mutable_data_ptr(), sort_bytes, stream));
      plan.order = order_p + 2 * plan_rows;
    }
    at::Tensor offsets = at::empty({plan_rows + 1}, options);
    const size_t scan_bytes = cuda::offsets_workspace_bytes(plan_rows);
    at::Tensor scan_space = cuda::workspace(scan_bytes, device);
    C10_CUDA_CHECK(cuda::offsets_from_counts(plan.count, plan_rows,
                                             offsets.mutable_data_ptr<int64_t>(),
                                             scan_space.mutable_data_ptr(), scan_bytes, stream));
    const int64_t* num_edges = offsets.const_data_ptr<int64_t>() + plan_rows;

    // The hop's edges: its bound when tight, else (all neighbors, or a fanout far above
    // the degrees) the exact count, read from the device. No product can wrap: the bound
    // saturates, and the scan's sums stay below it.
    const int64_t bound =
        saturating_mul(frontier_bound, per_node_bound(node_fanout, replace, csr.num_edges));
    // With replacement every live row with neighbors yields `fanout`; a saturated bound
    // could wrap the scan's sums.
    if ((replace && bound > kMaxHopEdges) || bound == kSaturated) {
      errors::batch_too_large(errors::hop_edges_name(hop), bound, kMaxHopEdges);
    }
    int64_t max_edges = bound;
    if (node_fanout < 0 || bound > kQueuedEdgeLimit) {
      C10_CUDA_CHECK(cudaMemcpyAsync(board.words(), num_edges, sizeof(int64_t),
                                     cudaMemcpyDeviceToDevice, stream));
      max_edges = board.read(stream, csr.num_nodes, csr.num_edges)[0];
      queued.waited = true;
    }
    if (max_edges > kMaxHopEdges) {
      errors::batch_too_large(errors::hop_edges_name(hop), max_edges, kMaxHopEdges);
    }
    const int64_t max_new = std::min(max_edges, key_space);
    nodes_bound = std::min(nodes_bound + max_new, key_space + batch_size);
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
    C10_CUDA_CHECK(cuda::insert_neighbors(table, edges, key_space, board.status(), stream));
    at::Tensor new_nodes = at::empty({max_new}, options);
    const size_t numbering_bytes = cuda::number_new_nodes_workspace_bytes(max_edges);
    at::Tensor numbering_space = cuda::workspace(numbering_bytes, device);
    C10_CUDA_CHECK(cuda::number_new_nodes(table, edges, node_total + hop + 1,
                                          new_nodes.mutable_data_ptr<int64_t>(),
                                          board.words() + edges_at + hop,
                                          numbering_space.mutable_data_ptr(), numbering_bytes,
                                          stream));

    row_parts.push_back(rows);
    col_parts.push_back(cols);
    eid_parts.push_back(eids);
    new_node_parts.push_back(new_nodes);
    stream_base += static_cast<uint64_t>(plan_rows);
    frontier = new_nodes;
    const bool last = hop + 1 == num_hops;
    const int64_t next_fanout = last ? 0 : shape.node_fanout(hop + 1);
    if (!last && (next_fanout < 0 ||
                  saturating_mul(max_new, per_node_bound(next_fanout, replace, csr.num_edges)) >
                      kQueuedEdgeLimit)) {
      const int64_t* counts = board.read(stream, csr.num_nodes, csr.num_edges);
      queued.waited = true;
      frontier = new_nodes.narrow(0, 0, counts[total_at + hop + 2] - counts[total_at + hop + 1]);
    }
  }
}

// The batch's one wait (true sizes, and any invalid input the kernels met), then its outputs
// cut to size and joined, all four in one launch (join_parts). `queued` is left as it is (a
// captured batch's buffers): the outputs never alias it. With `edge_index_rows`, rows and
// cols are the two rows of one [2, edges] tensor (their `_base`), so that Python's
// layers_of takes it as edge_index with no copy: for sampler objects, whose methods no
// schema check covers; an op's outputs must not alias one another.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> finish_batch(
    const QueuedBatch& queued, cuda::HopBoard& board, const BoardLayout& layout,
    const at::Tensor& seeds, int64_t num_hops, int64_t num_nodes, int64_t num_edges,
    bool edge_index_rows = false) {
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const int64_t* counts = board.read(stream, num_nodes, num_edges);
  const int64_t hops = static_cast<int64_t>(queued.row_parts.size());
  at::Tensor nodes_per_hop = at::empty({num_hops + 1}, at::kLong);
  at::Tensor edges_per_hop = at::empty({num_hops}, at::kLong);
  int64_t* nodes_per_hop_p = nodes_per_hop.mutable_data_ptr<int64_t>();
  int64_t* edges_per_hop_p = edges_per_hop.mutable_data_ptr<int64_t>();
  std::fill(nodes_per_hop_p, nodes_per_hop_p + num_hops + 1, int64_t{0});
  std::fill(edges_per_hop_p, edges_per_hop_p + num_hops, int64_t{0});
  nodes_per_hop_p[0] = seeds.numel();
  int64_t total_nodes = seeds.numel(), total_edges = 0;
  for (int64_t hop = 0; hop < hops; ++hop) {
    edges_per_hop_p[hop] = counts[layout.edges_at + hop];
    nodes_per_hop_p[hop + 1] =
        counts[layout.total_at + hop + 2] - counts[layout.total_at + hop + 1];
    total_nodes += nodes_per_hop_p[hop + 1];
    total_edges += edges_per_hop_p[hop];
  }
  const at::Tensor& seed_part = queued.seed_keys.defined() ? queued.seed_keys : seeds;
  const auto options = seeds.options().dtype(at::kLong);
  at::Tensor node_ids = at::empty({total_nodes}, options);
  at::Tensor rows, cols;
  if (edge_index_rows) {
    const at::Tensor edge_index = at::empty({2, total_edges}, options);
    rows = edge_index.select(0, 0);
    cols = edge_index.select(0, 1);
  } else {
    rows = at::empty({total_edges}, options);
    cols = at::empty({total_edges}, options);
  }
  at::Tensor edge_ids = at::empty({total_edges}, options);
  const auto joinable = [](const at::Tensor& t) {
    return t.scalar_type() == at::kLong && t.is_contiguous();
  };
  bool fused = 4 * hops + 1 <= kMaxJoinedParts && joinable(seed_part);
  for (int64_t hop = 0; fused && hop < hops; ++hop) {
    fused = joinable(queued.row_parts[hop]) && joinable(queued.col_parts[hop]) &&
            joinable(queued.eid_parts[hop]) && joinable(queued.new_node_parts[hop]);
  }
  if (!fused) {  // more hops than one launch takes: at::cat, an output at a time
    std::vector<at::Tensor> node_parts{seed_part}, row_parts, col_parts, eid_parts;
    for (int64_t hop = 0; hop < hops; ++hop) {
      const int64_t hop_edges = edges_per_hop_p[hop];
      row_parts.push_back(queued.row_parts[hop].narrow(0, 0, hop_edges));
      col_parts.push_back(queued.col_parts[hop].narrow(0, 0, hop_edges));
      eid_parts.push_back(queued.eid_parts[hop].narrow(0, 0, hop_edges));
      node_parts.push_back(queued.new_node_parts[hop].narrow(0, 0, nodes_per_hop_p[hop + 1]));
    }
    const auto join = [](const std::vector<at::Tensor>& parts, at::Tensor& into) {
      if (!parts.empty()) at::cat_out(into, parts);
    };
    join(node_parts, node_ids);
    join(row_parts, rows);
    join(col_parts, cols);
    join(eid_parts, edge_ids);
    return {node_ids, rows, cols, edge_ids, nodes_per_hop, edges_per_hop};
  }
  JoinedParts parts;
  const auto add = [&parts](const at::Tensor& from, int64_t* to, int64_t count) {
    if (count == 0) return;
    parts.from[parts.num_parts] = from.const_data_ptr<int64_t>();
    parts.to[parts.num_parts] = to;
    parts.count[parts.num_parts] = count;
    parts.longest = std::max(parts.longest, count);
    ++parts.num_parts;
  };
  int64_t* node_at = node_ids.mutable_data_ptr<int64_t>();
  int64_t* rows_at = rows.mutable_data_ptr<int64_t>();
  int64_t* cols_at = cols.mutable_data_ptr<int64_t>();
  int64_t* eids_at = edge_ids.mutable_data_ptr<int64_t>();
  add(seed_part, node_at, seeds.numel());
  node_at += seeds.numel();
  for (int64_t hop = 0; hop < hops; ++hop) {
    const int64_t hop_edges = edges_per_hop_p[hop], added = nodes_per_hop_p[hop + 1];
    add(queued.new_node_parts[hop], node_at, added);
    add(queued.row_parts[hop], rows_at, hop_edges);
    add(queued.col_parts[hop], cols_at, hop_edges);
    add(queued.eid_parts[hop], eids_at, hop_edges);
    node_at += added;
    rows_at += hop_edges;
    cols_at += hop_edges;
    eids_at += hop_edges;
  }
  C10_CUDA_CHECK(join_parts(parts, stream));
  return {node_ids, rows, cols, edge_ids, nodes_per_hop, edges_per_hop};
}

// The Philox key of one batch of `shape`. Each uniform row reserves the draws its hop may take
// (with the hop limits these never wrap); weighted rows key their counters by edge and row,
// and need only the call's offset to differ.
template <typename index_t>
PhiloxKey batch_philox_key(const BatchShape<index_t>& shape, const at::Device& device,
                           const std::optional<at::Generator>& generator) {
  int64_t draws = 4;
  for (const int64_t fanout : shape.fanouts) {
    draws = std::max(draws, draws_per_row(fanout, shape.replace, shape.csr.num_edges));
  }
  return draw_philox_key(device, draws, generator);
}

}  // namespace quiver::cuda
