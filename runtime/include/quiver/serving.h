// torch.classes.quiver.ServingRuntime: online GNN inference with workload-aware dispatch
// (torch-quiver's serving), in the op library so that a libtorch server needs no Python.
//
// Requests of a few node ids wait in a bounded queue; a batcher closes a batch when it holds
// max_batch_nodes seeds or its oldest request has waited max_wait_ms (or, dispatching by
// load with the GPU side full, at the PSGS a free CPU sampler does in time), prices it by its PSGS
// (each seed's expected sampling tree, nodes counted once per draw, summed over the seeds
// from per-node values computed once: an upper bound on the distinct nodes visited),
// and hands it to a CPU sampler or a GPU sampler (each on a CUDA stream of its own). With a
// calibrated runtime (both kinds, no threshold given), each batch goes where it is predicted
// to finish first: the work already queued or sampling on that side (its predicted latencies
// over its samplers) plus this batch's latency from the calibrated line a + b * PSGS. An idle
// runtime so sends batches by the lines' crossing (the threshold); a busy GPU overflows small
// batches onto idle CPU samplers and back. With a given threshold, PSGS at or below it goes
// to the CPU, the rest to the GPU, whatever the load. The sampler samples the computation graph with
// quiver::sample_subgraph, gathers the rows through a FeatureTiers and puts the batch, on the
// model's device, where the model side takes it: next_batch() ... finish(). The model side
// is the caller's (a Python thread running an nn.Module, or serve_with() running a C++
// function), so any model runs: eager, compiled, TorchScript or an AOTInductor package.
// finish() splits the model's rows among the batch's requests and wakes their waiters.
//
// Batches in flight (sampling, waiting for the model, or in it) are at most one per sampler:
// the batcher waits for a free one, so requests wait in the bounded queue and overflow as a
// refused submit (HTTP 503), never in an unbounded list. close() stops taking requests and
// answers every accepted one before it returns.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <quiver/feature_tiers.h>
#include <quiver/host_pin.h>
#include <torch/custom_class.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace quiver::runtime {

// torch's package loader takes a zip without the layout it writes (one folder holding
// archive_format "pt2" and the compiled model under data/aotinductor/model/) for an older
// format, and crashes the process reading it: such a file is refused, naming `caller`.
// Call it before constructing a torch::inductor::AOTIModelPackageLoader.
void check_package_layout(const std::string& package_path, const std::string& caller);

struct ServingOptions {
  std::vector<int64_t> fanouts;  // the seeds' hop first; -1 takes every neighbor
  std::string device = "cpu";    // where the model runs: rows and graphs are handed over there
  int64_t max_batch_nodes = 1024;  // seeds per batch; a larger request is refused
  double max_wait_ms = 2.0;        // a batch closes when its oldest request waited this long
  int64_t max_queue = 1024;        // requests waiting at most; more are refused
  int64_t cpu_samplers = 2;        // threads sampling on the CPU (0: never there)
  int64_t gpu_streams = 2;         // threads sampling on the GPU, a CUDA stream each (0: never)
  // PSGS at or below which a batch samples on the CPU; NaN: calibrated at construction when
  // both kinds of samplers exist (calibrate()).
  double threshold = std::numeric_limits<double>::quiet_NaN();
  // Each batch's draws come from (seed, the batch's number), whichever sampler takes it:
  // the same requests, sent one at a time, get the same answers from the same side.
  int64_t seed = 0;
  // Whether GPU samplers replay batches of a shape seen before as CUDA graphs. Served batches
  // come in many sizes, each a shape of its own: a sampler captures a few, then keeps them
  // (ops/cuda/batch_graphs.h: kMaxCapturesLetGo).
  bool capture_batches = true;
  // The latency a request should be answered within, ms (dispatch by load): with the GPU side
  // full and a CPU sampler free, a batch closes at the cost the CPU is predicted to sample in
  // time, and a batch whose side is full moves to the other side, where a sampler is free,
  // when it is predicted to have waited and been sampled there within half of it (the other
  // half left for the model and the answer).
  double latency_objective_ms = 30.0;
  // Node ids waiting at most, over every queued request (0: 8 x max_batch_nodes). A request
  // count alone let a queue of large requests hold seconds of work; this bounds the wait
  // by work, so a burst past capacity gets prompt refusals (503s) instead.
  int64_t max_queue_nodes = 0;
};

// One batch as the model side receives it: the sampled computation graph in torch-quiver's
// layout (GraphSageSampler.sample) with its rows, all on the model's device.
struct ServedBatch {
  int64_t id = -1;     // -1: the runtime closed and every batch was handed out
  at::Tensor node_ids;  // sampled nodes, the seeds first
  at::Tensor x;         // their feature rows
  int64_t seed_count = 0;
  std::vector<at::Tensor> edge_index;  // one [2, E] per layer, outermost first
  std::vector<int64_t> layer_sizes;    // (sources, targets) per layer, flattened
  std::string target;                  // "cpu" or "gpu": where it was sampled
};

class ServingRuntime : public torch::CustomClassHolder {
 public:
  // submit()'s answers that are not tickets.
  static constexpr int64_t kOverloaded = -1;  // the queue is full
  static constexpr int64_t kClosed = -2;      // close() was called

  // indptr/indices: the CSR on the CPU (for the CPU samplers). gpu_indptr/gpu_indices: the
  // same graph as the GPU samplers read it (GPU memory, or pinned host memory: UVA, kept
  // pinned by the runtime while it lives); needed when options.gpu_streams > 0. features:
  // the rows, gathered where they are best read (features->device()), handed over on the
  // model's device.
  ServingRuntime(at::Tensor indptr, at::Tensor indices, std::optional<at::Tensor> gpu_indptr,
                 std::optional<at::Tensor> gpu_indices, c10::intrusive_ptr<FeatureTiers> features,
                 ServingOptions options);
  ~ServingRuntime() override;
  ServingRuntime(const ServingRuntime&) = delete;
  ServingRuntime& operator=(const ServingRuntime&) = delete;

  // ---- requests ----
  // Queues a request (1-D integer node ids in range, at most max_batch_nodes of them; a
  // ValueError names what is wrong): a ticket for wait(), or kOverloaded / kClosed.
  int64_t submit(const at::Tensor& ids);
  // The model's rows for the ticket's ids, on the CPU; raises the model's error, or when
  // timeout_s (< 0: none) passes first (the answer is then dropped when it comes).
  at::Tensor wait(int64_t ticket, double timeout_s);
  // Drops a ticket no one will wait for or collect: its answer is dropped when it comes
  // (an answer is otherwise held until it is waited for, however long that takes). A ticket
  // being waited for or collected, or unknown (answered and taken already), is left alone.
  void forget(int64_t ticket);
  // Answers for one thread to hand out, in the order they come, instead of a thread waiting
  // on each ticket (an event loop serving many connections: a thread a request costs more
  // in switching than the request itself). collect() gives the ticket's answer to
  // next_collected(), which returns the tickets answered since its last call (waiting up to
  // timeout_s for one; none when the time passes); take() then returns a returned ticket's
  // rows, or raises its error, and forgets it.
  void collect(int64_t ticket);
  std::vector<int64_t> next_collected(double timeout_s);
  at::Tensor take(int64_t ticket);

  // ---- the model side ----
  // The next sampled batch (blocks); id -1 once closed and drained.
  ServedBatch next_batch();
  // The model's output for a batch (at least seed_count rows; the first seed_count are the
  // seeds'), or its failure, answered to each of its requests.
  void finish(int64_t batch_id, const at::Tensor& out);
  void fail(int64_t batch_id, const std::string& message);
  // Runs `model` on `threads` threads of the runtime's own until close(): the model side of a
  // C++ server. A model that throws fails its batch only.
  void serve_with(std::function<at::Tensor(const ServedBatch&)> model, int64_t threads);
  // serve_with() for a model compiled by AOTInductor (torch._inductor.aoti_compile_and_package;
  // torch_quiver_ops.serving.package_for_serving builds one): the model side with no Python.
  // The package takes x, each layer's edge_index (int64, outermost layer first), then each
  // layer's target count as the first dimension of an empty [targets, 0] tensor of x's dtype
  // (a package takes tensors only), and returns the rows.
  void serve_package(const std::string& package_path, int64_t threads);
  // Stops taking requests, answers every accepted one, stops the threads. Batches the model
  // side has not finished within timeout_s fail with a message saying so.
  void close(double timeout_s);
  // From now on a batch closes once the queue is empty, without waiting out max_wait_ms:
  // a shutdown still taking the requests its connections accepted answers them at once
  // (with a long max_wait_ms they had waited it out, or failed on the server's timeout).
  void stop_holding_batches();

  // ---- dispatch ----
  // psgs[v] = 1 + min(deg v, f1) * mean over v's neighbors u of psgs'(u), psgs' the same for
  // the remaining fanouts (1 past the last hop): uniform sampling without replacement visits
  // each neighbor with probability min(deg, f) / deg. Float64 on the CPU, O(edges) per hop.
  static at::Tensor expected_sampled_counts(const at::Tensor& indptr, const at::Tensor& indices,
                                            const std::vector<int64_t>& fanouts);
  const at::Tensor& psgs() const { return psgs_; }
  double cost(const at::Tensor& ids) const;  // a batch's PSGS: the sum over its seeds
  // Where an idle runtime sends a batch of this cost: "cpu" at or below the threshold, else
  // "gpu"; the only kind present when one is missing.
  std::string target_of(double cost) const;
  // Whether batches go where they are predicted to finish first (calibrated at construction;
  // set_threshold turns it off) rather than by the threshold alone.
  bool dispatches_by_load() const;
  double threshold() const;
  void set_threshold(double threshold);
  // Times sampling and gathering on each kind over batches of `sizes` random seeds (the
  // first of each size's repeats + 1 dropped as warm-up), fits latency = a + b * PSGS to
  // each, and returns (the PSGS where the lines cross, the CPU's below it: the threshold;
  // CPU fit (a, b); GPU fit (a, b)). Does not change the threshold.
  // Each size must be in [1, max_batch_nodes].
  std::tuple<double, std::vector<double>, std::vector<double>> calibrate(
      const std::vector<int64_t>& sizes, int64_t repeats, int64_t seed);
  // The sizes calibrated at construction: 1, 4, ..., 1024 up to max_batch_nodes, and it.
  static std::vector<int64_t> calibration_sizes(int64_t max_batch_nodes);

  // ---- reports ----
  // One row per batch answered (the latest 100000): nodes, requests, cost, 1 when sampled on
  // the GPU, ms waited before sampling, ms from sampling to the model's answer, and of those
  // the ms its sampler took to sample and gather (the rest: waiting for a model thread, the
  // model, the answer's copy).
  at::Tensor records() const;
  int64_t accepted() const;  // requests queued so far
  int64_t queued() const;    // requests waiting now
  int64_t answered_batches() const;  // batches answered or failed so far (records() keeps the latest)
  // Requests accepted and not yet answered: waiting, batched, sampling or in the model (what
  // a pool of runtimes balances, where queued() misses a batch being formed or in flight).
  int64_t outstanding() const;
  const ServingOptions& options() const { return options_; }
  int64_t num_nodes() const { return num_nodes_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Request {
    int64_t ticket;
    at::Tensor ids;
    Clock::time_point enqueued;
    double cost;  // its ids' PSGS, summed
  };
  struct Batch {
    int64_t id;
    std::vector<Request> requests;
    at::Tensor ids;
    double cost;
    bool on_gpu;
    double predicted_s = 0;  // its sampling latency by its side's line (dispatch by load)
    Clock::time_point started;   // a sampler took it
    Clock::time_point prepared;  // sampled and gathered, waiting for the model side
  };
  struct Answer {
    bool done = false;
    at::Tensor rows;
    std::string error;
    // Its waiter's own: an answer wakes the one thread waiting for it, not every waiter.
    std::condition_variable answered;
    bool waited = false;  // a thread waits for it (at most one may)
    bool collected = false;  // next_collected() hands it out instead
  };
  struct Sampler;  // a generator, and a CUDA stream when the model's device is a GPU

  void batch_loop();
  // Where a batch of `cost` goes now (called with mutex_ held); sets its predicted latency,
  // which the caller adds to its side's pending seconds once the batch is handed over.
  bool send_to_gpu(Batch& batch);
  bool on_gpu_by_threshold(double cost) const;  // the threshold's rule (mutex_ held)
  // cost() of contiguous int64 CPU ids, each checked to be a node, in one pass with no tensor
  // op: a submit pays it per request, and under load the submitting threads hold the rate.
  double checked_cost(const at::Tensor& ids) const;
  int64_t samplers_on(bool gpu) const;  // a side's samplers
  // Dispatch by load (mutex_ held): a batch's sampling latency on a side by its fitted line;
  // when that side would finish it (the work it holds over its samplers, then the batch);
  // whether the other side, with a sampler free, should take it: it is predicted to finish it
  // first (counting the wait for a sampler on its own, full side), or to have waited and
  // sampled it within half the latency objective (ServingOptions.latency_objective_ms).
  double line_latency(bool gpu, double cost) const;
  double predicted_finish_s(bool gpu, double cost) const;
  // Half the latency objective, in seconds: the time a batch may wait and sample.
  double sampling_budget_s() const;
  // The largest batch cost a side is predicted to sample within that budget, after `waited_s`
  // and the work it holds (infinite where its line does not grow).
  double cost_in_time(bool gpu, double waited_s) const;
  bool better_elsewhere(const Batch& batch, Clock::time_point now) const;
  void sample_loop(Sampler& sampler);
  void model_loop(const std::function<at::Tensor(const ServedBatch&)>& model);
  ServedBatch prepare(const at::Tensor& ids, Sampler& sampler) const;
  // Marks an answer done (mutex_ held) and wakes its waiter, or queues it for
  // next_collected().
  void mark_answered(int64_t ticket, Answer& answer);
  void hand_out(int64_t ticket);  // queues a collected, answered ticket (mutex_ held)
  // Answers the batch's requests; `from_model`: a batch take_from_model counted in
  // being_answered_.
  void answer(Batch batch, const at::Tensor& rows, const std::string& error, bool from_model);
  Batch take_from_model(int64_t batch_id, const char* caller);  // for finish and fail
  // `seed` unsigned: the samplers' seeds are the given one plus offsets, which wrap rather
  // than overflow for a seed near 2^63.
  std::unique_ptr<Sampler> make_sampler(bool on_gpu, uint64_t seed) const;

  at::Tensor indptr_, indices_;
  std::optional<at::Tensor> gpu_indptr_, gpu_indices_;
  std::vector<c10::intrusive_ptr<HostPin>> gpu_pins_;  // of the pinned host ones (UVA)
  c10::intrusive_ptr<FeatureTiers> features_;
  ServingOptions options_;
  at::Device device_;
  int64_t num_nodes_;
  at::Tensor psgs_;
  std::vector<std::unique_ptr<Sampler>> samplers_;
  int cpu_sampler_threads_ = 1;  // a CPU sampler's share of the cores, for its parallel loops

  mutable std::mutex mutex_;  // guards the state below
  // Each waits for its own event, so an event wakes only the threads it concerns: under load
  // a single variable woke every sampler, model thread and client at every submit and answer,
  // and they queued for mutex_ in turn.
  std::condition_variable batcher_wakes_;   // a request queued, a batch answered, closing
  std::condition_variable work_queued_[2];  // a batch for the CPU [0] or GPU [1] samplers
  std::condition_variable batch_ready_;     // a sampled batch for the model side
  std::condition_variable progress_;        // close(): the runtime may have drained
  std::condition_variable collected_ready_;  // an answer for next_collected()
  std::vector<int64_t> collected_;           // answered collected tickets not yet handed out
  std::deque<Request> queue_;
  std::deque<Batch> cpu_work_, gpu_work_;
  std::deque<std::pair<Batch, ServedBatch>> ready_;
  std::unordered_map<int64_t, Batch> with_model_;
  std::unordered_map<int64_t, Answer> answers_;
  std::deque<std::array<double, 7>> records_;
  double threshold_;
  // Dispatch by load: the calibrated lines (latency in s = a + b * PSGS, CPU then GPU) and the
  // predicted seconds of the batches each side holds (queued or sampling).
  bool by_load_ = false;
  std::vector<double> cpu_line_, gpu_line_;
  double pending_s_[2] = {0, 0};  // [0] CPU, [1] GPU
  int64_t in_side_[2] = {0, 0};    // batches in flight on each side, until answered
  double residence_s_[2] = {0, 0};  // mean seconds a batch holds a sampler's slot, sampled to answered
  int64_t answered_batches_ = 0;   // batches answered (or failed) so far; answered_batches()
  int64_t answered_requests_ = 0;  // their requests
  int64_t next_ticket_ = 0, next_batch_ = 0, accepted_ = 0, in_flight_ = 0;
  int64_t queued_nodes_ = 0;  // node ids of the requests in queue_
  int64_t samplers_running_ = 0;
  // Batches taken from the model side whose answers are not yet given (finish copies the
  // rows outside the lock): close() waits for them too, so that it returns only once every
  // accepted request is marked answered.
  int64_t being_answered_ = 0;
  bool closing_ = false, batcher_done_ = false, abandoned_ = false, no_holding_ = false;
  std::thread batcher_;
  std::vector<std::thread> sampler_threads_, model_threads_;
  std::mutex close_mutex_;  // one close() at a time; later ones return at once
  bool closed_ = false;     // written under both mutexes; next_collected reads it under mutex_
};

}  // namespace quiver::runtime
