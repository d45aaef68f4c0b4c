#include <quiver/batch_prefetcher.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "ops/errors.h"
#include "runtime/bounded_wait.h"
#include "runtime/intra_op_threads.h"

#include <algorithm>
#include <utility>

namespace quiver::runtime {

namespace {

at::Device sampling_device(int64_t device) {
  if (device < 0) {
    TORCH_CHECK_VALUE(device == -1, "BatchPrefetcher: device must be a GPU index or -1 for the CPU, "
                      "got ", device);
    return at::Device(at::kCPU);
  }
  TORCH_CHECK_VALUE(c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA),
                    "BatchPrefetcher: device=", device, " names a GPU, and this process has no CUDA");
  const auto count = c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).deviceCount();
  TORCH_CHECK_VALUE(device < count, "BatchPrefetcher: device=", device, ", but this process sees ",
                    static_cast<int>(count), " GPU(s)");
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device));
}

}  // namespace

BatchPrefetcher::BatchPrefetcher(c10::intrusive_ptr<SubgraphSampler> sampler,
                                 std::optional<c10::intrusive_ptr<FeatureTiers>> features,
                                 std::optional<at::Tensor> labels, int64_t device, int64_t depth,
                                 int64_t host_read_blocks, int64_t gather_threads)
    : sampler_(std::move(sampler)),
      features_(std::move(features)),
      labels_(std::move(labels)),
      device_(sampling_device(device)),
      depth_(depth),
      host_read_blocks_(host_read_blocks),
      gather_threads_(gather_threads) {
  // Null pointers reach here only from C++ (Python's None is an empty optional): they had
  // crashed the process at the first use.
  TORCH_CHECK_VALUE(sampler_, "BatchPrefetcher: sampler is a null pointer");
  TORCH_CHECK_VALUE(!features_ || *features_, "BatchPrefetcher: features holds a null pointer "
                    "(std::nullopt: batches without features)");
  TORCH_CHECK_VALUE(depth >= 1, "BatchPrefetcher: depth must be >= 1, got ", depth);
  TORCH_CHECK_VALUE(host_read_blocks >= 0, "BatchPrefetcher: host_read_blocks must be >= 0, got ",
                    host_read_blocks);
  TORCH_CHECK_VALUE(gather_threads >= 0 && gather_threads <= 4096,
                    "BatchPrefetcher: gather_threads must be in [0, 4096], got ", gather_threads);
  if (labels_) {
    TORCH_CHECK_VALUE(labels_->device() == device_, "BatchPrefetcher: labels are on ",
                      labels_->device(), ", but batches are sampled on ", device_);
    TORCH_CHECK_VALUE(labels_->dim() >= 1 && labels_->size(0) == sampler_->num_nodes(),
                      "BatchPrefetcher: labels must have a row per node of the sampler's graph (",
                      sampler_->num_nodes(), "), got shape ", labels_->sizes());
  }
  if (features_) {  // else the first batch named ids out of range, not the features
    TORCH_CHECK_VALUE(!(*features_)->released(), "BatchPrefetcher: features were released "
                      "(Feature.close() frees the memory they read): take a layout from an "
                      "open Feature");
    TORCH_CHECK_VALUE((*features_)->num_rows() >= sampler_->num_nodes(), "BatchPrefetcher: ",
                      "features hold ", (*features_)->num_rows(), " rows, fewer than the ",
                      "sampler's graph has nodes (", sampler_->num_nodes(), ")");
  }
  if (device_.is_cuda()) {
    stream_ = c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA)
                  .getStreamFromGlobalPool(device_, /*isHighPriority=*/false);
  }
}

BatchPrefetcher::~BatchPrefetcher() { stop(); }

void BatchPrefetcher::stop() {
  const std::lock_guard<std::mutex> control(control_mutex_);
  stop_epoch();
}

void BatchPrefetcher::start(std::vector<at::Tensor> seed_batches,
                            std::vector<int64_t> sampling_seeds) {
  TORCH_CHECK_VALUE(seed_batches.size() == sampling_seeds.size(), "BatchPrefetcher.start: ",
                    seed_batches.size(), " seed batches but ", sampling_seeds.size(),
                    " sampling seeds; give one seed per batch");
  for (size_t i = 0; i < seed_batches.size(); ++i) {
    const at::Tensor& seeds = seed_batches[i];
    TORCH_CHECK_VALUE(seeds.defined() && seeds.is_cpu() && seeds.dim() == 1,
                      "BatchPrefetcher.start: seed_batches[", i,
                      "] must be 1-D node ids in host "
                      "memory, got ",
                      seeds.defined()
                          ? errors::dtype_name(seeds.scalar_type()) + " on " + seeds.device().str()
                          : std::string("None"),
                      " of shape ", seeds.defined() ? seeds.sizes() : at::IntArrayRef{});
  }
  const std::lock_guard<std::mutex> control(control_mutex_);
  stop_epoch();
  if (stream_) {
    // What the caller queued before the epoch (a store's cache tiers built on its stream, the
    // labels copied there) is done before the side stream reads it.
    c10::Event queued(c10::DeviceType::CUDA);
    queued.record(c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(device_));
    queued.block(*stream_);
  }
  // The epoch's seeds stay with this object, not the thread: the last reference to a tensor
  // that Python made releases its Python object, which takes Python's lock, and a caller
  // that joins the thread (a destructor run by Python's garbage collector) may hold it.
  epoch_seeds_ = std::move(seed_batches);
  epoch_sampling_seeds_ = std::move(sampling_seeds);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    epoch_done_ = false;
    handed_out_ = 0;
  }
  try {
    worker_ = std::thread([this] { build_epoch(); });
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    epoch_done_ = true;  // no thread: next() must not wait for one
    throw;
  }
}

std::vector<at::Tensor> BatchPrefetcher::build_one(const at::Tensor& seeds, uint64_t sampling_seed,
                                                   at::Generator& generator) {
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_current_seed(sampling_seed);
  }
  const at::Tensor ids = seeds.contiguous();
  auto [node_ids, rows, cols, edge_ids, nodes_per_hop, edges_per_hop] =
      device_.is_cuda() ? sampler_->sample_subgraph_on(ids, device_.index(), generator)
                        : sampler_->sample_subgraph(ids, generator);
  at::Tensor x = features_ ? (*features_)->gather(node_ids, host_read_blocks_) : at::Tensor();
  at::Tensor y;
  if (labels_) {
    const int64_t batch_size = nodes_per_hop.select(0, 0).item<int64_t>();  // the seeds, first
    y = labels_->index_select(0, node_ids.narrow(0, 0, batch_size));
  }
  auto empty_if_none = [&](const at::Tensor& t) {
    return t.defined() ? t : at::empty({0}, node_ids.options());
  };
  return {node_ids, rows, cols, edge_ids, nodes_per_hop, edges_per_hop, empty_if_none(x),
          empty_if_none(y)};
}

void BatchPrefetcher::build_epoch() {
  const std::vector<at::Tensor>& seed_batches = epoch_seeds_;
  const std::vector<int64_t>& sampling_seeds = epoch_sampling_seeds_;
  auto finish = [&](std::optional<Built> last) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (last && !stopping_) built_.push_back(std::move(*last));
    epoch_done_ = true;
    changed_.notify_all();
  };
  // The error in flight ends the epoch; the caller raises it in its turn.
  auto fail = [&] {
    Built failed;
    failed.error = std::current_exception();
    finish(std::move(failed));
  };
  std::optional<at::Generator> generator;
  std::optional<c10::StreamGuard> on_stream;
  try {
    if (stream_) on_stream.emplace(*stream_);  // also makes the sampling GPU current here
    const int threads = gather_threads_ > 0
                            ? static_cast<int>(gather_threads_)
                            : std::max(1, at::get_num_threads() - 2);
    limit_intra_op_threads(threads);
    generator = device_.is_cuda()
                    ? at::globalContext().getAcceleratorHooksInterface(at::kCUDA).getNewGenerator(
                          device_.index())
                    : at::detail::createCPUGenerator();
  } catch (...) {
    fail();
    return;
  }
  for (size_t i = 0; i < seed_batches.size(); ++i) {
    bool ahead = false;  // of the model: this batch waits for room among those built
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ahead = static_cast<int64_t>(built_.size()) >= depth_;
      changed_.wait(lock, [&] { return stopping_ || static_cast<int64_t>(built_.size()) < depth_; });
      if (stopping_) break;
    }
    // The host's pace, on the CPU; a GPU's is read from events in next().
    if (ahead && !stream_ && features_) (*features_)->note_loader_pace(/*loader_ahead=*/true);
    Built item;
    try {
      item.tensors =
          build_one(seed_batches[i], static_cast<uint64_t>(sampling_seeds[i]), *generator);
      if (stream_) {  // timed, so that the pace can tell which came first
        item.ready.emplace(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
        item.ready->record(*stream_);
      }
    } catch (...) {
      fail();  // nothing is built after a failed batch
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) break;
    built_.push_back(std::move(item));
    changed_.notify_all();
  }
  finish(std::nullopt);
}

std::vector<at::Tensor> BatchPrefetcher::next() {
  Built item;
  // handed_out_ is written by this thread alone (next and start). Every model waits for
  // an epoch's first batch: its pace says nothing.
  const bool first_of_epoch = handed_out_ == 0;
  std::optional<c10::Event> asked;  // before any wait for the batch, which it must time
  if (stream_ && features_ && !first_of_epoch) {
    asked.emplace(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
    asked->record(c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(device_));
  }
  bool model_waited = false;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    model_waited = built_.empty() && !epoch_done_ && !first_of_epoch;
    const InterruptWatch interrupts;  // interrupted, nothing is taken: next() may be called again
    if (!wait_up_to(changed_, lock, kNoLimitS, [&] { return !built_.empty() || epoch_done_; },
                    &interrupts)) {
      throw Interrupted("the next batch");
    }
    if (built_.empty()) return {};
    item = std::move(built_.front());
    built_.pop_front();
    ++handed_out_;
    changed_.notify_all();  // room for the next build
  }
  if (model_waited && !stream_ && features_) {
    (*features_)->note_loader_pace(/*loader_ahead=*/false);
  }
  if (item.error) std::rethrow_exception(item.error);
  if (item.ready) {
    const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
    const c10::Stream consumer = cuda.getStream(device_);
    item.ready->block(consumer);
    if (asked) {
      pace_probes_.push_back(PaceProbe{std::move(*asked), std::move(*item.ready)});
      note_decided_paces();
    }
    // Freed by the caller, the batch's memory is not the side stream's to reuse until the
    // caller's stream is done with it.
    for (const at::Tensor& t : item.tensors) {
      if (t.defined() && t.is_cuda() && t.has_storage()) {
        cuda.recordDataPtrOnStream(t.storage().data_ptr(), consumer);
      }
    }
  }
  return std::move(item.tensors);
}

void BatchPrefetcher::note_decided_paces() {
  // Kept to a few: a caller whose stream runs far behind leaves them undecided for long.
  constexpr size_t kMaxProbes = 64;
  while (!pace_probes_.empty()) {
    PaceProbe& probe = pace_probes_.front();
    const bool asked_done = probe.asked.query(), ready_done = probe.ready.query();
    if (asked_done || ready_done) {
      // Both done: the order of their times; one done: that one came first.
      const bool ready_first = asked_done && ready_done
                                   ? probe.ready.elapsedTime(probe.asked) >= 0.0
                                   : ready_done;
      (*features_)->note_loader_pace(/*loader_ahead=*/ready_first);
    } else if (pace_probes_.size() <= kMaxProbes) {
      return;  // this one, and most likely the later ones, not yet known
    }
    pace_probes_.pop_front();
  }
}

void BatchPrefetcher::stop_epoch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    changed_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
  // Dropped here, in the caller's thread, as the seeds are (see start).
  epoch_seeds_.clear();
  epoch_sampling_seeds_.clear();
  pace_probes_.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  built_.clear();
  stopping_ = false;
  epoch_done_ = true;
}

}  // namespace quiver::runtime
