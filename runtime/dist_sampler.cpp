#include <quiver/dist_sampler.h>

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <quiver/ops.h>

#include <algorithm>
#include <array>
#include <functional>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <thread>

#include "ops/checks.h"
#include "ops/errors.h"
#include "ops/internal/slotted_hops.h"
#include "ops/sampling_rules.h"
#include "runtime/collective_channel.h"
#include "runtime/error_message.h"
#include "runtime/host_agreement.h"
#include "runtime/phase_clock.h"
#include "runtime/slotted_batch.h"
#ifdef QUIVER_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include "runtime/nccl_direct.h"
#endif

namespace quiver::runtime {

namespace {

// Slots sized by bounds pad every exchange to the hop's bound: a batch takes them while a
// hop's answers, over all hosts, fit in this many bytes (4 hosts, 1024 seeds, fanouts
// [15, 10, 5]: 49 MB at the last hop); beyond, the hosts exchange exact counts first.
constexpr int64_t kBoundedSlotBytes = int64_t{256} << 20;

// first_use_ of a node no edge of the current hop names.
constexpr int32_t kNoUse = std::numeric_limits<int32_t>::max();

std::vector<int64_t> as_vector(const at::Tensor& counts) {
  const at::Tensor c = counts.to(at::kCPU, at::kLong).contiguous();
  return std::vector<int64_t>(c.const_data_ptr<int64_t>(), c.const_data_ptr<int64_t>() + c.numel());
}

// Sums of `counts` over consecutive blocks of `splits` rows (per-peer totals).
std::vector<int64_t> block_sums(const at::Tensor& counts, const std::vector<int64_t>& splits) {
  std::vector<int64_t> sums;
  const int64_t* c = counts.const_data_ptr<int64_t>();
  int64_t begin = 0;
  for (int64_t n : splits) {
    sums.push_back(std::accumulate(c + begin, c + begin + n, int64_t{0}));
    begin += n;
  }
  return sums;
}

// One of this host's arrays (offsets, neighbor ids, edge ids) as the rows of one element a
// read transport serves, in `dtype` (the exchange's, the same on every host).
class ArrayRows final : public LocalRows {
 public:
  ArrayRows(const at::Tensor& array, at::ScalarType dtype) : array_(array), dtype_(dtype) {}
  int64_t num_rows() const override { return array_.numel(); }
  at::Tensor empty_rows() const override { return at::empty({0, 1}, at::dtype(dtype_)); }
  at::Tensor read(const at::Tensor& local_ids, const at::Device& device) override {
    return array_.view({-1, 1}).index_select(0, local_ids.to(array_.device())).to(device, dtype_);
  }

 private:
  const at::Tensor& array_;
  at::ScalarType dtype_;
};

}  // namespace

DistSampler::DistSampler(const c10::intrusive_ptr<c10d::ProcessGroup>& group, at::Tensor indptr,
                         at::Tensor indices, at::Tensor edge_ids, at::Tensor owner,
                         at::Tensor local_index, std::vector<int64_t> fanouts, bool replace,
                         double timeout_s, std::vector<c10::intrusive_ptr<Transport>> reads,
                         std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> lanes)
    : indptr_(std::move(indptr)),
      indices_(std::move(indices)),
      edge_ids_(std::move(edge_ids)),
      owner_(std::move(owner)),
      local_index_(std::move(local_index)),
      fanouts_(std::move(fanouts)),
      replace_(replace),
      reads_(std::move(reads)) {
  TORCH_CHECK_VALUE(group, "DistSampler needs a process group");
  // Finite, in (0, a year]: a timeout under a millisecond is one (c10d reads 0 as none).
  const std::chrono::milliseconds timeout = checked_timeout(timeout_s, "DistSampler: timeout_s");
  // The sampling ops' bounds (with replacement, a hop's edge limit), by name.
  check_fanouts(fanouts_, replace_, "DistSampler: fanouts");
  host_ = group->getRank();
  num_hosts_ = group->getSize();
  if (group->getBackendName() == "nccl") {  // NCCL moves GPU tensors only
    exchange_device_ = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getDevice();
  }
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor&>{"owner", owner_},
                                {"local_index", local_index_}}) {
    TORCH_CHECK_VALUE(t.is_cpu() && t.dim() == 1, "DistSampler: ", name,
                      " must be a 1-D CPU tensor, got ", t.sizes(), " on ", t.device());
  }
  TORCH_CHECK_VALUE(indptr_.dim() == 1 && (indptr_.is_cpu() || indptr_.is_cuda()),
                    "DistSampler: indptr must be a 1-D tensor on the CPU or a GPU, got ",
                    indptr_.sizes(), " on ", indptr_.device());
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor&>{"indices", indices_},
                                {"edge_ids", edge_ids_}}) {
    // GPU mode: the whole part on indptr's GPU; UVA mode: the lists in pinned host memory.
    const bool uva = indptr_.is_cuda() && t.is_cpu() && t.is_pinned();
    TORCH_CHECK_VALUE(t.dim() == 1 && (t.device() == indptr_.device() || uva), "DistSampler: ",
                      name, " must be a 1-D tensor on indptr's device (", indptr_.device(),
                      ") or, with indptr on a GPU, in pinned host memory; got ", t.sizes(),
                      " on ", t.device(), t.is_cpu() ? " (not pinned)" : "");
  }
  TORCH_CHECK_TYPE(owner_.scalar_type() == at::kShort || owner_.scalar_type() == at::kInt,
                   "DistSampler: owner must be int16 or int32, got ",
                   errors::dtype_name(owner_.scalar_type()));
  TORCH_CHECK_TYPE(local_index_.scalar_type() == at::kLong,
                   "DistSampler: local_index must be int64, got ",
                   errors::dtype_name(local_index_.scalar_type()));
  TORCH_CHECK_VALUE(local_index_.numel() == owner_.numel(),
                    "DistSampler: local_index must hold one entry per node (", owner_.numel(),
                    "), got ", local_index_.numel());
  if (owner_.numel() > 0) {
    const int64_t low = owner_.min().item<int64_t>(), high = owner_.max().item<int64_t>();
    TORCH_CHECK_VALUE(low >= 0 && high < num_hosts_, "DistSampler: owner names hosts in [", low,
                      ", ", high, "] but the group has ", num_hosts_);
  }
  TORCH_CHECK_VALUE(reads_.empty() || reads_.size() == 3,
                    "DistSampler: reads are three transports (offsets, neighbors, edge ids), got ",
                    reads_.size());
  for (const auto& t : reads_) {
    TORCH_CHECK_VALUE(t && t->is_collective() == reads_[0]->is_collective() && t->host() == host_ &&
                          t->num_hosts() == num_hosts_,
                      "DistSampler: the read transports must be of one kind (one-sided RDMA, or "
                      "collectives) over the group's hosts, as host ", host_, " of ", num_hosts_);
  }
  if (owner_.numel() > 0) {
    // Each node's row in its owner's part, within that part: a row past it would be read
    // from whatever lies there, and reported as the caller's seed.
    const at::Tensor owners = owner_.to(at::kLong);
    const at::Tensor rows_of_owner = at::bincount(owners, {}, num_hosts_).index_select(0, owners);
    const at::Tensor bad = (local_index_ < 0) | (local_index_ >= rows_of_owner);
    if (bad.any().item<bool>()) {
      const int64_t v = bad.nonzero()[0][0].item<int64_t>();
      TORCH_CHECK_VALUE(false, "DistSampler: local_index[", v, "] = ",
                        local_index_[v].item<int64_t>(), " but host ", owners[v].item<int64_t>(),
                        " owns ", rows_of_owner[v].item<int64_t>(),
                        " nodes: the partition is corrupt");
    }
    // And no row of a part named twice: two nodes on one row would read one's neighbors
    // for the other, silently (ShardMap refuses the same of its rows).
    const at::Tensor counts = at::bincount(owners, {}, num_hosts_);
    const at::Tensor part_begin = counts.cumsum(0) - counts;
    const at::Tensor row = part_begin.index_select(0, owners) + local_index_;
    const at::Tensor named = at::bincount(row, {}, owner_.numel());
    if (named.gt(1).any().item<bool>()) {
      const int64_t twice = named.gt(1).nonzero()[0][0].item<int64_t>();
      const at::Tensor nodes = (row == twice).nonzero().view(-1);
      const int64_t a = nodes[0].item<int64_t>(), b = nodes[1].item<int64_t>();
      TORCH_CHECK_VALUE(false, "DistSampler: local_index[", a, "] and local_index[", b,
                        "] both name row ", local_index_[a].item<int64_t>(), " of host ",
                        owners[a].item<int64_t>(), "'s part: the partition is corrupt");
    }
  }
  const int64_t owned = (owner_ == host_).sum().item<int64_t>();
  TORCH_CHECK_VALUE(indptr_.numel() == owned + 1, "DistSampler: host ", host_, " owns ", owned,
                    " nodes by the owner map but its indptr describes ", indptr_.numel() - 1,
                    ": the partition and the group's ranks do not match");
  // The whole part once (the per-batch op checks only the rows it touches, and neighbor ids
  // here are global, indexing the reindexing table): a corrupt part is refused here.
  try {
    check_whole_csr(indptr_, indices_, edge_ids_, owner_.numel());
  } catch (c10::Error& error) {
    error.add_context("DistSampler: in host " + std::to_string(host_) +
                      "'s part (global neighbor ids): the partition is corrupt");
    throw;
  }
  channel_ = std::make_unique<CollectiveChannel>(
      group, std::move(lanes), timeout,
      "dist_sampler",
      "quiver DistSampler (host " + std::to_string(host_) + " of " + std::to_string(num_hosts_) +
          ")");
}

#ifdef QUIVER_WITH_CUDA
struct DistSampler::Direct {
  std::unique_ptr<NcclDirect> comm;
  cudaEvent_t done = nullptr;  // recorded after what the host waits for
  ~Direct() {
    if (done != nullptr) cudaEventDestroy(done);
  }
};
#else
struct DistSampler::Direct {};
#endif

DistSampler::~DistSampler() {
  // The captured batches first: their graphs hold NCCL calls of the communicator, whose
  // abort would wait for them.
  bounded_batches_.reset();
  direct_.reset();
}

DistSampler::Direct* DistSampler::direct_link() {
#ifdef QUIVER_WITH_CUDA
  if (!exchange_device_.is_cuda()) return nullptr;
  if (!direct_decided_) {
    // Decided once, at the same exchange on every host; after a failed set-up the hosts are
    // out of step, and the channel refuses every later batch.
    direct_decided_ = true;
    std::string why_not;
    std::unique_ptr<NcclDirect> comm;
    try {
      comm = NcclDirect::connect(*channel_->group().getStore(),
                                 "quiver/dist_sampler_nccl/" + std::to_string(channel_->serial()) + "/",
                                 static_cast<int>(host_), static_cast<int>(num_hosts_),
                                 exchange_device_.index(), channel_->timeout(), why_not);
    } catch (const std::exception& error) {
      channel_->fail("the NCCL communicator's set-up", error);
    }
    if (!comm && tracing_transport()) {
      std::fprintf(stderr, "quiver DistSampler: NCCL through c10d (%s)\n", why_not.c_str());
    }
    if (comm) {
      auto direct = std::make_unique<Direct>();
      try {
        C10_CUDA_CHECK(cudaEventCreateWithFlags(&direct->done, cudaEventDisableTiming));
      } catch (const std::exception& error) {
        channel_->fail("the NCCL communicator's set-up", error);
      }
      direct->comm = std::move(comm);
      // A failed or timed-out exchange aborts the communicator: the captured batches go
      // first (they are of no use once the hosts are out of step).
      direct->comm->set_before_abort([this] {
        if (bounded_batches_) bounded_batches_->drop_captures();
      });
      direct_ = std::move(direct);
    }
  }
  return direct_.get();
#else
  return nullptr;
#endif
}

c10::intrusive_ptr<c10d::Work> DistSampler::all_to_all(at::Tensor& into, at::Tensor& from,
                                                       const std::vector<int64_t>& into_splits,
                                                       const std::vector<int64_t>& from_splits,
                                                       const char* what, bool host_waits) {
#ifdef QUIVER_WITH_CUDA
  if (Direct* direct = direct_link()) {
    const auto bytes = [](const at::Tensor& t, const std::vector<int64_t>& splits) {
      const size_t row = t.dim() == 0 || t.size(0) == 0 ? 0 : t.nbytes() / t.size(0);
      std::vector<size_t> sizes;
      for (const int64_t rows : splits) sizes.push_back(static_cast<size_t>(rows) * row);
      return sizes;
    };
    try {
      direct->comm->exchange_varied(from.const_data_ptr(), bytes(from, from_splits),
                                    into.mutable_data_ptr(), bytes(into, into_splits),
                                    at::cuda::getCurrentCUDAStream(exchange_device_.index()));
    } catch (const std::exception& error) {
      channel_->fail(what, error);
    }
    if (host_waits) settle({}, what);
    return {};
  }
#endif
  auto work = channel_->post(into, from, into_splits, from_splits, what);
  if (host_waits) {
    channel_->await(work, what);
  } else {
    channel_->order_after(work, what);
  }
  return work;
}

void DistSampler::settle(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
  if (work) return channel_->await(work, what);
#ifdef QUIVER_WITH_CUDA
  if (direct_ != nullptr) {
    try {
      C10_CUDA_CHECK(cudaEventRecord(direct_->done,
                                     at::cuda::getCurrentCUDAStream(exchange_device_.index())));
      direct_->comm->wait(direct_->done, channel_->timeout());
    } catch (const std::exception& error) {
      channel_->fail(what, error);
    }
  }
#endif
}

DistSampler::HopSamples DistSampler::sample_rows(const at::Tensor& rows, int64_t fanout,
                                                const std::optional<at::Generator>& generator,
                                                const at::Device& to) {
  auto [counts, neighbors, edge_ids] = quiver::sample_neighbors(
      indptr_, indices_, rows.to(indptr_.device()), fanout, replace_, edge_ids_, generator);
  return {counts.to(to, at::kLong),
          at::stack({neighbors.to(at::kLong), edge_ids.to(at::kLong)}, 1).to(to)};
}

std::optional<at::Generator> DistSampler::part_generator(
    const std::optional<at::Generator>& generator) {
  if (!generator.has_value() || indptr_.is_cpu() || generator->device() == indptr_.device()) {
    return generator;
  }
  if (!part_generator_.has_value()) {
    part_generator_ = at::globalContext().defaultGenerator(indptr_.device()).clone();
  }
  at::Tensor seed = at::empty({1}, at::kLong);
  seed.random_(generator);
  {
    std::lock_guard<std::mutex> lock(part_generator_->mutex());
    part_generator_->set_current_seed(static_cast<uint64_t>(seed.item<int64_t>()));
  }
  return part_generator_;
}

DistSampler::HopSamples DistSampler::exchange_hop(
    const at::Tensor& requests, const std::vector<int64_t>& send_splits, int64_t fanout,
    const std::optional<at::Generator>& generator, const OwnSamples& sample_own) {
  const int64_t P = num_hosts_;
  // Every tensor an all-to-all moves lives on the exchange's device (a GPU for NCCL).
  const at::Device x = exchange_device_;
  const auto long_x = at::TensorOptions().dtype(at::kLong).device(x);
  PhaseClock clock("partitioned hop exchange");
  // 1. How many rows each host asks of each other host.
  at::Tensor recv_counts = at::empty({P}, long_x);
  at::Tensor send_counts_buffer = at::tensor(send_splits, at::kLong).to(x);
  channel_->exchange(recv_counts, send_counts_buffer, {}, {}, "request counts");
  const std::vector<int64_t> recv_splits = as_vector(recv_counts);
  const int64_t asked_of_me = std::accumulate(recv_splits.begin(), recv_splits.end(), int64_t{0});
  clock.lap("request_counts");

  // 2. The requests travel while this host samples its own frontier nodes.
  at::Tensor asked = at::empty({asked_of_me}, long_x);
  at::Tensor requests_x = requests.to(x);
  auto requests_sent = channel_->post(asked, requests_x, recv_splits, send_splits, "requests");
  const HopSamples own = sample_own(x);
  clock.lap("own");
  channel_->await(requests_sent, "requests");
  clock.lap("requests");

  // 3. Sample what the peers asked for (this host's own block is answered already).
  std::vector<at::Tensor> answer_counts(P), answer_rows(P);
  int64_t begin = 0;
  for (int64_t p = 0; p < P; ++p) {
    std::tie(answer_counts[p], answer_rows[p]) =
        p == host_ ? own
                   : sample_rows(asked.narrow(0, begin, recv_splits[p]), fanout, generator, x);
    begin += recv_splits[p];
  }
  at::Tensor reply_counts = at::cat(answer_counts);
  at::Tensor reply_rows = at::cat(answer_rows);
  std::vector<int64_t> reply_splits(P);
  for (int64_t p = 0; p < P; ++p) reply_splits[p] = answer_rows[p].size(0);
  clock.lap("answer_peers");

  // 4. Answers back: counts per asked row (the requests' splits reversed), then the
  // sampled (neighbor, edge id) pairs, whose per-host totals the counts give.
  at::Tensor got_counts = at::empty({requests.numel()}, long_x);
  channel_->exchange(got_counts, reply_counts, send_splits, recv_splits, "answer counts");
  const at::Tensor got_counts_here = got_counts.cpu();
  clock.lap("answer_counts");
  const std::vector<int64_t> got_splits = block_sums(got_counts_here, send_splits);
  const int64_t got_total = std::accumulate(got_splits.begin(), got_splits.end(), int64_t{0});
  at::Tensor got_rows = at::empty({got_total, 2}, long_x);
  if (channel_->lanes().empty()) {
    channel_->exchange(got_rows, reply_rows, got_splits, reply_splits, "answers");
  } else {  // the hop's bulk, over the lanes side by side
    channel_->exchange_over_lanes(got_rows, reply_rows, got_splits, reply_splits, /*header=*/0,
                                  "answers");
  }
  clock.lap("answers");
  return {got_counts_here, got_rows};
}

DistSampler::SlotHop DistSampler::slot_hop(const at::Tensor& requests,
                                            const at::Tensor& send_counts, int64_t fanout,
                                            const std::optional<at::Generator>& generator,
                                            internal::HopNumbering* report, bool defer_answers) {
  const int64_t P = num_hosts_;
  const at::Device x = exchange_device_;
  const auto long_x = at::TensorOptions().dtype(at::kLong).device(x);
  PhaseClock clock("partitioned hop exchange in slots");
  // 1. How many rows each host asks of each other host, both ways: the only sizes of the
  // hop the host reads.
  at::Tensor counts = at::empty({2 * P}, long_x);  // sent, then received
  at::Tensor counts_out = counts.narrow(0, 0, P).copy_(send_counts);
  at::Tensor counts_in = counts.narrow(0, P, P);
  const std::vector<int64_t> one_each(P, 1);
  std::vector<int64_t> both;
#ifdef QUIVER_WITH_CUDA
  if (direct_link() != nullptr) {
    // Brought to the host on the stream, behind the exchange: the one wait covers both.
    all_to_all(counts_in, counts_out, one_each, one_each, "request counts", /*host_waits=*/false);
    at::Tensor here = at::empty({2 * P}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
    here.copy_(counts, /*non_blocking=*/true);
    settle({}, "request counts");
    both.assign(here.const_data_ptr<int64_t>(), here.const_data_ptr<int64_t>() + 2 * P);
  }
#endif
  if (both.empty()) {
    all_to_all(counts_in, counts_out, one_each, one_each, "request counts", /*host_waits=*/true);
    both = as_vector(counts);
  }
  SlotHop hop;
  hop.send_splits.assign(both.begin(), both.begin() + P);
  const std::vector<int64_t> recv_splits(both.begin() + P, both.end());
  const int64_t asked_of_me = std::accumulate(recv_splits.begin(), recv_splits.end(), int64_t{0});
  const int64_t frontier =
      std::accumulate(hop.send_splits.begin(), hop.send_splits.end(), int64_t{0});
  try {
    hop.slots = at::empty({frontier, 2, fanout}, long_x);
  } catch (const c10::Error& error) {  // the allocator's words name no fanout
    TORCH_CHECK(false, "DistSampler: a hop's slots (", frontier, " rows x fanout ", fanout,
                " x 2 ids of 8 bytes) could not be allocated: ", error.what_without_backtrace(),
                ". A fanout past the largest degree takes the same neighbors as -1, which needs "
                "no slots");
  }
  clock.lap("counts");
  if (fanout == 0) return hop;  // every host's slots are empty: nothing to move
  // 2. The requests. A hop kept on the stream samples them after them on the stream;
  // otherwise the sampling below may wait on the device itself (a CPU part copies them
  // over, a GPU part without `report` reads its status), so the host first waits for them
  // within the timeout: a blocking wait behind a dead peer's exchange would never end.
  at::Tensor asked = at::empty({asked_of_me}, long_x);
  at::Tensor requests_x = requests.to(x);
  all_to_all(asked, requests_x, recv_splits, hop.send_splits, "requests",
             /*host_waits=*/!defer_answers);
  clock.lap("requests");
  // 3. Every asked row in its slot, back to the host that asked. The slots' sizes are the
  // requests' splits times the slot: no count is exchanged or read back.
  at::Tensor answers = internal::sample_into_slots(indptr_, indices_, edge_ids_,
                                                   asked.to(indptr_.device()), fanout, replace_,
                                                   generator, report)
                           .to(x);
  clock.lap("answer");
  if (!channel_->lanes().empty()) {  // the hop's bulk, over the lanes side by side
    at::Tensor into = hop.slots.view({frontier, 2 * fanout});
    channel_->exchange_over_lanes(into, answers.view({asked_of_me, 2 * fanout}), hop.send_splits,
                                  recv_splits, /*header=*/0, "answers");
    return hop;
  }
  const bool defer = defer_answers && x.is_cuda();
  hop.answers = all_to_all(hop.slots, answers, hop.send_splits, recv_splits, "answers",
                           /*host_waits=*/!defer);
  hop.answers_pending = defer;
  clock.lap("answers");
  return hop;
}

namespace {

// "None seen yet" in a host's proposal of a hop's block rows: the agreed rows are the bound.
constexpr int64_t kNoneSeen = std::numeric_limits<int64_t>::max();

// Whether a hop's answers in blocks of `rows` (fanout pairs of 8-byte ids a row), over all
// hosts, fit kBoundedSlotBytes.
bool padded_answers_fit(int64_t hosts, int64_t rows, int64_t fanout) {
  return saturating_mul(saturating_mul(hosts, saturating_mul(rows, fanout)),
                        2 * int64_t{sizeof(int64_t)}) <= kBoundedSlotBytes;
}

// `rows` rounded up to one of 8 steps an octave: blocks sized by what was seen take few
// distinct shapes, so that their captured batches keep being replayed.
int64_t rounded_up_to_step(int64_t rows) {
  if (rows <= 8) return rows;
  int64_t step = 1;
  while ((step << 4) <= rows) step <<= 1;  // rows / 16 < step <= rows / 8
  return (rows + step - 1) / step * step;
}

}  // namespace

void DistSampler::set_slot_margin(double margin) {
  TORCH_CHECK_VALUE(std::isfinite(margin) && margin >= 0 && margin <= 1000,
                    "DistSampler.set_slot_margin: margin must be 0 (blocks of the bounds) or a "
                    "finite factor in (0, 1000], got ", margin);
  std::lock_guard<std::mutex> lock(sample_mutex_);
  if (margin == slot_margin_) return;  // no change: the blocks stay agreed
  slot_margin_ = margin;
  seen_slot_rows_.clear();
  slots_agreed_ = false;
  if (bounded_batches_) bounded_batches_->drop_captures();
}

std::vector<int64_t> DistSampler::agreed_slot_rows() const {
  const int64_t H = static_cast<int64_t>(fanouts_.size());
  if (!slots_agreed_ || slot_margin_ <= 0 || static_cast<int64_t>(seen_slot_rows_.size()) != H) {
    return {};
  }
  for (int64_t h = 0; h < H; ++h) {
    const int64_t rows = seen_slot_rows_[h], fanout = fanouts_[h];
    // A hop none has asked for yet keeps blocks of no rows: a batch that asks overflows.
    if (fanout > 0 && !padded_answers_fit(num_hosts_, rows, fanout)) return {};
  }
  return seen_slot_rows_;
}

DistSampler::BoundedSlots DistSampler::bounded_slot_rows(int64_t batch_size, bool able) {
  const int64_t P = num_hosts_, H = static_cast<int64_t>(fanouts_.size());
  const auto long_x = at::TensorOptions().dtype(at::kLong).device(exchange_device_);
  PhaseClock clock("partitioned batch's sizes");
  ++size_exchanges_;
  // Every host tells every other whether it can, its batch's size, and per hop the block
  // rows it proposes from what it has seen: one host wait. The hosts take the largest
  // proposal, so they agree on the blocks whatever each has seen.
  std::vector<int64_t> message{able ? 1 : 0, batch_size};
  for (int64_t h = 0; h < H; ++h) {
    const bool seen = slot_margin_ > 0 && h < static_cast<int64_t>(seen_slot_rows_.size()) &&
                      seen_slot_rows_[h] > 0;
    message.push_back(seen ? seen_slot_rows_[h] : kNoneSeen);
  }
  const int64_t words = 2 + H;
  // Pinned buffers kept across batches (free again: the host waits for the copies below).
  if (!sizes_host_.defined() || sizes_host_.numel() != 2 * P * words) {
    sizes_host_ = at::empty({2, P * words}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
  }
  at::Tensor out_host = sizes_host_[0], in_host = sizes_host_[1];
  int64_t* out_words = out_host.mutable_data_ptr<int64_t>();
  for (int64_t p = 0; p < P; ++p) std::copy(message.begin(), message.end(), out_words + p * words);
  at::Tensor from = out_host.to(exchange_device_, /*non_blocking=*/true);
  at::Tensor into = at::empty({P * words}, long_x);
  const std::vector<int64_t> each(P, words);
  all_to_all(into, from, each, each, "batch sizes", /*host_waits=*/false);
  in_host.copy_(into, /*non_blocking=*/true);
  clock.lap("queue");
  settle({}, "batch sizes");
  clock.lap("exchange");
  const int64_t* got = in_host.const_data_ptr<int64_t>();
  int64_t rows = 0;
  std::vector<int64_t> proposed(H, 0);
  for (int64_t p = 0; p < P; ++p) {
    const int64_t* word = got + p * words;
    if (word[0] != 1) return {};
    rows = std::max(rows, word[1]);
    for (int64_t h = 0; h < H; ++h) proposed[h] = std::max(proposed[h], word[2 + h]);
  }
  if (P > kMaxBoundedSlotHosts) return {};
  BoundedSlots slots;
  for (int64_t h = 0; h < H; ++h) {
    const int64_t edges = saturating_mul(rows, fanouts_[h]);
    if (edges > kMaxHopEdges || !padded_answers_fit(P, rows, fanouts_[h])) return {};
    slots.bounds.push_back(rows);
    slots.rows.push_back(std::min(rows, proposed[h]));
    rows = std::min(edges, num_nodes());  // HopNumbering's bound of the hop's new nodes
  }
  return slots;
}

DistSampler::Outputs DistSampler::sample_in_bounded_slots(
    const at::Tensor& seed_ids, const std::optional<at::Generator>& generator,
    const BoundedSlots& slots) {
  const at::Device w = indptr_.device();
  const int64_t H = static_cast<int64_t>(fanouts_.size());
  // A batch in agreed blocks that overflows and whose bounds are refused takes exact
  // counts, which draw the keys again: from the generator as it stands now, so that it is
  // the batch exact counts give.
  std::optional<at::Generator> keys_from;
  at::Tensor keys_state;
  if (slots.bounds.empty()) {
    keys_from = generator.has_value() ? *generator : at::globalContext().defaultGenerator(w);
    const std::lock_guard<std::mutex> lock(keys_from->mutex());
    keys_state = keys_from->get_state();
  }
  // Each hop's key, drawn in hop order as the exact exchange's owners draw them (every hop
  // of a fanout > 0, rows or none); a batch taken again draws from the same keys.
  std::vector<int64_t> key_words(2 * H, 0);
  for (int64_t h = 0; h < H; ++h) {
    if (fanouts_[h] > 0) {
      std::tie(key_words[2 * h], key_words[2 * h + 1]) =
          internal::draw_slots_key(w, fanouts_[h], replace_, indices_.numel(), generator);
    }
  }
  std::vector<int64_t> most_asked;
  Outputs outputs = queue_bounded_batch(seed_ids, generator, key_words, slots.rows, most_asked);
  // Every host read the same maxima, so all learn the same and all agree on taking the
  // batch again.
  bool overflowed = false, grew = false;
  const auto learn = [&] {
    seen_slot_rows_.resize(H, 0);
    for (int64_t h = 0; h < H; ++h) {
      if (slot_margin_ <= 0 || most_asked[h] <= 0) continue;
      const double wanted = std::ceil(static_cast<double>(most_asked[h]) * slot_margin_);
      const int64_t rows = std::min(
          rounded_up_to_step(static_cast<int64_t>(std::min(wanted, static_cast<double>(kMaxHopEdges)))),
          kMaxHopEdges);
      if (rows > seen_slot_rows_[h]) {
        seen_slot_rows_[h] = rows;
        grew = true;
      }
    }
  };
  // Batches of blocks that grew will not come back: their captures go, once this batch's
  // outputs are copied out of them.
  const auto drop_outgrown_captures = [&] {
    if (!grew || !bounded_batches_) return;
#ifdef QUIVER_WITH_CUDA
    at::cuda::getCurrentCUDAStream(w.index()).synchronize();
#endif
    bounded_batches_->drop_captures();
  };
  for (int64_t h = 0; h < H; ++h) {
    overflowed |= fanouts_[h] > 0 && most_asked[h] > slots.rows[h];
  }
  learn();
  last_slot_rows_ = slots.rows;
  if (overflowed) {
    // Some owner was asked for more rows than its block held: the batch is taken again in
    // blocks of the bounds, which hold every request, with the same keys, so the same draws.
    // Blocks that were agreed without an exchange have no bounds yet: every host saw the
    // overflow, so all exchange their batch sizes now.
    ++overflowed_batches_;
    slots_agreed_ = false;
    const std::vector<int64_t> bounds =
        slots.bounds.empty() ? bounded_slot_rows(seed_ids.numel(), /*able=*/true).bounds
                             : slots.bounds;
    if (bounds.empty()) {
      // The bounds' padding would pass kBoundedSlotBytes: the hops' exact counts instead,
      // drawing the same keys from the generator put back as it was.
      last_slot_rows_.clear();
      drop_outgrown_captures();
      {
        const std::lock_guard<std::mutex> lock(keys_from->mutex());
        keys_from->set_state(keys_state);
      }
      return sample_on_gpu(seed_ids, generator);
    }
    outputs = queue_bounded_batch(seed_ids, generator, key_words, bounds, most_asked);
    learn();
    last_slot_rows_ = bounds;
  }
  slots_agreed_ = true;
  drop_outgrown_captures();
  return outputs;
}

DistSampler::Outputs DistSampler::queue_bounded_batch(
    const at::Tensor& seed_ids, const std::optional<at::Generator>& generator,
    const std::vector<int64_t>& key_words, const std::vector<int64_t>& slot_rows,
    std::vector<int64_t>& most_asked) {
  const at::Device w = indptr_.device();
  const int64_t P = num_hosts_, H = static_cast<int64_t>(fanouts_.size());
  const auto long_w = at::TensorOptions().dtype(at::kLong).device(w);
  PhaseClock clock("partitioned batch in bounded slots");
  const auto queue = [&](SlottedBatch& batch, const int64_t* keys) {
    // Per hop, the most rows a host asked this host for (its blocks' counts).
    at::Tensor most_here = at::zeros({H}, long_w);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t fanout = fanouts_[h], rows = slot_rows[h];
      // Each owner's block of requests, and which frontier node each slot answers, sized
      // by the agreed rows: nothing is read back.
      const auto [frontier, live] = batch.frontier_bound();
      auto [requests, slot_order] =
          group_into_bounded_slots(frontier, live, owner_w_, local_index_w_, P, rows, host_,
                                   batch.remote_nodes_counter(h));
      at::Tensor slots = at::empty({P * rows, 2, fanout}, long_w);
      if (fanout > 0 && rows > 0) {  // the same on every host: its fanout, and the rows
        at::Tensor requests_flat = requests.view({-1});
        at::Tensor asked_padded = at::empty({P * (rows + 1)}, long_w);
        const std::vector<int64_t> request_splits(P, rows + 1), slot_splits(P, rows);
        all_to_all(asked_padded, requests_flat, request_splits, request_splits, "requests",
                   /*host_waits=*/false);
        // The peers' rows in the order an exact exchange gives (so the same draws), each
        // answered in its block's slot.
        const auto [asked, slot_of, asked_live] = compact_requests(
            asked_padded, P, rows, most_here.mutable_data_ptr<int64_t>() + h);
        at::Tensor answers = internal::sample_into_slots(
            indptr_, indices_, edge_ids_, asked, fanout, replace_, generator, batch.report(),
            {asked_live.const_data_ptr<int64_t>(), slot_of, keys + 2 * h});
        all_to_all(slots, answers, slot_splits, slot_splits, "answers", /*host_waits=*/false);
      } else if (fanout > 0) {
        // Blocks of no rows move nothing, so no owner counts what it was asked for: the
        // asking side's counts (each block's first word) tell of an overflow instead.
        most_here.narrow(0, h, 1).copy_(requests.select(1, 0).amax(0, /*keepdim=*/true));
      }
      batch.add_hop(slots, slot_order, host_ * rows, (host_ + 1) * rows, frontier.numel());
    }
    // Every host's maxima to every host, so that all hold the same largest counts (read
    // back with the batch's other counters).
    at::Tensor most_all = at::empty({P * H}, long_w);
    const std::vector<int64_t> each(P, H);
    at::Tensor most_each = most_here.repeat({P});
    all_to_all(most_all, most_each, each, each, "most asked", /*host_waits=*/false);
    at::from_blob(batch.most_asked_counters(), {H}, long_w).copy_(most_all.view({P, H}).amax(0));
  };
  if (!bounded_batches_) bounded_batches_ = std::make_unique<BoundedBatches>(capture_batches_);
  bounded_batches_->set_capture(capture_batches_);
  SlottedBatch& batch =
      bounded_batches_->run(seed_ids, w, num_nodes(), fanouts_, slot_rows, key_words, queue);
  clock.lap("queue");
  // One wait for the whole batch, within the timeout (a silent peer is named), before the
  // sizes are read.
  settle({}, "answers");
  clock.lap("hops");
  auto [node_ids, rows, cols, eids, nodes_per_hop, edges_per_hop, counters] = batch.finish();
  bounded_batches_->outputs_copied();
  clock.lap("finish");
  last_remote_edges_.assign(counters.begin(), counters.begin() + H);
  last_remote_nodes_.assign(counters.begin() + H, counters.begin() + 2 * H);
  most_asked.assign(counters.begin() + 2 * H, counters.begin() + 3 * H);
  return {node_ids, rows, cols, eids, nodes_per_hop, edges_per_hop};
}

DistSampler::Outputs DistSampler::sample_on_gpu(const at::Tensor& seed_ids,
                                                const std::optional<at::Generator>& generator) {
  const at::Device w = indptr_.device();
  PhaseClock clock("partitioned batch in slots");
  last_remote_nodes_.clear();
  last_remote_edges_.clear();
  SlottedBatch batch(seed_ids.to(w), num_nodes(), fanouts_);
  clock.lap("start");
  for (const int64_t fanout : fanouts_) {
    PhaseClock hop_clock("partitioned hop in slots");
    const at::Tensor frontier = batch.frontier();  // the hop's first wait
    hop_clock.lap("frontier");
    // Grouped by owner (stable: each owner's nodes keep their order), counted on the GPU.
    const auto [order, requests, send_counts] =
        group_by_owner(frontier, owner_w_, local_index_w_, num_hosts_);
    hop_clock.lap("group");
    SlotHop hop = slot_hop(requests, send_counts, fanout, generator, batch.report(), /*defer_answers=*/true);
    hop_clock.lap("exchange");
    const int64_t own_begin = std::accumulate(hop.send_splits.begin(),
                                              hop.send_splits.begin() + host_, int64_t{0});
    last_remote_nodes_.push_back(frontier.numel() - hop.send_splits[host_]);
    batch.add_hop(hop.slots.to(w), order, own_begin, own_begin + hop.send_splits[host_],
                  frontier.numel());
    // The numbering is queued after the answers; the host waits for them (at most the
    // timeout, naming a silent peer) before the next hop reads the device.
    if (hop.answers_pending) settle(hop.answers, "answers");
    hop_clock.lap("number");
  }
  clock.lap("hops");
  auto [node_ids, rows, cols, eids, nodes_per_hop, edges_per_hop, counters] = batch.finish();
  clock.lap("finish");
  last_remote_edges_.assign(counters.begin(), counters.begin() + fanouts_.size());
  return {node_ids, rows, cols, eids, nodes_per_hop, edges_per_hop};
}

DistSampler::HopSamples DistSampler::read_hop(
    const at::Tensor& requests, const std::vector<int64_t>& send_splits, int64_t fanout,
    const std::optional<at::Generator>& generator, const OwnSamples& sample_own) {
  const int64_t P = num_hosts_;
  const auto long_opts = at::TensorOptions().dtype(at::kLong);
  // Entries of the owners' arrays (offsets, neighbor ids, edge ids), as rows of one element.
  // Over RDMA they are read from the owner's memory; over collectives the owner answers its
  // peers from its own array (this serve) in the same exchange, over the sampler's group:
  // over NCCL through this process's GPU (the exchange's device), back here after, where the
  // draws are made, as over Gloo and RDMA: one seed then gives one batch over every transport.
  const std::array<const at::Tensor*, 3> arrays{&indptr_, &indices_, &edge_ids_};
  const at::Device comm = exchange_device_;
  const bool through_gpu = comm.is_cuda();
  const auto read = [&](int which, const std::vector<at::Tensor>& rows, at::ScalarType dtype) {
    ArrayRows array(*arrays[which], dtype);
    std::lock_guard<std::mutex> one_fetch(reads_[which]->fetch_mutex());
    std::vector<at::Tensor> got = reads_[which]->fetch(rows, array, comm, which);
    // Rows may view the transport's buffer until its next fetch, and one transport may
    // carry all three reads: each is copied out (to the host).
    for (at::Tensor& t : got) t = through_gpu ? t.to(at::kCPU) : t.clone();
    return got;
  };
  // 1. Each remote node's row bounds: its offsets indptr[i] and indptr[i + 1], read from
  // the owner (over RDMA its CPU does nothing).
  std::vector<at::Tensor> bounds_wanted(P, at::empty({0}, long_opts));
  int64_t begin = 0;
  for (int64_t p = 0; p < P; ++p) {
    const at::Tensor mine = requests.narrow(0, begin, send_splits[p]);
    if (p != host_) bounds_wanted[p] = at::stack({mine, mine + 1}, 1).view(-1);
    begin += send_splits[p];
  }
  const std::vector<at::Tensor> bounds = read(0, bounds_wanted, at::kLong);
  const HopSamples own = sample_own(at::kCPU);  // while nothing is in flight: reads wait
  // 2. Draw positions within each remote row here, with the sampling op itself on a
  // stand-in CSR whose neighbor ids are the positions (so the draw is the op's).
  std::vector<at::Tensor> row_begin, row_length;
  for (int64_t p = 0; p < P; ++p) {
    if (p == host_ || send_splits[p] == 0) continue;
    const at::Tensor b = bounds[p].view({-1, 2});
    row_begin.push_back(b.select(1, 0));
    row_length.push_back(b.select(1, 1) - b.select(1, 0));
  }
  const at::Tensor starts = row_begin.empty() ? at::empty({0}, long_opts) : at::cat(row_begin);
  const at::Tensor lengths = row_length.empty() ? at::empty({0}, long_opts) : at::cat(row_length);
  TORCH_CHECK(lengths.numel() == 0 || lengths.min().item<int64_t>() >= 0,
              "DistSampler: a peer's offsets are not non-decreasing: its partition is corrupt");
  at::Tensor stand_in_indptr = at::zeros({lengths.numel() + 1}, long_opts);
  at::Tensor stand_in_ends = stand_in_indptr.narrow(0, 1, lengths.numel());
  at::cumsum_out(stand_in_ends, lengths, 0);
  const int64_t positions = stand_in_indptr[-1].item<int64_t>();
  auto [counts, drawn, ignored] = quiver::sample_neighbors(
      stand_in_indptr, at::arange(positions, long_opts), at::arange(lengths.numel(), long_opts),
      fanout, replace_, std::nullopt, generator);
  const at::Tensor node_of = at::repeat_interleave(at::arange(lengths.numel(), long_opts), counts,
                                                   /*dim=*/0, drawn.numel());
  const at::Tensor at_owner = starts.index_select(0, node_of) + drawn -
                              stand_in_indptr.index_select(0, node_of);
  // 3. The drawn neighbors and their edge ids, read from the owners.
  std::vector<at::Tensor> picks(P, at::empty({0}, long_opts)), remote_counts(P);
  int64_t node = 0, pick = 0;
  const int64_t* count = counts.const_data_ptr<int64_t>();
  for (int64_t p = 0; p < P; ++p) {
    if (p == host_) continue;
    const int64_t n = send_splits[p];
    const int64_t k = std::accumulate(count + node, count + node + n, int64_t{0});
    picks[p] = at_owner.narrow(0, pick, k);
    remote_counts[p] = counts.narrow(0, node, n);
    node += n;
    pick += k;
  }
  // In address order, so that neighbors drawn next to each other (a row taken whole) travel
  // as one READ; put back in draw order after.
  std::vector<at::Tensor> ascending(P), order(P);
  for (int64_t p = 0; p < P; ++p) {
    std::tie(ascending[p], order[p]) = picks[p].sort(/*stable=*/false, /*dim=*/0, /*descending=*/false);
  }
  const std::vector<at::Tensor> neighbors = read(1, ascending, indices_.scalar_type());
  const std::vector<at::Tensor> edge_ids = read(2, ascending, at::kLong);
  const auto in_draw_order = [&](const at::Tensor& got, int64_t p) {
    at::Tensor out = at::empty({order[p].numel()}, long_opts);
    out.index_put_({order[p]}, got.view(-1).to(at::kLong));
    return out;
  };
  std::vector<at::Tensor> got_counts(P), got_rows(P);
  for (int64_t p = 0; p < P; ++p) {
    if (p == host_) {
      std::tie(got_counts[p], got_rows[p]) = own;
    } else {
      got_counts[p] = remote_counts[p];
      got_rows[p] = picks[p].numel() == 0
                        ? at::empty({0, 2}, long_opts)
                        : at::stack({in_draw_order(neighbors[p], p), in_draw_order(edge_ids[p], p)}, 1);
    }
  }
  return {at::cat(got_counts), at::cat(got_rows)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
DistSampler::sample(const at::Tensor& seeds, const std::optional<at::Generator>& generator) {
  std::lock_guard<std::mutex> one_batch(sample_mutex_);
  channel_->check_not_broken();
  // Seeds this host cannot sample are refused after the batch, not before it: its peers
  // take part in every batch, so this host takes part too, with no seeds, and the hosts
  // stay in step (raising at once would pair its next batch with their current one). The
  // refusal has the Python type the ops give that fault.
  static constexpr const char* kStaysInStep =
      " (this host took part in the batch with no seeds, so the hosts stay in step)";
  std::function<void()> refuse;
  at::Tensor seed_ids = at::empty({0}, at::kLong);
  if (!seeds.defined()) {
    refuse = [] {
      TORCH_CHECK_TYPE(false, "DistSampler.sample: seeds must be a tensor of node ids, got None",
                       kStaysInStep);
    };
  } else if (!seeds.is_cpu()) {
    refuse = [device = seeds.device()] {
      TORCH_CHECK(false, "DistSampler.sample: seeds must be a CPU tensor, got one on ", device,
                  kStaysInStep);
    };
  } else if (seeds.dim() != 1) {
    refuse = [shape = seeds.sizes().vec()] {
      TORCH_CHECK_VALUE(false, "DistSampler.sample: seeds must be a 1-D tensor, got shape ",
                        at::IntArrayRef(shape), kStaysInStep);
    };
  } else if (!at::isIntegralType(seeds.scalar_type(), /*includeBool=*/false)) {
    refuse = [dtype = errors::dtype_name(seeds.scalar_type())] {
      TORCH_CHECK_TYPE(false, "DistSampler.sample: seeds must be integers, got ", dtype,
                       kStaysInStep);
    };
  } else if (seeds.numel() > 0) {
    const at::Tensor ids = seeds.to(at::kLong).contiguous();
    const int64_t low = ids.min().item<int64_t>(), high = ids.max().item<int64_t>();
    if (low >= 0 && high < num_nodes()) {
      seed_ids = ids;
    } else {
      refuse = [seed = low < 0 ? low : high, limit = num_nodes()] {
        TORCH_CHECK_INDEX(false, "DistSampler.sample: seed ", seed, " is out of range [0, ", limit,
                          ")", kStaysInStep);
      };
    }
  }
  // The exchanges' NCCL calls and events go to the exchange's GPU.
  const c10::OptionalDeviceGuard on_exchange_gpu(
      exchange_device_.is_cuda() ? std::optional<at::Device>(exchange_device_) : std::nullopt);
  Outputs out;
  try {
    out = sample_batch(seed_ids, generator);
  } catch (const std::exception& error) {
    // Stopped midway (a peer's failure has already broken the channel): this host's next
    // exchange would pair with the peers' later ones, so the sampler refuses further batches.
    channel_->abandon(message_of(error));
    throw;
  }
  if (refuse) refuse();
  return out;
}

DistSampler::Outputs DistSampler::sample_batch(const at::Tensor& seed_ids,
                                               const std::optional<at::Generator>& generator) {
  const int64_t P = num_hosts_;
  // Without slots (an all-neighbors hop, or reads), a batch is grouped, put back in order
  // and reindexed with tensor ops where the part lies (its GPU in GPU and UVA modes).
  const at::Device w = indptr_.device();
  const auto long_w = at::TensorOptions().dtype(at::kLong).device(w);
  const auto int_w = at::TensorOptions().dtype(at::kInt).device(w);
  // The part's kernels (and the owners' answers to peers) draw from this.
  const std::optional<at::Generator> own_generator = part_generator(generator);
  if (!owner_w_.defined() || owner_w_.device() != w) {
    owner_w_ = owner_.to(w);  // int16 or int32
    local_index_w_ = local_index_.to(w);
  }
  const bool gpu_slots =
      w.is_cuda() && reads_.empty() &&
      std::all_of(fanouts_.begin(), fanouts_.end(), [](int64_t f) { return f >= 0; });
  // Over NCCL driven directly every host says whether it can take slots sized by bounds
  // (a GPU part whose exchanges run on its GPU); the batch takes them when all can.
  if (direct_link() != nullptr) {
    const bool able = gpu_slots && bounded_slots_ && exchange_device_ == w &&
                      channel_->lanes().empty();
    // Once the hosts agree on blocks sized by what was seen, a batch takes them at once:
    // its first wait on the host is its end.
    std::vector<int64_t> agreed = able ? agreed_slot_rows() : std::vector<int64_t>{};
    const BoundedSlots slots = !agreed.empty()
                                   ? BoundedSlots{{}, std::move(agreed)}
                                   : bounded_slot_rows(seed_ids.numel(), able);
    if (!slots.rows.empty()) return sample_in_bounded_slots(seed_ids, own_generator, slots);
    last_slot_rows_.clear();
    slots_agreed_ = false;
  }
  if (gpu_slots) return sample_on_gpu(seed_ids, own_generator);
  if (!position_.defined() || position_.device() != w) {
    position_ = at::full({num_nodes()}, -1, int_w);
    first_use_ = at::full({num_nodes()}, kNoUse, int_w);  // the seeds', and on a GPU each hop's
  }

  // Reindexing: position_[v] is v's index in the batch's node ids, -1 when absent (reset
  // after the batch). A seed given twice keeps its first index.
  const at::Tensor seeds_w = seed_ids.to(w);
  std::vector<at::Tensor> node_parts{seeds_w};
  int64_t num_batch_nodes = seeds_w.numel();
  {
    const at::Tensor index = at::arange(num_batch_nodes, int_w);
    first_use_.scatter_reduce_(0, seeds_w, index, "amin");
    position_.index_put_({seeds_w}, first_use_.index_select(0, seeds_w));
    first_use_.index_fill_(0, seeds_w, kNoUse);
  }
  std::vector<at::Tensor> rows, cols, eids;
  std::vector<int64_t> nodes_per_hop{num_batch_nodes}, edges_per_hop;
  last_remote_nodes_.clear();
  last_remote_edges_.clear();
  int64_t frontier_begin = 0;

  for (int64_t fanout : fanouts_) {
    PhaseClock clock("partitioned hop");
    const at::Tensor frontier = node_parts.back();  // the nodes the last hop added
    // Group the frontier by owner (stable: each owner's nodes keep their order).
    const at::Tensor owners = owner_w_.index_select(0, frontier).to(at::kLong);
    const at::Tensor order = std::get<1>(owners.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
    const std::vector<int64_t> send_splits = as_vector(at::bincount(owners, {}, P));
    at::Tensor requests = local_index_w_.index_select(0, frontier.index_select(0, order));

    const int64_t own_begin = std::accumulate(send_splits.begin(), send_splits.begin() + host_, int64_t{0});
    const auto sample_own = [&](const at::Device& to) {
      return sample_rows(requests.narrow(0, own_begin, send_splits[host_]), fanout, own_generator,
                         to);
    };
    clock.lap("group");
    // Per frontier node in grouped order, its sample's size; the (neighbor, edge id) pairs.
    HopSamples got;
    if (!reads_.empty()) {
      got = read_hop(requests.cpu(), send_splits, fanout, generator, sample_own);
    } else if (fanout >= 0) {  // in slots, as every host's hop of this fanout
      const SlotHop hop = slot_hop(requests, at::tensor(send_splits, at::kLong), fanout,
                                   own_generator, nullptr, /*defer_answers=*/false);
      got = internal::slots_as_samples(hop.slots);
      got.first = got.first.cpu();
    } else {
      got = exchange_hop(requests, send_splits, fanout, own_generator, sample_own);
    }
    auto [got_counts, got_rows] = std::move(got);
    // The counts come back on the CPU (their splits are needed there): the own block's
    // edges are summed before they move.
    const int64_t own_edges = got_counts.narrow(0, own_begin, send_splits[host_]).sum().item<int64_t>();
    got_counts = got_counts.to(w);
    got_rows = got_rows.to(w);
    clock.lap("exchange");
    const int64_t got_total = got_rows.size(0);
    TORCH_CHECK(got_total < kNoUse && num_batch_nodes + got_total < kNoUse,
                "DistSampler: a hop of ", got_total, " edges after ", num_batch_nodes,
                " nodes is more than a batch's int32 numbering holds");
    if (got_total > 0) {  // peers' answers index the reindexing table: checked first
      const auto [low, high] = at::aminmax(got_rows.select(1, 0));
      const int64_t lowest = low.item<int64_t>(), highest = high.item<int64_t>();
      TORCH_CHECK(lowest >= 0 && highest < num_nodes(), "DistSampler (host ", host_,
                  "): a peer answered neighbor ids in [", lowest, ", ", highest,
                  "], outside [0, ", num_nodes(), "): its partition is corrupt");
    }
    last_remote_nodes_.push_back(frontier.numel() - send_splits[host_]);
    last_remote_edges_.push_back(got_total - own_edges);

    // Back to frontier order: frontier node order[k] got got_counts[k] pairs.
    at::Tensor counts = at::empty_like(got_counts);
    counts.index_put_({order}, got_counts);
    const at::Tensor grouped_start = got_counts.cumsum(0) - got_counts;
    at::Tensor start_of = at::empty_like(grouped_start);
    start_of.index_put_({order}, grouped_start);
    const at::Tensor out_start = counts.cumsum(0) - counts;
    const at::Tensor gather = at::arange(got_total, long_w) +
                              at::repeat_interleave(start_of - out_start, counts, /*dim=*/0, got_total);
    const at::Tensor pairs = got_rows.index_select(0, gather);
    const at::Tensor neighbors = pairs.select(1, 0).contiguous();
    clock.lap("order");

    // Reindex: new nodes in order of first appearance.
    at::Tensor added, hop_rows;
    if (w.is_cpu()) {
      // One pass over the edges. On the CPU the tensor form below nearly doubled a batch
      // against single-host sampling (5.1x against 2.7x, docs/benchmarks.md).
      std::vector<int64_t> fresh;
      hop_rows = at::empty({got_total}, long_w);
      int32_t* position = position_.mutable_data_ptr<int32_t>();
      const int64_t* neighbor = neighbors.const_data_ptr<int64_t>();
      int64_t* row = hop_rows.mutable_data_ptr<int64_t>();
      for (int64_t e = 0; e < got_total; ++e) {
        int32_t& at = position[neighbor[e]];
        if (at < 0) {
          at = static_cast<int32_t>(num_batch_nodes + static_cast<int64_t>(fresh.size()));
          fresh.push_back(neighbor[e]);
        }
        row[e] = at;
      }
      added = at::tensor(fresh, long_w);
    } else {
      // A node's first edge is the least edge naming it; it is new when the batch does not
      // hold it yet.
      const at::Tensor edge = at::arange(got_total, int_w);
      first_use_.scatter_reduce_(0, neighbors, edge, "amin");
      const at::Tensor is_new = first_use_.index_select(0, neighbors).eq(edge).logical_and_(
          position_.index_select(0, neighbors).lt(0));
      added = neighbors.masked_select(is_new);
      position_.index_put_({added},
                           at::arange(num_batch_nodes, num_batch_nodes + added.numel(), int_w));
      first_use_.index_fill_(0, neighbors, kNoUse);
      hop_rows = position_.index_select(0, neighbors).to(at::kLong);
    }
    const int64_t num_added = added.numel();
    rows.push_back(hop_rows);
    cols.push_back(at::repeat_interleave(at::arange(frontier_begin, frontier_begin + frontier.numel(), long_w),
                                         counts, /*dim=*/0, got_total));
    eids.push_back(pairs.select(1, 1));
    frontier_begin = num_batch_nodes;
    num_batch_nodes += num_added;
    node_parts.push_back(added);
    nodes_per_hop.push_back(num_added);
    edges_per_hop.push_back(got_total);
    clock.lap("reindex");
  }
  const at::Tensor node_ids = at::cat(node_parts);
  position_.index_fill_(0, node_ids, -1);
  // Where the part lies, as the single-host sampler returns them; the counts on the CPU.
  return {node_ids, at::cat(rows), at::cat(cols), at::cat(eids),
          at::tensor(nodes_per_hop, at::kLong), at::tensor(edges_per_hop, at::kLong)};
}

}  // namespace quiver::runtime
