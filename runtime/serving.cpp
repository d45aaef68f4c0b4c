#include <quiver/serving.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <quiver/ops.h>
#include <caffe2/serialize/crc_alt.h>  // (its definitions: included in this file alone)
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include "ops/checks.h"
#include "ops/errors.h"
#include "ops/internal/sampling.h"
#include "runtime/bounded_wait.h"
#include "runtime/error_message.h"
#include "runtime/intra_op_threads.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <fstream>
#include <numeric>

namespace quiver::runtime {

namespace {

constexpr size_t kRecordsKept = 100000;
constexpr int64_t kMaxSamplers = 1024;  // CPU samplers, and GPU streams, each a thread

double ms_between(std::chrono::steady_clock::time_point from,
                  std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// latency = a + b * cost by least squares.
std::vector<double> fit_line(const std::vector<std::pair<double, double>>& points) {
  const double n = static_cast<double>(points.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) {
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double spread = n * sxx - sx * sx;
  const double b = spread > 0 ? (n * sxy - sx * sy) / spread : 0.0;
  return {(sy - b * sx) / n, b};
}

// Each node's expected sampled count for `fanouts` (see expected_sampled_counts), over a
// CSR already checked.
at::Tensor psgs_of(const at::Tensor& indptr, const at::Tensor& indices,
                   const std::vector<int64_t>& fanouts) {
  const at::Tensor ptr = indptr.to(at::kCPU, at::kLong);
  const at::Tensor idx = indices.to(at::kCPU, at::kLong);
  const at::Tensor begin = ptr.narrow(0, 0, ptr.numel() - 1);
  const at::Tensor end = ptr.narrow(0, 1, ptr.numel() - 1);
  const at::Tensor degree = (end - begin).to(at::kDouble);
  at::Tensor values = at::ones({ptr.numel() - 1}, at::kDouble);
  for (auto it = fanouts.rbegin(); it != fanouts.rend(); ++it) {
    at::Tensor sums = at::zeros({idx.numel() + 1}, at::kDouble);
    at::Tensor running = sums.narrow(0, 1, idx.numel());
    at::cumsum_out(running, values.index_select(0, idx), 0);
    const at::Tensor neighbor_sum = sums.index_select(0, end) - sums.index_select(0, begin);
    const at::Tensor taken = *it < 0 ? degree : degree.clamp_max(static_cast<double>(*it));
    values = 1 + at::where(degree > 0, taken / degree.clamp_min(1) * neighbor_sum,
                           at::zeros_like(degree));
  }
  return values;
}

// The seed of batch `number`'s draws (splitmix64 of the pair: CPU generators keep only the
// low 32 bits of a seed, so every bit of the batch number must reach them).
uint64_t batch_seed(uint64_t seed, int64_t number) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (static_cast<uint64_t>(number) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

struct ServingRuntime::Sampler {
  bool on_gpu;
  at::Generator generator;
  std::optional<c10::Stream> stream;  // when the model's device is a GPU
  // A GPU sampler's batch shapes captured as CUDA graphs and replayed (a few, the most
  // recently used), as a GraphSageSampler's are.
  std::unique_ptr<internal::SamplingGraphs> graphs;
};

std::unique_ptr<ServingRuntime::Sampler> ServingRuntime::make_sampler(bool on_gpu,
                                                                      uint64_t seed) const {
  at::Generator generator;
  if (on_gpu) {
    generator = at::globalContext().defaultGenerator(device_).clone();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_current_seed(seed);
  } else {
    generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  }
  std::optional<c10::Stream> stream;
  if (device_.is_cuda()) {
    stream = c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA)
                 .getStreamFromGlobalPool(device_, /*isHighPriority=*/false);
  }
  return std::make_unique<Sampler>(
      Sampler{on_gpu, std::move(generator), stream,
              on_gpu ? std::make_unique<internal::SamplingGraphs>(options_.capture_batches)
                     : nullptr});
}

ServingRuntime::ServingRuntime(at::Tensor indptr, at::Tensor indices,
                               std::optional<at::Tensor> gpu_indptr,
                               std::optional<at::Tensor> gpu_indices,
                               c10::intrusive_ptr<FeatureTiers> features, ServingOptions options)
    : indptr_(std::move(indptr)),
      indices_(std::move(indices)),
      gpu_indptr_(std::move(gpu_indptr)),
      gpu_indices_(std::move(gpu_indices)),
      features_(std::move(features)),
      options_(std::move(options)),
      device_(options_.device) {
  // (a null pointer, from C++ only, had crashed the process on its first use)
  TORCH_CHECK_VALUE(features_, "ServingRuntime: features is a null pointer: give a FeatureTiers");
  const ServingOptions& o = options_;
  check_fanouts(o.fanouts, /*replace=*/false, "ServingRuntime: fanouts");
  TORCH_CHECK_VALUE(o.max_batch_nodes >= 1, "ServingRuntime: max_batch_nodes must be >= 1, got ",
                    o.max_batch_nodes);
  TORCH_CHECK_VALUE(o.max_queue >= 1, "ServingRuntime: max_queue must be >= 1, got ", o.max_queue);
  TORCH_CHECK_VALUE(o.max_queue_nodes >= 0, "ServingRuntime: max_queue_nodes must be >= 0 (0: 8 x ",
                    "max_batch_nodes), got ", o.max_queue_nodes);
  if (o.max_queue_nodes == 0) {
    // Saturated: 8 x a huge max_batch_nodes would wrap negative and refuse every request.
    options_.max_queue_nodes = o.max_batch_nodes > std::numeric_limits<int64_t>::max() / 8
                                   ? std::numeric_limits<int64_t>::max()
                                   : 8 * o.max_batch_nodes;
  }
  TORCH_CHECK_VALUE(o.max_wait_ms >= 0 && std::isfinite(o.max_wait_ms),
                    "ServingRuntime: max_wait_ms must be finite and >= 0, got ", o.max_wait_ms);
  TORCH_CHECK_VALUE(o.latency_objective_ms > 0 && std::isfinite(o.latency_objective_ms),
                    "ServingRuntime: latency_objective_ms must be finite and > 0, got ",
                    o.latency_objective_ms);
  TORCH_CHECK_VALUE(o.cpu_samplers >= 0 && o.gpu_streams >= 0 && o.cpu_samplers + o.gpu_streams >= 1,
                    "ServingRuntime: needs a CPU sampler or a GPU stream, got cpu_samplers=",
                    o.cpu_samplers, " and gpu_streams=", o.gpu_streams);
  // A thread each: past this many a runtime only thrashes, and a count in the billions would
  // exhaust the process (a thread that cannot start would end it, in this constructor).
  TORCH_CHECK_VALUE(o.cpu_samplers <= kMaxSamplers && o.gpu_streams <= kMaxSamplers,
                    "ServingRuntime: cpu_samplers and gpu_streams must each be <= ", kMaxSamplers,
                    ", got cpu_samplers=", o.cpu_samplers, " and gpu_streams=", o.gpu_streams);
  TORCH_CHECK_VALUE(indptr_.is_cpu() && indices_.is_cpu() && indptr_.dim() == 1 &&
                        indptr_.numel() >= 1,
                    "ServingRuntime: indptr and indices must be the CSR on the CPU, got indptr ",
                    indptr_.sizes(), " on ", indptr_.device(), " and indices on ",
                    indices_.device());
  TORCH_CHECK_VALUE(o.gpu_streams == 0 || (device_.is_cuda() && gpu_indptr_ && gpu_indices_),
                    "ServingRuntime: gpu_streams=", o.gpu_streams,
                    " needs the model on a GPU (device ", device_,
                    ") and the graph as the GPU reads it (gpu_indptr, gpu_indices)");
  if (device_.is_cuda() && !device_.has_index()) {  // "cuda": the current GPU, fixed now
    device_ = at::Device(at::kCUDA, c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getDevice().index());
  }
  // UVA: the GPU samplers read pinned host memory; a pin of our own keeps it readable for as
  // long as the runtime lives, whoever pinned it.
  for (const std::optional<at::Tensor>& t : {gpu_indptr_, gpu_indices_}) {
    if (o.gpu_streams == 0 || !t || t->is_cuda()) continue;
    TORCH_CHECK_VALUE(t->is_cpu() && t->is_pinned(),
                      "ServingRuntime: gpu_indptr and gpu_indices must be in GPU memory or in "
                      "pinned host memory (UVA), got a tensor on ", t->device(),
                      t->is_cpu() ? " that is not pinned" : "");
    gpu_pins_.push_back(c10::make_intrusive<HostPin>(*t));
  }
  // The whole CSR once, by name (a request would otherwise find a bad one, or the PSGS
  // below fail with an index error that names neither array).
  check_whole_csr(indptr_, indices_, std::nullopt);
  num_nodes_ = indptr_.numel() - 1;
  // (else built, then every request failed naming the layout, as BatchPrefetcher refuses)
  TORCH_CHECK_VALUE(!features_->released(), "ServingRuntime: features were released ",
                    "(Feature.close() frees the memory they read): take a layout from an open ",
                    "Feature");
  TORCH_CHECK_VALUE(features_->num_rows() >= num_nodes_, "ServingRuntime: the features hold ",
                    features_->num_rows(), " rows for a graph of ", num_nodes_, " nodes");
  psgs_ = psgs_of(indptr_, indices_, o.fanouts).contiguous();  // checked above
  cpu_sampler_threads_ =
      std::max<int>(1, at::get_num_threads() / static_cast<int>(std::max<int64_t>(1, o.cpu_samplers)));

  const auto seed = static_cast<uint64_t>(o.seed);
  for (int64_t i = 0; i < o.cpu_samplers; ++i) samplers_.push_back(make_sampler(false, seed + i));
  for (int64_t i = 0; i < o.gpu_streams; ++i)
    samplers_.push_back(make_sampler(true, seed + 1000 + i));

  threshold_ = o.threshold;
  if (std::isnan(threshold_)) {
    if (o.cpu_samplers == 0) {
      threshold_ = -1.0;
    } else if (o.gpu_streams == 0) {
      threshold_ = std::numeric_limits<double>::infinity();
    } else {
      std::tie(threshold_, cpu_line_, gpu_line_) =
          calibrate(calibration_sizes(o.max_batch_nodes), 5, o.seed);
      by_load_ = true;
    }
  }
  samplers_running_ = static_cast<int64_t>(samplers_.size());
  for (auto& sampler : samplers_) {
    Sampler* s = sampler.get();
    sampler_threads_.emplace_back([this, s] { sample_loop(*s); });
  }
  batcher_ = std::thread([this] { batch_loop(); });
}

ServingRuntime::~ServingRuntime() {
  try {
    // With no model thread of its own nothing can answer once the last handle is gone
    // (Python's model threads hold one): waiting would only stall the dropping thread.
    close(model_threads_.empty() ? 0.0 : 30.0);
  } catch (...) {  // a destructor must not throw; close() only fails answers
  }
}

// ---- requests ----

int64_t ServingRuntime::submit(const at::Tensor& ids) {
  TORCH_CHECK_VALUE(ids.dim() == 1, "node ids must be a 1-D tensor, got shape ", ids.sizes());
  TORCH_CHECK_TYPE(at::isIntegralType(ids.scalar_type(), /*includeBool=*/false),
                   "node ids must be integers, got ", errors::dtype_name(ids.scalar_type()));
  TORCH_CHECK_VALUE(ids.numel() >= 1, "a request needs at least one node id");
  TORCH_CHECK_VALUE(ids.numel() <= options_.max_batch_nodes, "a request holds at most ",
                    options_.max_batch_nodes, " node ids, got ", ids.numel());
  at::Tensor owned = ids.to(at::kCPU, at::kLong).contiguous();
  const double request_cost = checked_cost(owned);  // here, not under the batcher's lock
  std::lock_guard<std::mutex> lock(mutex_);
  if (closing_) return kClosed;
  if (static_cast<int64_t>(queue_.size()) >= options_.max_queue) return kOverloaded;
  // An empty queue takes any request max_batch_nodes allows.
  if (queued_nodes_ > 0 && queued_nodes_ + owned.numel() > options_.max_queue_nodes) {
    return kOverloaded;
  }
  queued_nodes_ += owned.numel();
  const int64_t ticket = next_ticket_++;
  answers_.try_emplace(ticket);
  queue_.push_back(Request{ticket, std::move(owned), Clock::now(), request_cost});
  ++accepted_;
  batcher_wakes_.notify_one();
  return ticket;
}

at::Tensor ServingRuntime::wait(int64_t ticket, double timeout_s) {
  check_wait_seconds(timeout_s, "ServingRuntime.wait");
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = answers_.find(ticket);
  TORCH_CHECK_VALUE(it != answers_.end(), "ServingRuntime.wait: ticket ", ticket,
                    " is not waiting for an answer (never given, or answered already)");
  Answer& answer = it->second;  // stays put while others are added and erased
  // One waiter a ticket: the waiter erases the answer, with its condition variable.
  TORCH_CHECK_VALUE(!answer.waited && !answer.collected, "ServingRuntime.wait: ticket ", ticket,
                    " is already being waited for by another thread, or collected");
  answer.waited = true;
  auto answered = [&] { return answer.done; };
  // By key, not by `it`: a submit while this thread waited may have rehashed the table.
  const InterruptWatch interrupts;
  if (!wait_up_to(answer.answered, lock, timeout_s < 0 ? kNoLimitS : timeout_s, answered,
                  &interrupts)) {
    answers_.erase(ticket);
    if (interrupts.interrupted()) {
      throw Interrupted("the answer to request " + std::to_string(ticket));
    }
    TORCH_CHECK(false, "ServingRuntime.wait: request ", ticket, " was not answered within ",
                timeout_s, " s");
  }
  at::Tensor rows = std::move(answer.rows);
  const std::string error = std::move(answer.error);
  answers_.erase(ticket);
  TORCH_CHECK(error.empty(), error);
  return rows;
}

void ServingRuntime::forget(int64_t ticket) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = answers_.find(ticket);
  // answer() skips a ticket that is gone, as it does one whose waiter gave up.
  if (it != answers_.end() && !it->second.waited && !it->second.collected) answers_.erase(it);
}

void ServingRuntime::collect(int64_t ticket) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = answers_.find(ticket);
  TORCH_CHECK_VALUE(it != answers_.end(), "ServingRuntime.collect: ticket ", ticket,
                    " is not waiting for an answer (never given, or answered already)");
  Answer& answer = it->second;
  TORCH_CHECK_VALUE(!answer.waited && !answer.collected, "ServingRuntime.collect: ticket ",
                    ticket, " is already being waited for or collected");
  answer.collected = true;
  if (answer.done) hand_out(ticket);  // answered before it was collected
}

std::vector<int64_t> ServingRuntime::next_collected(double timeout_s) {
  check_wait_seconds(timeout_s, "ServingRuntime.next_collected");
  std::unique_lock<std::mutex> lock(mutex_);
  // A closed runtime hands out nothing more: a wait for it ends (empty) rather than never.
  wait_up_to(collected_ready_, lock, std::max(0.0, timeout_s),
             [&] { return !collected_.empty() || closed_; });
  std::vector<int64_t> tickets;
  tickets.swap(collected_);
  return tickets;
}

at::Tensor ServingRuntime::take(int64_t ticket) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = answers_.find(ticket);
  TORCH_CHECK_VALUE(it != answers_.end() && it->second.collected && it->second.done,
                    "ServingRuntime.take: ticket ", ticket,
                    " is not an answer next_collected() handed out (or was taken already)");
  at::Tensor rows = std::move(it->second.rows);
  const std::string error = std::move(it->second.error);
  answers_.erase(it);
  TORCH_CHECK(error.empty(), error);
  return rows;
}

void ServingRuntime::hand_out(int64_t ticket) {
  collected_.push_back(ticket);
  collected_ready_.notify_one();
}

void ServingRuntime::mark_answered(int64_t ticket, Answer& answer) {
  answer.done = true;
  if (answer.collected) {
    hand_out(ticket);
  } else {
    answer.answered.notify_one();
  }
}

// ---- batching, sampling and the model side ----

void ServingRuntime::batch_loop() {
  // At most kNoLimitS (about 32 years): a longer wait, in int64 nanoseconds added to the
  // enqueue time, would wrap into the past and close every batch at once.
  const auto max_wait = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double, std::milli>(std::min(options_.max_wait_ms, kNoLimitS * 1e3)));
  std::unique_lock<std::mutex> lock(mutex_);
  const int64_t slots = static_cast<int64_t>(samplers_.size());
  while (true) {
    // A free sampler first, so requests wait in the bounded queue rather than here.
    batcher_wakes_.wait(lock, [&] {
      return abandoned_ || (in_flight_ < slots && (!queue_.empty() || closing_));
    });
    if (abandoned_ || (queue_.empty() && closing_)) break;
    Batch batch;
    batch.id = next_batch_++;
    int64_t nodes = 0;
    double batch_cost = 0;
    const Clock::time_point deadline = queue_.front().enqueued + max_wait;
    // Dispatch by load, with the GPU side full and a CPU sampler free: the batch closes at
    // the cost the CPU is predicted to sample in time (once it has waited up to max_wait),
    // so the CPU takes a share rather than the batch growing while it waits for the GPU
    // (at high load batches grow past what a CPU sampler does within the objective).
    // The wait counted is the front request's by the time the batch closes: a request put
    // back by a full runtime has waited longer than max_wait already.
    double cost_cap = std::numeric_limits<double>::infinity();
    if (by_load_ && in_side_[1] >= samplers_on(true) && in_side_[0] < samplers_on(false)) {
      const Clock::time_point closes = std::max(Clock::now(), deadline);
      cost_cap = cost_in_time(false, ms_between(queue_.front().enqueued, closes) / 1000);
    }
    while (true) {
      if (queue_.empty()) {
        if (closing_ || no_holding_ ||
            !batcher_wakes_.wait_until(lock, deadline, [&] {
              return !queue_.empty() || closing_ || no_holding_;
            }))
          break;
        if (queue_.empty()) break;  // closing: what is batched goes now
      }
      const int64_t size = queue_.front().ids.numel();
      if (nodes + size > options_.max_batch_nodes) break;  // starts the next batch
      if (nodes > 0 && batch_cost + queue_.front().cost > cost_cap) break;
      nodes += size;
      batch_cost += queue_.front().cost;
      queued_nodes_ -= queue_.front().ids.numel();
      batch.requests.push_back(std::move(queue_.front()));
      queue_.pop_front();
      if (nodes == options_.max_batch_nodes) break;
    }
    ++in_flight_;
    lock.unlock();
    std::vector<at::Tensor> parts;
    for (const Request& r : batch.requests) parts.push_back(r.ids);
    batch.ids = at::cat(parts);
    batch.cost = batch_cost;
    lock.lock();
    batch.on_gpu = send_to_gpu(batch);
    const auto side_full = [&](bool gpu) {
      return in_side_[gpu] >= samplers_on(gpu);
    };
    if (by_load_ && !closing_ && !abandoned_ && side_full(batch.on_gpu) &&
        !side_full(!batch.on_gpu) && better_elsewhere(batch, Clock::now())) {
      // Its side holds as many batches as it has samplers, and the other side, with one
      // free, is predicted to finish it before a sampler here frees up and samples it, or
      // in time: a busy GPU overflows onto idle CPU samplers (and back), a batch too large
      // for them waits.
      batch.on_gpu = !batch.on_gpu;
      batch.predicted_s = line_latency(batch.on_gpu, batch.cost);
    }
    if (by_load_ && !closing_ && !abandoned_ && side_full(batch.on_gpu)) {
      // Both sides hold as many batches as they have samplers (sampling, waiting for the
      // model or in it): rather than queue a small batch behind them (while requests that
      // would have joined it arrive), its requests go back to the front of the queue and the
      // batch is formed again, larger, once a batch is answered. The same back-pressure as a
      // runtime of one side alone.
      for (auto it = batch.requests.rbegin(); it != batch.requests.rend(); ++it) {
        queued_nodes_ += it->ids.numel();  // queued again: max_queue_nodes counts them
        queue_.push_front(std::move(*it));
      }
      --in_flight_;
      const int64_t seen = answered_batches_;
      batcher_wakes_.wait(lock, [&] { return abandoned_ || closing_ || answered_batches_ != seen; });
      continue;
    }
    ++in_side_[batch.on_gpu];
    pending_s_[batch.on_gpu] += batch.predicted_s;
    const bool on_gpu = batch.on_gpu;
    (on_gpu ? gpu_work_ : cpu_work_).push_back(std::move(batch));
    work_queued_[on_gpu].notify_one();
  }
  batcher_done_ = true;
  for (auto& side : work_queued_) side.notify_all();
  batch_ready_.notify_all();
  progress_.notify_all();
}

int64_t ServingRuntime::samplers_on(bool gpu) const {
  return gpu ? options_.gpu_streams : options_.cpu_samplers;
}

double ServingRuntime::line_latency(bool gpu, double cost) const {
  const std::vector<double>& line = gpu ? gpu_line_ : cpu_line_;
  return line[0] + line[1] * cost;
}

double ServingRuntime::predicted_finish_s(bool gpu, double cost) const {
  return pending_s_[gpu] / static_cast<double>(samplers_on(gpu)) + line_latency(gpu, cost);
}

double ServingRuntime::sampling_budget_s() const {
  return options_.latency_objective_ms / 2000;  // half: the rest for the model and the answer
}

double ServingRuntime::cost_in_time(bool gpu, double waited_s) const {
  const double per_cost_s = (gpu ? gpu_line_ : cpu_line_)[1];
  if (per_cost_s <= 0) return std::numeric_limits<double>::infinity();
  // What is left once the wait, the side's pending work and the line's intercept are paid.
  const double left_s = sampling_budget_s() - waited_s - predicted_finish_s(gpu, 0.0);
  return std::max(0.0, left_s / per_cost_s);
}

bool ServingRuntime::better_elsewhere(const Batch& batch, Clock::time_point now) const {
  const bool here = batch.on_gpu;
  const double there_done = predicted_finish_s(!here, batch.cost);
  // A full side frees a sampler every (time a batch holds one) / samplers, on average.
  const double here_done = residence_s_[here] / static_cast<double>(samplers_on(here)) +
                           line_latency(here, batch.cost);
  if (there_done <= here_done) return true;
  // Slower there, but in time: waiting here for a sampler would let the batch grow while
  // the other side's samplers idle (the sum of both sides is what holds a rate).
  const double waited_s = ms_between(batch.requests.front().enqueued, now) / 1000;
  return waited_s + there_done <= sampling_budget_s();
}

bool ServingRuntime::send_to_gpu(Batch& batch) {
  if (!by_load_) return on_gpu_by_threshold(batch.cost);
  // A tie goes to the CPU, as at the threshold: an idle runtime then sends a batch where
  // its reported threshold says.
  const bool gpu = predicted_finish_s(true, batch.cost) < predicted_finish_s(false, batch.cost);
  batch.predicted_s = line_latency(gpu, batch.cost);
  return gpu;
}

void ServingRuntime::sample_loop(Sampler& sampler) {
  std::deque<Batch>& work = sampler.on_gpu ? gpu_work_ : cpu_work_;
  if (!sampler.on_gpu) limit_intra_op_threads(cpu_sampler_threads_);
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_queued_[sampler.on_gpu].wait(lock,
                                      [&] { return abandoned_ || !work.empty() || batcher_done_; });
    if (abandoned_ || work.empty()) break;  // the batcher is done and nothing is left
    Batch batch = std::move(work.front());
    work.pop_front();
    batch.started = Clock::now();
    lock.unlock();
    {
      // Each sampler's own stream, drawn in the order its thread happened to take batches,
      // gave one seed's runs several sets of answers with two CPU samplers (a probe).
      std::lock_guard<std::mutex> drawing(sampler.generator.mutex());
      sampler.generator.set_current_seed(
          batch_seed(static_cast<uint64_t>(options_.seed), batch.id));
    }
    ServedBatch served;
    std::string error;
    try {
      served = prepare(batch.ids, sampler);
    } catch (const std::exception& e) {
      error = message_of(e);
    }
    batch.prepared = Clock::now();
    lock.lock();
    pending_s_[batch.on_gpu] = std::max(0.0, pending_s_[batch.on_gpu] - batch.predicted_s);
    if (!error.empty()) {
      lock.unlock();
      answer(std::move(batch), at::Tensor(), error, /*from_model=*/false);
      lock.lock();
      continue;
    }
    served.id = batch.id;
    ready_.emplace_back(std::move(batch), std::move(served));
    batch_ready_.notify_one();
  }
  --samplers_running_;
  batch_ready_.notify_all();
  progress_.notify_all();
}

ServedBatch ServingRuntime::prepare(const at::Tensor& ids, Sampler& sampler) const {
  std::optional<c10::StreamGuard> on_stream;
  if (sampler.stream) on_stream.emplace(*sampler.stream);
  const at::Tensor& indptr = sampler.on_gpu ? *gpu_indptr_ : indptr_;
  const at::Tensor& indices = sampler.on_gpu ? *gpu_indices_ : indices_;
  const at::Tensor seeds = sampler.on_gpu ? ids.to(device_, /*non_blocking=*/true) : ids;
  auto [node_ids, rows, cols, edge_ids, nodes_per_hop, edges_per_hop] =
      internal::sample_subgraph(sampler.graphs.get(), indptr, indices, seeds, options_.fanouts,
                                /*replace=*/false, std::nullopt, sampler.generator, std::nullopt,
                                std::nullopt);
  // One wait for both count vectors: they size every layer.
  const at::Tensor counts = at::cat({nodes_per_hop, edges_per_hop}).to(at::kCPU, at::kLong);
  const int64_t hops = static_cast<int64_t>(options_.fanouts.size());
  const int64_t* c = counts.const_data_ptr<int64_t>();
  std::vector<int64_t> cum_nodes(hops + 1), cum_edges(hops);
  std::partial_sum(c, c + hops + 1, cum_nodes.begin());
  std::partial_sum(c + hops + 1, c + 2 * hops + 1, cum_edges.begin());

  ServedBatch served;
  served.seed_count = cum_nodes[0];
  served.target = sampler.on_gpu ? "gpu" : "cpu";
  served.node_ids = node_ids.to(device_, /*non_blocking=*/true);
  served.x = features_->gather(node_ids.to(features_->device())).to(device_);
  const at::Tensor edge_index = at::stack({rows, cols}).to(device_, /*non_blocking=*/true);
  for (int64_t hop = hops - 1; hop >= 0; --hop) {  // outermost layer first
    served.edge_index.push_back(edge_index.narrow(1, 0, cum_edges[hop]));
    served.layer_sizes.push_back(cum_nodes[hop + 1]);
    served.layer_sizes.push_back(cum_nodes[hop]);
  }
  // The model side runs on streams of its own: everything above must have landed.
  if (sampler.stream) sampler.stream->synchronize();
  return served;
}

ServedBatch ServingRuntime::next_batch() {
  std::unique_lock<std::mutex> lock(mutex_);
  batch_ready_.wait(lock, [&] {
    return !ready_.empty() || abandoned_ || (batcher_done_ && samplers_running_ == 0);
  });
  if (ready_.empty()) return ServedBatch{};  // id -1: closed and drained
  auto [batch, served] = std::move(ready_.front());
  ready_.pop_front();
  with_model_.emplace(batch.id, std::move(batch));
  return served;
}

ServingRuntime::Batch ServingRuntime::take_from_model(int64_t batch_id, const char* caller) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = with_model_.find(batch_id);
  TORCH_CHECK_VALUE(it != with_model_.end(), "ServingRuntime.", caller, ": batch ", batch_id,
                    " is not with the model (never handed out, or answered already)");
  Batch batch = std::move(it->second);
  with_model_.erase(it);
  ++being_answered_;
  return batch;
}

void ServingRuntime::finish(int64_t batch_id, const at::Tensor& out) {
  Batch batch = take_from_model(batch_id, "finish");
  const int64_t seeds = batch.ids.numel();
  if (out.dim() < 1 || out.size(0) < seeds) {
    answer(std::move(batch), at::Tensor(),
           "the model answered " + std::to_string(out.dim() < 1 ? 0 : out.size(0)) +
               " rows for a batch of " + std::to_string(seeds) + " seeds",
           /*from_model=*/true);
    return;
  }
  at::Tensor rows;
  std::string error;
  try {  // taken from the model side already: a failing copy fails its requests
    rows = out.narrow(0, 0, seeds).to(at::kCPU);
  } catch (const std::exception& e) {
    error = message_of(e);
  }
  answer(std::move(batch), rows, error, /*from_model=*/true);
}

void ServingRuntime::fail(int64_t batch_id, const std::string& message) {
  answer(take_from_model(batch_id, "fail"), at::Tensor(), message, /*from_model=*/true);
}

void ServingRuntime::answer(Batch batch, const at::Tensor& rows, const std::string& error,
                            bool from_model) {
  const Clock::time_point now = Clock::now();
  // A failure may come with no words (fail(id, ""), an exception whose what() is empty):
  // it fails its requests all the same.
  const bool failed = !error.empty() || !rows.defined();
  const std::string why = !error.empty() ? error
                          : from_model   ? "the model failed without a message"
                                         : "sampling the batch failed without a message";
  std::lock_guard<std::mutex> lock(mutex_);
  if (from_model) --being_answered_;
  int64_t begin = 0;
  for (const Request& request : batch.requests) {
    const int64_t size = request.ids.numel();
    auto it = answers_.find(request.ticket);
    // Gone: its waiter gave up. Done: a close() that gave up failed it while this batch's
    // rows were being copied.
    if (it != answers_.end() && !it->second.done) {
      if (!failed) {
        it->second.rows = rows.narrow(0, begin, size);
      } else {
        it->second.error = why;
      }
      mark_answered(request.ticket, it->second);
    }
    begin += size;
  }
  const Clock::time_point first = batch.requests.front().enqueued;
  records_.push_back({static_cast<double>(batch.ids.numel()),
                      static_cast<double>(batch.requests.size()), batch.cost,
                      batch.on_gpu ? 1.0 : 0.0, ms_between(first, batch.started),
                      ms_between(batch.started, now), ms_between(batch.started, batch.prepared)});
  if (records_.size() > kRecordsKept) records_.pop_front();
  if (batch.started != Clock::time_point{}) {  // sampled (closing fails some before)
    const double held = ms_between(batch.started, now) / 1000;
    double& mean = residence_s_[batch.on_gpu];
    mean = mean == 0 ? held : 0.9 * mean + 0.1 * held;
  }
  --in_flight_;
  --in_side_[batch.on_gpu];
  ++answered_batches_;
  answered_requests_ += static_cast<int64_t>(batch.requests.size());
  batcher_wakes_.notify_one();  // a sampler's slot is free
  progress_.notify_all();
}

void ServingRuntime::model_loop(const std::function<at::Tensor(const ServedBatch&)>& model) {
  while (true) {
    ServedBatch served = next_batch();
    if (served.id < 0) return;
    // Nothing may escape a thread of the runtime's: after a close() that gave up on the
    // model, finish and fail find the batch gone (already failed) and raise.
    try {
      at::Tensor out;
      try {
        out = model(served);
      } catch (const std::exception& e) {
        fail(served.id, message_of(e));
        continue;
      }
      finish(served.id, out);
    } catch (const std::exception&) {
    }
  }
}

void ServingRuntime::serve_with(std::function<at::Tensor(const ServedBatch&)> model,
                                int64_t threads) {
  TORCH_CHECK_VALUE(threads >= 1, "ServingRuntime.serve_with: threads must be >= 1, got ",
                    threads);
  auto shared = std::make_shared<std::function<at::Tensor(const ServedBatch&)>>(std::move(model));
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(!closing_, "ServingRuntime.serve_with: the runtime is closed");
  for (int64_t i = 0; i < threads; ++i) {
    model_threads_.emplace_back([this, shared] {
      // A stream of its own, as the Python model threads have: on the default stream every
      // model thread's kernels would queue behind the others'.
      std::optional<c10::StreamGuard> on_stream;
      if (device_.is_cuda()) {
        on_stream.emplace(c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA)
                              .getStreamFromGlobalPool(device_, /*isHighPriority=*/false));
      }
      model_loop(*shared);
    });
  }
}

namespace {

uint64_t little_endian(const unsigned char* p, int bytes) {
  uint64_t value = 0;
  for (int b = bytes - 1; b >= 0; --b) value = value << 8 | p[b];
  return value;
}

// Each stored record of the zip at `path` against the CRC-32 its central directory gives
// (deflated records, which torch's writer never makes, are left to the reader). torch's C++
// zip reader skips these checks, and a package damaged inside its compiled model crashed the
// process that loaded it (SIGILL), where Python's zipfile names the damage. Returns the
// first record whose bytes disagree, or a description of a directory it cannot read.
std::optional<std::string> damaged_record(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  file.seekg(0, std::ios::end);
  const int64_t size = file.tellg();
  auto read_at = [&](int64_t at, int64_t bytes) {
    std::vector<unsigned char> out(std::max<int64_t>(bytes, 0));
    if (at < 0 || bytes < 0 || at + bytes > size) return std::vector<unsigned char>{};
    file.seekg(at);
    file.read(reinterpret_cast<char*>(out.data()), bytes);
    return file ? out : std::vector<unsigned char>{};
  };
  // The end of central directory record: 22 bytes and a comment of at most 65,535.
  const int64_t tail_at = std::max<int64_t>(0, size - (22 + 65535));
  const std::vector<unsigned char> tail = read_at(tail_at, size - tail_at);
  int64_t end = -1;
  for (int64_t q = static_cast<int64_t>(tail.size()) - 22; q >= 0 && end < 0; --q) {
    if (little_endian(&tail[q], 4) == 0x06054b50) end = q;
  }
  if (end < 0) return "no end of central directory";
  uint64_t entries = little_endian(&tail[end + 10], 2);
  uint64_t directory_at = little_endian(&tail[end + 16], 4);
  if ((entries == 0xFFFF || directory_at == 0xFFFFFFFF) && tail_at + end >= 20) {
    // ZIP64: the locator just before the record points at the ZIP64 end record.
    const auto locator = read_at(tail_at + end - 20, 20);
    if (locator.empty() || little_endian(&locator[0], 4) != 0x07064b50) return "no ZIP64 locator";
    const auto end64 = read_at(static_cast<int64_t>(little_endian(&locator[8], 8)), 56);
    if (end64.empty() || little_endian(&end64[0], 4) != 0x06064b50) return "no ZIP64 end record";
    entries = little_endian(&end64[32], 8);
    directory_at = little_endian(&end64[48], 8);
  }
  int64_t at = static_cast<int64_t>(directory_at);
  for (uint64_t e = 0; e < entries; ++e) {
    const auto header = read_at(at, 46);
    if (header.empty() || little_endian(&header[0], 4) != 0x02014b50) {
      return "a central directory entry is damaged";
    }
    const uint64_t method = little_endian(&header[10], 2);
    const uint32_t crc = static_cast<uint32_t>(little_endian(&header[16], 4));
    uint64_t stored = little_endian(&header[20], 4);
    uint64_t local_at = little_endian(&header[42], 4);
    const int64_t name_bytes = little_endian(&header[28], 2);
    const int64_t extra_bytes = little_endian(&header[30], 2);
    const int64_t comment_bytes = little_endian(&header[32], 2);
    const auto name_and_extra = read_at(at + 46, name_bytes + extra_bytes);
    if (name_and_extra.empty() && name_bytes + extra_bytes > 0) return "a record's name is cut";
    const std::string name(name_and_extra.begin(), name_and_extra.begin() + name_bytes);
    // ZIP64 extra field: the 64-bit values of the fields saturated above, in their order.
    const bool size_saturated = stored == 0xFFFFFFFF;
    const bool uncompressed_saturated = little_endian(&header[24], 4) == 0xFFFFFFFF;
    for (int64_t q = name_bytes; q + 4 <= name_bytes + extra_bytes;) {
      const uint64_t id = little_endian(&name_and_extra[q], 2);
      const int64_t length = little_endian(&name_and_extra[q + 2], 2);
      if (id == 0x0001) {
        int64_t v = q + 4;
        auto next = [&](uint64_t& field) {
          if (v + 8 <= q + 4 + length && v + 8 <= name_bytes + extra_bytes) {
            field = little_endian(&name_and_extra[v], 8);
          }
          v += 8;
        };
        uint64_t ignored = 0;
        if (uncompressed_saturated) next(ignored);
        if (size_saturated) next(stored);
        if (local_at == 0xFFFFFFFF) next(local_at);
      }
      q += 4 + length;
    }
    if (method == 0) {
      const auto local = read_at(static_cast<int64_t>(local_at), 30);
      if (local.empty() || little_endian(&local[0], 4) != 0x04034b50) {
        return "the record " + name + " is not where the directory says";
      }
      int64_t data_at = static_cast<int64_t>(local_at) + 30 + little_endian(&local[26], 2) +
                        little_endian(&local[28], 2);
      uint32_t running = 0;
      std::vector<char> chunk(1 << 20);
      file.seekg(data_at);
      for (uint64_t left = stored; left > 0;) {
        const int64_t bytes = static_cast<int64_t>(std::min<uint64_t>(left, chunk.size()));
        if (data_at + bytes > size || !file.read(chunk.data(), bytes)) {
          return "the record " + name + " is cut short";
        }
        running = crc32_fast(chunk.data(), static_cast<size_t>(bytes), running);
        data_at += bytes;
        left -= static_cast<uint64_t>(bytes);
      }
      if (running != crc) return "the record " + name + " fails its CRC-32";
    }
    at += 46 + name_bytes + extra_bytes + comment_bytes;
  }
  return std::nullopt;
}

}  // namespace

void check_package_layout(const std::string& package_path, const std::string& caller) {
  const std::string refused = caller + ": " + package_path +
                              " is not an AOTInductor package (torch_quiver_ops.aoti."
                              "compile_and_package makes one): ";
  std::vector<std::string> records;
  std::string format;
  try {
    caffe2::serialize::PyTorchStreamReader reader(package_path);
    records = reader.getAllRecords();
    if (reader.hasRecord("archive_format")) {
      auto [data, size] = reader.getRecord("archive_format");
      format.assign(static_cast<const char*>(data.get()), std::min<size_t>(size, 16));
    }
  } catch (const c10::Error& e) {
    TORCH_CHECK_VALUE(false, refused, e.what_without_backtrace());
  }
  TORCH_CHECK_VALUE(format == "pt2", refused, "its archive_format is ",
                    format.empty() ? std::string("missing") : "'" + format + "'",
                    ", not 'pt2'");
  const std::string model_dir = "data/aotinductor/model/";
  const bool has_model = std::any_of(records.begin(), records.end(), [&](const std::string& r) {
    return r.rfind(model_dir, 0) == 0 && r.size() > 3 && r.compare(r.size() - 3, 3, ".so") == 0;
  });
  TORCH_CHECK_VALUE(has_model, refused, "it holds no compiled model (", model_dir, "*.so)");
  // torch's loader needs the model's metadata beside it ("File not found" otherwise).
  const std::string metadata = "_metadata.json";
  const bool has_metadata = std::any_of(records.begin(), records.end(), [&](const std::string& r) {
    return r.rfind(model_dir, 0) == 0 && r.size() > metadata.size() &&
           r.compare(r.size() - metadata.size(), metadata.size(), metadata) == 0;
  });
  TORCH_CHECK_VALUE(has_metadata, refused, "it holds no model metadata (", model_dir,
                    "*_metadata.json)");
  const std::optional<std::string> damage = damaged_record(package_path);
  TORCH_CHECK_VALUE(!damage, caller, ": ", package_path, " is damaged: ", damage.value_or(""),
                    " (copy it again, or export it again)");
}

void ServingRuntime::serve_package(const std::string& package_path, int64_t threads) {
  TORCH_CHECK_VALUE(threads >= 1, "ServingRuntime.serve_package: threads must be >= 1, got ",
                    threads);
  check_package_layout(package_path, "ServingRuntime.serve_package");
  std::shared_ptr<torch::inductor::AOTIModelPackageLoader> package;
  try {
    // One runner per thread: the package's container hands each call a model of its own.
    package = std::make_shared<torch::inductor::AOTIModelPackageLoader>(
        package_path, "model", /*run_single_threaded=*/false, static_cast<size_t>(threads),
        device_.is_cuda() ? device_.index() : static_cast<c10::DeviceIndex>(-1));
  } catch (const std::exception& e) {
    TORCH_CHECK_VALUE(false, "ServingRuntime.serve_package: could not load ", package_path,
                      " for ", device_, ": ", message_of(e));
  }
  serve_with(
      [this, package](const ServedBatch& batch) {
        std::vector<at::Tensor> inputs{batch.x};
        // Contiguous: a package reads inputs with the strides it was traced with (a layer's
        // edges are a narrowed view of the batch's, rows apart by all its edges).
        for (const at::Tensor& edges : batch.edge_index)
          inputs.push_back(edges.to(at::kLong).contiguous());
        for (size_t layer = 0; layer < batch.edge_index.size(); ++layer) {
          inputs.push_back(at::empty({batch.layer_sizes[2 * layer + 1], 0}, batch.x.options()));
        }
        void* stream = nullptr;  // the thread's own (serve_with), as a cudaStream_t
        if (device_.is_cuda()) {
          stream = c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(device_).native_handle();
        }
        std::vector<at::Tensor> outputs = package->run(inputs, stream);
        TORCH_CHECK(!outputs.empty(), "the package returned no output");
        return outputs.front();
      },
      threads);
}

void ServingRuntime::stop_holding_batches() {
  std::lock_guard<std::mutex> lock(mutex_);
  no_holding_ = true;
  batcher_wakes_.notify_one();
}

void ServingRuntime::close(double timeout_s) {
  check_wait_seconds(timeout_s, "ServingRuntime.close");
  std::lock_guard<std::mutex> one_close(close_mutex_);
  if (closed_) return;
  std::vector<std::thread> threads;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    closing_ = true;
    batcher_wakes_.notify_one();
    // Every accepted request answered, or the time is up.
    const auto drained = [&] {
      return batcher_done_ && samplers_running_ == 0 && ready_.empty() && with_model_.empty() &&
             being_answered_ == 0;
    };
    // A second Ctrl-C (the first often asked for the close) gives up as the timeout would.
    const InterruptWatch interrupts;
    if (!wait_up_to(progress_, lock, timeout_s, drained, &interrupts)) {
      abandoned_ = true;  // the model side stopped taking batches: fail what is left
      const std::string why = "the runtime closed before the model answered";
      for (auto& [ticket, a] : answers_) {
        if (!a.done) {
          a.error = why;
          mark_answered(ticket, a);
        }
      }
      answered_requests_ = accepted_;  // every accepted request is answered or failed
      answered_batches_ += static_cast<int64_t>(ready_.size() + with_model_.size() +
                                                cpu_work_.size() + gpu_work_.size());
      ready_.clear();
      with_model_.clear();
      cpu_work_.clear();
      gpu_work_.clear();
      queue_.clear();
      queued_nodes_ = 0;
      batcher_wakes_.notify_one();
      for (auto& side : work_queued_) side.notify_all();
      batch_ready_.notify_all();
    }
    threads.swap(sampler_threads_);
    threads.insert(threads.end(), std::make_move_iterator(model_threads_.begin()),
                   std::make_move_iterator(model_threads_.end()));
    model_threads_.clear();
  }
  if (batcher_.joinable()) batcher_.join();
  for (std::thread& t : threads) t.join();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  collected_ready_.notify_all();
}

// ---- dispatch ----

at::Tensor ServingRuntime::expected_sampled_counts(const at::Tensor& indptr,
                                                   const at::Tensor& indices,
                                                   const std::vector<int64_t>& fanouts) {
  // Called from Python too: a corrupt CSR read past its lists, a fanout of -5 was -1.
  check_whole_csr(indptr, indices, std::nullopt);
  check_fanouts(fanouts, /*replace=*/false, "expected_sampled_counts: fanouts");
  return psgs_of(indptr, indices, fanouts);
}

double ServingRuntime::cost(const at::Tensor& ids) const {
  TORCH_CHECK_VALUE(ids.dim() <= 1, "ServingRuntime.cost: ids must be a 0-d or 1-D tensor, got "
                    "shape ", ids.sizes());
  TORCH_CHECK_TYPE(at::isIntegralType(ids.scalar_type(), /*includeBool=*/false),
                   "ServingRuntime.cost: ids must be integers, got ",
                   errors::dtype_name(ids.scalar_type()));
  return checked_cost(ids.to(at::kCPU, at::kLong).reshape(-1).contiguous());
}

double ServingRuntime::checked_cost(const at::Tensor& ids) const {
  TORCH_INTERNAL_ASSERT_DEBUG_ONLY(ids.is_contiguous() && ids.scalar_type() == at::kLong);
  const int64_t* id = ids.const_data_ptr<int64_t>();
  const double* psgs = psgs_.const_data_ptr<double>();
  double sum = 0;
  for (int64_t i = 0, n = ids.numel(); i < n; ++i) {
    if (id[i] < 0 || id[i] >= num_nodes_) errors::id_out_of_range("node ids", i, id[i], num_nodes_);
    sum += psgs[id[i]];
  }
  return sum;
}

std::string ServingRuntime::target_of(double cost) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return on_gpu_by_threshold(cost) ? "gpu" : "cpu";
}

bool ServingRuntime::on_gpu_by_threshold(double cost) const {
  if (options_.gpu_streams == 0) return false;
  if (options_.cpu_samplers == 0) return true;
  return cost > threshold_;
}

double ServingRuntime::threshold() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return threshold_;
}

void ServingRuntime::set_threshold(double threshold) {
  TORCH_CHECK_VALUE(!std::isnan(threshold), "ServingRuntime: the threshold must be a number");
  std::lock_guard<std::mutex> lock(mutex_);
  threshold_ = threshold;
  by_load_ = false;  // a threshold given is followed whatever the load
}

bool ServingRuntime::dispatches_by_load() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return by_load_;
}

std::vector<int64_t> ServingRuntime::calibration_sizes(int64_t max_batch_nodes) {
  std::vector<int64_t> sizes;
  const int64_t largest = std::min<int64_t>(max_batch_nodes, 1024);
  for (int64_t size = 1; size < largest; size *= 4) sizes.push_back(size);
  sizes.push_back(largest);
  return sizes;
}

std::tuple<double, std::vector<double>, std::vector<double>> ServingRuntime::calibrate(
    const std::vector<int64_t>& sizes, int64_t repeats, int64_t seed) {
  constexpr int64_t kMostRepeats = 1'000'000;  // its loop counts to repeats + 1
  TORCH_CHECK_VALUE(!sizes.empty() && repeats >= 1 && repeats <= kMostRepeats,
                    "ServingRuntime.calibrate: needs batch sizes and repeats in [1, ",
                    kMostRepeats, "], got ", sizes.size(), " sizes and repeats=", repeats);
  for (const int64_t size : sizes) {  // (a size out of range had been clamped unsaid)
    TORCH_CHECK_VALUE(size >= 1 && size <= options_.max_batch_nodes,
                      "ServingRuntime.calibrate: sizes must be in [1, max_batch_nodes=",
                      options_.max_batch_nodes, "], got ", size);
  }
  TORCH_CHECK_VALUE(options_.cpu_samplers > 0 && options_.gpu_streams > 0,
                    "ServingRuntime.calibrate compares CPU and GPU sampling: it needs both, got "
                    "cpu_samplers=", options_.cpu_samplers, " and gpu_streams=",
                    options_.gpu_streams);
  // Samplers of its own: the serving ones may be busy.
  const std::unique_ptr<Sampler> on_cpu = make_sampler(false, static_cast<uint64_t>(seed));
  const std::unique_ptr<Sampler> on_gpu = make_sampler(true, static_cast<uint64_t>(seed) + 1);
  at::Generator draw = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(seed));
  std::vector<std::pair<double, double>> cpu_points, gpu_points;
  // On a thread of its own, its parallel loops limited as a CPU sampler's are, so the CPU's
  // line is what a sampler will see (and the caller's own setting stays as it was).
  std::exception_ptr failure;
  std::thread timing([&] {
    try {
      limit_intra_op_threads(cpu_sampler_threads_);
      for (const int64_t size : sizes) {
        for (int64_t r = 0; r <= repeats; ++r) {
          const at::Tensor ids = at::randint(num_nodes_, {size}, draw, at::kLong);
          const double batch_cost = cost(ids);
          for (Sampler* sampler : {on_cpu.get(), on_gpu.get()}) {
            const Clock::time_point start = Clock::now();
            prepare(ids, *sampler);
            const double seconds = ms_between(start, Clock::now()) / 1000;
            if (r > 0) (sampler->on_gpu ? gpu_points : cpu_points).emplace_back(batch_cost, seconds);
          }
        }
      }
    } catch (...) {
      failure = std::current_exception();
    }
  });
  timing.join();
  if (failure) std::rethrow_exception(failure);
  const std::vector<double> cpu = fit_line(cpu_points), gpu = fit_line(gpu_points);
  double crossing;
  if (cpu[1] <= gpu[1]) {  // the CPU never loses: everything there
    crossing = cpu[0] <= gpu[0] ? std::numeric_limits<double>::infinity() : -1.0;
  } else {
    crossing = std::max((gpu[0] - cpu[0]) / (cpu[1] - gpu[1]), -1.0);
  }
  return {crossing, cpu, gpu};
}

// ---- reports ----

at::Tensor ServingRuntime::records() const {
  std::lock_guard<std::mutex> lock(mutex_);
  at::Tensor out = at::empty({static_cast<int64_t>(records_.size()), 7}, at::kDouble);
  double* row = out.data_ptr<double>();
  for (const auto& record : records_) row = std::copy(record.begin(), record.end(), row);
  return out;
}

int64_t ServingRuntime::answered_batches() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return answered_batches_;
}

int64_t ServingRuntime::outstanding() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return accepted_ - answered_requests_;
}

int64_t ServingRuntime::accepted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return accepted_;
}

int64_t ServingRuntime::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(queue_.size());
}

}  // namespace quiver::runtime
