// torch.classes.quiver.BatchPrefetcher: a SampleLoader's batches built ahead by a C++ thread
// that never takes Python's lock. Each batch is sampled by a SubgraphSampler, its rows
// gathered through a FeatureTiers and its seeds' labels read, on a side stream of the
// sampling GPU (or on the CPU), at most `depth` batches ahead of the caller. The batches
// are the ones the same calls make in Python: batch i samples with a generator seeded with
// sampling_seeds[i].
//
// Why a C++ thread: a GraphSAGE step on an H200 is bound by the host's time to issue it
// (about 2.9 ms of host work to 2.5 ms on the GPU), and a loader thread in Python takes
// the interpreter's lock between its calls. Beside a GraphSAGE model in GPU sampling mode
// its epochs were shorter than the Python thread's in 19 of 20 pairs (docs/benchmarks.md,
// nineteenth session), so Python's SampleLoader takes it by default there
// (prefetch_in_cpp=None); UVA mode showed no gain and keeps the Python thread. It also
// gives libtorch programs a prefetching loader. Its parallel loops (a staged gather's)
// leave two cores to the caller's thread and autograd's. It tells the features its pace
// (FeatureTiers::note_loader_pace), so that a staged gather takes fewer SMs from the model
// while batches are built faster than the model takes them.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/custom_class.h>

#include <quiver/feature_tiers.h>
#include <quiver/subgraph_sampler.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace quiver::runtime {

class BatchPrefetcher : public torch::CustomClassHolder {
 public:
  // features and labels may be None (batches without rows or labels); the rows are gathered
  // with the sampled ids where those lie, and labels (a row per node) must be on the
  // sampling device. One object serves one epoch at a time (start stops the one before);
  // Python's SampleLoader makes one per epoch, and stops it itself when the epoch ends, so
  // that the destructor (run holding Python's lock) never waits for a running thread.
  // device: the sampling GPU's index, or -1 for the CPU. depth >= 1: batches built ahead.
  // host_read_blocks: the cap on a gather's blocks that read host rows (see
  // FeatureTiers::gather). gather_threads: CPU threads of this thread's parallel loops (a
  // staged gather's); 0 leaves two of the process's to the caller's thread and autograd's.
  BatchPrefetcher(c10::intrusive_ptr<SubgraphSampler> sampler,
                  std::optional<c10::intrusive_ptr<FeatureTiers>> features,
                  std::optional<at::Tensor> labels, int64_t device, int64_t depth,
                  int64_t host_read_blocks, int64_t gather_threads);
  ~BatchPrefetcher() override;

  // Starts an epoch: seed_batches[i] (1-D CPU ids) is batch i, sampled with a generator
  // seeded with sampling_seeds[i] (an unsigned 64-bit seed, as Python's manual_seed takes
  // it, passed as its two's-complement int64). An epoch still running is stopped first. On
  // a GPU the side stream first waits for the work the caller's stream holds.
  void start(std::vector<at::Tensor> seed_batches, std::vector<int64_t> sampling_seeds);
  // The next batch in order: (node_ids, rows, cols, edge_ids, nodes_per_hop, edges_per_hop,
  // x, y), x and y empty without features or labels; an empty list when the epoch is done.
  // The caller's current stream waits for the batch, and its tensors are marked as used on
  // that stream. An error raised while building a batch is raised here, in its turn, and
  // ends the epoch (the thread stops there: later calls return the empty list), as an
  // exception ends a Python loop over the batches; start() begins the next epoch.
  std::vector<at::Tensor> next();
  // Stops the epoch's thread and drops the batches built ahead (start and the destructor
  // call it). A build under way finishes first.
  void stop();

 private:
  struct Built {
    std::vector<at::Tensor> tensors;
    std::optional<c10::Event> ready;  // recorded on the side stream after the batch
    std::exception_ptr error;
  };
  // On a GPU the pace is the GPU's, not the host's (whose loop may run many steps ahead of
  // its stream): for each batch after an epoch's first, whether it was ready before the
  // caller's stream had finished the work queued before it was asked for.
  struct PaceProbe {
    c10::Event asked;  // recorded on the caller's stream when the batch was asked for
    c10::Event ready;  // the batch's own
  };
  void note_decided_paces();  // the probes whose order is known, oldest first
  void stop_epoch();  // stop's work, with control_mutex_ held
  void build_epoch();  // the worker thread: epoch_seeds_ in order
  std::vector<at::Tensor> build_one(const at::Tensor& seeds, uint64_t sampling_seed,
                                    at::Generator& generator);

  c10::intrusive_ptr<SubgraphSampler> sampler_;
  std::optional<c10::intrusive_ptr<FeatureTiers>> features_;
  std::optional<at::Tensor> labels_;
  at::Device device_;
  int64_t depth_, host_read_blocks_, gather_threads_;
  std::optional<c10::Stream> stream_;  // the side stream, kept from epoch to epoch
  std::vector<at::Tensor> epoch_seeds_;    // the epoch's batches; read by the worker only
  std::vector<int64_t> epoch_sampling_seeds_;  // while it runs, dropped by stop()

  // Held by start and stop (not next, which a stop from another thread must be able to
  // wake): two threads starting at once joined and replaced one worker together, and one
  // waited forever.
  std::mutex control_mutex_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Built> built_;
  bool stopping_ = false, epoch_done_ = true;
  int64_t handed_out_ = 0;  // batches next() returned this epoch
  std::deque<PaceProbe> pace_probes_;  // the caller's thread's (next and stop)
  std::thread worker_;
};

}  // namespace quiver::runtime
