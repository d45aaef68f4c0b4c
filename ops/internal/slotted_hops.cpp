// ops/internal/slotted_hops.h: the owner's slots (the sampling kernels of row_sampling.h on
// a GPU part, the sampling op on a CPU one) and the GPU numbering of a batch's hops
// (slotted_hops.h's unpacking, then reindex.h's four launches, as the single-host loop).
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
#include "ops/cuda/reindex.h"
#include "ops/cuda/row_sampling.h"
#include "ops/cuda/slotted_hops.h"
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

// Board words: [0] scratch, node_total (num_hops + 2 words, as hop_loop.h's BoardLayout:
// hop h's frontier is [node_total[h], node_total[h + 1])), each hop's edges, and each hop's
// edges answered by other hosts.
struct SlottedBatch::State {
  State(const at::Tensor& seeds, int64_t num_nodes, at::IntArrayRef fanouts)
      : device(seeds.device()),
        num_nodes(num_nodes),
        num_hops(static_cast<int64_t>(fanouts.size())),
        edges_at(total_at + num_hops + 2),
        remote_at(edges_at + num_hops),
        board(seeds.device(), remote_at + num_hops),
        seeds(seeds),
        fanouts(fanouts.vec()) {}
  at::Device device;
  int64_t num_nodes;
  int64_t num_hops;
  int64_t total_at = 1;
  int64_t edges_at;
  int64_t remote_at;
  cuda::HopBoard board;
  at::Tensor seeds;
  std::vector<int64_t> fanouts;  // what the table was sized for
  at::Tensor table_space;
  cuda::NodeTable table{nullptr, 0};
  std::vector<at::Tensor> new_nodes, rows, cols, eids;
  int64_t hops_added = 0;
};

SlottedBatch::SlottedBatch(const at::Tensor& seeds, int64_t num_nodes, at::IntArrayRef fanouts)
    : state_(std::make_unique<State>(seeds, num_nodes, fanouts)) {
  State& s = *state_;
  TORCH_CHECK(seeds.is_cuda() && seeds.scalar_type() == at::kLong && seeds.dim() == 1,
              "SlottedBatch: seeds must be 1-D int64 on a GPU, got ", seeds.scalar_type(), " ",
              seeds.sizes(), " on ", seeds.device());
  for (const int64_t fanout : fanouts) {
    TORCH_CHECK(fanout >= 0, "SlottedBatch: every fanout must be >= 0, got ", fanout);
  }
  const c10::cuda::CUDAGuard guard(s.device);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const int64_t batch_size = seeds.numel();
  s.board.clear_host();
  s.board.host_words()[s.total_at + 1] = batch_size;
  s.board.upload(stream);
  // Every node the batch can reach, so the table never fills past half.
  const int64_t nodes_bound = node_bound(batch_size, fanouts, num_nodes);
  check_batch_nodes(nodes_bound);
  const int64_t capacity = node_table_capacity(nodes_bound);
  s.table_space = cuda::workspace(capacity * sizeof(NodeSlot), s.device);
  s.table = {static_cast<NodeSlot*>(s.table_space.mutable_data_ptr()), capacity};
  C10_CUDA_CHECK(cuda::clear_node_table(s.table, stream));
  at::Tensor entries = at::empty({batch_size}, seeds.options());
  C10_CUDA_CHECK(cuda::insert_nodes(s.table, seeds.const_data_ptr<int64_t>(), batch_size,
                                    entries.mutable_data_ptr<int64_t>(), stream));
}

SlottedBatch::~SlottedBatch() = default;

at::Tensor SlottedBatch::frontier() {
  State& s = *state_;
  if (s.hops_added == 0) return s.seeds;
  const c10::cuda::CUDAGuard guard(s.device);
  const int64_t* words = s.board.read(at::cuda::getCurrentCUDAStream().stream(), s.num_nodes,
                                      s.num_nodes);
  const int64_t h = s.hops_added;  // the frontier of hop h: what hop h - 1 added
  return s.new_nodes.back().narrow(0, 0, words[s.total_at + h + 1] - words[s.total_at + h]);
}

void SlottedBatch::add_hop(const at::Tensor& slots, const at::Tensor& order, int64_t own_begin,
                           int64_t own_end) {
  State& s = *state_;
  TORCH_CHECK(s.hops_added < s.num_hops, "SlottedBatch: more hops than its ", s.num_hops,
              " fanouts");
  TORCH_CHECK(slots.device() == s.device && slots.dim() == 3 && slots.size(1) == 2 &&
                  slots.is_contiguous() && slots.size(0) == order.numel(),
              "SlottedBatch: slots must be [", order.numel(), ", 2, fanout] contiguous on ",
              s.device, ", got ", slots.sizes(), " on ", slots.device());
  const c10::cuda::CUDAGuard guard(s.device);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const int64_t h = s.hops_added;
  const int64_t frontier = slots.size(0), fanout = slots.size(2);
  TORCH_CHECK(fanout == s.fanouts[h], "SlottedBatch: hop ", h, "'s slots hold ", fanout,
              " pairs but its fanout is ", s.fanouts[h]);
  const int64_t max_edges = saturating_mul(frontier, fanout);
  // Reindexing keys an edge's first mention in 32 bits (reindex.h).
  if (max_edges > kMaxHopEdges) {
    errors::batch_too_large(errors::hop_edges_name(h), max_edges, kMaxHopEdges);
  }
  const auto options = s.seeds.options();
  int64_t* words = s.board.words();
  int64_t* node_total = words + s.total_at;

  const cuda::FrontierSlots answers{slots.const_data_ptr<int64_t>(), order.const_data_ptr<int64_t>(),
                                    frontier, fanout, own_begin, own_end};
  at::Tensor counts = at::empty({frontier}, options);
  C10_CUDA_CHECK(cuda::count_slot_edges(answers, counts.mutable_data_ptr<int64_t>(),
                                        words + s.remote_at + h, stream));
  at::Tensor offsets = at::empty({frontier + 1}, options);
  const size_t scan_bytes = cuda::offsets_workspace_bytes(frontier);
  at::Tensor scan_space = cuda::workspace(scan_bytes, s.device);
  C10_CUDA_CHECK(cuda::offsets_from_counts(counts.const_data_ptr<int64_t>(), frontier,
                                           offsets.mutable_data_ptr<int64_t>(),
                                           scan_space.mutable_data_ptr(), scan_bytes, stream));
  at::Tensor rows = at::empty({max_edges}, options);
  at::Tensor cols = at::empty({max_edges}, options);
  at::Tensor eids = at::empty({max_edges}, options);
  C10_CUDA_CHECK(cuda::unpack_slots(answers, counts.const_data_ptr<int64_t>(),
                                    offsets.const_data_ptr<int64_t>(), node_total + h,
                                    rows.mutable_data_ptr<int64_t>(),
                                    eids.mutable_data_ptr<int64_t>(),
                                    cols.mutable_data_ptr<int64_t>(), stream));
  // Then as every hop of the single-host loop (hop_loop.h): number the new ids in order of
  // first appearance, and relabel the rows.
  const cuda::HopEdges edges{rows.mutable_data_ptr<int64_t>(), max_edges,
                             offsets.const_data_ptr<int64_t>() + frontier};
  C10_CUDA_CHECK(cuda::insert_neighbors(s.table, edges, s.num_nodes, s.board.status(), stream));
  at::Tensor new_pos = at::empty({max_edges + 1}, options);
  const size_t new_scan_bytes = cuda::scan_new_nodes_workspace_bytes(max_edges);
  at::Tensor new_scan_space = cuda::workspace(new_scan_bytes, s.device);
  C10_CUDA_CHECK(cuda::scan_new_nodes(s.table, edges, new_pos.mutable_data_ptr<int64_t>(),
                                      new_scan_space.mutable_data_ptr(), new_scan_bytes, stream));
  at::Tensor new_nodes = at::empty({std::min(max_edges, s.num_nodes)}, options);
  C10_CUDA_CHECK(cuda::assign_new_nodes(s.table, edges, new_pos.const_data_ptr<int64_t>(),
                                        node_total + h + 1, new_nodes.mutable_data_ptr<int64_t>(),
                                        words + s.edges_at + h, stream));
  C10_CUDA_CHECK(cuda::relabel_rows(s.table, edges, stream));
  s.rows.push_back(rows);
  s.cols.push_back(cols);
  s.eids.push_back(eids);
  s.new_nodes.push_back(new_nodes);
  ++s.hops_added;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
           std::vector<int64_t>>
SlottedBatch::finish() {
  State& s = *state_;
  const c10::cuda::CUDAGuard guard(s.device);
  const int64_t* words = s.board.read(at::cuda::getCurrentCUDAStream().stream(), s.num_nodes,
                                      s.num_nodes);
  const int64_t hops = s.hops_added;
  at::Tensor nodes_per_hop = at::zeros({hops + 1}, at::kLong);
  at::Tensor edges_per_hop = at::zeros({hops}, at::kLong);
  nodes_per_hop.mutable_data_ptr<int64_t>()[0] = s.seeds.numel();
  std::vector<at::Tensor> node_parts{s.seeds}, row_parts, col_parts, eid_parts;
  std::vector<int64_t> remote_edges;
  for (int64_t h = 0; h < hops; ++h) {
    const int64_t edges = words[s.edges_at + h];
    const int64_t added = words[s.total_at + h + 2] - words[s.total_at + h + 1];
    row_parts.push_back(s.rows[h].narrow(0, 0, edges));
    col_parts.push_back(s.cols[h].narrow(0, 0, edges));
    eid_parts.push_back(s.eids[h].narrow(0, 0, edges));
    node_parts.push_back(s.new_nodes[h].narrow(0, 0, added));
    nodes_per_hop.mutable_data_ptr<int64_t>()[h + 1] = added;
    edges_per_hop.mutable_data_ptr<int64_t>()[h] = edges;
    remote_edges.push_back(words[s.remote_at + h]);
  }
  const auto join = [&](const std::vector<at::Tensor>& parts) {
    return parts.empty() ? at::empty({0}, s.seeds.options()) : at::cat(parts);
  };
  return {join(node_parts), join(row_parts), join(col_parts), join(eid_parts),
          nodes_per_hop,    edges_per_hop,   remote_edges};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_by_owner(const at::Tensor& frontier,
                                                              const at::Tensor& owner,
                                                              const at::Tensor& local_index,
                                                              int64_t num_hosts) {
  const at::Device device = frontier.device();
  TORCH_CHECK(frontier.is_cuda() && frontier.scalar_type() == at::kLong &&
                  owner.device() == device && local_index.device() == device &&
                  local_index.scalar_type() == at::kLong,
              "group_by_owner: frontier and local_index int64, and owner, on one GPU; got ",
              frontier.scalar_type(), " on ", frontier.device(), ", ", owner.scalar_type(),
              " on ", owner.device(), ", ", local_index.scalar_type(), " on ",
              local_index.device());
  const c10::cuda::CUDAGuard guard(device);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const int64_t n = frontier.numel();
  const auto options = frontier.options();
  at::Tensor order = at::empty({n}, options), requests = at::empty({n}, options);
  at::Tensor send_counts = at::empty({num_hosts}, options);
  const size_t bytes = cuda::group_by_owner_workspace_bytes(n, num_hosts);
  at::Tensor space = cuda::workspace(bytes, device);
  const auto group = [&](auto typed) {
    using owner_t = decltype(typed);
    const cuda::OwnerGrouping<owner_t> grouping{
        frontier.const_data_ptr<int64_t>(), n, owner.const_data_ptr<owner_t>(),
        local_index.const_data_ptr<int64_t>(), num_hosts, order.mutable_data_ptr<int64_t>(),
        requests.mutable_data_ptr<int64_t>(), send_counts.mutable_data_ptr<int64_t>()};
    C10_CUDA_CHECK(cuda::group_by_owner(grouping, space.mutable_data_ptr(), bytes, stream));
  };
  if (owner.scalar_type() == at::kShort) {
    group(int16_t{});
  } else {
    TORCH_CHECK(owner.scalar_type() == at::kInt, "group_by_owner: owner must be int16 or int32, got ",
                owner.scalar_type());
    group(int32_t{});
  }
  return {order, requests, send_counts};
}

at::Tensor sample_into_slots(const at::Tensor& indptr, const at::Tensor& indices,
                             const at::Tensor& edge_ids, const at::Tensor& rows,
                             int64_t fanout, bool replace,
                             const std::optional<at::Generator>& generator,
                             SlottedBatch* report) {
  TORCH_CHECK(fanout >= 0, "sample_into_slots: fanout must be >= 0, got ", fanout);
  if (!indptr.is_cuda()) {
    return cpu_slots(indptr, indices, edge_ids, rows, fanout, replace, generator);
  }
  const at::Device device = indptr.device();
  TORCH_CHECK(rows.device() == device && rows.scalar_type() == at::kLong,
              "sample_into_slots: rows must be int64 on ", device, ", got ", rows.scalar_type(),
              " on ", rows.device());
  const c10::cuda::CUDAGuard guard(device);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const int64_t num_rows = rows.numel();
  at::Tensor slots = at::full({num_rows, 2, fanout}, -1, rows.options());
  if (num_rows == 0 || fanout == 0) return slots;
  std::optional<cuda::HopBoard> own_board;
  if (report == nullptr) own_board.emplace(device, /*words=*/1);
  cuda::DeviceStatus* status =
      report != nullptr ? report->state().board.status() : own_board->status();
  AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "sample_into_slots", [&] {
    const auto csr = cuda::readable_csr<index_t>(indptr, indices, edge_ids, device);
    at::Tensor plan_space = at::empty({3, num_rows}, rows.options());
    int64_t* plan_p = plan_space.mutable_data_ptr<int64_t>();
    const cuda::RowPlan plan{rows.const_data_ptr<int64_t>(), nullptr, num_rows, plan_p,
                             plan_p + num_rows, plan_p + 2 * num_rows};
    cuda::HopRule rule{fanout, replace,
                       cuda::draw_philox_key(device, draws_per_row(fanout, replace, csr.num_edges),
                                             generator),
                       0};
    // The part was checked whole when its sampler was made: a row outside it is a peer's
    // bad request, reported (as a seed out of range) at the next read of the board.
    C10_CUDA_CHECK(cuda::plan_rows(csr, plan, rule, {/*nodes_are_seeds=*/true, /*csr_ends=*/false},
                                   status, stream));
    // Row r's slot starts at r * 2 * fanout: its neighbor ids there, its edge ids `fanout`
    // entries on.
    const at::Tensor offsets = at::arange(0, (num_rows + 1) * 2 * fanout, 2 * fanout, rows.options());
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

struct SlottedBatch::State {};

SlottedBatch::SlottedBatch(const at::Tensor&, int64_t, at::IntArrayRef) {
  TORCH_CHECK(false, "SlottedBatch numbers batches on a GPU: this build has no CUDA");
}
SlottedBatch::~SlottedBatch() = default;
at::Tensor SlottedBatch::frontier() { return {}; }
void SlottedBatch::add_hop(const at::Tensor&, const at::Tensor&, int64_t, int64_t) {}
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
           std::vector<int64_t>>
SlottedBatch::finish() {
  return {};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_by_owner(const at::Tensor&,
                                                              const at::Tensor&,
                                                              const at::Tensor&, int64_t) {
  TORCH_CHECK(false, "group_by_owner groups on a GPU: this build has no CUDA");
}

at::Tensor sample_into_slots(const at::Tensor& indptr, const at::Tensor& indices,
                             const at::Tensor& edge_ids, const at::Tensor& rows,
                             int64_t fanout, bool replace,
                             const std::optional<at::Generator>& generator, SlottedBatch*) {
  TORCH_CHECK(fanout >= 0, "sample_into_slots: fanout must be >= 0, got ", fanout);
  TORCH_CHECK(!indptr.is_cuda(), "sample_into_slots: a part on a GPU needs the CUDA build");
  return cpu_slots(indptr, indices, edge_ids, rows, fanout, replace, generator);
}

#endif

}  // namespace quiver::internal
