// torch.classes.quiver.DistSampler: multi-hop neighbor sampling over a graph partitioned
// over hosts (torch_quiver_ops.partition), so that no host holds the whole topology. Each
// host holds the rows of the nodes it owns (neighbor ids and edge ids global) and the node ->
// owner map. Each hop splits the frontier by owner and asks every owner (itself included)
// for its nodes' samples over the host group: the request counts, the requests, then the
// answers, each row's sample in a fixed slot of `fanout` (neighbor, edge id) pairs
// (ops/internal/slotted_hops.h), so the answers' sizes are known without a count read
// back. Owners sample with the same kernels as one host. The asking host then reindexes.
// A part on a GPU whose fanouts are all >= 0 does all of it there (the grouping, the
// unpacking and the numbering of the single-host sampler), over NCCL driven directly when
// every host can: the host waits for the request counts and for the answers, then reads
// the new frontier's size. Over NCCL driven directly, when every host's part is on its GPU,
// a batch instead takes slots sized by bounds: the hosts tell each other their batch's
// size once (one wait), and every hop's requests and answers are padded to the hop's bound
// (seeds x the fanouts before it), so the whole batch is queued on the stream and the host
// waits once more, at the end. An all-neighbors hop (fanout -1) has no slot: its answers' counts travel first.
// The result is sample_subgraph's layout exactly (node ids seeds first then each hop's new
// nodes in order of first appearance, per-hop rows/cols local, edge ids global, per-hop
// counts), so the loaders and models above do not change.
//
// Every host samples a batch at the same time (the exchanges are collectives, as DDP's
// gradients are): each calls sample() once per step, with its own seeds (any number,
// none included). With `reads` (three transports serving this host's indptr, indices and
// edge ids, as rows of one element) a host instead reads each remote node's offsets, draws
// the positions itself with the same kernel, and reads the drawn neighbors and edge ids
// from the owner. Over one-sided RDMA transports the owner's CPU does nothing, and hosts
// sample whenever they like; over collective transports the owners answer the reads in
// lockstep, three exchanges a hop. An exchange that fails or does not complete within
// timeout_s raises on every survivor, naming the silent peer (from heartbeats in the
// group's store), and the sampler refuses further batches: the hosts may be out of step.
//
// Randomness: without `reads`, each row is sampled by its owner with the owner's generator;
// with them, by the host that asks, with its generator (the part's for its own rows).
// Either way uniform without replacement unless `replace`, so a batch's sample has the
// distribution single-host sampling gives, whatever the partitioning; and with reads, the
// same seed gives the same batch whichever kind of transport carries them.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <quiver/transport.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/custom_class.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace quiver::internal {
class HopNumbering;
}

namespace quiver::runtime {

class BoundedBatches;
class CollectiveChannel;

class DistSampler : public torch::CustomClassHolder {
 public:
  // indptr/indices/edge_ids: this host's rows (the nodes it owns, in local order), on the
  // CPU, on one GPU (GPU mode), or indptr on a GPU and the rest in pinned host memory (UVA
  // mode): its own nodes, and those its peers ask for, are sampled there; owner[v]
  // (int16/int32) and local_index[v] (int64), on the CPU: every node's host and its row
  // there. A group whose backend is NCCL exchanges through the current GPU.
  DistSampler(const c10::intrusive_ptr<c10d::ProcessGroup>& group, at::Tensor indptr,
              at::Tensor indices, at::Tensor edge_ids, at::Tensor owner, at::Tensor local_index,
              std::vector<int64_t> fanouts, bool replace, double timeout_s,
              std::vector<c10::intrusive_ptr<Transport>> reads = {},
              std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> lanes = {});
  ~DistSampler() override;

  // lanes: Gloo groups of the same hosts that the answers (the sampled pairs, a hop's bulk)
  // travel over side by side (runtime/lane_exchange.h); none: the group's all-to-all.
  // (node_ids, rows, cols, sampled_edge_ids, nodes_per_hop, edges_per_hop), as
  // quiver::sample_subgraph returns them: the first four where the part lies (the CPU, or
  // its GPU in GPU and UVA modes), the counts on the CPU; seeds: global ids on the CPU.
  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> sample(
      const at::Tensor& seeds, const std::optional<at::Generator>& generator);

  // Slots sized by bounds when every host can (the default); off, the hosts exchange each
  // hop's exact counts first. Either way the same batch for the same seed. This and
  // set_slot_margin are to be called alike on every host, between the same batches: once
  // the hosts agree on blocks sized by what was seen, they take them without asking each
  // other again until one of these calls or a batch that overflows.
  void set_bounded_slots(bool on) {
    if (on == bounded_slots_) return;  // no change: nothing to agree on again
    bounded_slots_ = on;
    slots_agreed_ = false;
  }
  // Whether batches in slots sized by bounds are captured as CUDA graphs and replayed (the
  // default); off, each runs as launched (to compare). The batch is the same.
  void set_capture_batches(bool on) { capture_batches_ = on; }
  // Slots sized by what was seen: each hop's block holds the most rows any host has asked
  // one owner for so far, times `margin` (rounded up to one of 8 steps an octave; at most
  // the bound in a batch that exchanged batch sizes, else as agreed, whatever the batch's
  // size). A batch that asks an owner for more is taken again in blocks of the bounds,
  // with the same draws, and the blocks grow. 0: blocks of the bounds (the padding grows with
  // the hosts). Default 1.15.
  void set_slot_margin(double margin);
  double slot_margin() const { return slot_margin_; }
  // Of the last batch in slots sized by bounds, each hop's block rows (empty when it
  // exchanged exact counts); and the batches taken again since the sampler was made.
  std::vector<int64_t> last_slot_rows() const { return last_slot_rows_; }
  int64_t overflowed_batches() const { return overflowed_batches_; }
  // The exchanges of batch sizes so far (one a batch, but none once blocks are agreed).
  int64_t size_exchanges() const { return size_exchanges_; }
  int64_t host() const { return host_; }
  int64_t num_hosts() const { return num_hosts_; }
  int64_t num_nodes() const { return owner_.numel(); }
  // Whether the asking host draws its remote rows' samples (it was given reads).
  bool requester_draws() const { return !reads_.empty(); }
  // Of the last batch: per hop, the frontier nodes this host asked its peers for, and the
  // neighbor ids and edge ids that came back (8 bytes each).
  std::vector<int64_t> last_remote_nodes() const { return last_remote_nodes_; }
  std::vector<int64_t> last_remote_edges() const { return last_remote_edges_; }

 private:
  // Samples of some frontier nodes: per node its sample's size (int64), and the (neighbor,
  // edge id) pairs ([k, 2] int64).
  using HopSamples = std::pair<at::Tensor, at::Tensor>;
  using OwnSamples = std::function<HopSamples(const at::Device& to)>;
  // Rows (this host's local rows) sampled here with the op, where the part lies (CPU, or
  // the GPU in GPU and UVA modes); the samples come back on the device asked for.
  HopSamples sample_rows(const at::Tensor& rows, int64_t fanout,
                         const std::optional<at::Generator>& generator, const at::Device& to);
  // The generator the part's kernels draw from: a CPU generator given for a part on a GPU
  // seeds the sampler's own CUDA generator once per batch (so a fixed seed still fixes the
  // batch); none: the device's default.
  std::optional<at::Generator> part_generator(const std::optional<at::Generator>& generator);
  // One hop's samples of the frontier, grouped by owner (requests: local rows, send_splits
  // per owner): the counts on the CPU, the pairs on the exchange's device (read_hop: the
  // CPU). sample_own samples this host's own block; each path runs it while its exchange
  // travels. exchange_hop (an all-neighbors hop: its answers' counts first) draws from the
  // part's generator (it samples for its peers too); read_hop draws positions on the CPU.
  HopSamples exchange_hop(const at::Tensor& requests, const std::vector<int64_t>& send_splits,
                          int64_t fanout, const std::optional<at::Generator>& generator,
                          const OwnSamples& sample_own);
  HopSamples read_hop(const at::Tensor& requests, const std::vector<int64_t>& send_splits,
                      int64_t fanout, const std::optional<at::Generator>& generator,
                      const OwnSamples& sample_own);
  // A hop of fanout >= 0 in fixed slots (ops/internal/slotted_hops.h), three exchanges: the
  // request counts (send_counts: per owner, where the part lies), the requests, then every
  // asked row's slot (this host's own through itself) back: `slots` [frontier, 2, fanout]
  // in grouped order, on the exchange's device. With `defer_answers` (a GPU part whose
  // sampling reports to `report`) the hop stays on the stream: over NCCL the current stream
  // is ordered after the requests and the answers but the host has waited for neither; the
  // caller settles `answers` (so that a silent peer still raises) before it reads the
  // device. Without, the host waits for each exchange within the timeout.
  struct SlotHop {
    at::Tensor slots;
    std::vector<int64_t> send_splits;
    bool answers_pending = false;  // the caller settles `answers`
    c10::intrusive_ptr<c10d::Work> answers;  // null when NCCL is driven directly
  };
  SlotHop slot_hop(const at::Tensor& requests, const at::Tensor& send_counts, int64_t fanout,
                   const std::optional<at::Generator>& generator,
                   internal::HopNumbering* report, bool defer_answers);
  // The group's all-to-all of rows (`from` split per host by from_splits, `into` by
  // into_splits). Over NCCL driven directly (runtime/nccl_direct.h), when every host can,
  // it is enqueued on the current stream and the result is null; else c10d's, its work
  // returned. With host_waits the host waits for it within the timeout (a silent peer is
  // named); without, only the current stream is ordered after it, and the caller settles it
  // before it reads the device.
  c10::intrusive_ptr<c10d::Work> all_to_all(at::Tensor& into, at::Tensor& from,
                                            const std::vector<int64_t>& into_splits,
                                            const std::vector<int64_t>& from_splits,
                                            const char* what, bool host_waits);
  void settle(const c10::intrusive_ptr<c10d::Work>& work, const char* what);
  // NCCL driven directly over the group, set up by every host at its first exchange through
  // the GPU; null when some host cannot (c10d's all-to-all then).
  struct Direct;
  Direct* direct_link();
  std::unique_ptr<Direct> direct_;
  bool direct_decided_ = false;
  using Outputs =
      std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
  // sample() past its checks of the seeds: a batch in step with the other hosts.
  Outputs sample_batch(const at::Tensor& seed_ids, const std::optional<at::Generator>& generator);
  // A batch of a part on a GPU whose fanouts are all >= 0, without reads: every hop in
  // slots, grouped and numbered on the GPU (runtime/slotted_batch.h).
  Outputs sample_on_gpu(const at::Tensor& seed_ids, const std::optional<at::Generator>& generator);
  // Slots sized by bounds: every host's `able`, batch size and proposed block rows
  // exchanged (over NCCL driven directly, one host wait), then per hop the bound of a
  // block (the largest batch times the fanouts before it) and the rows agreed (at most the
  // bound), or none
  // when some host cannot or a hop's padded answers would pass kBoundedSlotBytes.
  struct BoundedSlots {
    std::vector<int64_t> bounds, rows;  // bounds empty: not exchanged (agreed rows)
  };
  BoundedSlots bounded_slot_rows(int64_t batch_size, bool able);
  // A batch in blocks of slots.rows, taken again in blocks of the bounds when one
  // overflowed; what it saw sizes the next batches' blocks.
  Outputs sample_in_bounded_slots(const at::Tensor& seed_ids,
                                  const std::optional<at::Generator>& generator,
                                  const BoundedSlots& slots);
  // One batch queued in blocks of slot_rows, each hop drawing from key_words; most_asked:
  // per hop, the most rows any host asked one owner for (past the rows: it overflowed).
  Outputs queue_bounded_batch(const at::Tensor& seed_ids,
                              const std::optional<at::Generator>& generator,
                              const std::vector<int64_t>& key_words,
                              const std::vector<int64_t>& slot_rows,
                              std::vector<int64_t>& most_asked);
  bool bounded_slots_ = true;
  bool capture_batches_ = true;
  double slot_margin_ = 1.15;
  std::vector<int64_t> seen_slot_rows_;  // per hop, 0 while none seen
  // Whether every host holds the same seen_slot_rows_ and took the last batch in them (or
  // in the bounds): the next batch takes them without the exchange of batch sizes.
  bool slots_agreed_ = false;
  // The blocks of a batch that needs no exchange first: seen_slot_rows_, when every hop
  // that asks has seen rows whose padded answers fit kBoundedSlotBytes; else none.
  std::vector<int64_t> agreed_slot_rows() const;
  std::vector<int64_t> last_slot_rows_;
  int64_t overflowed_batches_ = 0;
  int64_t size_exchanges_ = 0;
  at::Tensor sizes_host_;  // bounded_slot_rows' messages out and in, pinned
  std::unique_ptr<BoundedBatches> bounded_batches_;  // runtime/slotted_batch.h

  // The group's all-to-alls (and lanes), its heartbeats and its failure state.
  std::unique_ptr<CollectiveChannel> channel_;
  at::Tensor indptr_, indices_, edge_ids_, owner_, local_index_;
  // Where the all-to-alls' tensors live: the current GPU for NCCL, else the CPU.
  at::Device exchange_device_{at::kCPU};
  std::optional<at::Generator> part_generator_;  // see part_generator
  std::vector<int64_t> fanouts_;
  bool replace_;
  std::vector<c10::intrusive_ptr<Transport>> reads_;  // offsets, neighbor ids, edge ids
  int64_t host_, num_hosts_;
  std::mutex sample_mutex_;  // one batch at a time: the hosts' exchanges pair in order
  std::vector<int64_t> last_remote_nodes_, last_remote_edges_;
  // Where the part lies (sample()'s tensor work runs there): the owner map and local
  // indices, and the reindexing tables: a node's place in the batch (-1 when absent) and the
  // first edge of a hop naming it (seeds, and every hop of a part on a GPU). 8 bytes a node
  // of the graph, touched entries reset after each hop or batch; a hash map cost more than
  // the sampling.
  at::Tensor owner_w_, local_index_w_, position_, first_use_;
};

}  // namespace quiver::runtime
