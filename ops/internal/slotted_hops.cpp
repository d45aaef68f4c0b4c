// ops/internal/slotted_hops.h: the owner's slots (the sampling kernels of row_sampling.h on
// a GPU part, the sampling op on a CPU one) and a batch's numbering on the GPU (reindex.h's
// four launches a hop, as the single-host loop).
#include "ops/internal/slotted_hops.h"

#include <ATen/ATen.h>
#include <quiver/ops.h>

#include "ops/checks.h"
#include "ops/errors.h"
#include "ops/sampling_rules.h"

#ifdef QUIVER_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "ops/cuda/device_access.h"
#include "ops/cuda/hop_board.h"
#include "ops/cuda/hop_loop.h"
#include "ops/cuda/reindex.h"
#include "ops/cuda/row_sampling.h"
#endif

namespace quiver::internal {

namespace {

// A CPU part's rows through the op, then each row's sample moved into its slot.
at::Tensor cpu_slots(const at::Tensor& indptr, const at::Tensor& indices,
                     const at::Tensor& edge_ids, const at::Tensor& rows, int64_t fanout,
                     bool replace, const std::optional<at::Generator>& generator) {
  const int64_t num_rows = rows.numel();
  at::Tensor slots = at::full({num_rows, 2, fanout}, -1, rows.options().dtype(at::kLong));
  if (num_rows == 0 || fanout == 0) return slots;
  auto [counts, neighbors, sampled_eids] =
      quiver::sample_neighbors(indptr, indices, rows, fanout, replace, edge_ids, generator);
  const int64_t total = neighbors.numel();
  const auto long_opts = counts.options();
  const at::Tensor row_of =
      at::repeat_interleave(at::arange(num_rows, long_opts), counts, /*dim=*/0, total);
  const at::Tensor row_start = counts.cumsum(0) - counts;
  const at::Tensor in_row = at::arange(total, long_opts) - row_start.index_select(0, row_of);
  const at::Tensor at_neighbor = row_of * (2 * fanout) + in_row;
  at::Tensor flat = slots.view({-1});
  flat.index_put_({at_neighbor}, neighbors.to(at::kLong));
  flat.index_put_({at_neighbor + fanout}, sampled_eids);
  return slots;
}

}  // namespace

std::pair<at::Tensor, at::Tensor> slots_as_samples(const at::Tensor& slots) {
  const at::Tensor neighbors = slots.select(1, 0);
  const at::Tensor sampled = neighbors.ge(0);
  return {sampled.sum(1), at::stack({neighbors.masked_select(sampled),
                                     slots.select(1, 1).masked_select(sampled)},
                                    1)};
}

#ifdef QUIVER_WITH_CUDA

// The board is the single-host loop's (hop_loop.h: BoardLayout, the node totals and each
// hop's edges; its key words unused), then the caller's counters; the hops' buffers are a
// QueuedBatch, cut to size by the loop's finish_batch.
struct HopNumbering::State {
  State(const at::Tensor& seeds, int64_t num_nodes, at::IntArrayRef fanouts, int64_t counters)
      : device(seeds.device()),
        num_nodes(num_nodes),
        num_hops(static_cast<int64_t>(fanouts.size())),
        layout(num_hops),
        num_counters(counters),
        board(seeds.device(), layout.words + counters),
        seeds(seeds),
        fanouts(fanouts.vec()) {}
  at::Device device;
  int64_t num_nodes;
  int64_t num_hops;
  cuda::BoardLayout layout;
  int64_t num_counters;  // at layout.words
  cuda::HopBoard board;
  at::Tensor seeds;
  std::vector<int64_t> fanouts;  // a hop's most edges a node: what the table was sized for
  at::Tensor table_space;
  cuda::NodeTable table{nullptr, 0};
  at::Tensor seed_entries;  // insert_nodes' scratch
  cuda::QueuedBatch queued;  // each hop's new nodes, rows, cols and edge ids, bound-sized
  at::Tensor open_offsets;  // the open hop's, until close_hop()
  int64_t hops_added = 0;
};

HopNumbering::HopNumbering(const at::Tensor& seeds, int64_t num_nodes, at::IntArrayRef fanouts,
                           int64_t counters)
    : state_(std::make_unique<State>(seeds, num_nodes, fanouts, counters)) {
  State& s = *state_;
  TORCH_CHECK(seeds.is_cuda() && seeds.scalar_type() == at::kLong && seeds.dim() == 1,
              "HopNumbering: seeds must be 1-D int64 on a GPU, got ",
              errors::dtype_name(seeds.scalar_type()), " ", seeds.sizes(), " on ", seeds.device());
  for (const int64_t fanout : fanouts) {
    TORCH_CHECK(fanout >= 0, "HopNumbering: every fanout must be >= 0, got ", fanout);
  }
  const c10::cuda::CUDAGuard guard(s.device);
  const int64_t batch_size = seeds.numel();
  // Every node the batch can reach, so the table never fills past half.
  const int64_t nodes_bound = node_bound(batch_size, fanouts, num_nodes);
  check_batch_nodes(nodes_bound);
  const int64_t capacity = node_table_capacity(nodes_bound);
  s.table_space = cuda::workspace(capacity * sizeof(NodeSlot), s.device);
  s.table = {static_cast<NodeSlot*>(s.table_space.mutable_data_ptr()), capacity};
  s.seed_entries = at::empty({batch_size}, seeds.options());
  prepare_replay();
}

void HopNumbering::prepare_replay() {
  State& s = *state_;
  s.board.clear_host();
  s.board.host_words()[s.layout.total_at + 1] = s.seeds.numel();
}

void HopNumbering::start() {
  State& s = *state_;
  const c10::cuda::CUDAGuard guard(s.device);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  s.board.upload(stream);
  C10_CUDA_CHECK(cuda::clear_node_table(s.table, stream));
  C10_CUDA_CHECK(cuda::insert_nodes(s.table, s.seeds.const_data_ptr<int64_t>(), s.seeds.numel(),
                                    s.seed_entries.mutable_data_ptr<int64_t>(), stream));
}

HopNumbering::~HopNumbering() = default;

at::Tensor HopNumbering::frontier() {
  State& s = *state_;
  if (s.hops_added == 0) return s.seeds;
  const c10::cuda::CUDAGuard guard(s.device);
  const int64_t* words = s.board.read(at::cuda::getCurrentCUDAStream().stream(), s.num_nodes,
                                      s.num_nodes);
  const int64_t h = s.hops_added;  // the frontier of hop h: what hop h - 1 added
  const int64_t* node_total = words + s.layout.total_at;
  return s.queued.new_node_parts.back().narrow(0, 0, node_total[h + 1] - node_total[h]);
}

std::pair<at::Tensor, const int64_t*> HopNumbering::frontier_bound() {
  State& s = *state_;
  const int64_t* live = s.board.words() + s.layout.total_at + s.hops_added;
  return {s.hops_added == 0 ? s.seeds : s.queued.new_node_parts.back(), live};
}

int64_t* HopNumbering::counter(int64_t i) {
  State& s = *state_;
  TORCH_CHECK(i >= 0 && i < s.num_counters, "HopNumbering: counter ", i, " of ", s.num_counters);
  return s.board.words() + s.layout.words + i;
}

int64_t HopNumbering::hops_numbered() const { return state().hops_added; }

int64_t HopNumbering::fanout(int64_t hop) const {
  const State& s = state();
  TORCH_CHECK(hop >= 0 && hop < s.num_hops, "HopNumbering: hop ", hop, " of ", s.num_hops);
  return s.fanouts[hop];
}

HopNumbering::HopEdges HopNumbering::open_hop(const at::Tensor& counts, int64_t answered_rows) {
  State& s = *state_;
  TORCH_CHECK(s.hops_added < s.num_hops && !s.open_offsets.defined(),
              "HopNumbering: a hop opened past its ", s.num_hops, " fanouts, or twice");
  TORCH_CHECK(counts.device() == s.device && counts.scalar_type() == at::kLong &&
                  counts.dim() == 1 && counts.is_contiguous(),
              "HopNumbering: counts must be 1-D contiguous int64 on ", s.device, ", got ",
              errors::dtype_name(counts.scalar_type()), " ", counts.sizes(), " on ",
              counts.device());
  const c10::cuda::CUDAGuard guard(s.device);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const int64_t h = s.hops_added, frontier = counts.numel();
  const int64_t rows_with_edges = answered_rows >= 0 ? std::min(frontier, answered_rows) : frontier;
  const int64_t max_edges = saturating_mul(rows_with_edges, s.fanouts[h]);
  // Reindexing keys an edge's first mention in 32 bits (reindex.h).
  if (max_edges > kMaxHopEdges) {
    errors::batch_too_large(errors::hop_edges_name(h), max_edges, kMaxHopEdges);
  }
  const auto options = s.seeds.options();
  at::Tensor offsets = at::empty({frontier + 1}, options);
  const size_t scan_bytes = cuda::offsets_workspace_bytes(frontier);
  at::Tensor scan_space = cuda::workspace(scan_bytes, s.device);
  C10_CUDA_CHECK(cuda::offsets_from_counts(counts.const_data_ptr<int64_t>(), frontier,
                                           offsets.mutable_data_ptr<int64_t>(),
                                           scan_space.mutable_data_ptr(), scan_bytes, stream));
  s.open_offsets = offsets;
  cuda::QueuedBatch& q = s.queued;
  q.row_parts.push_back(at::empty({max_edges}, options));
  q.col_parts.push_back(at::empty({max_edges}, options));
  q.eid_parts.push_back(at::empty({max_edges}, options));
  return {offsets, q.row_parts.back(), q.col_parts.back(), q.eid_parts.back(),
          s.board.words() + s.layout.total_at + h};
}

void HopNumbering::close_hop() {
  State& s = *state_;
  TORCH_CHECK(s.open_offsets.defined(), "HopNumbering: close_hop() without an open hop");
  const c10::cuda::CUDAGuard guard(s.device);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const int64_t h = s.hops_added;
  const int64_t frontier = s.open_offsets.numel() - 1;
  const at::Tensor& rows = s.queued.row_parts.back();
  const int64_t max_edges = rows.numel();
  const auto options = s.seeds.options();
  int64_t* words = s.board.words();
  // As every hop of the single-host loop (hop_loop.h): number the new ids in order of first
  // appearance, and relabel the rows.
  const cuda::HopEdges edges{rows.mutable_data_ptr<int64_t>(), max_edges,
                             s.open_offsets.const_data_ptr<int64_t>() + frontier};
  C10_CUDA_CHECK(cuda::insert_neighbors(s.table, edges, s.num_nodes, s.board.status(), stream));
  at::Tensor new_nodes = at::empty({std::min(max_edges, s.num_nodes)}, options);
  const size_t numbering_bytes = cuda::number_new_nodes_workspace_bytes(max_edges);
  at::Tensor numbering_space = cuda::workspace(numbering_bytes, s.device);
  C10_CUDA_CHECK(cuda::number_new_nodes(s.table, edges, words + s.layout.total_at + h + 1,
                                        new_nodes.mutable_data_ptr<int64_t>(),
                                        words + s.layout.edges_at + h,
                                        numbering_space.mutable_data_ptr(), numbering_bytes,
                                        stream));
  s.queued.new_node_parts.push_back(new_nodes);
  s.open_offsets = at::Tensor();
  ++s.hops_added;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
           std::vector<int64_t>>
HopNumbering::finish() {
  State& s = *state_;
  TORCH_CHECK(!s.open_offsets.defined(), "HopNumbering: finish() with a hop still open");
  const c10::cuda::CUDAGuard guard(s.device);
  auto [node_ids, rows, cols, edge_ids, nodes_per_hop, edges_per_hop] = cuda::finish_batch(
      s.queued, s.board, s.layout, s.seeds, s.hops_added, s.num_nodes, s.num_nodes);
  const int64_t* counters = s.board.host_words() + s.layout.words;  // read with the sizes
  return {node_ids,      rows,          cols,
          edge_ids,      nodes_per_hop, edges_per_hop,
          std::vector<int64_t>(counters, counters + s.num_counters)};
}

std::pair<int64_t, int64_t> draw_slots_key(const at::Device& device, int64_t fanout,
                                           bool replace, int64_t num_edges,
                                           const std::optional<at::Generator>& generator) {
  const cuda::PhiloxKey key =
      cuda::draw_philox_key(device, draws_per_row(fanout, replace, num_edges), generator);
  return {static_cast<int64_t>(key.seed), static_cast<int64_t>(key.offset)};
}

at::Tensor sample_into_slots(const at::Tensor& indptr, const at::Tensor& indices,
                             const at::Tensor& edge_ids, const at::Tensor& rows,
                             int64_t fanout, bool replace,
                             const std::optional<at::Generator>& generator,
                             HopNumbering* report, const SlotPlacement& placement) {
  TORCH_CHECK(fanout >= 0, "sample_into_slots: fanout must be >= 0, got ", fanout);
  const bool placed = placement.live != nullptr || placement.slot_of.defined();
  TORCH_CHECK(!placed || indptr.is_cuda(),
              "sample_into_slots: a SlotPlacement needs a part on a GPU");
  TORCH_CHECK(!placement.slot_of.defined() ||
                  (placement.slot_of.device() == indptr.device() &&
                   placement.slot_of.scalar_type() == at::kLong &&
                   placement.slot_of.is_contiguous() && placement.slot_of.numel() == rows.numel()),
              "sample_into_slots: slot_of must be contiguous int64 on ", indptr.device(), " with ",
              rows.numel(), " entries, got ", errors::dtype_name(placement.slot_of.scalar_type()),
              " of ", placement.slot_of.numel(), " on ", placement.slot_of.device());
  if (!indptr.is_cuda()) {
    return cpu_slots(indptr, indices, edge_ids, rows, fanout, replace, generator);
  }
  const at::Device device = indptr.device();
  TORCH_CHECK(rows.device() == device && rows.scalar_type() == at::kLong,
              "sample_into_slots: rows must be int64 on ", device, ", got ",
              errors::dtype_name(rows.scalar_type()), " on ", rows.device());
  const c10::cuda::CUDAGuard guard(device);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const int64_t num_rows = rows.numel();
  at::Tensor slots = at::full({num_rows, 2, fanout}, -1, rows.options());
  if (fanout == 0) return slots;
  // Drawn even for no rows: an owner asked for nothing at an exact hop still moves the
  // generator as in slots sized by bounds (whose owners cannot know), so both give one batch.
  cuda::PhiloxKey key{0, 0};
  if (placement.device_key == nullptr) {
    const auto [seed, offset] = draw_slots_key(device, fanout, replace, indices.numel(), generator);
    key = {static_cast<uint64_t>(seed), static_cast<uint64_t>(offset)};
  }
  if (num_rows == 0) return slots;
  std::optional<cuda::HopBoard> own_board;
  if (report == nullptr) own_board.emplace(device, /*words=*/1);
  cuda::DeviceStatus* status =
      report != nullptr ? report->state().board.status() : own_board->status();
  AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "sample_into_slots", [&] {
    const auto csr = cuda::readable_csr<index_t>(indptr, indices, edge_ids, device);
    at::Tensor plan_space = at::empty({3, num_rows}, rows.options());
    int64_t* plan_p = plan_space.mutable_data_ptr<int64_t>();
    const cuda::RowPlan plan{rows.const_data_ptr<int64_t>(), placement.live, num_rows, plan_p,
                             plan_p + num_rows, plan_p + 2 * num_rows};
    cuda::HopRule rule{fanout, replace, key, 0, placement.device_key};
    // The part was checked whole when its sampler was made: a row outside it is a peer's
    // bad request, reported (as a seed out of range) at the next read of the board.
    C10_CUDA_CHECK(cuda::plan_rows(csr, plan, rule, {/*nodes_are_seeds=*/true, /*csr_ends=*/false},
                                   status, stream));
    // Row r's slot starts at r * 2 * fanout (placed: slot_of[r] * 2 * fanout): its neighbor
    // ids there, its edge ids `fanout` entries on.
    const at::Tensor offsets =
        placement.slot_of.defined()
            ? placement.slot_of * (2 * fanout)
            : at::arange(0, (num_rows + 1) * 2 * fanout, 2 * fanout, rows.options());
    at::Tensor pick_sets = cuda::pick_sets(fanout, replace, num_rows * 2 * fanout, device, stream);
    int64_t* slots_p = slots.mutable_data_ptr<int64_t>();
    const cuda::HopOutput out{offsets.const_data_ptr<int64_t>(),
                              slots_p,
                              slots_p + fanout,
                              nullptr,
                              nullptr,
                              pick_sets.defined() ? pick_sets.mutable_data_ptr<int64_t>() : nullptr};
    C10_CUDA_CHECK(cuda::sample_rows(csr, plan, rule, out, stream));
  });
  if (own_board) own_board->read(stream, indptr.numel() - 1, indices.numel());
  return slots;
}

#else  // a CPU build: CPU parts only

struct HopNumbering::State {};

HopNumbering::HopNumbering(const at::Tensor&, int64_t, at::IntArrayRef, int64_t) {
  TORCH_CHECK(false, "HopNumbering numbers batches on a GPU: this build has no CUDA");
}
HopNumbering::~HopNumbering() = default;
void HopNumbering::start() {}
void HopNumbering::prepare_replay() {}
at::Tensor HopNumbering::frontier() { return {}; }
std::pair<at::Tensor, const int64_t*> HopNumbering::frontier_bound() { return {}; }
HopNumbering::HopEdges HopNumbering::open_hop(const at::Tensor&, int64_t) { return {}; }
void HopNumbering::close_hop() {}
int64_t* HopNumbering::counter(int64_t) { return nullptr; }
int64_t HopNumbering::hops_numbered() const { return 0; }
int64_t HopNumbering::fanout(int64_t) const { return 0; }
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
           std::vector<int64_t>>
HopNumbering::finish() {
  return {};
}

std::pair<int64_t, int64_t> draw_slots_key(const at::Device&, int64_t, bool, int64_t,
                                           const std::optional<at::Generator>&) {
  TORCH_CHECK(false, "draw_slots_key draws for a GPU: this build has no CUDA");
}

at::Tensor sample_into_slots(const at::Tensor& indptr, const at::Tensor& indices,
                             const at::Tensor& edge_ids, const at::Tensor& rows,
                             int64_t fanout, bool replace,
                             const std::optional<at::Generator>& generator, HopNumbering*,
                             const SlotPlacement& placement) {
  TORCH_CHECK(fanout >= 0, "sample_into_slots: fanout must be >= 0, got ", fanout);
  TORCH_CHECK(placement.live == nullptr && !placement.slot_of.defined(),
              "sample_into_slots: a SlotPlacement needs a part on a GPU");
  TORCH_CHECK(!indptr.is_cuda(), "sample_into_slots: a part on a GPU needs the CUDA build");
  return cpu_slots(indptr, indices, edge_ids, rows, fanout, replace, generator);
}

#endif

}  // namespace quiver::internal
