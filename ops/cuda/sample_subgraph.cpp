// CUDA entry point of sample_subgraph: every hop runs row sampling (row_sampling.cu) and
// reindexing (reindex.cu), queued back to back with one host wait per batch.
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/MemPool.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
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

// Where a batch's words sit on its HopBoard: [0] scratch, then node_total (num_hops + 2
// words: node_total[h] = nodes numbered before hop h - 1 adds any, so hop h's frontier is
// [node_total[h], node_total[h + 1])), the edges of each hop, and the call's Philox key
// {seed, offset}, which the kernels read from the device (so a replayed graph gets each
// call's own).
struct BoardLayout {
  explicit BoardLayout(int64_t num_hops)
      : edges_at(total_at + num_hops + 2), key_at(edges_at + num_hops), words(key_at + 2) {}
  int64_t total_at = 1;
  int64_t edges_at;
  int64_t key_at;
  int64_t words;
};

// The host's half of a board before a call: the seeds counted, the key, nothing else.
void prepare_board(cuda::HopBoard& board, const BoardLayout& layout, int64_t batch_size,
                   const cuda::PhiloxKey& key) {
  board.clear_host();
  int64_t* words = board.host_words();
  words[layout.total_at + 1] = batch_size;
  words[layout.key_at] = static_cast<int64_t>(key.seed);
  words[layout.key_at + 1] = static_cast<int64_t>(key.offset);
}

// What a queued batch leaves on the GPU: each hop's outputs, sized by their bounds (the true
// sizes are on the board).
struct QueuedBatch {
  std::vector<at::Tensor> new_node_parts, row_parts, col_parts, eid_parts;
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
};

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

  auto& new_node_parts = queued.new_node_parts;
  auto& row_parts = queued.row_parts;
  auto& col_parts = queued.col_parts;
  auto& eid_parts = queued.eid_parts;
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
    const cuda::HopRule rule{fanout, replace, {}, stream_base, board.words() + layout.key_at};
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
      queued.waited = true;
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
      queued.waited = true;
      frontier = new_nodes.narrow(0, 0, counts[total_at + hop + 2] - counts[total_at + hop + 1]);
    }
  }
}

// The batch's one wait (true sizes, and any invalid input the kernels met), then its outputs
// cut to size and joined. `queued` is left as it is (a captured batch's buffers).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> finish_batch(
    const QueuedBatch& queued, cuda::HopBoard& board, const BoardLayout& layout,
    const at::Tensor& seeds, int64_t num_hops, int64_t num_nodes, int64_t num_edges) {
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const int64_t* counts = board.read(stream, num_nodes, num_edges);
  at::Tensor nodes_per_hop = at::zeros({num_hops + 1}, at::kLong);
  at::Tensor edges_per_hop = at::zeros({num_hops}, at::kLong);
  int64_t* nodes_per_hop_p = nodes_per_hop.mutable_data_ptr<int64_t>();
  int64_t* edges_per_hop_p = edges_per_hop.mutable_data_ptr<int64_t>();
  nodes_per_hop_p[0] = seeds.numel();
  std::vector<at::Tensor> node_parts{seeds}, row_parts, col_parts, eid_parts;
  for (size_t hop = 0; hop < queued.row_parts.size(); ++hop) {
    const int64_t hop_edges = counts[layout.edges_at + hop];
    const int64_t added = counts[layout.total_at + hop + 2] - counts[layout.total_at + hop + 1];
    row_parts.push_back(queued.row_parts[hop].narrow(0, 0, hop_edges));
    col_parts.push_back(queued.col_parts[hop].narrow(0, 0, hop_edges));
    eid_parts.push_back(queued.eid_parts[hop].narrow(0, 0, hop_edges));
    node_parts.push_back(queued.new_node_parts[hop].narrow(0, 0, added));
    nodes_per_hop_p[hop + 1] = added;
    edges_per_hop_p[hop] = hop_edges;
  }
  // at::cat copies even a single part: the outputs never alias a captured batch's buffers.
  auto join = [&](const std::vector<at::Tensor>& parts) {
    return parts.empty() ? at::empty({0}, seeds.options()) : at::cat(parts);
  };
  return {join(node_parts), join(row_parts), join(col_parts),
          join(eid_parts),  nodes_per_hop,   edges_per_hop};
}

// Batches captured as CUDA graphs. The host takes longer to launch a batch (about 15 kernels
// and 10 allocations a hop) than the GPU takes to run it in GPU mode, and in UVA mode the
// last, slow hop starts only once the host has launched the ones before; a replay is one
// launch. The first call of a shape runs as usual, the second captures it, later ones
// replay it: the seeds are copied into the graph's input, the board's host half is filled
// with this call's key, and the outputs are copied out as usual. Each capture keeps its
// batch's buffers in a memory pool of its own, so only a few shapes are kept (an epoch has
// two: full batches and the last). QUIVER_SAMPLING_GRAPHS=0 turns this off. On the H100 a
// replayed batch ([15, 10, 5] from 1024 seeds) took 0.36 against 0.39-0.45 ms in GPU mode
// and 1.06-1.11 against 1.16-1.19 ms in UVA mode (docs/benchmarks.md).
constexpr size_t kMaxCapturedBatches = 3;
// Only batches of at most this many edges (their bound) are captured: a capture holds about
// 100 bytes of GPU memory an edge of the bound (94 MiB for that batch, 0.94M edges), memory
// the model could otherwise reuse between calls.
constexpr int64_t kMaxCapturedEdges = int64_t{1} << 22;

// The edges a queued batch is sized for (see queue_batch), saturating.
int64_t queued_edges_bound(int64_t batch_size, at::IntArrayRef fanouts, bool replace,
                           int64_t num_nodes, int64_t num_edges) {
  int64_t frontier = batch_size, total = 0;
  for (const int64_t fanout : fanouts) {
    const int64_t bound = saturating_mul(frontier, per_node_bound(fanout, replace, num_edges));
    total = bound > kSaturated - total ? kSaturated : total + bound;
    frontier = std::min(bound, num_nodes);
  }
  return total;
}

// One captured batch as a CUDA graph, its allocations in a memory pool of its own. Not
// at::cuda::CUDAGraph: that one also puts PyTorch's default CUDA generator into capture
// mode, which breaks random numbers drawn by other threads meanwhile (the model's, beside a
// prefetching loader); our kernels read their key from the board instead.
class BatchGraph {
 public:
  BatchGraph() = default;
  BatchGraph(const BatchGraph&) = delete;
  BatchGraph& operator=(const BatchGraph&) = delete;
  ~BatchGraph() {
    if (exec_ != nullptr) C10_CUDA_CHECK_WARN(cudaGraphExecDestroy(exec_));
    if (pooled_) c10::cuda::CUDACachingAllocator::releasePool(device_, pool_);
  }

  // Captures what `queue` queues on `stream` (not the default stream). Only this thread's
  // unsafe CUDA calls are refused meanwhile; allocations on `stream` come from the pool.
  template <typename Queue>
  void capture(c10::DeviceIndex device, cudaStream_t stream, Queue&& queue) {
    device_ = device;
    pool_ = at::cuda::MemPool::graph_pool_handle(/*is_user_created=*/false);
    c10::cuda::CUDACachingAllocator::beginAllocateToPool(device_, pool_, [this](cudaStream_t s) {
      cudaStreamCaptureStatus status;
      unsigned long long id = 0;
      return cudaStreamGetCaptureInfo(s, &status, &id) == cudaSuccess &&
             status == cudaStreamCaptureStatusActive && id == capture_id_;
    });
    pooled_ = true;
    cudaGraph_t graph = nullptr;
    try {
      C10_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      cudaStreamCaptureStatus status;
      C10_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, &capture_id_));
      queue();
    } catch (...) {
      (void)cudaStreamEndCapture(stream, &graph);
      (void)cudaGetLastError();
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
      c10::cuda::CUDACachingAllocator::endAllocateToPool(device_, pool_);
      throw;
    }
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    c10::cuda::CUDACachingAllocator::endAllocateToPool(device_, pool_);
    C10_CUDA_CHECK(ended);
    const cudaError_t made = cudaGraphInstantiateWithFlags(&exec_, graph, 0);
    C10_CUDA_CHECK_WARN(cudaGraphDestroy(graph));
    C10_CUDA_CHECK(made);
  }

  void replay(cudaStream_t stream) { C10_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

 private:
  c10::DeviceIndex device_ = 0;
  at::cuda::MempoolId_t pool_{0, 0};
  bool pooled_ = false;
  unsigned long long capture_id_ = 0;
  cudaGraphExec_t exec_ = nullptr;
};

struct CapturedBatch {
  BatchGraph graph;  // first: destroyed last, after the buffers in its pool
  std::unique_ptr<cuda::HopBoard> board;
  at::Tensor seeds;
  QueuedBatch queued;
  at::cuda::CUDAEvent outputs_copied;  // the last call's copies out of `queued`
  std::mutex busy;
  bool ran = false;  // a call of this shape ran as usual (so whether it waits is known)
  bool capturable = true;
  bool captured = false;
  uint64_t last_use = 0;

  ~CapturedBatch() {
    try {
      outputs_copied.synchronize();  // its pool must not be handed out under those copies
    } catch (...) {
    }
  }
};

class CapturedBatches {
 public:
  std::shared_ptr<CapturedBatch> find(const std::string& key) {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto& entry = batches_[key];
    if (!entry) entry = std::make_shared<CapturedBatch>();
    entry->last_use = ++clock_;
    std::shared_ptr<CapturedBatch> found = entry;
    while (batches_.size() > kMaxCapturedBatches) {
      auto oldest = batches_.end();
      for (auto it = batches_.begin(); it != batches_.end(); ++it) {
        if (it->second != found &&
            (oldest == batches_.end() || it->second->last_use < oldest->second->last_use)) {
          oldest = it;
        }
      }
      if (oldest == batches_.end()) break;
      batches_.erase(oldest);  // destroyed once no call holds it
    }
    return found;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<CapturedBatch>> batches_;
  uint64_t clock_ = 0;
};

// Never destroyed: at exit the CUDA context and the allocator may be gone before statics.
CapturedBatches& captured_batches() {
  static auto* batches = new CapturedBatches();
  return *batches;
}

bool sampling_graphs_enabled() {
  const char* value = std::getenv("QUIVER_SAMPLING_GRAPHS");
  return value == nullptr || value[0] != '0';
}

// Every input a captured batch depends on: the tensors' addresses and sizes, the batch size,
// fanouts and choices. (Same addresses and sizes: a graph reads whatever is there.)
std::string batch_key(const at::Tensor& indptr, const at::Tensor& indices,
                      const std::optional<at::Tensor>& edge_ids,
                      const std::optional<at::Tensor>& cached_indices,
                      const std::optional<at::Tensor>& cached_starts, int64_t batch_size,
                      at::IntArrayRef fanouts, bool replace, bool sort_rows) {
  std::ostringstream key;
  auto tensor = [&](const at::Tensor& t) {
    key << t.data_ptr() << ':' << t.numel() << ':' << t.scalar_type() << ':' << t.device() << ';';
  };
  auto optional = [&](const std::optional<at::Tensor>& t) {
    if (t.has_value()) {
      tensor(*t);
    } else {
      key << "-;";
    }
  };
  tensor(indptr);
  tensor(indices);
  optional(edge_ids);
  optional(cached_indices);
  optional(cached_starts);
  key << batch_size << ';' << replace << ';' << sort_rows << ';' << at::cuda::current_device()
      << ';';
  for (const int64_t fanout : fanouts) key << fanout << ',';
  return key.str();
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
  const at::cuda::CUDAStream stream = at::cuda::getCurrentCUDAStream();
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
  const int64_t num_hops = static_cast<int64_t>(fanouts.size());
  const BatchShape<index_t> shape{csr,
                                  fanouts,
                                  replace,
                                  uva_rows_sorted(indices),
                                  cached_starts.has_value() ? 4 : 3,
                                  seeds.numel(),
                                  BoardLayout(num_hops)};

  // Each row reserves the draws its hop may take; with the hop limits these never wrap.
  int64_t draws = 4;
  for (const int64_t fanout : fanouts) {
    draws = std::max(draws, draws_per_row(fanout, replace, csr.num_edges));
  }
  const cuda::PhiloxKey key = cuda::draw_philox_key(device, draws, generator);
  auto run_once = [&]() {
    cuda::HopBoard board(device, shape.layout.words);
    prepare_board(board, shape.layout, shape.batch_size, key);
    QueuedBatch queued;
    queue_batch(shape, seeds, board, queued);
    return std::make_pair(
        finish_batch(queued, board, shape.layout, seeds, num_hops, csr.num_nodes, csr.num_edges),
        queued.waited);
  };
  if (!sampling_graphs_enabled() ||
      queued_edges_bound(shape.batch_size, fanouts, replace, csr.num_nodes, csr.num_edges) >
          kMaxCapturedEdges) {
    return run_once().first;
  }

  const std::shared_ptr<CapturedBatch> batch =
      captured_batches().find(batch_key(indptr, indices, edge_ids, cached_indices, cached_starts,
                                        shape.batch_size, fanouts, replace, shape.sort_rows));
  std::unique_lock<std::mutex> mine(batch->busy, std::try_to_lock);
  if (!mine.owns_lock() || !batch->capturable) return run_once().first;  // in use elsewhere
  if (!batch->captured && !batch->ran) {
    auto [outputs, waited] = run_once();
    batch->ran = true;
    batch->capturable = !waited;
    return outputs;
  }
  if (!batch->captured) {
    // Captured on a side stream (a graph cannot be captured on the default one) that first
    // waits for the caller's; other threads' CUDA calls go on meanwhile (thread-local mode).
    batch->board = std::make_unique<cuda::HopBoard>(device, shape.layout.words);
    batch->seeds = at::empty_like(seeds);
    prepare_board(*batch->board, shape.layout, shape.batch_size, key);
    const at::cuda::CUDAStream side = at::cuda::getStreamFromPool(false, device.index());
    at::cuda::CUDAEvent caller_ready;
    caller_ready.record(stream);
    caller_ready.block(side);
    try {
      const c10::cuda::CUDAStreamGuard on_side(side);
      batch->graph.capture(device.index(), side.stream(),
                           [&] { queue_batch(shape, batch->seeds, *batch->board, batch->queued); });
      batch->captured = true;
    } catch (...) {
      batch->capturable = false;  // runs as usual from now on
      batch->queued = QueuedBatch{};
      return run_once().first;
    }
  }
  prepare_board(*batch->board, shape.layout, shape.batch_size, key);
  batch->outputs_copied.block(stream);  // the last call's copies out of the buffers are done
  batch->seeds.copy_(seeds, /*non_blocking=*/true);
  batch->graph.replay(stream.stream());
  auto outputs = finish_batch(batch->queued, *batch->board, shape.layout, seeds, num_hops,
                              csr.num_nodes, csr.num_edges);
  batch->outputs_copied.record(stream);
  return outputs;
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
