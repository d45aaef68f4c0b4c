#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <quiver/dist_feature.h>

#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>

#include "ops/checks.h"
#include "ops/errors.h"
#include "ops/internal/gather.h"
#include "runtime/bounded_wait.h"
#include "runtime/cpu/owner_groups.h"
#include "runtime/kept_buffer.h"
#include "runtime/phase_clock.h"
#include "runtime/slot_exchange.h"
#ifdef QUIVER_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace quiver::runtime {

namespace {

// "float32 rows of shape [100]": what a host's table looks like to its peers.
std::string describe_rows(const FeatureTiers& local) {
  const at::Tensor like = local.empty_rows();
  std::ostringstream out;
  out << errors::dtype_name(like.scalar_type()) << " rows of shape " << like.sizes().slice(1);
  return out.str();
}

// The fields of a host's set-up words ("key=value" lines).
std::map<std::string, std::string> fields_of(const std::string& text) {
  std::map<std::string, std::string> fields;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t equals = line.find('=');
    if (equals != std::string::npos) fields[line.substr(0, equals)] = line.substr(equals + 1);
  }
  return fields;
}

#ifdef QUIVER_WITH_CUDA
// Whether a GPU gathers from these tiers directly: each on that GPU, or pinned host memory.
bool reads_directly(const FeatureTiers& local, const at::Device& device) {
  auto readable = [&](const at::Tensor& t) {
    return t.device() == device || (t.is_cpu() && t.is_pinned()) || t.numel() == 0;
  };
  for (const at::Tensor& t : local.tiers()) {
    if (!readable(t)) return false;
  }
  return !local.positions() || readable(*local.positions());
}
#endif

}  // namespace

// The local layout as the transports read it: FeatureTiers' gather with the block cap of
// the gather in progress (gathers are serialized by the transport's fetch lock). On a GPU
// that reads the tiers directly (and does not stage host rows: staging waits for the GPU),
// a read is only enqueued, its faults kept for check_reads.
class DistFeature::TableRows final : public LocalRows {
 public:
  explicit TableRows(c10::intrusive_ptr<FeatureTiers> tiers) : tiers_(std::move(tiers)) {}

  void set_host_read_blocks(int64_t blocks) { blocks_ = blocks; }
  int64_t host_read_blocks() const { return blocks_; }

  int64_t num_rows() const override { return tiers_->num_rows(); }
  at::Tensor empty_rows() const override { return tiers_->empty_rows(); }

  at::Tensor read(const at::Tensor& local_ids, const at::Device& device) override {
#ifdef QUIVER_WITH_CUDA
    if (reads_on_stream(device)) {
      pending_.push_back(cuda::enqueue_gather_from_tiers(tiers_->tiers(), tiers_->positions(),
                                                         local_ids, tiers_->groups_host_reads(),
                                                         blocks_, "DistFeature.gather"));
      return pending_.back().rows();
    }
#endif
    return tiers_->gather(local_ids.to(tiers_->device()), blocks_).to(device);
  }

  void read_into(const at::Tensor& local_ids, const at::Tensor& into) override {
    if (tiers_->device().is_cpu()) {
      tiers_->gather_into(local_ids, into);
    } else {
      LocalRows::read_into(local_ids, into);
    }
  }

  bool reads_on_stream(const at::Device& device) const override {
#ifdef QUIVER_WITH_CUDA
    return device.is_cuda() && reads_directly(*tiers_, device) && !tiers_->stages_host_rows();
#else
    return false;
#endif
  }

  void check_reads() override {
#ifdef QUIVER_WITH_CUDA
    std::vector<cuda::PendingGather> pending = std::move(pending_);
    pending_.clear();
    for (const cuda::PendingGather& gather : pending) gather.raise_if_failed();
#endif
  }

 private:
  c10::intrusive_ptr<FeatureTiers> tiers_;
  int64_t blocks_ = 0;
#ifdef QUIVER_WITH_CUDA
  std::vector<cuda::PendingGather> pending_;  // enqueued reads, until check_reads
#endif
};

DistFeature::DistFeature(c10::intrusive_ptr<ShardMap> shard_map,
                         c10::intrusive_ptr<FeatureTiers> local,
                         c10::intrusive_ptr<Transport> transport)
    : shard_map_(std::move(shard_map)), local_(std::move(local)), transport_(std::move(transport)) {
  TORCH_CHECK_VALUE(shard_map_ && local_ && transport_,
                    "DistFeature needs a shard map, a local layout and a transport");
  table_rows_ = std::make_unique<TableRows>(local_);
  // What this host cannot do is told to every host before anyone raises: a host that
  // raised alone would leave its peers waiting for it in their first gather.
  std::string problem;
  const int64_t me = transport_->host();
  if (local_->released()) {
    // Told like any other problem: raising here alone left the peers waiting in the
    // agreement below, and their transport's next collective out of step.
    problem = "its local layout was released (Feature.close() frees the memory it read)";
  } else if (transport_->num_hosts() != shard_map_->num_hosts()) {
    problem = "its transport connects " + std::to_string(transport_->num_hosts()) +
              " hosts but its shard map splits the table over " +
              std::to_string(shard_map_->num_hosts());
  } else if (local_->num_rows() != shard_map_->local_rows(me)) {
    problem = "its local table has " + std::to_string(local_->num_rows()) +
              " rows but its shard map gives it " + std::to_string(shard_map_->local_rows(me));
  } else if (row_bytes_of(local_->empty_rows()) == 0) {
    // (empty_rows() holds no row: its sizes had named a table of [0, 0])
    problem = "its table's rows hold no bytes (" + std::to_string(local_->num_rows()) +
              " rows of shape " + c10::str(local_->empty_rows().sizes().slice(1)) + ")";
  }
  const std::string mine = "map=" + std::to_string(shard_map_->fingerprint()) +
                           "\nrows=" + (local_->released() ? "released rows" : describe_rows(*local_)) +
                           "\nproblem=" + problem;
  const std::vector<std::string> everyone = transport_->agree("dist-feature", mine, &tag_);
  std::vector<std::map<std::string, std::string>> fields;
  for (const std::string& text : everyone) fields.push_back(fields_of(text));
  std::ostringstream faults;
  const char* separator = "";
  for (size_t h = 0; h < fields.size(); ++h) {
    if (!fields[h]["problem"].empty()) {
      faults << separator << "host " << h << " cannot take part: " << fields[h]["problem"];
      separator = "; ";
    }
  }
  std::vector<int64_t> other_map;
  for (size_t h = 0; h < fields.size(); ++h) {
    if (fields[h]["map"] != fields[me]["map"]) other_map.push_back(static_cast<int64_t>(h));
  }
  if (!other_map.empty()) {
    faults << separator << "host " << me << "'s shard map differs from that of hosts "
           << c10::IntArrayRef(other_map) << ": every host must load the same partition";
    separator = "; ";
  }
  bool rows_differ = false;
  for (const auto& f : fields) {  // among hosts that can take part (a problem is told above)
    if (f.at("problem").empty() && fields[me]["problem"].empty()) {
      rows_differ |= f.at("rows") != fields[me]["rows"];
    }
  }
  if (rows_differ) {
    faults << separator << "the hosts' tables differ (";
    for (size_t h = 0; h < fields.size(); ++h) {
      faults << (h ? ", " : "") << "host " << h << " serves " << fields[h]["rows"];
    }
    faults << "): every host must serve the same dtype and row shape";
  }
  const std::string fault = faults.str();
  TORCH_CHECK_VALUE(fault.empty(), "DistFeature (host ", me, " of ", transport_->num_hosts(),
                    "): ", fault);
}

DistFeature::~DistFeature() = default;

at::Tensor DistFeature::gather(const at::Tensor& ids, int64_t host_read_blocks) {
  std::lock_guard<std::mutex> lock(transport_->fetch_mutex());
  // The path follows the transport: every host takes it.
  auto gather_on_path = [&](const at::Tensor& asked) {
    if (SlotExchange* slots = transport_->slots()) return gather_in_slots(*slots, asked);
    return gather_grouped(asked);
  };
  if (host_read_blocks < 0) {
    // Refused after this host's part in the step (asking nothing), as bad ids are, so that
    // its peers do not wait for it and its next gather pairs with theirs.
    table_rows_->set_host_read_blocks(0);
    gather_on_path(at::empty({0}, ids.options().dtype(at::kLong)));
    check_host_read_blocks(host_read_blocks);
  }
  table_rows_->set_host_read_blocks(host_read_blocks);
  return gather_on_path(ids);
}

namespace {

// Whether this process already holds a CUDA context: only then may CPU rows come from the
// pinned-memory cache (pinning would otherwise create a context, hundreds of MB on a GPU
// that a CPU-only program never meant to use).
bool holds_cuda_context() {
#ifdef QUIVER_WITH_CUDA
  return at::globalContext().hasCUDA() && c10::cuda::hasPrimaryContext(c10::cuda::current_device());
#else
  return false;
#endif
}

}  // namespace

at::Tensor DistFeature::gather_in_slots(SlotExchange& slots, const at::Tensor& ids) {
  // Every host takes part in every exchange, in step: a host whose ids are bad still
  // answers its peers (asking nothing itself) and raises after the exchange, so no peer
  // waits for it, and none pairs its next gather with this one.
  const at::Device gpu(at::kCUDA, c10::impl::getDeviceGuardImpl(at::kCUDA)->getDevice().index());
  std::exception_ptr failure;
  at::Tensor on_gpu;
  try {
    check_index_vector(ids, "ids");
    on_gpu = ids.is_cuda() ? ids : ids.to(gpu);
  } catch (...) {
    failure = std::current_exception();
    on_gpu = at::empty({0}, at::TensorOptions(gpu).dtype(at::kLong));
  }
  const SlotExchange::Gathered gathered = slots.gather(on_gpu, *shard_map_, *table_rows_);
  if (failure) std::rethrow_exception(failure);
  const int64_t n = on_gpu.numel();
  last_local_fraction_ = n ? static_cast<double>(gathered.held) / n : 0.0;
  return gathered.rows.to(ids.device());
}

at::Tensor DistFeature::gather_grouped(const at::Tensor& ids) {
  PhaseClock clock("distributed gather");
  const int64_t me = host(), hosts = num_hosts();
  const at::Device local_device = local_->device();
  at::Tensor owner, local;
  try {  // what can fail on this host alone (bad ids): before any exchange
    check_index_vector(ids, "ids");
    std::tie(owner, local) = shard_map_->locate(ids);
  } catch (...) {
    if (transport_->is_collective()) {  // its part of the step: asking nothing
      const std::vector<at::Tensor> nothing(num_hosts(), at::empty({0}, at::kLong));
      transport_->fetch(nothing, *table_rows_, at::Device(at::kCPU), tag_);
    }
    throw;
  }
  const at::Device device = ids.device();
  clock.lap("locate");
  // Group 0: rows this host holds (replicated, owner -1, or its own); group h + 1: host h's
  // rows, each group in the ids' order.
  at::Tensor order, sorted_local;
  std::vector<int64_t> count(hosts + 1);
  if (owner.is_cpu()) {
    cpu::OwnerGroups groups = cpu::group_by_owner(owner, local, me, hosts);
    order = std::move(groups.order);
    sorted_local = std::move(groups.sorted_local);
    count = std::move(groups.count);
  } else {
    // On a GPU the group is the narrowest integer that holds it, so that the radix sort
    // makes one pass over 8 bits rather than eight over 64, and the counts come from the
    // sorted groups (one search, one copy) rather than bincount (which synchronizes twice).
    const at::ScalarType group_type = hosts < 255 ? at::kByte : at::kInt;
    at::Tensor group = (owner + 1).to(group_type);
    group.masked_fill_(owner == me, 0);
    at::Tensor sorted_group;
    std::tie(sorted_group, order) = group.sort(/*stable=*/true, 0, false);
    const at::Tensor group_ends =
        at::searchsorted(sorted_group, at::arange(hosts + 1, group.options()), false, true).cpu();
    const int64_t* end = group_ends.const_data_ptr<int64_t>();
    for (int64_t g = 0; g <= hosts; ++g) count[g] = end[g] - (g > 0 ? end[g - 1] : 0);
    sorted_local = local.index_select(0, order);
  }
  clock.lap("group");

  std::vector<at::Tensor> requests(hosts);
  std::vector<int64_t> group_at(hosts);  // where host h's rows start in the sorted order
  for (int64_t h = 0, at = count[0]; h < hosts; ++h) {
    group_at[h] = at;
    requests[h] = sorted_local.narrow(0, at, count[h + 1]);
    at += count[h + 1];
  }
  // The output is the caller's: in a process that uses CUDA it comes from PyTorch's
  // pinned-memory cache, whose blocks are reused (no page faults) and copy to a GPU at full
  // speed.
  const bool on_host = device.is_cpu() && local_device.is_cpu();
  const at::Tensor like = local_->empty_rows();
  const std::vector<int64_t> shape = rows_like(like, ids.numel());
  at::Tensor out = at::empty(
      shape, like.options().device(device).pinned_memory(on_host && holds_cuda_context()));
  const auto place = [&out](const at::Tensor& rows, const at::Tensor& where) {
    if (out.is_cpu()) {
      internal::scatter_rows_into(rows.contiguous(), where.contiguous(), out);
    } else {
      out.index_copy_(0, where, rows);
    }
  };
  // Remote rows first: a collective transport also serves peers from this host's table,
  // on the CPU straight into the transport's send buffer. The rows view the transport's
  // buffers until its next fetch: each host's are placed now.
  const std::vector<at::Tensor> fetched = transport_->fetch(requests, *table_rows_, device, tag_);
  for (int64_t h = 0; h < hosts; ++h) {
    if (count[h + 1] > 0) place(fetched[h].to(device), order.narrow(0, group_at[h], count[h + 1]));
  }
  clock.lap("fetch and place");

  if (count[0] > 0) {
    const at::Tensor held = sorted_local.narrow(0, 0, count[0]);
    at::Tensor mine;
    if (on_host) {
      mine = kept_rows(held_rows_, count[0]);
      local_->gather_into(held, mine);
    } else {
      mine = local_->gather(held.to(local_device), table_rows_->host_read_blocks());
    }
    place(mine.to(device), order.narrow(0, 0, count[0]));
  }
  clock.lap("local");
  last_local_fraction_ = ids.numel() ? static_cast<double>(count[0]) / ids.numel() : 0.0;
  return out;
}

at::Tensor DistFeature::kept_rows(at::Tensor& buffer, int64_t rows) {
  const at::Tensor like = local_->empty_rows();
  const std::vector<int64_t> shape = rows_like(like, rows);
  int64_t elements = 1;
  for (int64_t extent : shape) elements *= extent;
  return kept_prefix(buffer, elements, like.options()).view(shape);
}

namespace {

// Runs `fetch` on a thread of its own and returns its future. The thread is detached and
// the future comes from a promise, so dropping an unfinished FetchWork returns at once
// (std::async's future would block in its destructor until the fetch ended, holding
// Python's GIL); the thread keeps what it uses alive and ends within the transport's
// timeout.
template <typename Fetch>
std::future<FetchWork::Fetched> fetch_on_own_thread(Fetch fetch) {
  auto promise = std::make_shared<std::promise<FetchWork::Fetched>>();
  std::future<FetchWork::Fetched> future = promise->get_future();
  std::thread([promise, fetch = std::optional<Fetch>(std::move(fetch))]() mutable {
    std::optional<FetchWork::Fetched> fetched;
    std::exception_ptr failed;
    try {
      fetched.emplace((*fetch)());
    } catch (...) {
      failed = std::current_exception();
    }
    // What the fetch used (its DistFeature among it) is let go of before the rows are
    // given: a caller that takes them, closes and exits raced this release, and when it
    // dropped the last reference during the interpreter's exit, its tensors' Python
    // objects asked for a GIL that exit no longer gives, aborting the process ("terminate
    // called without an active exception", found by a probe). The rows themselves are
    // moved out of the promise's state by FetchWork::wait.
    fetch.reset();
    if (failed) {
      promise->set_exception(failed);
    } else {
      promise->set_value(std::move(*fetched));
    }
  }).detach();
  return future;
}

}  // namespace

c10::intrusive_ptr<FetchWork> DistFeature::gather_async(const at::Tensor& ids,
                                                       int64_t host_read_blocks) {
  auto self = c10::intrusive_ptr<DistFeature>::reclaim_copy(this);
  const c10::Device device = ids.device();
  if (device.is_cpu()) {
    // The fetch's thread starts on GPU 0; a gather of CPU ids runs on the caller's current
    // GPU (an NCCL exchange on its communicator's), so the thread takes the caller's.
    std::optional<c10::Device> caller_gpu;
    if (at::hasCUDA()) {
      caller_gpu = c10::impl::getDeviceGuardImpl(at::kCUDA)->getDevice();
    }
    return c10::make_intrusive<FetchWork>(
        fetch_on_own_thread([self, ids, host_read_blocks, caller_gpu] {
          const c10::OptionalDeviceGuard on_caller_gpu(caller_gpu);
          return FetchWork::Fetched{self->gather(ids, host_read_blocks), nullptr};
        }));
  }
  // The side stream waits for the ids (maybe still being written on the caller's stream);
  // the caller's stream waits for the rows in FetchWork::wait.
  const c10::impl::VirtualGuardImpl guard_impl(device.type());
  const c10::Stream caller = guard_impl.getStream(device);
  const c10::Stream side = guard_impl.getStreamFromGlobalPool(device, /*isHighPriority=*/false);
  auto ids_ready = std::make_shared<c10::Event>(device.type());
  ids_ready->record(caller);
  return c10::make_intrusive<FetchWork>(fetch_on_own_thread([self, ids, side, ids_ready,
                                                             host_read_blocks] {
    const c10::StreamGuard on_side(side);
    ids_ready->block(side);
    ids.record_stream(side);
    FetchWork::Fetched result{self->gather(ids, host_read_blocks),
                              std::make_shared<c10::Event>(side.device_type())};
    result.written->record(side);
    return result;
  }));
}

FetchWork::FetchWork(std::future<Fetched> fetched) : fetched_(fetched.share()) {}

bool FetchWork::done() const {
  std::lock_guard<std::mutex> lock(taken_mutex_);
  return taken_ || fetched_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

at::Tensor FetchWork::wait(double timeout_s) {
  auto check_not_taken = [&] {
    TORCH_CHECK(!taken_, "FetchWork.wait: the rows were already taken");
  };
  std::shared_future<Fetched> mine;  // this waiter's copy: others may drop theirs meanwhile
  {
    std::lock_guard<std::mutex> lock(taken_mutex_);
    check_not_taken();
    mine = fetched_;
  }
  check_wait_seconds(timeout_s, "FetchWork.wait");
  const InterruptWatch interrupts;  // interrupted, the fetch goes on and may be waited for again
  const bool ready = ready_within(mine, timeout_s < 0 ? kNoLimitS : timeout_s, &interrupts);
  if (!ready && interrupts.interrupted()) throw Interrupted("a fetch of remote rows");
  TORCH_CHECK(ready,
              "DistFeature.gather_async: the fetch did not finish within ", timeout_s,
              " s (the transport raises naming a silent peer once its own timeout passes)");
  {
    std::lock_guard<std::mutex> lock(taken_mutex_);
    check_not_taken();
    taken_ = true;
    fetched_ = {};  // the work no longer holds the rows once they are taken
  }
  // Moved out of the shared state (rethrowing the fetch's error): the fetching thread may
  // be the state's last holder, and must not drop rows that Python may come to own while
  // the interpreter exits (see fetch_on_own_thread). Taken once (taken_), and nothing else
  // reads the value, so moving it out of the const view is safe.
  Fetched fetched = std::move(const_cast<Fetched&>(mine.get()));
  if (fetched.written) {
    // The rows were written on the side stream: order the caller's stream after them, and
    // tell the allocator the caller's stream uses them.
    const c10::impl::VirtualGuardImpl guard_impl(fetched.rows.device().type());
    const c10::Stream caller = guard_impl.getStream(fetched.rows.device());
    fetched.written->block(caller);
    fetched.rows.record_stream(caller);
  }
  return fetched.rows;
}

}  // namespace quiver::runtime
