// Batches of the hop loop (hop_loop.h) captured as CUDA graphs and replayed, for the
// sampling ops' kernels: sample_batch runs a batch once, or, given a sampler's
// SamplerGraphs (the runtime's sampler classes own one each; the ops pass none and never
// capture), captures it or replays its capture.
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/MemPool.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ops/cuda/hop_board.h"
#include "ops/cuda/hop_loop.h"
#include "ops/internal/batch_graph.h"
#include "ops/sampling_rules.h"

namespace quiver::cuda {

// Batches captured as CUDA graphs. The host takes longer to launch a batch (about 15 kernels
// and 10 allocations a hop) than the GPU takes to run it in GPU mode, and in UVA mode the
// last, slow hop starts only once the host has launched the ones before; a replay is one
// launch. The first call of a shape runs as usual, the second captures it, later ones
// replay it: the seeds are copied into the graph's input, the board's host half is filled
// with this call's key, and the outputs are copied out as usual. Each capture keeps its
// batch's buffers in a memory pool of its own, so only a few shapes are kept (an epoch has
// two: full batches and the last), and they go with the sampler that owns them. On the H100 a
// replayed batch ([15, 10, 5] from 1024 seeds) took 0.36 against 0.39-0.45 ms in GPU mode
// and 1.06-1.11 against 1.16-1.19 ms in UVA mode (docs/benchmarks.md).
constexpr size_t kMaxCapturedBatches = 3;
// Only batches of at most this many edges (their bound) are captured: a capture holds about
// 100 bytes of GPU memory an edge of the bound (94 MiB for that batch, 0.94M edges), memory
// the model could otherwise reuse between calls.
constexpr int64_t kMaxCapturedEdges = int64_t{1} << 22;

// The edges a queued batch is sized for (see queue_batch), saturating.
inline int64_t queued_edges_bound(int64_t batch_size, at::IntArrayRef fanouts, bool replace,
                           int64_t num_nodes, int64_t num_edges) {
  int64_t frontier = batch_size, total = 0;
  for (const int64_t fanout : fanouts) {
    const int64_t bound = saturating_mul(frontier, per_node_bound(fanout, replace, num_edges));
    total = bound > kSaturated - total ? kSaturated : total + bound;
    frontier = std::min(bound, num_nodes);
  }
  return total;
}

struct CapturedBatch {
  BatchGraph graph;  // first: destroyed last, after the buffers in its pool
  std::unique_ptr<cuda::HopBoard> board;
  at::Tensor seeds;
  at::Tensor seed_time;  // neighbor_sample's seed times, when temporal
  QueuedBatch queued;
  at::cuda::CUDAEvent outputs_copied;  // the last call's copies out of `queued`
  std::mutex busy;
  bool ran = false;  // a call of this shape ran as usual (so whether it waits is known)
  bool capturable = true;
  std::atomic<bool> captured{false};  // read by CapturedBatches::find under its own lock
  std::atomic<int64_t> replays{0};    // likewise
  uint64_t last_use = 0;

  ~CapturedBatch() {
    try {
      outputs_copied.synchronize();  // its pool must not be handed out under those copies
    } catch (...) {
    }
  }
};

// A sampler whose batch shapes keep changing (a serving runtime's, each batch as large as the
// requests that came) would capture shape after shape and let each go. A capture costs a
// graph instantiation and fresh device memory, and a capture's pool let go goes back to the
// device only when some allocation fails: the caching allocator then frees every cached
// block, which synchronizes the device. So once this many captures have been let go before
// they paid for themselves (fewer than kRepaidAfterReplays replays), shapes not seen before
// run as launched, and the captured ones are kept. Shapes that take turns for long stretches
// (a loader's training and evaluation batches) replay many times before they go, and keep
// being captured.
constexpr int64_t kMaxCapturesLetGo = 8;
constexpr int64_t kRepaidAfterReplays = 4;

// A sampler's captured batches, by every input they depend on (GraphKey), the least
// recently used past kMaxCapturedBatches let go of (see kMaxCapturesLetGo).
class CapturedBatches {
 public:
  // The batch of `key`; none once too many captures were let go and `key` is new: run it as
  // launched.
  std::shared_ptr<CapturedBatch> find(const std::string& key) {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto known = batches_.find(key);
    if (known == batches_.end()) {
      if (captures_let_go_ >= kMaxCapturesLetGo) return nullptr;
      known = batches_.emplace(key, std::make_shared<CapturedBatch>()).first;
    }
    std::shared_ptr<CapturedBatch> found = known->second;
    found->last_use = ++clock_;
    while (batches_.size() > kMaxCapturedBatches) {
      auto oldest = batches_.end();
      for (auto it = batches_.begin(); it != batches_.end(); ++it) {
        if (it->second != found &&
            (oldest == batches_.end() || it->second->last_use < oldest->second->last_use)) {
          oldest = it;
        }
      }
      if (oldest == batches_.end()) break;
      if (oldest->second->captured && oldest->second->replays < kRepaidAfterReplays) {
        ++captures_let_go_;
      }
      batches_.erase(oldest);  // destroyed once no call holds it
    }
    return found;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<CapturedBatch>> batches_;
  uint64_t clock_ = 0;
  // Captures let go of before they paid for themselves (then, at kMaxCapturesLetGo, no new
  // shape is kept).
  int64_t captures_let_go_ = 0;
};

// What one sampler object keeps for replays: its captured batches, and small tables on the
// GPU that captures read at replay (so they must outlive the call: the heterogeneous op's
// graph tables), one per content, both freed with the sampler. And the sampler's options
// that change no sample: whether it captures at all, and the order of a UVA hop's rows.
class SamplerGraphs {
 public:
  CapturedBatches& batches() { return batches_; }

  // Whether batches are captured and replayed (false: each runs as launched).
  bool captures() const { return captures_; }
  void set_captures(bool captures) { captures_ = captures; }
  // Whether a large UVA hop visits its rows in their lists' order (hop_loop.h:
  // uva_rows_sorted); none: by the lists' size.
  std::optional<bool> uva_row_order() const { return uva_row_order_; }
  void set_uva_row_order(std::optional<bool> order) { uva_row_order_ = order; }

  // `values` on `device`, the same tensor for the same content while this object lives,
  // copied before it is handed out (any thread's stream may read it: a wait, once per
  // content). Past kKeptTables contents, none (std::nullopt): such calls run uncaptured.
  std::optional<at::Tensor> kept_tables(const std::vector<int64_t>& values,
                                        const at::Device& device) {
    std::ostringstream key;
    key << device << ';';
    for (const int64_t v : values) key << v << ',';
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto found = tables_.find(key.str());
    if (found != tables_.end()) return found->second;
    if (tables_.size() >= kKeptTables) return std::nullopt;
    at::Tensor tables = at::tensor(values, at::kLong).to(device);  // waits for the copy
    tables_.emplace(key.str(), tables);
    return tables;
  }

 private:
  static constexpr size_t kKeptTables = 16;
  bool captures_ = true;
  std::optional<bool> uva_row_order_;
  CapturedBatches batches_;
  std::mutex mutex_;
  std::unordered_map<std::string, at::Tensor> tables_;
};

// Every input a captured batch depends on, as a string: tensors by address, size, dtype and
// device (same addresses and sizes: a graph reads whatever is there), then the choices.
class GraphKey {
 public:
  GraphKey() {
    key_.reserve(160);
    number(at::cuda::current_device());
  }
  GraphKey& add(const at::Tensor& t) {
    number(reinterpret_cast<uintptr_t>(t.data_ptr()));
    number(t.numel());
    number(static_cast<int64_t>(t.scalar_type()));
    number(static_cast<int64_t>(t.device().type()));
    number(t.device().index());
    return *this;
  }
  GraphKey& add(const std::optional<at::Tensor>& t) {
    if (t.has_value()) return add(*t);
    key_ += "-;";
    return *this;
  }
  GraphKey& add(int64_t value) {
    number(value);
    return *this;
  }
  GraphKey& add(at::IntArrayRef values) {
    for (const int64_t v : values) number(v);
    key_ += ';';
    return *this;
  }
  std::string str() const { return key_; }

 private:
  // Appended as text with a separator (no stream: this runs on every sampling call).
  template <typename Number>
  void number(Number value) {
    char digits[24];
    const auto end = std::to_chars(digits, digits + sizeof(digits), value).ptr;
    key_.append(digits, end);
    key_ += ',';
  }

  std::string key_;
};

// One batch of `shape` on `device` from `seeds` (and, when temporal, `seed_time` on the
// device, which shape.rules.seed_time points to) with Philox `key`: run as usual, or, with a
// sampler's `graphs` and a `graph_key` that names every input the batch depends on (empty:
// never captured), captured into `graphs` at the second call of that key and replayed from
// the third. The seeds are on `device`, or, when shape.layout carries them, int64 in host
// memory: then they ride on the board (hop_loop.h: BoardLayout).
template <typename index_t>
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> sample_batch(
    const BatchShape<index_t>& shape, const at::Tensor& seeds, const at::Tensor& seed_time,
    const PhiloxKey& key, const std::string& graph_key, SamplerGraphs* graphs,
    const at::Device& device) {
  const at::cuda::CUDAStream stream = at::cuda::getCurrentCUDAStream();
  const auto& csr = shape.csr;
  const at::IntArrayRef fanouts = shape.fanouts;
  const bool replace = shape.replace;
  const int64_t num_hops = static_cast<int64_t>(fanouts.size());
  auto run_once = [&]() {
    const std::unique_ptr<cuda::HopBoard> board = board_for(shape.layout, device);
    prepare_board(*board, shape.layout, shape.batch_size, key, seeds);
    const at::Tensor device_seeds = board_seeds(*board, shape.layout, seeds, device);
    QueuedBatch queued;
    queue_batch(shape, device_seeds, *board, queued);
    return std::make_pair(
        finish_batch(queued, *board, shape.layout, device_seeds, num_hops, csr.num_nodes,
                     csr.num_edges, /*edge_index_rows=*/graphs != nullptr),
        queued.waited);
  };
  if (graphs == nullptr || !graphs->captures() || graph_key.empty() ||
      queued_edges_bound(shape.batch_size, shape.bound_fanouts(), replace, shape.key_space(),
                         csr.num_edges) > kMaxCapturedEdges) {
    return run_once().first;
  }

  const std::shared_ptr<CapturedBatch> batch = graphs->batches().find(graph_key);
  if (!batch) return run_once().first;  // a new shape, with captures churning
  std::unique_lock<std::mutex> mine(batch->busy, std::try_to_lock);
  if (!mine.owns_lock() || !batch->capturable) return run_once().first;  // in use elsewhere
  if (!batch->captured && !batch->ran) {
    auto [outputs, waited] = run_once();
    batch->ran = true;
    batch->capturable = !waited;
    return outputs;
  }
  if (!batch->captured) {
    // Captured on the GPU's capture stream (a graph cannot be captured on the default one;
    // see CaptureStream), which first waits for the caller's; other threads' CUDA calls go
    // on meanwhile (thread-local mode).
    batch->board = board_for(shape.layout, device);
    batch->seeds = shape.layout.host_seeds > 0
                       ? board_seeds(*batch->board, shape.layout, seeds, device)
                       : at::empty_like(seeds);
    BatchShape<index_t> captured_shape = shape;  // reads the capture's own seed times
    if (seed_time.defined()) {
      batch->seed_time = at::empty_like(seed_time);
      captured_shape.rules.seed_time = batch->seed_time.const_data_ptr<int64_t>();
    }
    prepare_board(*batch->board, shape.layout, shape.batch_size, key, seeds);
    CaptureStream& capture_stream = CaptureStream::of(device.index());
    const std::lock_guard<std::mutex> one_capture(capture_stream.turn());
    const at::cuda::CUDAStream side = capture_stream.stream();
    at::cuda::CUDAEvent caller_ready;
    caller_ready.record(stream);
    caller_ready.block(side);
    try {
      const c10::cuda::CUDAStreamGuard on_side(side);
      batch->graph.capture(device.index(), side.stream(),
                           [&] {
        queue_batch(captured_shape, batch->seeds, *batch->board, batch->queued);
      });
      batch->captured = true;
    } catch (...) {
      batch->capturable = false;  // runs as usual from now on
      batch->queued = QueuedBatch{};
      return run_once().first;
    }
  }
  prepare_board(*batch->board, shape.layout, shape.batch_size, key, seeds);
  batch->outputs_copied.block(stream);  // the last call's copies out of the buffers are done
  if (shape.layout.host_seeds == 0) {
    C10_CUDA_CHECK(cudaMemcpyAsync(batch->seeds.mutable_data_ptr(), seeds.const_data_ptr(),
                                   seeds.nbytes(), cudaMemcpyDeviceToDevice, stream.stream()));
  }
  if (seed_time.defined()) batch->seed_time.copy_(seed_time, /*non_blocking=*/true);
  batch->graph.replay(stream.stream());
  ++batch->replays;
  auto outputs = finish_batch(batch->queued, *batch->board, shape.layout, batch->seeds, num_hops,
                              csr.num_nodes, csr.num_edges, /*edge_index_rows=*/true);
  batch->outputs_copied.record(stream);
  return outputs;
}

}  // namespace quiver::cuda
